"""The command's answers to bad input (issue 41): an unknown option, an ambiguous one or
one without its value is one line naming it (with the nearest option when one is near)
and a hint, exit 2, for every command; a mistyped command is answered with the nearest;
memtap run -O refuses an unknown key or a value the recorder would ignore before the job
starts, while unknown MEMTAP_ variables in the environment stay harmless; options given
together do all they say (report --json --html); a binary export never goes to a terminal;
no path a command makes or says has '//' in it, however its folder was given."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, read_pty, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("cli")


def memtap(*args, **kw):
    return subprocess.run([MEMTAP, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)


def refused(p, line):
    """Exit 2, nothing on stdout, exactly `line` on stderr."""
    return p.returncode == 2 and p.stdout == "" and p.stderr == line + "\n"


def said(p):
    return "exit %d, stdout %r, stderr %r" % (p.returncode, p.stdout[:300], p.stderr)


# ---- unknown options: one line and a hint, every command ----
commands = [line.split("\t")[0] for line in memtap("--complete", "commands").stdout.splitlines()]
commands = [c for c in commands if c != "version"]
ok(len(commands) >= 9, "the commands (%s)" % " ".join(commands))
marker = os.path.join(TMP, "ran")
for c in commands:
    rest = ["--", "touch", marker] if c == "run" else ["x.trace"]
    p = memtap(c, "--nosuch", *rest)
    ok(refused(p, "memtap %s: unknown option --nosuch (see memtap %s --help)" % (c, c)),
       "memtap %s --nosuch: one line naming it and where to look, exit 2" % c, said(p))
ok(not os.path.exists(marker), "memtap run --nosuch does not start the job")

CASES = [(["report", "--jsn", "x.trace"], "memtap report: unknown option --jsn; did you mean --json? "
          "(see memtap report --help)"),
         (["export", "--formt=folded", "x.trace"], "memtap export: unknown option --formt; did you mean --format? "
          "(see memtap export --help)"),
         (["plan", "--params", "1B", "--zeros", "1"], "memtap plan: unknown option --zeros; did you mean --zero? "
          "(see memtap plan --help)"),
         (["report", "--plan", "--params 1B --zeros 1", "x.trace"], "memtap report --plan: unknown option --zeros; "
          "did you mean --zero? (see memtap plan --help)"),
         (["run", "--d", "3", "--", "true"], "memtap run: option --d is ambiguous: --depth, --dir "
          "(see memtap run --help)"),
         (["report", "--top"], "memtap report: --top needs a value (see memtap report --help)"),
         (["run", "-o"], "memtap run: -o needs a value (see memtap run --help)"),
         (["report", "--json=yes", "x.trace"], "memtap report: --json takes no value (see memtap report --help)"),
         (["export", "-x", "x.trace"], "memtap export: unknown option -x (see memtap export --help)"),
         (["report", "--json", "-xq", "x.trace"], "memtap report: unknown option -x (see memtap report --help)"),
         (["report", "--no\x1b[2Jsuch", "x.trace"], "memtap report: unknown option --no?[2Jsuch "
          "(see memtap report --help)"),
         # a value not in an option's list: the list (the one the completions offer) and the nearest
         (["export", "--format=perfeto", "x.trace"], "memtap export: --format is folded, perfetto or memviz, "
          "not 'perfeto'; did you mean perfetto? (see memtap export --help)"),
         (["export", "x.trace"], "memtap export: --format is needed: folded, perfetto or memviz "
          "(see memtap export --help)"),
         (["run", "--allocator", "cachng", "--", "true"], "memtap run: --allocator is caching or none, not 'cachng'; "
          "did you mean caching? (see memtap run --help)"),
         (["plan", "--params", "1B", "--estimator", "zero3"], "memtap plan: --estimator is deepspeed-zero2, "
          "deepspeed-zero3 or megatron, not 'zero3' (see memtap plan --help)")]
for args, line in CASES:
    p = memtap(*args)
    ok(refused(p, line), "memtap %s: %s" % (" ".join(args).replace("\x1b", "\\e"), line.replace("\x1b", "\\e")),
       said(p))

# ---- a mistyped command: the nearest one ----
for word, near in (("reprot", "report"), ("rnu", "run"), ("exprot", "export"), ("dfif", "diff")):
    p = memtap(word, "x.trace")
    ok(refused(p, "memtap: unknown command '%s'; did you mean %s? (see memtap --help)" % (word, near)),
       "memtap %s: did you mean %s, exit 2" % (word, near), said(p))
p = memtap("frobnicate")
ok(refused(p, "memtap: unknown command 'frobnicate' (see memtap --help)"), "no command near: none offered", said(p))
p = memtap("--hepl")
ok(refused(p, "memtap: unknown option '--hepl'; did you mean --help? (see memtap --help)"), "memtap --hepl", said(p))

# ---- memtap run -O: the recorder's keys and its parser, before the job starts ----
RUN_O = [("nosuchkey=1", "-O nosuchkey=1: unknown key nosuchkey"),
         ("dpth=3", "-O dpth=3: unknown key dpth; did you mean depth?"),
         ("Flush-ms=5", "-O Flush-ms=5: unknown key Flush-ms; did you mean flush_ms?"),
         ("depth=abc", "-O depth=abc: depth takes a number, with K, M or G for sizes"),
         ("ring=12Q", "-O ring=12Q: ring takes a number, with K, M or G for sizes"),
         ("follow_fork=yes", "-O follow_fork=yes: follow_fork takes 1 or 0 (on or off)"),
         ("output=" + "x" * 5000, "-O output=" + "x" * 248 + ": output takes a value shorter than 4096 bytes")]
for kv, line in RUN_O:
    p = memtap("run", "-O", kv, "--", "touch", marker)
    ok(refused(p, "memtap run: %s (see memtap run --help)" % line) and not os.path.exists(marker),
       "memtap run -O %s: %s; the job not started" % (kv[:20], line[:80]), said(p))
trace = os.path.join(TMP, "o.trace")
p = memtap("run", "-q", "-o", trace, "-O", "ring=16K", "-O", "FOLLOW_FORK=true", "-O", "flush_ms=50", "--",
           SIMTRAIN, "--preset", "tiny", "--iters", "1")
ok(p.returncode == 0 and p.stderr == "" and os.path.exists(trace),
   "what the recorder takes, -O takes: sizes with K, true for 1, a key in capitals", said(p))
p = memtap("run", "-q", "-o", os.path.join(TMP, "deep.trace"), "-O", "depth=1k", "--", SIMTRAIN, "--preset", "tiny",
           "--iters", "1")
ok(p.returncode == 0 and p.stderr == "memtap: depth=1024 is more than 256 frames: using 256\n",
   "-O depth=1k: the recorder's limit said once, by memtap run (not again by the job)", said(p))
# the environment is not the command line: a variable that names no option is left alone,
# a bad one in MEMTAP_OPTIONS is one warning, and the job runs
trace = os.path.join(TMP, "env.trace")
p = memtap("run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "tiny", "--iters", "1",
           env=dict(os.environ, MEMTAP_NOSUCHKEY="1", MEMTAP_OPTIONS="nosuchkey=1"))
ok(p.returncode == 0 and os.path.exists(trace) and
   p.stderr == "memtap: ignoring 'nosuchkey=1' in MEMTAP_OPTIONS: not a known key=value option\n",
   "unknown MEMTAP_ variables in the environment: a warning at most, and the job recorded", said(p))
# ---- report --json --html: both, the page to its file and the JSON on stdout ----
golden = os.path.join(S, "tests/golden/v1-06e1a0a-simtrain.trace")
alone = memtap("report", "--json", golden)
page = os.path.join(TMP, "both.html")
p = memtap("report", "--json", "--html", page, golden)
ok(p.returncode == 0 and alone.returncode == 0 and p.stdout == alone.stdout and json.loads(p.stdout)
   and os.path.exists(page) and "<html" in open(page).read() and p.stderr == "memtap: wrote %s\n" % page,
   "memtap report --json --html FILE TRACE: the JSON on stdout as --json alone gives it, and the page", said(p))
ranks = os.path.join(TMP, "ranks")
os.makedirs(ranks)
# two processes' traces (copies of one trace would be one process's, the second a copy)
for r, name in enumerate(("v1-06e1a0a-simtrain.trace", "v1-5b7c812-simtrain.trace")):
    shutil.copy(os.path.join(S, "tests/golden", name), os.path.join(ranks, "rank%d.trace" % r))
alone = memtap("report", "--json", ranks)
page = os.path.join(TMP, "ranks.html")
p = memtap("report", "--html", page, "--json", ranks)
ok(p.returncode == 0 and alone.returncode == 0 and p.stdout == alone.stdout and len(json.loads(p.stdout)["ranks"]) == 2
   and os.path.exists(page) and p.stderr == "memtap: wrote %s\n" % page,
   "memtap report --html FILE --json DIR: both for ranks too", said(p))
# ---- export --format=memviz: a binary pickle never goes to a terminal ----
def on_terminal(*args):
    """memtap with its stdout a terminal: (exit status, what reached the terminal, stderr)."""
    master, slave = os.openpty()
    p = subprocess.Popen([MEMTAP, *args], stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    os.close(slave)
    got = read_pty(master)
    err = p.stderr.read()
    return p.wait(), got, err


status, out, err = on_terminal("export", "--format=memviz", golden)
ok(status == 2 and out == b"" and err == "memtap: --format memviz is a binary pickle, not for a terminal: use -o FILE "
   "or redirect the output\n", "export --format=memviz to a terminal: refused in one line, nothing written to it",
   (status, out[:100], err))
status, out, err = on_terminal("export", "--format=folded", golden)
ok(status == 0 and out.count(b"\n") > 3 and err == "", "export --format=folded to a terminal: text, written",
   (status, out[:100], err))
pickle = os.path.join(TMP, "snap.pickle")
status, out, err = on_terminal("export", "--format=memviz", "-o", pickle, golden)
ok(status == 0 and out == b"" and open(pickle, "rb").read(1) == b"\x80", "memviz with -o from a terminal: the file",
   (status, err))
p = subprocess.run([MEMTAP, "export", "--format=memviz", golden], capture_output=True)
ok(p.returncode == 0 and p.stdout[:1] == b"\x80" and p.stdout[-1:] == b".", "memviz redirected: the pickle on stdout",
   p.stderr)
# ---- paths: one '/' between a folder and a name, however the folder was given ----
for given in (ranks + "/", ranks + "//"):
    p = memtap("report", "--json", given)
    rows = json.loads(p.stdout)["ranks"] if p.returncode == 0 else []
    ok(len(rows) == 2 and all(r["trace"] == os.path.join(ranks, "rank%s.trace" % r["rank"]) for r in rows),
       "memtap report --json %s: each rank's trace as DIR/rank0.trace" % given.replace(ranks, "DIR"),
       [r["trace"] for r in rows] or said(p))
model = os.path.join(TMP, "model")
os.makedirs(model)
json.dump({"model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
           "attention_bias": False, "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "max_position_embeddings": 4096}, open(os.path.join(model, "config.json"), "w"))
p = memtap("plan", "--model", model + "/", "--json")
ok(p.returncode == 0 and p.stderr.startswith("memtap: %s/config.json: llama" % model) and "//" not in p.stderr,
   "memtap plan --model DIR/: DIR/config.json", said(p))
# the trace's path from a relative -o in the root folder, and a run directory given with a '/'
rel = os.path.relpath(os.path.join(TMP, "root.trace"), "/")
p = memtap("run", "-o", rel, "--", SIMTRAIN, "--preset", "tiny", "--iters", "1", cwd="/")
ok(p.returncode == 0 and "memtap: trace /%s: " % rel in p.stderr and "//" not in p.stderr,
   "memtap run -o RELATIVE in /: the trace named /RELATIVE", said(p))
rundir = os.path.join(TMP, "rundir")
p = memtap("run", "--", SIMTRAIN, "--preset", "tiny", "--iters", "1",
           env=dict(os.environ, MEMTAP_DIR=rundir + "/", RANK="0", TMPDIR=TMP + "/"))
ok(p.returncode == 0 and "memtap: trace %s/rank-0.trace: " % rundir in p.stderr and "//" not in p.stderr,
   "MEMTAP_DIR=DIR/ (and TMPDIR with its '/'): the rank's trace DIR/rank-0.trace", said(p))
# a policy's folder given with a '/': the paths its snapshots return and its errors name
pdir = os.path.join(TMP, "policy_dir")
os.makedirs(pdir)
policy = os.path.join(TMP, "snap.lua")
open(policy, "w").write("""memtap.on_exit(function()
  print(memtap.snapshot("snap.trace"))
  print(select(2, memtap.snapshot("snap.trace")))
end)
""")
p = memtap("run", "-o", os.path.join(pdir, "job.trace"), "--policy", policy, "-O", "policy_dir=%s/" % pdir, "--",
           SIMTRAIN, "--preset", "tiny", "--iters", "1")
ok(p.returncode == 0 and p.stderr.startswith("memtap: policy: %s/snap.trace\nmemtap: policy: %s/snap.trace: File "
                                             "exists\n" % (pdir, pdir)) and "//" not in p.stderr,
   "-O policy_dir=DIR/: a snapshot is DIR/snap.trace, and a refusal names it so", said(p))
done()
