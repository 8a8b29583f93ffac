"""memtap report and dump on bad input: a missing file, an empty one, another format,
a trace cut at every chunk boundary and inside chunks, flipped bytes. Each says what
happened in one line, keeps every event before the damage, exits non-zero (2 when
nothing could be read, 3 when the trace was damaged) and never crashes."""
import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
TMP = scratch("reader")



def run(*args):
    return subprocess.run([MEMTAP, *args], capture_output=True, text=True)


trace = os.path.join(TMP, "good.trace")
p = subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", os.path.join(B, "tools/simtrain/simtrain"),
                    "--preset", "tiny"], capture_output=True, text=True)
ok(p.returncode == 0 and os.path.exists(trace), "a trace to damage", p.stderr)
good = open(trace, "rb").read()
full = run("dump", trace).stdout.count("\n")

p = run("report", os.path.join(TMP, "missing.trace"))
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "No such file" in p.stderr, "a missing file", p.stderr)
empty = os.path.join(TMP, "empty.trace")
open(empty, "wb").close()
p = run("report", empty)
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "empty" in p.stderr, "an empty file", p.stderr)
other = os.path.join(TMP, "other.trace")
open(other, "wb").write(b"PK\x03\x04" + b"\0" * 100)
p = run("report", other)
ok(p.returncode == 2 and "not a memtap trace" in p.stderr, "a file of another format", p.stderr)
lfs = os.path.join(TMP, "snapshot.pickle")  # a repository's snapshot cloned without git lfs
open(lfs, "w").write("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146f0e5c5d0b1\nsize 48204512\n")
p = run("report", lfs)
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "a Git LFS pointer, not the file" in p.stderr,
   "a Git LFS pointer: said so, in one line", p.stderr)

cut = os.path.join(TMP, "cut.trace")
crashes, prev, monotone, one_line = [], 0, True, True
for n in list(range(0, len(good), max(1, len(good) // 300))) + [len(good) - 1]:
    open(cut, "wb").write(good[:n])
    p = run("dump", cut)
    if p.returncode < 0:
        crashes.append(n)
    events = p.stdout.count("\n")
    monotone &= events >= prev
    prev = events
    if n >= 16:
        one_line &= p.returncode == 3 and p.stderr.count("\n") == 1 and "cut short" in p.stderr
ok(not crashes, "a trace cut anywhere never crashes the reader", crashes[:5])
ok(monotone, "the longer the piece, the more events read back")
ok(one_line, "a cut trace: one line saying it was cut short, exit 3")
open(cut, "wb").write(good[:len(good) // 2])
ok(run("dump", cut).stdout.count("\n") < full, "half a trace reads back fewer events than the whole")
# after its END, a chunk the process's end cut short (events other threads made after the END,
# being written when the process ended): the trace is whole as of that END
events_chunk = good[16:16 + 16 + int.from_bytes(good[24:28], "little")]
for tail in (events_chunk[:40], events_chunk[:7]):
    open(cut, "wb").write(good + tail)
    p = run("report", cut)
    ok(p.returncode == 0 and run("dump", cut).stdout.count("\n") == full,
       "a closed trace and %d bytes of a chunk cut short after its END: whole, no complaint" % len(tail), p.stderr)

# every byte of every chunk header and a spread of payload bytes, flipped: each one caught
# (the payload's checksum, the header's magic, length and zero bytes, an unknown type said)

def chunk_headers(data):
    """Offsets of every chunk header's 16 bytes (magic, type, zeros, length, checksum)."""
    at, out = 16, []
    while at + 16 <= len(data):
        out += range(at, at + 16)
        at += 16 + int.from_bytes(data[at + 8:at + 12], "little")
    return out


headers = chunk_headers(good)
crashes, missed = [], []
for i in sorted(set(headers) | set(range(16, len(good), max(1, len(good) // 400)))):
    bad = bytearray(good)
    bad[i] ^= 0x5a
    open(cut, "wb").write(bytes(bad))
    p = run("report", "--json", cut)
    if p.returncode < 0:
        crashes.append(i)
    elif p.returncode != 3 or p.stderr.count("\n") != 1:
        missed.append((i, p.returncode, p.stderr[:200]))
ok(not crashes, "a flipped byte anywhere never crashes the reader", crashes[:5])
ok(len(headers) > 16 and not missed,
   "every byte of the %d chunk headers and 400 of the payload, flipped: each caught, said in one line, exit 3"
   % (len(headers) // 16), missed[:5])

p = run("report")
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "report without a trace: one line, exit 2", p.stderr)
p = run("report", "--top", "x", trace)
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "a bad --top: one line, exit 2", p.stderr)
p = run("frobnicate")
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "an unknown command: one line, exit 2", p.stderr)
done()
