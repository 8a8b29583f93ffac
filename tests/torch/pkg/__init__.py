"""The stand-in torch package (tests/torch/test_torch.py copies this folder into a package
per release): torch's lazy CUDA start-up and tensors that live as long as their Python
object, over the stand-in libc10_cuda.so loaded at import as torch loads its own."""
import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10_cuda.so"))
_lib.standin_malloc.restype = ctypes.c_void_p
_lib.standin_malloc.argtypes = [ctypes.c_size_t]
_lib.standin_free.argtypes = [ctypes.c_void_p]
_initialized = False


class OutOfMemoryError(RuntimeError):
    pass


def _lazy_init():
    global _initialized
    if not _initialized:
        _lib.standin_init()
        _initialized = True


class Tensor:
    def __init__(self, nbytes):
        _lazy_init()
        self.nbytes = nbytes
        self.ptr = _lib.standin_malloc(nbytes)
        if not self.ptr:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % nbytes)

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.standin_free(self.ptr)


def empty(nbytes):
    return Tensor(nbytes)


class cuda:
    @staticmethod
    def empty_cache():
        _lib.standin_empty_cache()

    @staticmethod
    def is_initialized():
        return _initialized
