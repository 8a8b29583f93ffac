"""TAP for the Python tests: ok() for each check, then done() to print the plan and exit."""
import sys

count = failed = 0


def ok(cond, what, detail=""):
    """One test line; on failure, up to 20 lines of detail as TAP comments."""
    global count, failed
    count += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (count, what))
    if not cond:
        failed += 1
        for line in str(detail).splitlines()[:20]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


def done():
    print("1..%d" % count)
    sys.exit(1 if failed else 0)
