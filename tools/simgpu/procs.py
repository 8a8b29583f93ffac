#!/usr/bin/env python3
"""Writes tools/simgpu/procs.def from the CUDA headers: every driver function that
cuGetProcAddress serves, keyed as the typedef headers key it (PFN_<base>_v<version>
with _ptds/_ptsz for the per-thread twins), with the ELF symbol that implements it.
A base's ABIs, oldest first, are the symbols base, base_v2, base_v3, ... (checked
against cuda.h's renaming macros); a twin is its ABI's symbol plus the suffix.
Usage: procs.py [CUDA_INCLUDE_DIR] > tools/simgpu/procs.def"""
import os
import re
import sys

HEADER = """/* Every driver function cuGetProcAddress serves, as cudaTypedefs.h keys them (and the
 * profiler, OpenGL, EGL and VDPAU typedef headers): the base name, the CUDA version that
 * introduced that ABI, and the ELF symbol that implements it. tools/simgpu/procs.py writes
 * this file from the installed headers; tests/simgpu/test_procs.py checks it is in step.
 * SIM_PROC(base, version, symbol)     the function returned for base at version and later
 * SIM_PROC_PT(base, version, symbol)  its per-thread-default-stream twin (_ptds or _ptsz),
 *                                     returned with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
"""
TYPEDEF_HEADERS = ("cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h",
                   "cudaVDPAUTypedefs.h")
MACRO_HEADERS = ("cuda.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h", "cudaProfiler.h")


def rows(inc):
    text = "".join(open(os.path.join(inc, h)).read() for h in TYPEDEF_HEADERS)
    found = set(re.findall(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)", text))
    macros = {}
    for h in MACRO_HEADERS:
        for m in re.finditer(r"^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\((cu\w+)\)|(cu\w+))\s*$",
                             open(os.path.join(inc, h)).read(), re.M):
            macros.setdefault(m.group(1), m.group(2) or m.group(3))
    plain = {}
    for base, ver, pt in found:
        if not pt:
            plain.setdefault(base, []).append(int(ver))
    out = []
    for base, ver, pt in found:
        vers = sorted(plain[base])
        ver = int(ver)
        at = max(i for i, v in enumerate(vers) if v <= ver)
        sym = base if at == 0 else "%s_v%d" % (base, at + 1)
        target = macros.get(base)
        # cuda.h renames base to its newest ABI's symbol, unless it renames it to another function
        if not pt and at == len(vers) - 1 and target and target != base and target != sym \
                and re.fullmatch(re.escape(base) + r"_v\d+", target):
            sys.exit("procs.py: %s@%d: cuda.h names %s, the numbering %s" % (base, ver, target, sym))
        out.append((base, ver, pt[1:] if pt else "", sym + pt))
    return sorted(out)


def main():
    inc = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/include"
    r = rows(inc)
    syms = [s for _, _, _, s in r]
    if len(set(syms)) != len(syms):
        sys.exit("procs.py: a symbol serves two rows")
    sys.stdout.write(HEADER)
    for base, ver, pt, sym in r:
        print("SIM_PROC%s(%s, %d, %s)" % ("_PT" if pt else "", base, ver, sym))


if __name__ == "__main__":
    main()
