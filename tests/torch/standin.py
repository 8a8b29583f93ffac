"""The stand-in torch of a release, built into a folder for PYTHONPATH: this folder's
pkg/ (the Python side), include/ (the header, with standin_version.h saying the release)
and standin.cc built against it as torch/lib/libc10_cuda.so, over simgpu's runtime.
tests/torch/test_torch.py and bench/torch_tracker.py use it."""
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def build(root, version, code, simgpu, cxx="c++", cuda=os.environ.get("MT_CUDA_HOME") or "/usr/local/cuda"):
    """ROOT/site-VERSION holding torch VERSION (code: major * 100 + minor), over simgpu's
    runtime and driver (its expandable segments use the driver's VMM calls, CUDA's cuda.h);
    its path."""
    site = os.path.join(root, "site-" + version)
    pkg = os.path.join(site, "torch")
    if os.path.isdir(pkg):
        return site
    shutil.copytree(os.path.join(HERE, "pkg"), pkg)
    os.makedirs(os.path.join(pkg, "lib"))
    shutil.copytree(os.path.join(HERE, "include"), os.path.join(pkg, "include"))
    with open(os.path.join(pkg, "include/c10/standin_version.h"), "w") as f:
        f.write("#define STANDIN_TORCH %d\n" % code)
    with open(os.path.join(pkg, "version.py"), "w") as f:
        # as a wheel's (tools/generate_torch_version.py): __all__ names the fields first
        f.write("from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
                "__version__ = '%s+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\n"
                "git_version = 'standin%s'\nhip: Optional[str] = None\n" % (version, version))
    subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", os.path.join(pkg, "lib/libc10_cuda.so"),
                    os.path.join(HERE, "standin.cc"), "-I" + os.path.join(pkg, "include"),
                    "-I" + os.path.join(cuda, "include"), "-L" + simgpu, "-lcudart", "-lcuda"], check=True)
    return site
