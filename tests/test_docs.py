"""The docs in step with the code's tables: every recorder option (options.def) in
docs/RECORDER.md's table and `memtap run --help`; every event kind (events.def) in
docs/FORMAT.md; every planner option (plan_options.def) in docs/PLAN.md and `memtap plan
--help`; every option a command parses in its --help; every source path the docs and
README name exists."""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")


def read(path):
    return open(os.path.join(S, path)).read()


def helptext(*args):
    return subprocess.run([MEMTAP, *args, "--help"], capture_output=True, text=True).stdout


options = re.findall(r"(?m)^OPT\((\w+),", read("src/recorder/options.def"))
recorder, run_help = read("docs/RECORDER.md"), helptext("run")
ok(options and not [o for o in options if "| `%s` |" % o not in recorder],
   "docs/RECORDER.md's table has every option of options.def (%d)" % len(options),
   [o for o in options if "| `%s` |" % o not in recorder])
ok(not [o for o in options if o not in run_help], "memtap run --help names every option",
   [o for o in options if o not in run_help])

kinds = re.findall(r'(?m)^EV\(\w+, "(\w+)"', read("src/core/events.def"))
fmt = read("docs/FORMAT.md")
ok(kinds and not [k for k in kinds if not re.search(r"\b%s\b" % k, fmt)],
   "docs/FORMAT.md describes every event kind of events.def (%d)" % len(kinds),
   [k for k in kinds if not re.search(r"\b%s\b" % k, fmt)])

plan = re.findall(r"(?m)^PLAN_OPT\((\w+),", read("src/core/plan_options.def"))
plan_doc, plan_help = read("docs/PLAN.md"), helptext("plan")
ok(plan and not [p for p in plan if "`%s`" % p not in plan_doc or "--" + p.replace("_", "-") not in plan_doc],
   "docs/PLAN.md lists every planner option, as option and Lua field (%d)" % len(plan))
ok(not [p for p in plan if "--" + p.replace("_", "-") not in plan_help], "memtap plan --help names every option",
   [p for p in plan if "--" + p.replace("_", "-") not in plan_help])

# every long option a command parses (its getopt table) is in its --help, so the manual
# pages and completions made from --help offer it (report.c's table is report's; dump
# shares it but takes only --json)
undocumented = []
for src in sorted(glob.glob(os.path.join(S, "tools/memtap/*.c"))):
    command = os.path.basename(src)[:-2]
    tables = re.findall(r"(?s)struct option (?:longopts|own)\[\] = \{(.*?)\};", open(src).read())
    if not tables:
        continue
    offered = subprocess.run([MEMTAP, "--complete", "options", command], capture_output=True, text=True).stdout.split()
    undocumented += ["memtap %s --%s" % (command, o) for body in tables for o in re.findall(r'\{"([\w-]+)", ', body)
                     if "--" + o not in offered]
ok(not undocumented, "every long option of the commands' getopt tables is in their --help", undocumented)

missing = []
for doc in glob.glob(os.path.join(S, "docs/*.md")) + [os.path.join(S, "README.md")]:
    for path in set(re.findall(r"(?<![/\w])((?:src|tools|tests|bench|lua|python|include)/[\w./-]+\.(?:c|h|S|def|py|lua|sh|js|css))\b",
                               open(doc).read())):
        if not os.path.exists(os.path.join(S, path)):
            missing.append("%s: %s" % (os.path.basename(doc), path))
ok(not missing, "every source path docs/ and README.md name exists", "\n".join(missing))
done()
