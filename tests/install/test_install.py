"""memtap installed as a user gets it: `make install DESTDIR=...` into a scratch tree (or,
with MT_INSTALLED=1 from `make installcheck`, the configured prefix itself), then from
that tree: every manual page renders without a warning and carries its command's
options; pkg-config gives the header's folder and no libraries, and a program built
with it alone compiles, links and runs; the configured python3 imports the package
from where it went and `python3 -m memtap` runs the installed command; `pip install` of
python/ works offline; bash and zsh complete commands, options, option values,
policies, option keys and trace files."""
import errno
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
TMP = scratch("install")
# a make of our own: not the jobserver of the make running the tests
ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
DIRS = dict(line.split("=", 1) for line in subprocess.run(
    ["make", "-s", "-C", B, "print-dirs"], env=ENV, capture_output=True, text=True, check=True).stdout.splitlines()
    if "=" in line)

if os.environ.get("MT_INSTALLED"):
    ROOT = ""
else:
    ROOT = os.path.join(TMP, "root")
    p = subprocess.run(["make", "-s", "-C", B, "install", "DESTDIR=" + ROOT], env=ENV, capture_output=True,
                       text=True)
    ok(p.returncode == 0, "make install DESTDIR=%s" % ROOT, p.stdout + p.stderr)


def at(name):
    """A configured folder inside the tree installed."""
    return ROOT + DIRS[name]


MEMTAP = os.path.join(at("bindir"), "memtap")
COMMANDS = [line.split("\t")[0] for line in subprocess.run(
    [MEMTAP, "--complete", "commands"], capture_output=True, text=True).stdout.splitlines()]
ok("run" in COMMANDS and "report" in COMMANDS, "the installed memtap lists its commands", COMMANDS)


def options(command):
    return subprocess.run([MEMTAP, "--complete", "options", command], capture_output=True, text=True).stdout.split()


# ---- manual pages ----
pages = ["man1/memtap.1", "man3/memtap.3", "man7/memtap-policy.7"] + \
    ["man1/memtap-%s.1" % c for c in COMMANDS if c != "version"]
man = shutil.which("man")
for page in pages:
    path = os.path.join(at("mandir"), page)
    if not ok(os.path.isfile(path), "%s installed" % page, path):
        continue
    if not man:
        ok(True, "# SKIP man is not installed (Debian: man-db, groff-base): %s not rendered" % page)
        continue
    p = subprocess.run([man, "--warnings=w", "-l", path], capture_output=True, text=True,
                       env=dict(ENV, MANWIDTH="80", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8"))
    text = re.sub(r".\x08", "", p.stdout)
    ok(p.returncode == 0 and not p.stderr.strip() and "NAME" in text and "SEE ALSO" in text,
       "man -l %s renders without a warning" % page, p.stderr or text[:500])
    leaks = re.findall(r".{0,30}\\(?:[(ef&%-]|f[BIR]).{0,30}", text)
    ok(not leaks, "no roff escape shows through in %s" % page, "\n".join(leaks))
    if shutil.which("lexgrog"):
        p = subprocess.run(["lexgrog", path], capture_output=True, text=True)
        name = os.path.basename(page).rsplit(".", 1)[0]
        ok(p.returncode == 0 and '"%s - ' % name in p.stdout, "whatis reads %s's NAME line" % page,
           p.stdout + p.stderr)
    m = re.match(r"man1/memtap-(\w+)\.1$", page)
    if m:
        text = text.replace("\u2010", "-").replace("\u2212", "-")
        missing = [o for o in options(m.group(1)) if o != "--help" and not re.search(r"(?<![\w-])%s(?![\w-])" % o,
                                                                                     text)]
        ok(not missing, "memtap-%s(1) describes every option memtap %s --help names" % (m.group(1), m.group(1)),
           missing)
if man:
    p = subprocess.run([man, "-l", os.path.join(at("mandir"), "man1/memtap.1")], capture_output=True, text=True,
                       env=dict(ENV, MANWIDTH="80", MANPAGER="cat", LC_ALL="C.UTF-8"))
    text = re.sub(r".\x08", "", p.stdout)
    ok(all("memtap-%s(1)" % c in text for c in COMMANDS if c != "version"), "memtap(1) names every command's page",
       text[:800])
    p = subprocess.run([man, "-l", os.path.join(at("mandir"), "man3/memtap.3")], capture_output=True, text=True,
                       env=dict(ENV, MANWIDTH="200", MANPAGER="cat", LC_ALL="C.UTF-8"))
    text = re.sub(r".\x08", "", p.stdout)
    header = open(os.path.join(S, "include/memtap.h")).read()
    funcs = set(re.findall(r"MEMTAP_API\w*\(\w+, (\w+),", header) + re.findall(r"^\w[\w *]*?\b(memtap_\w+)\(", header,
                                                                            re.M))
    ok(funcs and all(f in text for f in funcs), "memtap(3) has every function of memtap.h (%d)" % len(funcs),
       [f for f in funcs if f not in text])

# ---- pkg-config and the header ----
pkgconfig = shutil.which("pkg-config")
if not pkgconfig:
    ok(True, "# SKIP pkg-config is not installed (Debian: pkgconf)")
else:
    env = dict(ENV, PKG_CONFIG_PATH=at("pkgconfigdir"), PKG_CONFIG_SYSROOT_DIR=ROOT or "/")
    p = subprocess.run([pkgconfig, "--cflags", "memtap"], capture_output=True, text=True, env=env)
    cflags = p.stdout.split()
    got = [os.path.normpath(f[2:]) for f in cflags if f.startswith("-I")]
    # pkg-config leaves out the compiler's own folders
    ok(p.returncode == 0 and (got == [os.path.normpath(at("includedir"))] or
                              (not got and DIRS["includedir"] == "/usr/include")),
       "pkg-config --cflags memtap: the installed header's folder", (p.stdout, p.stderr, at("includedir")))
    p = subprocess.run([pkgconfig, "--libs", "memtap"], capture_output=True, text=True, env=env)
    ok(p.returncode == 0 and p.stdout.strip() == "", "pkg-config --libs memtap is empty", (p.stdout, p.stderr))
    p = subprocess.run([pkgconfig, "--modversion", "memtap"], capture_output=True, text=True, env=env)
    ok(p.stdout.strip() == DIRS["VERSION"], "memtap.pc has the package's version", p.stdout)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc:
        prog = os.path.join(TMP, "app.c")
        open(prog, "w").write('#include <memtap.h>\n#include <stdio.h>\nint main(void) {\n'
                              '\tprintf("%d %d\\n", memtap_active(), memtap_mark("step"));\n\treturn 0;\n}\n')
        cmd = [cc, *cflags, "-o", os.path.join(TMP, "app"), prog] + \
            subprocess.run([pkgconfig, "--libs", "memtap"], capture_output=True, text=True, env=env).stdout.split()
        p = subprocess.run(cmd, capture_output=True, text=True)
        ok(p.returncode == 0, "a program builds with pkg-config's flags alone: " + " ".join(cmd), p.stderr)
        p = subprocess.run([os.path.join(TMP, "app")], capture_output=True, text=True)
        ok(p.stdout.split() == ["0", str(errno.ENOSYS)], "it runs without memtap: not active, ENOSYS",
           p.stdout + p.stderr)

# ---- the Python package ----
python = DIRS.get("PYTHON")
if python and DIRS.get("pythondir"):
    # the interpreter itself, not a wrapper that needs a shell on PATH (pyenv's shims)
    python = subprocess.run([python, "-c", "import sys; print(sys.executable)"], capture_output=True,
                            text=True).stdout.strip() or python
if not python or not DIRS.get("pythondir"):
    ok(True, "# SKIP configured --without-python: no package installed")
else:
    pyenv = dict(ENV, PYTHONPATH=at("pythondir"), PATH="/usr/bin:/bin")
    pyenv.pop("MEMTAP_COMMAND", None)
    p = subprocess.run([python, "-c", "import memtap, memtap.__main__ as m; print(memtap.__file__); "
                        "print(memtap.__version__); print(m.command())"], capture_output=True, text=True, env=pyenv)
    lines = p.stdout.split("\n")
    # without PYTHONPATH: the folder is the interpreter's own, or configure said it is not
    q = subprocess.run([python, "-c", "import sys; print(%r in [p.rstrip('/') for p in sys.path])"
                        % DIRS["pythondir"].rstrip("/")], capture_output=True, text=True)
    log = open(os.path.join(B, "config.log"), errors="replace").read()
    ok(q.stdout.strip() == "True" or "does not import from " + DIRS["pythondir"] in log,
       "%s imports from %s, or configure warned that it does not" % (python, DIRS["pythondir"]), q.stdout + q.stderr)
    ok(p.returncode == 0 and lines[0] == os.path.join(at("pythondir"), "memtap", "__init__.py"),
       "%s imports memtap from %s" % (python, DIRS["pythondir"]), p.stdout + p.stderr)
    ok(len(lines) > 2 and lines[1] == DIRS["VERSION"], "memtap.__version__ is the package's", lines)
    ok(len(lines) > 2 and os.path.realpath(lines[2]) == os.path.realpath(MEMTAP),
       "python3 -m memtap finds the memtap installed with it", lines)
    p = subprocess.run([python, "-m", "memtap", "version"], capture_output=True, text=True, env=pyenv)
    ok(p.returncode == 0 and p.stdout.strip() == "memtap " + DIRS["VERSION"], "python3 -m memtap version",
       p.stdout + p.stderr)
    p = subprocess.run([python, "-m", "memtap", "report", "--help"], capture_output=True, text=True, env=pyenv)
    q = subprocess.run([python, "-m", "memtap", "no-such-command"], capture_output=True, text=True, env=pyenv)
    ok(p.returncode == 0 and "usage: memtap report" in p.stdout and q.returncode == 2,
       "python3 -m memtap passes arguments and exit status", (p.returncode, q.returncode, q.stderr))
    # without an installed command: one line, status 2
    lone = os.path.join(TMP, "lone")
    shutil.copytree(os.path.join(S, "python", "memtap"), os.path.join(lone, "memtap"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([python, "-m", "memtap", "version"], capture_output=True, text=True,
                       env=dict(pyenv, PYTHONPATH=lone, PATH=TMP))
    ok(p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "PATH" in p.stderr,
       "python3 -m memtap without memtap anywhere: one line, status 2", (p.returncode, p.stderr))

    # pip install ./python, offline, from a copy (pip builds in the source folder)
    has_pip = all(subprocess.run([python, *args], capture_output=True).returncode == 0
                  for args in (["-m", "pip", "--version"], ["-c", "import setuptools"], ["-c", "import wheel"]))
    if not has_pip:
        ok(True, "# SKIP pip, setuptools or wheel missing for %s (Debian: python3-pip, python3-setuptools, "
           "python3-wheel)" % python)
    else:
        src, target = os.path.join(TMP, "pysrc"), os.path.join(TMP, "pip")
        shutil.copytree(os.path.join(S, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                                      "*.egg-info"))
        p = subprocess.run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "--no-deps",
                            "--disable-pip-version-check", "--target", target, src], capture_output=True, text=True,
                           env=dict(ENV, PIP_NO_CACHE_DIR="1"))
        ok(p.returncode == 0, "pip install --no-build-isolation ./python, offline", p.stdout + p.stderr)
        p = subprocess.run([python, "-c", "import memtap; print(memtap.__file__, memtap.__version__)"],
                           capture_output=True, text=True, env=dict(pyenv, PYTHONPATH=target))
        ok(p.stdout.split() == [os.path.join(target, "memtap", "__init__.py"), DIRS["VERSION"]],
           "the pip-installed package imports, with the package's version", p.stdout + p.stderr)
        p = subprocess.run([python, "-m", "memtap", "version"], capture_output=True, text=True,
                           env=dict(pyenv, PYTHONPATH=target, PATH=at("bindir") + ":/usr/bin:/bin"))
        ok(p.returncode == 0 and p.stdout.startswith("memtap "), "python3 -m memtap runs memtap found on PATH",
           p.stdout + p.stderr)

# ---- the example scripts: installed, and memtap lua finds one by name ----
examples = os.path.join(at("pkgdatadir"), "lua", "examples")
ok(all(os.path.isfile(os.path.join(examples, f)) for f in ("peak_budget.lua", "phases.lua")),
   "the example scripts go to share/memtap/lua/examples", examples)
p = subprocess.run([MEMTAP, "lua", "peak_budget", os.path.join(S, "tests/golden/v1-drops-simtrain.trace"), "--",
                    "activations", "1TiB"], capture_output=True, text=True, cwd=TMP,
                   env=dict(ENV, MEMTAP_LUA_DIR=os.path.join(at("pkgdatadir"), "lua")))
ok(p.returncode == 0 and "within budget" in p.stdout, "memtap lua peak_budget: a bundled example by name, from "
   "anywhere (the README's command)", p.stdout + p.stderr)

# ---- completion ----
work = os.path.join(TMP, "cwd")
os.makedirs(os.path.join(work, "traces"))
for name in ("run.trace", "snap.pickle", "notes.txt", "check.lua"):
    open(os.path.join(work, name), "w").close()
path = at("bindir") + ":" + os.environ.get("PATH", "/usr/bin:/bin")
# each line typed, and words that must (and must not) be offered
CASES = [("memtap re", ["report", "replay"], ["run"]),
         ("memtap run --po", ["--policy"], []),
         ("memtap run --policy ", ["oom_snapshot", "cap", "check.lua"], ["run.trace"]),
         ("memtap run -O pol", ["policy_budget"], ["depth"]),
         ("memtap report --h", ["--html", "--help"], ["--json"]),
         ("memtap plan --zer", ["--zero"], []),
         ("memtap report ", ["run.trace", "snap.pickle", "traces"], ["notes.txt"]),
         ("memtap report --html ", ["notes.txt", "run.trace"], []),
         ("memtap lua ", ["check.lua"], ["run.trace"]),
         ("memtap lua check.lua ", ["run.trace"], ["check.lua"]),
         ("memtap run -- simgpu-r", ["simgpu-run"], []),
         ("memtap t", ["top"], ["report"]),
         ("memtap top --o", ["--once"], []),
         ("memtap top ", ["run.trace", "traces"], ["notes.txt"]),
         # an option's values, from the tables the commands check them against
         ("memtap export --format ", ["folded", "perfetto", "memviz"], ["run.trace", "--format"]),
         ("memtap export --format=m", ["memviz"], ["folded", "run.trace"]),
         ("memtap export --what ", ["peak", "exit", "leaks"], ["run.trace"]),
         ("memtap plan --gpu-mem h", ["h100", "h200"], ["a100-40gb"]),
         ("memtap run --allocator ", ["caching", "none"], []),
         ("memtap run --backend=", ["preload", "cupti"], []),
         ("memtap report --frames ", ["all", "view"], ["run.trace"]),
         ("memtap report --top ", ["run.trace"], ["all"])]


def judge(shell, line, got, want, never):
    got = [w.rstrip("/=") for w in got]
    ok(all(w in got for w in want) and not any(w in got for w in never),
       "%s completes '%s' with %s" % (shell, line, " ".join(want)), " ".join(sorted(set(got))))


bash_file = os.path.join(at("bashcompletiondir"), "memtap")
if ok(os.path.isfile(bash_file), "bash completion installed", bash_file) and shutil.which("bash"):
    for line, want, never in CASES:
        words = line.replace("=", " = ").split(" ")  # bash's COMP_WORDBREAKS split at '='
        script = ('source "$1" && complete -p memtap >/dev/null || exit 3; COMP_WORDS=(%s); COMP_CWORD=%d; '
                  'COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}; _memtap; printf "%%s\\n" "${COMPREPLY[@]}"'
                  % (" ".join("'%s'" % w for w in words), len(words) - 1))
        p = subprocess.run(["bash", "--norc", "--noprofile", "-i", "-c", script, "bash", bash_file, line],
                           capture_output=True, text=True, cwd=work, env=dict(ENV, PATH=path),
                           stdin=subprocess.DEVNULL)
        if p.returncode:
            ok(False, "bash -i completes '%s'" % line, p.stderr)
            continue
        judge("bash -i", line, p.stdout.split(), want, never)

zsh_dir = at("zshcompletiondir")
if ok(os.path.isfile(os.path.join(zsh_dir, "_memtap")), "zsh completion installed", zsh_dir):
    zsh = shutil.which("zsh")
    if not zsh:
        ok(True, "# SKIP zsh is not installed (Debian: zsh): its completion not run")
    else:
        for n, (line, want, never) in enumerate(CASES):
            out = os.path.join(TMP, "zsh-%d.out" % n)
            p = subprocess.run([zsh, "-f", os.path.join(S, "tests/install/complete.zsh"), zsh_dir, out, line],
                               capture_output=True, text=True, cwd=work, env=dict(ENV, PATH=path), timeout=60)
            got = open(out).read().split() if os.path.exists(out) else []
            judge("zsh", line, got, want, never)
done()
