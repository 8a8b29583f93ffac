"""Every reader entry point of memtap on every file of the hostile corpus (make_corpus.py
writes it): report (text, --json, --html), export in each format, dump, diff (against a
good trace), lua and replay on each trace, pickle and RMM log; plan --deepspeed on each
config; every command that takes a path on a FIFO, a device and a directory, and the
config readers on a file past their bound. Each run must end as EXPECT says for its input: exit 0 where the input is
legitimately valid; otherwise the given non-zero status with exactly one line on stderr
that names the file and says what is wrong. Never a signal; never a hang (the timeout
only detects one, no duration is asserted); never more memory than a fixed bound
(RLIMIT_AS, or ASan's RSS limit under the sanitizers)."""
import json
import os
import resource
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
HERE = os.path.join(os.environ["MT_SRCDIR"], "tests", "hostile")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
TMP = scratch("hostile")
LIMIT = 256 << 20    # address space for one run: memtap needs less than 64 MiB of it for this corpus
HANG = 60            # seconds: only a hang detector; no duration is asserted
SANITIZED = bool(os.environ.get("MT_SANITIZERS", "").replace("no", ""))

DAMAGED, REFUSED = 3, 2
# For each input: the exit status every reader gives it and a few words of its one line
# on stderr (None: valid, status 0). A damaged memtap trace is reported up to the damage
# (status 3); an input with nothing usable is refused (status 2).
EXPECT = {
    # memtap traces, every checksum valid
    "traces/healthy.trace": (0, None),
    "traces/thread-0xffffffff.trace": (0, None),
    "traces/thread-sparse.trace": (0, None),
    "traces/stack-out-of-table.trace": (DAMAGED, "an alloc event refers to stack 99; the trace has 2"),
    "traces/phase-out-of-table.trace": (DAMAGED, "an alloc event's phase refers to string 77; the trace has 3"),
    "traces/stack-one-past-table.trace": (DAMAGED, "an alloc event refers to stack 3; the trace has 2"),
    "traces/phase-one-past-table.trace": (DAMAGED, "an alloc event's phase refers to string 4; the trace has 3"),
    "traces/range-name-one-past-table.trace": (DAMAGED, "a range_push event refers to string 4; the trace has 3"),
    "traces/range-name-out-of-table.trace": (DAMAGED, "a range_push event refers to string 1099511627776"),
    "traces/device-name-out-of-table.trace": (DAMAGED, "a device event refers to string 1000"),
    "traces/mark-name-out-of-table.trace": (DAMAGED, "a mark event refers to string 4294967295"),
    "traces/string-id-huge.trace": (DAMAGED, "string 1073741824 where string 1 was due"),
    "traces/stack-id-huge.trace": (DAMAGED, "stack 1073741824 where stack 1 was due"),
    "traces/stack-depth-lie.trace": (DAMAGED, "stack 1 claims 4096 frames"),
    "traces/string-id-zero.trace": (DAMAGED, "string 0 where string 2 was due"),
    "traces/stack-id-33-bits.trace": (DAMAGED, "corrupt chunk contents"),
    "traces/size-wraps.trace": (DAMAGED, "runs past the end of the address space"),
    "traces/size-2-63.trace": (DAMAGED, "9223372036854775808 bytes, more than any address space"),
    "traces/vmm-create-huge.trace": (DAMAGED, "a vmm_create event of 18446744073709551615 bytes"),
    "traces/module-wraps.trace": (DAMAGED, "a module of 1048576 bytes at 0xfffffffffffff000"),
    "traces/module-is-stdin.trace": (0, None),
    "traces/pyframe-out-of-table.trace": (0, None),
    "traces/time-extremes.trace": (0, None),
    "traces/vmm-disorder.trace": (0, None),
    "traces/devices-255.trace": (0, None),
    "traces/ranges-10000-deep.trace": (0, None),
    "traces/end-before-events.trace": (0, None),
    "traces/unknown-chunk.trace": (DAMAGED, "a chunk of unknown type 99 at byte"),
    "traces/two-bytes.trace": (REFUSED, "unknown opcode 0x01"),
    # pickles
    "pickles/memo-bomb.pickle": (REFUSED, "not a PyTorch memory snapshot"),
    "pickles/memo-bomb-text.pickle": (REFUSED, "not a PyTorch memory snapshot"),
    "pickles/memo-index-negative.pickle": (REFUSED, "memo index -1 is negative"),
    "pickles/int-text-overread.pickle": (REFUSED, "a text number of 0 characters"),
    "pickles/float-text-overread.pickle": (REFUSED, "a text number of 0 characters"),
    "pickles/int-text-too-long.pickle": (REFUSED, "a text number of 80 characters"),
    "pickles/int-text-65-bits.pickle": (REFUSED, "'36893488147419103232' is not a whole number of 64 bits"),
    "pickles/shared-dict.pickle": (0, None),
    "pickles/expansion-devices.pickle": (REFUSED, "more entries than the file's size can hold"),
    "pickles/expansion-segments.pickle": (REFUSED, "more entries than the file's size can hold"),
    "pickles/shared-long-name.pickle": (0, None),
    "pickles/frames-cycle.pickle": (0, None),
    "pickles/frames-holds-its-dict.pickle": (REFUSED, "a dict that is one of its own frames"),
    "pickles/frames-holds-its-dict-1.pickle": (REFUSED, "a dict that is one of its own frames"),
    "pickles/block-frames-are-its-blocks-p0.pickle": (REFUSED, "its list of blocks is also a block's list of frames"),
    "pickles/block-frames-are-its-blocks-p4.pickle": (REFUSED, "its list of blocks is also a block's list of frames"),
    "pickles/segment-its-own-block-and-frames.pickle": (REFUSED, "a dict that is one of its own frames"),
    "pickles/segment-given-a-pair-after.pickle": (REFUSED, "a list or dict given more items after it was read"),
    "pickles/segment-is-its-block.pickle": (REFUSED, "not a PyTorch memory snapshot"),
    "pickles/segment-is-its-block-listed.pickle": (0, None),
    "pickles/time-nan.pickle": (REFUSED, "'time_us' is not a whole number"),
    "pickles/time-inf.pickle": (REFUSED, "'time_us' is not a whole number"),
    "pickles/time-1e300.pickle": (REFUSED, "'time_us' is not a whole number"),
    "pickles/size-string.pickle": (REFUSED, "'size' is not a whole number"),
    "pickles/size-negative.pickle": (REFUSED, "an alloc event of 18446744073709551615 bytes, more than any"),
    "pickles/addr-wraps.pickle": (REFUSED, "runs past the end of the address space"),
    "pickles/block-address-overflow.pickle": (0, None),
    "pickles/devices-300.pickle": (REFUSED, "device_traces for 300 devices; memtap reads at most 255"),
    "pickles/segment-device-300.pickle": (REFUSED, "segments[0]: device 300 is not a device number"),
    "pickles/global-reduce.pickle": (REFUSED, "opcode GLOBAL (imports a name)"),
    "pickles/marks-20000.pickle": (REFUSED, "0 values left at STOP"),
    "pickles/long4-2-31-bytes.pickle": (REFUSED, "an integer of 2147483648 bytes"),
    "pickles/binunicode8-huge.pickle": (REFUSED, "cut short"),
    "pickles/frame-huge.pickle": (REFUSED, "not a PyTorch memory snapshot"),
    "pickles/dict-duplicate-keys.pickle": (0, None),
    "pickles/not-a-snapshot.pickle": (REFUSED, "not a PyTorch memory snapshot"),
    "pickles/alloc-2-52.pickle": (0, None),
    # RMM logs
    "rmm/time-nan.csv": (REFUSED, "line 3: the time is not HH:MM:SS.ffffff"),
    "rmm/time-1e308.csv": (REFUSED, "line 3: the time is not HH:MM:SS.ffffff"),
    "rmm/time-hours-huge.csv": (REFUSED, "line 3: the time is not HH:MM:SS.ffffff"),
    "rmm/time-negative.csv": (REFUSED, "line 3: the time is not HH:MM:SS.ffffff"),
    "rmm/size-2-64.csv": (REFUSED, "line 3: the size is not a number of bytes"),
    "rmm/size-2-64-minus-1.csv": (REFUSED, "line 3: the size is not a number of bytes"),
    "rmm/size-negative.csv": (REFUSED, "line 3: the size is not a number of bytes"),
    "rmm/size-float.csv": (REFUSED, "line 3: the size is not a number of bytes"),
    "rmm/thread-negative.csv": (REFUSED, "line 3: the thread is not a number"),
    "rmm/pointer-wraps.csv": (REFUSED, "line 3: an alloc event of 1048576 bytes at 0xfffffffffffff000 runs past"),
    "rmm/pointer-not-hex.csv": (REFUSED, "line 3: the pointer is not a hexadecimal address"),
    "rmm/stream-garbage.csv": (REFUSED, "line 3: the stream is not a hexadecimal handle"),
    "rmm/field-too-long.csv": (REFUSED, "line 3: not Thread,Time,Action,Pointer,Size,Stream"),
    "rmm/nul-in-field.csv": (REFUSED, "line 3: not Thread,Time,Action,Pointer,Size,Stream"),
    "rmm/unknown-action.csv": (REFUSED, "line 3: unknown action 'reallocate'"),
    "rmm/too-few-fields.csv": (REFUSED, "line 3: not Thread,Time,Action,Pointer,Size,Stream"),
    "rmm/header-only.csv": (0, None),
    "rmm/size-2-52.csv": (0, None),
    "rmm/live-2.25-tib.csv": (0, None),
    "rmm/crlf-past-midnight.csv": (0, None),
    "rmm/threads-2000.csv": (0, None),
    "rmm/midnight-flapping.csv": (0, None),
    # DeepSpeed configs (memtap plan MODEL --deepspeed FILE)
    "deepspeed/batch-product-wraps.json": (REFUSED, "train_micro_batch_size_per_gpu must be a whole number from 1 to"),
    "deepspeed/micro-batch-2-63.json": (REFUSED, "train_micro_batch_size_per_gpu must be a whole number from 1 to"),
    # what DeepSpeed's config models refuse, in their words (tests/analyze/upstream/deepspeed_config.json)
    "deepspeed/stage-99.json": (REFUSED, "zero_optimization.stage: Input should be 0, 1, 2, 3 or 3"),
    "deepspeed/integer-too-big.json": (REFUSED, "zero_optimization.stage: Input should be 0, 1, 2, 3 or 3"),
    "deepspeed/zero-not-object.json": (REFUSED, "zero_optimization must be an object"),
    "deepspeed/offload-gpu.json": (REFUSED, "zero_optimization.offload_param.device: Input should be 'none', 'cpu' or"),
    "deepspeed/offload-not-object.json": (REFUSED, "zero_optimization.offload_optimizer: Input should be a valid "
                                                   "dictionary"),
    "deepspeed/optimizer-type-number.json": (REFUSED, "optimizer.type must be a string"),
    "deepspeed/batch-not-multiple.json": (REFUSED, "train_batch_size 10 is not a multiple"),
    "deepspeed/array.json": (REFUSED, "a DeepSpeed config is an object"),
    "deepspeed/duplicate-keys.json": (REFUSED, "Duplicate keys in DeepSpeed config: ['zero_optimization']"),
    "deepspeed/duplicate-nested-keys.json": (REFUSED, "Duplicate keys in DeepSpeed config: ['stage']"),
    # what its hjson reader refuses, with the place
    "deepspeed/nesting-5000.json": (REFUSED, "nested deeper than 490 levels"),
    "deepspeed/nesting-600.json": (REFUSED, "nested deeper than 490 levels"),
    "deepspeed/real-overflow.json": (REFUSED, "a number too large for a float"),
    "deepspeed/invalid-utf8.json": (REFUSED, "'utf-8' codec can't decode byte 0xff in position 2"),
    "deepspeed/trailing-garbage.json": (REFUSED, "not valid JSON or hjson (DeepSpeed's syntax): Extra data"),
    "deepspeed/error-near-newline.json": (REFUSED, "error-near-newline.json:3:14: not valid JSON or hjson "
                                                   "(DeepSpeed's syntax): Invalid \\X escape sequence"),
    "deepspeed/hjson-quoteless-brace.json": (REFUSED, "Bad key name (eof) (a quoteless value runs to the end of its line"),
    "deepspeed/hjson-open-comment.json": (REFUSED, "a /* comment is never closed"),
    "deepspeed/hjson-key-space.json": (REFUSED, "Found whitespace in your key name"),
    "deepspeed/hjson-multiline-open.json": (REFUSED, "Bad multiline string"),
    # what DeepSpeed accepts: a string stage, "yes" for true, an empty file (hjson reads {}),
    # a key with NUL (ignored), hjson's syntax
    "deepspeed/ok-stage-string.json": (0, None),
    "deepspeed/bf16-enabled-string.json": (0, None),
    "deepspeed/empty.json": (0, None),
    "deepspeed/nul-in-key.json": (0, None),
    "deepspeed/ok-hjson-tutorial.json": (0, None),
    "deepspeed/ok-hjson-comments.json": (0, None),
    "deepspeed/ok-hjson-multiline.json": (0, None),
    "deepspeed/ok-bom-crlf.json": (0, None),
    "deepspeed/ok-no-braces.json": (0, None),
    "deepspeed/ok-key-with-newline.json": (0, None),
    "deepspeed/ok-zero3.json": (0, None),
    "deepspeed/ok-auto.json": (0, None),
    "deepspeed/ok-dp-1e9.json": (0, None),
    "deepspeed/ok-many-keys.json": (0, None),
    "deepspeed/ok-long-string.json": (0, None),
}

# memtap plan's example model; the config's own micro-batch is replaced, so every config plans
MODEL = ["--layers", "24", "--hidden", "2048", "--heads", "16", "--vocab", "50257", "--seq", "2048", "--micro-batch", "1"]
LUA = os.path.join(TMP, "walk.lua")
open(LUA, "w").write("""
local t = memtap.trace
local n = 0
for e in t:events() do n = n + 1 end
local r = t:report(3)
local live = t:live_at(1e12)
for id = 1, 4 do t:stack(id) end
print(n, #r.devices, #live)
""")


def limit():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


# stdin is a pipe whose writer stays open and silent: a reader that opens it (a module
# path of /dev/stdin) waits forever
STDIN, _SILENT = os.pipe()


def run(args):
    env = dict(os.environ)
    if SANITIZED:  # ASan reserves terabytes of address space, and its quarantine and redzones
        # take memory of their own: bound what it really uses, with room for that
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":hard_rss_limit_mb=%d" % (4 * LIMIT >> 20)
    try:
        return subprocess.run([MEMTAP, *args], stdin=STDIN, capture_output=True, text=True,
                              errors="replace", timeout=HANG, preexec_fn=limit, env=env)
    except subprocess.TimeoutExpired:
        return None


def judge(name, what, p, status, says):
    label = "%s: %s" % (what, name)
    if p is None:
        return ok(False, label, "no end within %d s (a hang)" % HANG)
    lines = p.stderr.splitlines()
    if p.returncode < 0:
        return ok(False, label, "killed by signal %d\n%s" % (-p.returncode, p.stderr))
    if status == 0:  # notes may come (keys a config ignores), each a line of its own
        return ok(p.returncode == 0 and all(line.startswith("memtap: ") for line in lines), label,
                  "exit %d, expected 0 and only lines of memtap's own\n%s" % (p.returncode, p.stderr))
    path = os.path.join(HERE, name)
    good = (p.returncode == status and len(lines) == 1 and lines[0].startswith("memtap: ") and
            says in lines[0] and path in lines[0])
    return ok(good, label, "exit %d, expected %d with one line naming the file and saying %r:\n%s" %
              (p.returncode, status, says, p.stderr))


def trace_readers(path):
    html, memviz = os.path.join(TMP, "out.html"), os.path.join(TMP, "out.pickle")
    good = os.path.join(HERE, "traces", "healthy.trace")
    return [("report", ["report", path]), ("report --json", ["report", "--json", path]),
            ("report --html", ["report", "--html", html, path]),
            ("export folded", ["export", "--format=folded", path]),
            ("export folded --what leaks", ["export", "--format=folded", "--what", "leaks", path]),
            ("export perfetto", ["export", "--format=perfetto", path]),
            ("export memviz", ["export", "--format=memviz", "-o", memviz, path]),
            ("dump", ["dump", path]), ("dump --json", ["dump", "--json", path]),
            ("diff A", ["diff", path, good]), ("diff B", ["diff", "--json", good, path]),
            ("lua", ["lua", LUA, path]), ("replay", ["replay", "--find-min-capacity", path])]


found = set()
for kind in ("traces", "pickles", "rmm", "deepspeed"):
    for f in sorted(os.listdir(os.path.join(HERE, kind))):
        found.add(kind + "/" + f)
ok(found == set(EXPECT), "every corpus file has an expectation, and every expectation a file",
   "no expectation: %s\nno file: %s" % (sorted(found - set(EXPECT)), sorted(set(EXPECT) - found)))

for name in sorted(EXPECT):
    status, says = EXPECT[name]
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
        continue
    if name.startswith("deepspeed/"):
        judge(name, "plan --deepspeed", run(["plan", *MODEL, "--deepspeed", path]), status, says)
        continue
    for what, args in trace_readers(path):
        judge(name, what, run(args), status, says)

# The pickle bombs again, made big here rather than kept in the repository: linear time
# and bounded memory must hold at any size. Before memtap read them in linear time the
# shared dict took minutes (the timeout catches it), and the others more memory than LIMIT.
sys.path.insert(0, HERE)
import make_corpus  # noqa: E402
BIG = {"shared-dict-2MB.pickle": (make_corpus.shared_dict(100000, 300000), 0, None),
       "expansion-devices-2MB.pickle": (make_corpus.expansion_devices(40000), REFUSED,
                                        "more entries than the file's size can hold"),
       "shared-long-name-1MB.pickle": (make_corpus.shared_long_name(1 << 20, 2000), 0, None),
       # read as a segment at each SETITEMS, its growing pairs each time: 17 s for 2.9 MB
       "segment-keys-again-5MB.pickle": (make_corpus.segment_keys_again(400000), 0, None)}
# A trace of 200000 stacks, each live at the peak, in a module (so each prints apart as
# module+offset): diff matched stacks against every row (quadratic, minutes); by hash it
# is linear.
from mtrace import Trace, basic_events  # noqa: E402
N = 200000
t = Trace().strings([(1, "cuda:0")]).modules([("/nonexistent/libhostile.so", "", 0x400000, 0x400000, 16 << 20)])
for lo in range(0, N, 100000):
    t.stacks([(i + 1, [0x400000 + 16 * i]) for i in range(lo, min(N, lo + 100000))])
ev = basic_events()[:2]
for lo in range(0, N, 100000):
    ev += [dict(kind="alloc", thread=1, time=3000 + i, device=0, addr=0x200000000000 + 4096 * i, size=4096,
                stack=i + 1, flags=2) for i in range(lo, min(N, lo + 100000))]
    t.events(ev)
    ev = []
BIG["stacks-200000.trace"] = (t.end().bytes(), 0, None)
# 20000 stacks live across 20000 iteration marks: the leak scan kept every stack's bytes
# at every mark (5 GB for 500 KB); it keeps each stack's growing run now.
t = Trace().strings([(1, "cuda:0"), (2, "step")]).stacks([(i + 1, [0x400000 + 16 * i]) for i in range(20000)])
t.events(basic_events()[:2] + [dict(kind="alloc", thread=1, time=3000 + i, device=0, addr=0x200000000000 + 4096 * i,
                                    size=4096, stack=i + 1, flags=2) for i in range(20000)] +
         [dict(kind="mark", thread=1, time=30000 + j, aux=2) for j in range(20000)])
BIG["marks-20000-stacks-20000.trace"] = (t.end().bytes(), 0, None)
# 120000 VMM mappings, each unmapped by a range that misses it: every unmap walked every
# mapping (minutes); the replay keeps mapped addresses in order now.
N = 120000
t = Trace().strings([(1, "cuda:0")])
t.events(basic_events()[:2] + [dict(kind="vmm_create", thread=1, time=3000 + i, device=0, aux=i + 1, size=1 << 21,
                                    flags=1) for i in range(N)])
t.events([dict(kind="vmm_map", thread=1, time=400000 + i, addr=0x300000000000 + (i << 21), size=1 << 21, aux=i + 1)
          for i in range(N)])
t.events([dict(kind="vmm_unmap", thread=1, time=800000 + i, addr=0x300000000000 + (i << 21) + 4096, size=4096)
          for i in range(N)])
BIG["unmaps-120000.trace"] = (t.end().bytes(), 0, None)
for name, (data, status, says) in sorted(BIG.items()):
    path = os.path.join(TMP, name)
    open(path, "wb").write(data)
    for what, args in trace_readers(path)[:1] + trace_readers(path)[9:10]:  # report, and diff (stacks by text)
        p = run(args)
        label = "%s: %s (%d bytes, made here)" % (what, name, len(data))
        if p is None or p.returncode < 0 or p.returncode != status or (status and says not in p.stderr):
            ok(False, label, "exit %s, expected %d\n%s" % (p and p.returncode, status, p and p.stderr))
        else:
            ok(True, label)
# A module path naming a FIFO made here: opening it for symbols waited for a writer forever.
fifo = os.path.join(TMP, "fifo")
os.mkfifo(fifo)
path = os.path.join(TMP, "module-is-fifo.trace")
open(path, "wb").write(Trace().strings([(1, "cuda:0")]).stacks([(1, [0x400100])]).modules(
    [(fifo, "", 0x400000, 0x400000, 0x10000)]).events(basic_events()).end().bytes())
for what, args in trace_readers(path):
    p = run(args)
    ok(p is not None and p.returncode == 0, "%s: a module that is a FIFO (made here)" % what,
       "a hang" if p is None else p.stderr)

# Paths that are not files, given where a file is read: a FIFO nobody writes to (opening it
# waited forever), /dev/zero and /dev/urandom (a config reader read them until memory ran
# out), a directory. Every entry point refuses each in one line naming it, exit 2.
good = os.path.join(HERE, "traces", "healthy.trace")
nowriter = os.path.join(TMP, "no-writer.trace")
os.mkfifo(nowriter)
ranks = os.path.join(TMP, "ranks")  # a folder of ranks, one of them a FIFO
os.makedirs(ranks)
shutil.copy(good, os.path.join(ranks, "rank0.trace"))
os.mkfifo(os.path.join(ranks, "rank1.trace"))


def path_readers(path):
    return trace_readers(path) + [
        ("lua SCRIPT", ["lua", path, good]), ("top --once", ["top", "--once", path]), ("plan TRACE", ["plan", path, *MODEL]),
        ("plan --model", ["plan", "--model", path]), ("plan --deepspeed", ["plan", *MODEL, "--deepspeed", path]),
        ("run --policy", ["run", "--policy", path, "--", "true"])]


for path, kind in ((nowriter, "a FIFO"), ("/dev/zero", "a character device"), ("/dev/urandom", "a character device"),
                   (ranks, "a directory")):
    for what, args in path_readers(path):
        if path == ranks and what in ("report", "report --json", "report --html", "top --once", "plan --model"):
            continue  # a folder (of ranks, or holding config.json) is what these take
        p = run(args)
        lines = p.stderr.splitlines() if p else []
        said = os.path.realpath(path) if what == "run --policy" else path  # run names a policy by its real path
        ok(p is not None and p.returncode == REFUSED and len(lines) == 1 and
           lines[0] == "memtap: %s is %s, not a regular file" % (said, kind), "%s: %s refused" % (what, path),
           "a hang" if p is None else "exit %d\n%s" % (p.returncode, p.stderr))
fifo_rank = os.path.join(ranks, "rank1.trace")
for what, args in (("report DIR", ["report", ranks]), ("top --once DIR", ["top", "--once", "--json", ranks])):
    p = run(args)
    if what == "top --once DIR":  # a file found in a folder is skipped when it cannot be followed
        ok(p is not None and p.returncode == 0 and p.stdout.count('"rank"') == 1, what + ": its FIFO skipped",
           "a hang" if p is None else "exit %d\n%s%s" % (p.returncode, p.stdout[:300], p.stderr))
    else:
        ok(p is not None and p.returncode == REFUSED and
           p.stderr == "memtap: %s is a FIFO, not a regular file\n" % fifo_rank, what + ": its FIFO refused",
           "a hang" if p is None else "exit %d\n%s" % (p.returncode, p.stderr))
# A job's run directory whose event log and rank file are FIFOs: read as absent, not waited on.
rundir = os.path.join(TMP, "rundir")
os.makedirs(os.path.join(rundir, ".memtap"))
shutil.copy(good, os.path.join(rundir, "rank-0.trace"))
os.mkfifo(os.path.join(rundir, ".memtap", "events"))
os.mkfifo(os.path.join(rundir, ".memtap", "rank-0"))
p = run(["report", rundir])
ok(p is not None and p.returncode == 0, "report RUNDIR: a FIFO event log and rank file are not waited on",
   "a hang" if p is None else "exit %d\n%s" % (p.returncode, p.stderr))
# A config reader reads at most 16 MiB: a 3 GiB file (sparse: no disk) is refused before a
# byte of it is read, within the test's memory limit, as is one a byte past the bound.
for size in (3 << 30, (16 << 20) + 1):
    big = os.path.join(TMP, "config-%d.json" % size)
    with open(big, "wb") as f:
        f.truncate(size)
    for what, args in (("plan --model", ["plan", "--model", big]),
                       ("plan --deepspeed", ["plan", *MODEL, "--deepspeed", big])):
        p = run(args)
        ok(p is not None and p.returncode == REFUSED and
           p.stderr == "memtap: %s is %d bytes, more than a config file memtap reads (16 MiB)\n" % (big, size),
           "%s: a config file of %d bytes refused unread" % (what, size),
           "a hang" if p is None else "exit %d\n%s" % (p.returncode, p.stderr))

# One allocation of 2^52 bytes, more than any device holds (a snapshot of 133 bytes, an RMM
# log of one line): memtap-vmm's replay mapped it 2 MiB page by page (30 s, 4.7 GB; here,
# out of memory). Every policy fails it at once, in segments and in expandable segments.
for name in ("pickles/alloc-2-52.pickle", "rmm/size-2-52.csv"):
    for conf in ("expandable_segments:False", "expandable_segments:True"):
        p = run(["replay", "--json", "--conf=" + conf, os.path.join(HERE, name)])
        pol = json.loads(p.stdout)["policies"] if p and p.returncode == 0 else []
        ok([(x["policy"], x["ooms"], x["peak_reserved"]) for x in pol] ==
           [(x, 1, 0) for x in ("native", "memtap", "memtap-vmm", "bump")],
           "replay --conf=%s: %s fails in every policy, as an OOM" % (conf, name),
           "a hang" if p is None else "exit %d\n%s%s" % (p.returncode, p.stdout[:500], p.stderr))
# Three live allocations of 768 GiB: without --capacity the device holds 1 TiB, so the
# second and third fail in every policy, and nothing past 1 TiB is ever reserved.
p = run(["replay", "--json", os.path.join(HERE, "rmm/live-2.25-tib.csv")])
pol = json.loads(p.stdout)["policies"] if p and p.returncode == 0 else []
ok([(x["ooms"], x["first_oom"]) for x in pol] == [(2, 1)] * 4 and all(x["peak_reserved"] <= 1 << 40 for x in pol),
   "replay: allocations a device holds one at a time, not together, fail past 1 TiB in every policy",
   "a hang" if p is None else "exit %d\n%s%s" % (p.returncode, p.stdout[:500], p.stderr))
p = run(["replay", os.path.join(HERE, "rmm/size-2-52.csv")])
ok(p is not None and p.returncode == 0 and
   "OOMs: allocations that fail on a device of 1.00 TiB, more than any holds (no --capacity given)" in p.stdout,
   "replay says why an allocation failed without --capacity", p and p.stdout + p.stderr)
p = run(["replay", "--capacity=2TiB", os.path.join(HERE, "rmm/size-2-52.csv")])
ok(p is not None and p.returncode == REFUSED and
   p.stderr == "memtap: --capacity: 2TiB is more than any device holds (1.00 TiB)\n",
   "replay --capacity past what any device holds is refused", p and p.stderr)

# What valid hostile inputs read as: the recorder's thread numbers, Python's last value for
# a key given twice, a label that says what the input was.
p = run(["dump", os.path.join(HERE, "traces", "thread-sparse.trace")])
threads = sorted({int(line.split()[1]) for line in p.stdout.splitlines()}) if p and p.returncode == 0 else None
ok(threads == [7, 4000000000], "dump shows the recorder's thread indices, however sparse", threads)
p = run(["dump", os.path.join(HERE, "pickles", "dict-duplicate-keys.pickle")])
ok(p is not None and p.returncode == 0 and " alloc " in p.stdout and " free " not in p.stdout,
   "a key given twice keeps its last value, as in Python", p and p.stdout)
p = run(["report", os.path.join(HERE, "rmm", "threads-2000.csv")])
ok(p is not None and "(an RMM log)" in p.stdout.splitlines()[0], "report names an RMM log as one",
   p and p.stdout[:200])
done()
