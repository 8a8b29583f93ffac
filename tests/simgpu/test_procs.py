"""simgpu's tables are in step with the CUDA headers: procs.def is what procs.py writes
from them, libcuda.so.1 exports every symbol in it by name, and attributes.def answers
every CUdevice_attribute cuda.h declares."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

B = os.environ["MT_BUILDDIR"]
S = os.environ["MT_SRCDIR"]
INC = os.path.join(os.environ.get("MT_CUDA_HOME", "/usr/local/cuda"), "include")
SIM = os.path.join(S, "tools/simgpu")

p = subprocess.run([sys.executable, os.path.join(SIM, "procs.py"), INC], capture_output=True, text=True)
ok(p.returncode == 0 and p.stdout == open(os.path.join(SIM, "procs.def")).read(),
   "procs.def is what procs.py writes from the installed headers (rerun it after a toolkit update)", p.stderr)

rows = re.findall(r"^SIM_PROC(?:_PT)?\((\w+), (\d+), (\w+)\)", open(os.path.join(SIM, "procs.def")).read(), re.M)
nm = subprocess.run(["nm", "-D", "--defined-only", os.path.join(B, "tools/simgpu/.libs/libcuda.so.1")],
                    capture_output=True, text=True).stdout
exported = set(line.split()[-1] for line in nm.splitlines())
missing = sorted(sym for _, _, sym in rows if sym not in exported)
ok(len(rows) > 500 and not missing, "libcuda.so.1 exports all %d symbols of procs.def" % len(rows), missing[:10])
for want in ("cuMemAlloc_v2", "cuMemAlloc", "cuCtxGetDevice_v2", "cuStreamSynchronize_ptsz", "cuLaunchKernel_ptsz"):
    ok(want in exported, "exported: " + want)

cuda_h = open(os.path.join(INC, "cuda.h")).read()
enum = re.search(r"typedef enum CUdevice_attribute_enum \{(.*?)\} CUdevice_attribute;", cuda_h, re.S).group(1)
# by value: deprecated names share their successor's number, and the table has one row a number
value = {n: int(v, 0) for n, v in re.findall(r"CU_DEVICE_ATTRIBUTE_(\w+)\s*=\s*(\w+)", enum) if v[0].isdigit()}
value.pop("MAX", None)
table = re.findall(r"^SIM_ATTR(?:_DEV)?\((\w+),", open(os.path.join(SIM, "attributes.def")).read(), re.M)
answered = set(value[n] for n in table if n in value)
lacking = sorted(n for n, v in value.items() if v not in answered)
ok(not lacking and len(value) > 100, "attributes.def answers all %d attributes cuda.h declares" % len(value), lacking)
done()
