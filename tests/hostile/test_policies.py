"""Hostile Lua policies (tests/hostile/policies/*.lua) inside real jobs on simgpu: each
must leave the job's exit status and output (its CUDA results) as they are without
memtap, every event recorded, and memtap's messages few and clear. Each file says how in
its header: `job:` the workload, `options:` memtap options, `env:` variables, `bundled:`
a bundled policy to run instead of the file (`{folder}` in options is the policy folder;
`dir={folder}` makes it the job's run directory), `plant:` what to put in the policy
folder first (link NAME, dirlink NAME: symbolic links out of it; hardlink NAME: a second
name of an empty file outside it; fifo NAME), `stack:` the job's stack limit in KiB
(ulimit -s), `expect:` and `expect-not:` text on stderr, `max-lines:`, `max-files:` and
`max-bytes:` (what the policy wrote: the folder less the job's trace) bounds, `skip-tsan:`
why the file cannot run under ThreadSanitizer. Nothing may be written outside the folder."""
import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
WORKLOAD = os.path.join(B, "tests/recorder/workload")
TMP = scratch("hostile-policies")
OUTSIDE = os.path.join(TMP, "outside")
os.mkdir(OUTSIDE)
HANG = 120  # seconds: only a hang detector; nothing here takes more than a few
DEADLINE = "policy_deadline_ms=20000"  # no call stops on time unless its file asks (a loaded machine is slow)


def headers(path):
    h = {"options": [], "env": {}, "plant": [], "expect": [], "expect-not": []}
    for line in open(path):
        if not line.startswith("-- "):
            break
        key, _, value = line[3:].strip().partition(": ")
        if key == "options":
            h["options"] += value.split()
        elif key == "env":
            h["env"].update(kv.split("=", 1) for kv in value.split())
        elif key in ("plant", "expect", "expect-not"):
            h[key].append(value)
        elif key in ("job", "bundled", "max-lines", "max-files", "max-bytes", "stack", "skip-tsan"):
            h[key] = value
    return h


def job(h):
    words = h["job"].split()
    return [WORKLOAD] + words[1:]


def limits(h):
    """What the job's process starts with: the header's stack limit, if any."""
    def apply():
        if "stack" in h:
            hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
            resource.setrlimit(resource.RLIMIT_STACK, (int(h["stack"]) << 10, hard))
    return apply


references = {}


def reference(cmd, h):
    """The job alone, and under memtap without a policy: its status, output, allocations."""
    key = (tuple(cmd), h.get("stack"))
    if key not in references:
        alone = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG, preexec_fn=limits(h))
        trace = os.path.join(TMP, "ref%d.trace" % len(references))
        subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--"] + cmd, capture_output=True, timeout=HANG,
                       preexec_fn=limits(h))
        references[key] = (alone.returncode, alone.stdout, events(trace))
    return references[key]


def events(trace):
    p = subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    e = json.loads(p.stdout)["events"]
    return e["allocs"], e["frees"], e["failed"], e["dropped"]


def plant(folder, what):
    kind, name = what.split()
    path = os.path.join(folder, name)
    if kind == "link":
        os.symlink(os.path.join(OUTSIDE, name), path)
    elif kind == "dirlink":
        os.symlink(OUTSIDE, path)
    elif kind == "hardlink":
        open(os.path.join(OUTSIDE, name), "w").close()
        os.link(os.path.join(OUTSIDE, name), path)
    elif kind == "fifo":
        os.mkfifo(path)


def written_outside(planted):
    """What is outside the policy folder but the empty files planted there; then it all goes."""
    found = []
    for n in os.listdir(OUTSIDE):
        path = os.path.join(OUTSIDE, n)
        if n not in planted or not os.path.isfile(path) or os.path.getsize(path):
            found.append(n)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return found


for path in sorted(glob.glob(os.path.join(S, "tests/hostile/policies/*.lua"))):
    name = os.path.basename(path)
    h = headers(path)
    if "skip-tsan" in h and "thread" in os.environ.get("MT_SANITIZERS", ""):
        ok(True, "%s # SKIP %s" % (name, h["skip-tsan"]))
        continue
    cmd = job(h)
    status, stdout, counts = reference(cmd, h)
    folder = os.path.join(TMP, name[:-4])
    os.mkdir(folder)
    for what in h["plant"]:
        plant(folder, what)
    trace = os.path.join(folder, "job.trace")
    args = [MEMTAP, "run", "-o", trace, "--policy", h.get("bundled", path), "-O", DEADLINE]
    for o in h["options"]:
        args += ["-O", o.replace("{folder}", folder)]
        if o.startswith("dir="):
            trace = os.path.join(folder, "rank-0.trace")
    p = subprocess.Popen(args + ["--"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **h["env"]), start_new_session=True, preexec_fn=limits(h))
    try:
        p.stdout, p.stderr = p.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the job too, not only memtap run
        p.communicate()
        ok(False, "%s: the job hung under the policy" % name)
        continue
    err = p.stderr
    said = [line for line in err.splitlines() if line.startswith("memtap: policy:")]
    problems = []
    if p.returncode != status:
        problems.append("exit status %d, %d without memtap" % (p.returncode, status))
    if p.stdout != stdout:
        problems.append("the job's output changed: %r" % p.stdout)
    if events(trace) != counts:
        problems.append("events %s, %s without the policy" % (events(trace), counts))
    problems += ["no %r on stderr" % x for x in h["expect"] if x not in err]
    problems += ["%r on stderr" % x for x in h["expect-not"] if x in err]
    if len(err.splitlines()) > int(h.get("max-lines", 60)):
        problems.append("%d lines on stderr" % len(err.splitlines()))
    if len(os.listdir(folder)) > int(h.get("max-files", 10)):
        problems.append("%d files in the policy folder" % len(os.listdir(folder)))
    if "max-bytes" in h:
        written = sum(os.lstat(os.path.join(root, n)).st_size for root, _, names in os.walk(folder) for n in names
                      if os.path.join(root, n) != trace)
        if written > int(h["max-bytes"]):
            problems.append("the policy wrote %d bytes" % written)
    outside = written_outside([w.split()[1] for w in h["plant"] if w.startswith("hardlink ")])
    if outside:
        problems.append("wrote outside the policy folder: %s" % outside)
    ok(not problems, "%s: %s" % (name, open(path).readline()[3:].strip()), "; ".join(problems) + "\n" + err[-2000:])

done()
