"""memtap from Python: say what tensors are for and where iterations end. Plain ctypes,
no build step: `make install` puts it where the configured python3 finds it, `pip
install --no-build-isolation ./python` anywhere else, or put python/ on PYTHONPATH.
`python3 -m memtap ARGS` runs the memtap command.

Under `memtap run -- python train.py` memtap's library is already in the process and
these calls land in the trace; anywhere else they do nothing and return 0 / False, so a
training script can keep them.

    import memtap
    ...
    loss.backward()
    optimizer.step()
    memtap.tag_model(model, optimizer)   # parameters, gradients, optimizer state
    memtap.mark("step")                  # an iteration boundary for leak detection

Tags are recorded as (data pointer, bytes, category). `memtap report` counts a tagged
range toward its category when the range is a whole allocation memtap saw; inside a
segment of PyTorch's caching allocator the tag is recorded, and attributed once memtap's
own allocator serves the tensors (docs/PYTHON.md).
"""
import ctypes
import os

__version__ = "0.1.0"  # configure.ac's AC_INIT (tests/install/test_install.py checks)

__all__ = ["PARAMS", "GRADS", "OPTIMIZER", "ACTIVATIONS", "TEMPORARIES", "OTHER", "active", "tag", "tag_model",
           "mark"]

# enum memtap_category in include/memtap.h
PARAMS, GRADS, OPTIMIZER, ACTIVATIONS, TEMPORARIES, OTHER = range(1, 7)

_api = None


def _lib():
    """memtap's C API in this process, or None when memtap is not loaded."""
    global _api
    if _api is None:
        process = ctypes.CDLL(None)
        try:
            tag_range, mark_, active_ = process.memtap_tag_range, process.memtap_mark, process.memtap_active
        except AttributeError:
            _api = False
            return None
        tag_range.argtypes, tag_range.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
        mark_.argtypes, mark_.restype = [ctypes.c_char_p], ctypes.c_int
        active_.argtypes, active_.restype = [], ctypes.c_int
        _api = (tag_range, mark_, active_)
    return _api or None


def active():
    """True when this process is being recorded by memtap."""
    api = _lib()
    return bool(api and api[2]())


def tag(tensor, category):
    """Tags one tensor's memory (its data pointer and its bytes) with a category.
    True when memtap recorded it."""
    api = _lib()
    size = tensor.numel() * tensor.element_size()
    if not api or not size:
        return False
    return api[0](tensor.data_ptr(), size, category) == 0


def _tensors(value):
    """Tensors inside an optimizer state entry (tensors, lists, tuples, dicts)."""
    if hasattr(value, "data_ptr") and hasattr(value, "numel"):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def tag_model(model, optimizer=None):
    """Tags the model's parameters, their gradients (those that exist: call it after
    backward) and the optimizer's state tensors (after its first step). Memory shared
    by several (tied weights) is tagged once, by its first role. Returns how many
    tensors memtap recorded."""
    seen, count = set(), 0

    def one(t, category):
        nonlocal count
        key = (t.data_ptr(), t.numel() * t.element_size())
        if key in seen or not key[1]:
            return
        seen.add(key)
        count += tag(t, category)

    params = list(model.parameters())
    for p in params:
        one(p.detach(), PARAMS)
    for p in params:
        if p.grad is not None:
            one(p.grad, GRADS)
    if optimizer is not None:
        for state in optimizer.state.values():
            for t in _tensors(state):
                one(t, OPTIMIZER)
    return count


def mark(name="step"):
    """An iteration boundary (or any named moment) in the trace. True when recorded."""
    api = _lib()
    return bool(api) and api[1](name.encode()) == 0


def library_path():
    """The path of the memtap library loaded in this process, or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip()
            if os.path.basename(path) == "libmemtap.so":
                return path
    return None


def use_allocator(torch=None):
    """Make memtap's caching allocator PyTorch's CUDA allocator, with its optional hooks
    (init, empty_cache, memory fraction, record_stream). Call it before any CUDA tensor
    exists, in a job run under memtap. Returns the CUDAPluggableAllocator; raises
    RuntimeError when memtap is not loaded."""
    if torch is None:
        import torch
    path = library_path()
    if path is None:
        raise RuntimeError("memtap is not loaded: run the job with `memtap run -- python ...`")
    lib = ctypes.CDLL(path)  # the library already loaded: no second copy
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "memtap_alloc", "memtap_free")
    inner = alloc.allocator()
    for setter, name in (("set_init_fn", "memtap_init"), ("set_reset_fn", "memtap_reset"),
                         ("set_memory_fraction_fn", "memtap_memory_fraction"),
                         ("set_record_stream_fn", "memtap_record_stream")):
        if hasattr(inner, setter):
            getattr(inner, setter)(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc
