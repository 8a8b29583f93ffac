"""The command's answers to bad input (issue 41): an unknown option, an ambiguous one or
one without its value is one line naming it (with the nearest option when one is near)
and a hint, exit 2, for every command; a mistyped command is answered with the nearest."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
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
          "(see memtap report --help)")]
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
done()
