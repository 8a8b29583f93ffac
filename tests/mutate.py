"""make mutate: plants each bug of tests/mutations.txt in turn, rebuilds, and runs the
test suite until a test fails (the mutant is killed) or every test passes (it survived).
Tests named by the mutation's `tests:` lines run first, then the rest in the suite's
order. Prints each mutation's fate and the kill rate; exit 1 when the rate is below 90%
or a mutation no longer applies.

  python3 tests/mutate.py BUILD_DIR [--list] [--only TEXT]

Not part of make check: a survivor costs a whole suite run. The tree is restored after
each mutation, whatever happens; run it in a worktree of its own while others work."""
import os
import re
import signal
import subprocess
import sys
import time

S = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path):
    mutations, cur = [], None
    for n, line in enumerate(open(path).read().split("\n"), 1):
        if line.startswith("@ "):
            file, _, bug = line[2:].partition(" | ")
            cur = {"file": file.strip(), "bug": bug.strip(), "old": [], "new": [], "tests": [], "line": n}
            mutations.append(cur)
        elif cur and line.startswith("<"):
            cur["old"].append(line[1:])
        elif cur and line.startswith(">"):
            cur["new"].append(line[1:])
        elif cur and line.startswith("tests:"):
            cur["tests"] += line[6:].split()
    return mutations


def suite(build):
    make(build)  # a Makefile.am newer than the build regenerates the Makefile, which make echoes
    out = subprocess.run(["make", "-s", "-C", build, "print-tests"], capture_output=True, text=True).stdout
    return [t for t in out.split() if t.startswith("tests/")]


def make(build, *args, timeout=1800):
    return subprocess.run(["make", "-s", "-j2", "-C", build, *args], capture_output=True, text=True,
                          timeout=timeout)


def run_test(build, test):
    """True when the test passed."""
    try:
        p = make(build, "check", "TESTS=" + test, timeout=900)
    except subprocess.TimeoutExpired:
        return False  # a hang is a failure too
    return p.returncode == 0


def interrupted(sig, _frame):
    raise KeyboardInterrupt(signal.Signals(sig).name)  # the planted file is restored on the way out


def main():
    args = sys.argv[1:]
    if "--only" in args:
        at = args.index("--only")
        args = args[:at] + args[at + 2:] if at + 1 < len(args) else ["--only"]
    if [a for a in args if a.startswith("-") and a != "--list"]:
        print("usage: " + __doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "build")
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    mutations = parse(os.path.join(S, "tests/mutations.txt"))
    for m in mutations:
        text = open(os.path.join(S, m["file"])).read()
        m["count"] = text.count("\n".join(m["old"]) + "\n")
    if "--list" in sys.argv:
        for m in mutations:
            print("%-28s %s%s" % (m["file"], m["bug"], "" if m["count"] == 1 else "  [DOES NOT APPLY]"))
        return 0 if all(m["count"] == 1 for m in mutations) else 1
    tests = suite(build)
    results = []
    for m in mutations:
        if only and only not in m["bug"] and only not in m["file"]:
            continue
        path = os.path.join(S, m["file"])
        original = open(path).read()
        t0 = time.time()
        if m["count"] != 1:
            fate = "does not apply (the text occurs %d times)" % m["count"]
        else:
            try:
                open(path, "w").write(original.replace("\n".join(m["old"]) + "\n", "\n".join(m["new"]) + "\n", 1))
                if make(build).returncode or make(build, "check", "TESTS=").returncode:
                    fate = "does not build"
                else:
                    fate = "survived"
                    for test in m["tests"] + [t for t in tests if t not in m["tests"]]:
                        if not run_test(build, test):
                            fate = "killed by " + test
                            break
            finally:
                open(path, "w").write(original)
        results.append((m, fate))
        print("%-5s %-40s %s (%ds)" % ("ok" if fate.startswith("killed") else "--", m["file"] + ":" + str(m["line"]),
                                       m["bug"], time.time() - t0))
        print("      " + fate)
        sys.stdout.flush()
    make(build)  # the build as the tree is again
    counted = [f for _, f in results if f.startswith(("killed", "survived"))]
    killed = sum(f.startswith("killed") for f in counted)
    print("\n%d mutations: %d killed, %d survived, %d did not build, %d do not apply; kill rate %.1f%%"
          % (len(results), killed, len(counted) - killed, sum(f == "does not build" for _, f in results),
             sum(f.startswith("does not apply") for _, f in results), 100.0 * killed / max(1, len(counted))))
    for m, f in results:
        if f == "survived":
            print("survived: %s (%s)" % (m["bug"], m["file"]))
    bad = any(f.startswith("does not apply") for _, f in results)
    return 1 if bad or killed < 0.9 * len(counted) else 0


if __name__ == "__main__":
    sys.exit(main())
