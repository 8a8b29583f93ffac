"""The house's rules, checked on the tree and the built libraries:
- each folder includes headers only from itself and the layers below it (the table is
  docs/ARCHITECTURE.md's), so no code the job runs depends on offline code and no arrow
  points back up; the recorder reaches the policy engine only through its seam header,
  and the command reaches the recorder only through its options header;
- the libraries injected into a job export exactly their API (the hooks, the public
  functions, the injection entry points, the engine's one start function), and do not
  link Lua or the C++ runtime where the job could see them."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402
from tree import source_files  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]

# folder -> the folders it may include from (besides itself); in the job first, then offline
LAYERS = {
    "src/core": [],
    "src/cache": ["src/core"],
    "src/lua": ["src/core"],
    "src/policy": ["src/core", "src/cache", "src/lua"],
    "src/recorder": ["src/core", "src/cache", "src/policy"],
    "src/cupti": ["src/core", "src/recorder"],
    "src/reader": ["src/core"],
    "src/analyze": ["src/core", "src/cache", "src/reader"],
    "src/plan": ["src/core", "src/reader"],
    "src/script": ["src/core", "src/lua", "src/reader", "src/analyze", "src/plan"],
    "tools/memtap": ["src/core", "src/lua", "src/reader", "src/analyze", "src/plan", "src/script", "src/recorder"],
}
# where a folder may reach only one header of another
ONLY = {("src/recorder", "src/policy"): {"policy/policy.h"},
        ("tools/memtap", "src/recorder"): {"recorder/options.h", "recorder/options.def"}}

bad, seen = [], 0
for folder, below in LAYERS.items():
    for name in [os.path.basename(f) for f in source_files(S, (folder,), (".c", ".h", ".S"))
                 if os.path.dirname(f) == folder]:
        seen += 1
        text = open(os.path.join(S, folder, name)).read()
        for inc in re.findall(r'#include "([^"]+)"', text):
            if "/" not in inc or inc.startswith("../"):
                target = folder  # its own folder
            else:
                target = "src/" + inc.split("/")[0] if not inc.startswith("memtap/") else "tools/memtap"
            if target == folder:
                continue
            if target not in below:
                bad.append("%s/%s includes %s: %s is not below %s" % (folder, name, inc, target, folder))
            elif (folder, target) in ONLY and inc not in ONLY[(folder, target)]:
                bad.append("%s/%s includes %s: only %s of %s" % (folder, name, inc, ", ".join(ONLY[(folder, target)]),
                                                                  target))
ok(seen and not bad, "%d files include only from their own folder and the layers below it" % seen,
   "\n".join(bad))
src = {d for d in os.listdir(os.path.join(S, "src")) if os.path.isdir(os.path.join(S, "src", d))}
ok(src == {f[4:] for f in LAYERS if f.startswith("src/")}, "every folder of src/ has its place in the layering",
   src ^ {f[4:] for f in LAYERS if f.startswith("src/")})


# ---- what the injected libraries export ----
def names(path, pattern):
    text = open(os.path.join(S, path)).read()
    return set(re.findall(pattern, re.sub(r"/\*.*?\*/", "", text, flags=re.S)))


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(B, lib)], capture_output=True, text=True).stdout
    return set(out.split()[2::3])


def needed(lib):
    out = subprocess.run(["readelf", "-d", os.path.join(B, lib)], capture_output=True, text=True).stdout
    return set(re.findall(r"Shared library: \[([^\]]+)\]", out))


api = names("include/memtap.h", r"MEMTAP_API\w*\(int, (memtap_\w+),")
allocator = names("include/memtap.h", r"(?m)^\w+ \*?(memtap_\w+)\(")  # the caching allocator's entry points
hooks = names("src/recorder/driver_hooks.def", r"DRV\(\w+, (\w+),") | names("src/recorder/runtime_hooks.def",
                                                                           r"RT\((\w+)\)")
hooks |= {"cuGetProcAddress", "cuGetProcAddress_v2", "dlsym", "InitializeInjectionNvtx2"}
# the loader and exec hooks (src/recorder/loader.c, exec.c): unloads and image replacement
hooks |= {"dlclose", "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "execveat",
          "exit", "_exit", "_Exit", "pthread_exit"}
for lib, want in (("src/recorder/.libs/libmemtap.so", hooks | api | allocator),
                  ("src/cupti/.libs/libmemtap-cupti.so", api | {"InitializeInjection", "InitializeInjectionNvtx2"}),
                  ("src/policy/.libs/libmemtap-policy.so", {"memtap_policy_start"})):
    got = exported(lib)
    ok(got == want, "%s exports exactly its API (%d names)" % (os.path.basename(lib), len(want)), got ^ want)
deps = needed("src/recorder/.libs/libmemtap.so")
ok(deps and not any(d.startswith(("liblua", "libstdc++", "libjansson", "libdw")) for d in deps),
   "libmemtap.so links no Lua, C++ runtime, JSON or DWARF library (the policy engine is opened only when asked)",
   deps)
done()
