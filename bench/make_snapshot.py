"""Writes a PyTorch memory snapshot laid out as torch.cuda.memory._dump_snapshot writes one
with _record_memory_history(stacks="all"), of about the size asked for: training steps
of a transformer (forward, backward on autograd's thread, an AdamW step), each entry's
stack 30 to 90 frames of C++ internals and Python callers as PyTorch interleaves them,
frame dicts shared between stacks, every entry its own frame list (an alloc's free
entries share its list), time_us, segments at the end with blocks, allocator_settings
and external_annotations. Only the standard pickle module; the numbers are made up.

  python3 bench/make_snapshot.py OUT.pickle [MEGABYTES]
"""
import pickle
import random
import sys

OUT = sys.argv[1]
TARGET = int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 100_000_000
rng = random.Random(20)
MiB = 1 << 20


def frame(name, filename="??", line=0):
    return {"name": name, "filename": filename, "line": line}


RECORDER = [frame("torch::unwind::unwind()"), frame("torch::CapturedTraceback::gather(bool, bool, bool)"),
            frame("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp")]
ALLOC = [frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, "
               "CUstream_st*)", "CUDACachingAllocator.cpp"),
         frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, "
               "unsigned long, CUstream_st*)"),
         frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
         frame("c10::StorageImpl::StorageImpl(c10::StorageImpl::use_byte_size_t, c10::SymInt const&, "
               "c10::Allocator*, bool)"),
         frame("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, "
               "c10::ScalarType, std::optional<c10::MemoryFormat>)"),
         frame("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)")]
OPS = ["mm", "add", "mul", "softmax", "gelu", "layer_norm", "einsum", "bmm", "cat", "zeros_like", "addcmul_",
       "sqrt", "div", "index_Tensor", "embedding", "cross_entropy", "clone", "transpose", "sum", "mean"]


def op_frames(op):
    long = ("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<"
            "c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&, at::Tensor const&), "
            "&at::(anonymous namespace)::wrapper_CUDA_%s>, at::Tensor, c10::guts::typelist::typelist<"
            "at::Tensor const&, at::Tensor const&> >, at::Tensor (at::Tensor const&, at::Tensor const&)>::call("
            "c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)" % op)
    return [frame("at::(anonymous namespace)::wrapper_CUDA_%s(at::Tensor const&, at::Tensor const&)" % op,
                  "RegisterCUDA_0.cpp"), frame(long, "RegisterCUDA_0.cpp"),
            frame("at::_ops::%s::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)" % op),
            frame("torch::autograd::VariableType::(anonymous namespace)::%s(c10::DispatchKeySet, at::Tensor "
                  "const&, at::Tensor const&)" % op, "VariableType_1.cpp"),
            frame("at::_ops::%s::call(at::Tensor const&, at::Tensor const&)" % op),
            frame("torch::autograd::THPVariable_%s(_object*, _object*, _object*)" % op,
                  "python_torch_functions_0.cpp")]


OPF = {op: op_frames(op) for op in OPS}
EVAL = frame("_PyEval_EvalFrameDefault")
CALL = [frame("_PyFunction_Vectorcall"), frame("PyObject_Call"), frame("slot_tp_call")]
START = [frame("Py_RunMain"), frame("Py_BytesMain"), frame("__libc_start_main"), frame("_start")]
TORCH = "/usr/lib/python3.11/site-packages/torch/"
MODULE = [frame("_call_impl", TORCH + "nn/modules/module.py", 1750),
          frame("_wrapped_call_impl", TORCH + "nn/modules/module.py", 1739)]
USER = [frame("forward", "/home/me/model.py", 20 + 7 * i) for i in range(40)]
LOOP = [frame("train_step", "/home/me/train.py", 88), frame("main", "/home/me/train.py", 140),
        frame("<module>", "/home/me/train.py", 151)]
OPTIM = [frame("_init_group", TORCH + "optim/adamw.py", 160), frame("_multi_tensor_adamw", TORCH + "optim/adamw.py",
         560), frame("step", TORCH + "optim/adamw.py", 220), frame("_use_grad", TORCH + "optim/optimizer.py", 79),
         frame("wrapper", TORCH + "optim/optimizer.py", 493)]
BACKWARD = [frame("torch::autograd::generated::%sBackward0::apply(std::vector<at::Tensor>&&)" % k)
            for k in ("Mm", "Add", "Mul", "Softmax", "Gelu", "NativeLayerNorm", "Bmm", "Embedding")]
ENGINE = [frame("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"),
          frame("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, "
                "torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<"
                "torch::autograd::ReadyQueue> const&)"),
          frame("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
          frame("torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> "
                "const&, bool)"), frame("execute_native_thread_routine", "thread48.o"), frame("start_thread"),
          frame("__clone3")]


def python_stack(depth, op):
    """C++ frames innermost first, one Python frame before each _PyEval_EvalFrameDefault,
    the Python frames left over after _start (as PyTorch 2.x on Python 3.11+ records)."""
    py = []
    for k in range(depth):
        py.append(USER[(k * 7 + depth) % len(USER)])
        py.extend(MODULE)
    py.extend(LOOP)
    cpp = RECORDER + ALLOC + OPF[op]
    out = list(cpp)
    for k, f in enumerate(py[:len(py) // 2]):
        out.append(f)
        out.append(EVAL)
        if k % 3 == 0:
            out.extend(CALL)
    out.extend(START)
    out.extend(py[len(py) // 2:])
    return out


def backward_stack(k, op):
    return RECORDER + ALLOC + OPF[op] + [BACKWARD[k % len(BACKWARD)]] + ENGINE


def optim_stack(k):
    return RECORDER + ALLOC + OPF[["zeros_like", "addcmul_", "sqrt", "div"][k % 4]] + OPTIM[k % 2:] + LOOP


STACKS = ([python_stack(d, op) for d in range(1, 12) for op in OPS[:12]] +
          [backward_stack(k, op) for k in range(8) for op in OPS[:6]] + [optim_stack(k) for k in range(8)])

T0 = 1748730219000000
entries = []
live = {}
addr_next = [0x7F0000000000]
time = [T0]


def tick():
    time[0] += rng.randint(1, 40)
    return time[0]


def alloc(size, stack):
    addr = addr_next[0]
    addr_next[0] += (size + 511) // 512 * 512
    frames = list(stack)  # a list of its own, of frame dicts shared with other stacks
    entries.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": tick(), "frames": frames})
    live[addr] = (size, frames)
    return addr


def free(addr):
    size, frames = live.pop(addr)
    for action in ("free_requested", "free_completed"):
        entries.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": tick(),
                        "frames": frames})


annotations = []
approx = 0
step = 0
while approx < TARGET:
    addr_next[0] = 0x7F0000000000 + (step % 4) * (1 << 36)
    acts = []
    for k in range(600):  # forward: activations kept for backward, temporaries freed at once
        st = STACKS[(k * 13 + step) % 132]
        a = alloc(rng.choice([2 * MiB, 8 * MiB, 512 * 1024, 4096]), st)
        if k % 3:
            acts.append(a)
        else:
            free(a)
    for k in range(600):  # backward, on autograd's thread
        a = alloc(rng.choice([2 * MiB, 8 * MiB, 4096]), STACKS[132 + k % 48])
        free(a)
        if acts and k % 2:
            free(acts.pop())
    while acts:
        free(acts.pop())
    annotations.append({"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": tick()})
    for k in range(64):  # the optimizer's temporaries
        free(alloc(4 * MiB, STACKS[180 + k % 8]))
    annotations.append({"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": tick()})
    step += 1
    approx = len(entries) * 165

segments = [{"device": 0, "address": 0x7E0000000000, "total_size": 40 * MiB, "allocated_size": 20 * MiB,
             "active_size": 20 * MiB, "requested_size": 20 * MiB, "stream": 0, "segment_type": "large",
             "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
             "blocks": [{"address": 0x7E0000000000, "size": 20 * MiB, "requested_size": 20 * MiB,
                         "state": "active_allocated", "frames": []},
                        {"address": 0x7E0000000000 + 20 * MiB, "size": 20 * MiB, "requested_size": 0,
                         "state": "inactive", "frames": []}]}]
snapshot = {"segments": segments, "device_traces": [entries],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False,
                                   "roundup_power2_divisions": {"1": 0, "2": 0}},
            "external_annotations": annotations}
with open(OUT, "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
