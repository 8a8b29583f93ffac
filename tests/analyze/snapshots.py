"""PyTorch memory snapshots for the tests, laid out as torch.cuda.memory._dump_snapshot
writes them (the standard pickle module, dicts and lists only) and holding what real ones
hold: expandable segments (pages mapped before the trace began, segment_map and
segment_unmap of whole pages, one segment per run of mapped pages at the end), an OOM
after the allocator's retry unmapped the free pages, several devices, external
annotations, allocator_settings; stacks of 30 to 300 frames as PyTorch records them with
stacks="all" (the recorder's, the allocator's and the dispatcher's C++ frames first, one
Python frame before each _PyEval_EvalFrameDefault, the Python frames left over after
_start; autograd's engine thread with no Python frames at all); blocks made before
recording (frames []), an optimizer's state in AdamW's _init_group, gradients made by
AccumulateGrad. Each function says the numbers it was built to give; the tests work out
the rest by hand from PyTorch's rules."""
MiB = 1 << 20
T0 = 1748730219000000


def frame(name, filename="??", line=0):
    return {"name": name, "filename": filename, "line": line}


RECORDER = [frame("torch::unwind::unwind()"), frame("torch::CapturedTraceback::gather(bool, bool, bool)"),
            frame("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp")]
ALLOCATOR = [frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned "
                   "long, CUstream_st*)", "CUDACachingAllocator.cpp"),
             frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, "
                   "unsigned long, CUstream_st*)"),
             frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long) const"),
             frame("c10::StorageImpl::StorageImpl(c10::StorageImpl::use_byte_size_t, c10::SymInt const&, "
                   "c10::Allocator*, bool)"),
             frame("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, "
                   "c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)"),
             frame("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)")]
KERNEL = ("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<"
          "c10::CompileTimeFunctionPointer<at::Tensor (c10::DispatchKeySet, at::Tensor const&, at::Tensor const&), "
          "&torch::autograd::VariableType::(anonymous namespace)::%s>, at::Tensor, c10::guts::typelist::typelist<"
          "c10::DispatchKeySet, at::Tensor const&, at::Tensor const&> >, at::Tensor (c10::DispatchKeySet, "
          "at::Tensor const&, at::Tensor const&)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, "
          "at::Tensor const&)")


def op(name):
    """The dispatcher's frames of one operation, innermost first (a 600-character kernel name among them)."""
    return [frame("at::native::%s_out_cuda(at::Tensor const&, at::Tensor const&, at::Tensor&)" % name),
            frame("at::(anonymous namespace)::wrapper_CUDA_%s(at::Tensor const&, at::Tensor const&)" % name,
                  "RegisterCUDA_0.cpp"),
            frame(KERNEL % name, "RegisterCUDA_0.cpp"),
            frame("at::_ops::%s::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)" % name),
            frame("torch::autograd::VariableType::(anonymous namespace)::%s(c10::DispatchKeySet, at::Tensor const&, "
                  "at::Tensor const&)" % name, "VariableType_1.cpp"),
            frame("at::_ops::%s::call(at::Tensor const&, at::Tensor const&)" % name),
            frame("torch::autograd::THPVariable_%s(_object*, _object*, _object*)" % name,
                  "python_torch_functions_0.cpp")]


EVAL = frame("_PyEval_EvalFrameDefault")
CALLS = [frame("_PyFunction_Vectorcall"), frame("PyObject_Call"), frame("slot_tp_call"),
         frame("_PyObject_MakeTpCall.lto_priv.0")]
START = [frame("Py_RunMain"), frame("Py_BytesMain"), frame("__libc_start_call_main"), frame("__libc_start_main"),
         frame("_start")]
TORCH = "/opt/conda/lib/python3.11/site-packages/torch/"
MODULE = [frame("_call_impl", TORCH + "nn/modules/module.py", 1750),
          frame("_wrapped_call_impl", TORCH + "nn/modules/module.py", 1739)]
LOOP = [frame("train_step", "/home/me/train.py", 88), frame("train", "/home/me/train.py", 120),
        frame("main", "/home/me/train.py", 140), frame("<module>", "/home/me/train.py", 151)]
ENGINE = [frame("torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
          frame("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, "
                "torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> "
                "const&)"),
          frame("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
          frame("torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, "
                "bool)"),
          frame("torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<"
                "torch::autograd::ReadyQueue> const&, bool)"),
          frame("execute_native_thread_routine", "thread48.o"), frame("start_thread"), frame("__clone3")]


def python_stack(py, cpp):
    """As PyTorch 2.x on Python 3.11+ records a stack: the C++ frames innermost first, a
    Python frame before every _PyEval_EvalFrameDefault it met (fewer than there are Python
    frames), the rest of the Python frames after _start."""
    out, k = list(cpp), 0
    for k, f in enumerate(py[:len(py) // 3]):
        out += [f, EVAL] + (CALLS if k % 2 == 0 else [])
    return out + START + py[len(py) // 3:]


def forward_stack(layer, opname, depth=1):
    """An allocation in the forward pass: layer `layer`'s forward, under the model's."""
    py = []
    for d in range(depth):
        py += [frame("forward", "/home/me/model.py", 30 + 10 * ((layer + d) % 7))] + MODULE
    py += [frame("forward", "/home/me/model.py", 120)] + MODULE + LOOP
    return python_stack(py, RECORDER + ALLOCATOR + op(opname))


def backward_stack(node, opname):
    """An allocation on autograd's engine thread: no Python frames."""
    return RECORDER + ALLOCATOR + op(opname) + [
        frame("torch::autograd::generated::%s::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"
              % node)] + ENGINE


def grad_stack():
    """A parameter's gradient, made by AccumulateGrad on the engine thread."""
    return RECORDER + ALLOCATOR + op("clone") + [
        frame("torch::autograd::AccumulateGrad::accumulateGrad<torch::autograd::AccumulateGrad::apply("
              "std::vector<at::Tensor, std::allocator<at::Tensor> >&&)::{lambda(at::Tensor&&)#1}>(at::Tensor const&, "
              "at::Tensor&, at::Tensor const&, long, std::function<void (at::Tensor&&)> const&)"),
        frame("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")] + ENGINE


OPTIM = [frame("_use_grad", TORCH + "optim/optimizer.py", 79), frame("wrapper", TORCH + "optim/optimizer.py", 493)]


def optimizer_stack(state):
    """AdamW's step: its state made by zeros_like in _init_group, or a temporary of the update."""
    if state:
        py = [frame("_init_group", TORCH + "optim/adamw.py", 160), frame("step", TORCH + "optim/adamw.py", 220)]
        cpp = op("zeros_like")
    else:
        py = [frame("_multi_tensor_adamw", TORCH + "optim/adamw.py", 560), frame("adamw", TORCH + "optim/adamw.py",
                                                                                   470),
              frame("step", TORCH + "optim/adamw.py", 240)]
        cpp = op("_foreach_sqrt")
    return python_stack(py + OPTIM + LOOP, RECORDER + ALLOCATOR + cpp)


class Trace:
    """Trace entries of one device, with addresses handed out in one segment_map'd range."""

    def __init__(self, base, timed=True, device=0):
        self.entries, self.at, self.t, self.timed, self.live, self.base = [], base, T0, timed, {}, base
        self.device = device

    def add(self, action, addr, size, frames, **extra):
        self.t += 7
        e = {"action": action, "addr": addr, "size": size, "stream": 0}
        if self.timed:
            e["time_us"] = self.t
        e["frames"] = frames
        e["compile_context"] = "N/A"
        e.update(extra)
        self.entries.append(e)
        return e

    def alloc(self, size, frames):
        addr = self.at
        self.at += (size + 511) // 512 * 512
        self.add("alloc", addr, size, frames)
        self.live[addr] = (size, frames)
        return addr

    def free(self, addr):
        size, frames = self.live.pop(addr)
        self.add("free_requested", addr, size, frames)
        self.add("free_completed", addr, size, frames)

    def blocks(self, total):
        """The range's blocks at the end (`total` bytes from base): the live ones, their
        sizes rounded to 512 B, and the free space between them."""
        blocks, at = [], self.base
        for addr, (size, frames) in sorted(self.live.items()):
            if addr > at:
                blocks.append(block(at, addr - at, 0, "inactive", []))
            rounded = (size + 511) // 512 * 512
            blocks.append(block(addr, rounded, size, "active_allocated", frames))
            at = addr + rounded
        return blocks + [block(at, self.base + total - at, 0, "inactive", [])]


def settings(expandable):
    return {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if expandable else "", "max_split_size": -1,
            "garbage_collection_threshold": 0.0, "expandable_segments": expandable, "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0}}


def block(addr, size, requested, state, frames):
    return {"address": addr, "size": size, "requested_size": requested, "state": state, "frames": frames}


def segment(device, addr, blocks, small=False, expandable=True):
    """A segment dict as DeviceCachingAllocator::snapshot() fills it from its blocks."""
    active = [b for b in blocks if b["state"].startswith("active")]
    return {"device": device, "address": addr, "total_size": sum(b["size"] for b in blocks),
            "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in active), "requested_size": sum(b["requested_size"] for b in active),
            "stream": 0, "segment_type": "small" if small else "large", "segment_pool_id": (0, 0),
            "is_expandable": expandable, "frames": [], "blocks": blocks}


def expandable_oom():
    """expandable_segments:True, two devices. Device 0: pages [L, L+40 MiB) mapped before
    recording (a 30 MiB parameter, a 10 MiB block freed in the trace); maps of 60 MiB
    (large pool, 20 MiB pages) and 2 MiB (small pool); a 50 MiB block freed, then an OOM
    for 200 MiB with 91 MiB free in CUDA after the retry unmapped the two whole free pages
    [L+40, L+80). Peak 90 MiB + 3000 B allocated with 102 MiB mapped; at the end three
    segments (2 MiB small, 40 MiB and 20 MiB large): total_reserved 62 MiB,
    total_allocated 39 MiB + 4000 B, 96 B internal. Device 1: a 20 MiB page mapped, 12 MiB
    allocated, an annotation around it."""
    L, S, F = 0x7f2000000000, 0x7f1000000000, [frame("forward", "/home/me/model.py", 20)] + LOOP
    d0 = Trace(L)
    d0.add("segment_map", L + 40 * MiB, 60 * MiB, F)
    d0.add("alloc", L + 40 * MiB, 50 * MiB - 1000, F)  # a block of 50 MiB - 512
    d0.add("segment_map", S, 2 * MiB, F)
    d0.add("alloc", S, 4000, F)  # a block of 4096
    d0.add("free_requested", L + 30 * MiB, 10 * MiB, F)  # made before recording
    d0.add("free_completed", L + 30 * MiB, 10 * MiB, F)
    d0.add("alloc", L + 90 * MiB - 512, 9 * MiB, F)
    d0.add("free_requested", L + 40 * MiB, 50 * MiB - 1000, F)
    d0.add("free_completed", L + 40 * MiB, 50 * MiB - 1000, F)
    d0.add("segment_unmap", L + 40 * MiB, 40 * MiB, F)  # release_cached_blocks before the OOM
    oom = {"action": "oom", "device_free": 91 * MiB, "size": 200 * MiB, "stream": 0, "time_us": d0.t + 5,
           "frames": F, "compile_context": "N/A"}
    d0.entries.append(oom)
    M = 0x7f4000000000
    d1 = Trace(M, device=1)
    d1.add("segment_map", M, 20 * MiB, F)
    d1.add("alloc", M, 12 * MiB, F)
    segments = [
        segment(0, S, [block(S, 4096, 4000, "active_allocated", F), block(S + 4096, 2 * MiB - 4096, 0, "inactive", [])],
                small=True),
        segment(0, L, [block(L, 30 * MiB, 30 * MiB, "active_allocated", []),
                       block(L + 30 * MiB, 10 * MiB, 10 * MiB, "inactive", [])]),  # a stale requested_size
        segment(0, L + 80 * MiB, [block(L + 80 * MiB, 10 * MiB - 512, 50 * MiB - 1000, "inactive", []),
                                  block(L + 90 * MiB - 512, 9 * MiB, 9 * MiB, "active_allocated", F),
                                  block(L + 99 * MiB - 512, MiB + 512, 0, "inactive", [])]),
        segment(1, M, [block(M, 12 * MiB, 12 * MiB, "active_allocated", F),
                       block(M + 12 * MiB, 8 * MiB, 0, "inactive", [])])]
    notes = [{"stage": "START", "name": "## forward ##", "device": 1, "time_us": d1.t - 10},
             {"stage": "END", "name": "## forward ##", "device": 1, "time_us": d1.t + 10}]
    return {"segments": segments, "device_traces": [d0.entries, d1.entries], "allocator_settings": settings(True),
            "external_annotations": notes}


# A training step's sizes: four parameters of 32 MiB (made before recording), their
# gradients, AdamW's two states per parameter, six saved activations of 16 MiB per layer
# pass, temporaries of 8 MiB.
PARAMS, ACT, TMP = 32 * MiB, 16 * MiB, 8 * MiB


def training(iterations=2, timed=True, annotated=True, backward=True, optimizer=True, leak=0, deep=0):
    """Full training steps (forward, backward on autograd's thread, AdamW's step,
    zero_grad(set_to_none)) of a model whose four 32 MiB parameters were made before
    recording. Per step: 6 activations of 16 MiB saved in forward and freed in backward,
    one 8 MiB temporary per activation freed at once (forward) or after the next (backward);
    4 gradients of 32 MiB (AccumulateGrad) kept into the optimizer step, freed by
    zero_grad; AdamW's first step makes 8 states of 32 MiB (_init_group), each step a 64
    MiB temporary of the update. The peak, in the first optimizer step: params 128 MiB,
    grads 128 MiB, optimizer 256 MiB, temporaries 64 MiB. Without backward and
    optimizer, a forward pass: params 128 MiB, activations 96 MiB, temporaries 8 MiB
    (the last one's, live with the last activation). `leak` bytes a step are kept by
    the training loop; `deep` adds that many Python frames to the forward stacks (a
    recursion 300 deep keeps the loop's frames at its outer end)."""
    P, BASE, SEG = 0x7e0000000000, 0x7f0000000000, 4 << 30
    d = Trace(BASE, timed=timed)
    d.add("segment_alloc", BASE, SEG, LOOP)  # one segment the trace's blocks are cut from
    notes, segs = [], []
    for k in range(4):
        segs.append(block(P + k * PARAMS, PARAMS, PARAMS, "active_allocated", []))
    state = []
    for it in range(iterations):
        acts = []
        for k in range(6):
            st = forward_stack(k, ["mm", "gelu", "softmax"][k % 3])
            if deep:
                st = python_stack([frame("recurse", "/home/me/model.py", 77)] * deep +
                                  [frame("forward", "/home/me/model.py", 120)] + MODULE + LOOP,
                                  RECORDER + ALLOCATOR + op("mm"))
            tmp = d.alloc(TMP, st)
            acts.append(d.alloc(ACT, st))
            if k < 5 or backward:
                d.free(tmp)
        if leak:
            d.alloc(leak, python_stack([frame("train_step", "/home/me/train.py", 95)] + LOOP[1:],
                                       RECORDER + ALLOCATOR + op("cat")))
        if not backward:
            break
        grads = []
        for k in range(6):
            tmp = d.alloc(TMP, backward_stack(["MmBackward0", "GeluBackward0", "SoftmaxBackward0"][k % 3], "mm"))
            d.free(acts.pop())
            if k % 3 == 2 and len(grads) < 4:
                grads.append(d.alloc(PARAMS, grad_stack()))
            d.free(tmp)
        while len(grads) < 4:
            grads.append(d.alloc(PARAMS, grad_stack()))
        if not optimizer:
            continue
        if annotated:
            notes.append({"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": d.t + 1})
        if not state:
            for k in range(8):
                state.append(d.alloc(PARAMS, optimizer_stack(True)))
        tmp = d.alloc(64 * MiB, optimizer_stack(False))
        d.free(tmp)
        if annotated:
            notes.append({"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": d.t + 1})
            notes.append({"stage": "START", "name": "Optimizer.zero_grad#AdamW.zero_grad", "device": 0,
                          "time_us": d.t + 2})
        zero = python_stack([frame("zero_grad", TORCH + "optim/optimizer.py", 980)] + LOOP,
                            RECORDER + [frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free("
                                              "c10::cuda::CUDACachingAllocator::Native::Block*)")])
        for g in grads:
            size, _ = d.live.pop(g)
            d.add("free_requested", g, size, zero)
            d.add("free_completed", g, size, zero)
        if annotated:
            notes.append({"stage": "END", "name": "Optimizer.zero_grad#AdamW.zero_grad", "device": 0,
                          "time_us": d.t + 1})
    # the end: the parameters' segment, and the trace's segment with its live blocks and
    # the free space between them
    segments = [segment(0, P, segs, expandable=False), segment(0, BASE, d.blocks(SEG), expandable=False)]
    snap = {"segments": segments, "device_traces": [d.entries], "allocator_settings": settings(False),
            "external_annotations": notes if timed else []}
    return snap


def warm_step():
    """One training step recorded after warm-up steps, with a hand-written Adam that writes
    new state tensors (m = beta1 * m + ..., as CS336's does) instead of updating in place.
    Made before recording: four 32 MiB parameters and their eight 32 MiB states. The step:
    6 activations of 16 MiB freed in backward, then 4 gradients of 32 MiB, per parameter a
    new m and v (/home/me/optimizer.py:73, 74), each old one freed once the new is made.
    The peak, at the first new state: params 128 MiB, grads 128 MiB, optimizer 288 MiB
    (the eight old states and one new one)."""
    P, S, BASE, SEG = 0x7e0000000000, 0x7d0000000000, 0x7f0000000000, 1 << 30
    d = Trace(BASE)
    d.add("segment_alloc", BASE, SEG, LOOP)
    acts = [d.alloc(ACT, forward_stack(k, "mm")) for k in range(6)]
    for k in range(6):
        d.free(acts.pop())
    grads = [d.alloc(PARAMS, grad_stack()) for k in range(4)]
    step = [frame("step", "/home/me/optimizer.py", 0)] + OPTIM + LOOP
    for k in range(8):
        at = [dict(f, line=73 + k % 2) if f["name"] == "step" else f for f in step]
        d.alloc(PARAMS, python_stack(at, RECORDER + ALLOCATOR + op("mul")))
        d.live[S + k * PARAMS] = (PARAMS, python_stack(at, RECORDER))
        d.free(S + k * PARAMS)  # the old state, made before recording
    params = [block(P + k * PARAMS, PARAMS, PARAMS, "active_allocated", []) for k in range(4)]
    return {"segments": [segment(0, P, params, expandable=False), segment(0, BASE, d.blocks(SEG), expandable=False)],
            "device_traces": [d.entries], "allocator_settings": settings(False), "external_annotations": []}


def later_step(grads_kept=True, workspace=True):
    """A training step recorded after warm-up, under torch's AdamW (state updated in place).
    Made before recording and live to the end: four 32 MiB parameters (frames []), their
    eight 32 MiB states (the block keeps its frames: _init_group's), a 32 MiB cuBLAS
    workspace made on autograd's engine thread (its frames: getNewWorkspace), and - the
    loop calls zero_grad(set_to_none=False), backward adds into them - four 32 MiB
    gradients (frames [], as the parameters). The step: 6 activations of 16 MiB freed in
    backward (which makes only 8 MiB temporaries), a 64 MiB temporary of the update. The
    peak, at backward's first temporary: params 128 MiB, grads 128 MiB, optimizer 256 MiB,
    activations 96 MiB, temporaries 8 MiB, other 32 MiB (the workspace)."""
    P, BASE, SEG = 0x7e0000000000, 0x7f0000000000, 1 << 30
    d = Trace(BASE)
    d.add("segment_alloc", BASE, SEG, LOOP)
    acts = [d.alloc(ACT, forward_stack(k, "mm")) for k in range(6)]
    for k in range(6):
        tmp = d.alloc(TMP, backward_stack("MmBackward0", "mm"))
        d.free(acts.pop())
        d.free(tmp)
    d.free(d.alloc(64 * MiB, optimizer_stack(False)))
    wsp = RECORDER + ALLOCATOR[:3] + [frame("at::cuda::getNewWorkspace()"),
                                      frame("at::cuda::getCurrentCUDABlasHandle()")] + op("mm") + [
        frame("torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")
    ] + ENGINE
    made = [block(P + k * PARAMS, PARAMS, PARAMS, "active_allocated", []) for k in range(4)]
    made += [block(P + (4 + k) * PARAMS, PARAMS, PARAMS, "active_allocated", optimizer_stack(True)) for k in range(8)]
    if grads_kept:
        made += [block(P + (12 + k) * PARAMS, PARAMS, PARAMS, "active_allocated", []) for k in range(4)]
    if workspace:
        made.append(block(P + 16 * PARAMS, PARAMS, PARAMS, "active_allocated", wsp))
    free = block(BASE, SEG, 0, "inactive", [])
    return {"segments": [segment(0, P, made, expandable=False), segment(0, BASE, [free], expandable=False)],
            "device_traces": [d.entries], "allocator_settings": settings(False), "external_annotations": []}


def inference(passes=2):
    """Forward passes under no_grad of the same model (four 32 MiB parameters made before
    recording): six layers, each output (16 MiB) freed once the next layer has made its
    own, the last freed at the end of the pass. The peak: params 128 MiB, two outputs,
    activations 32 MiB, nothing else."""
    P, BASE, SEG = 0x7e0000000000, 0x7f0000000000, 4 << 30
    d = Trace(BASE)
    d.add("segment_alloc", BASE, SEG, LOOP)
    segs = [block(P + k * PARAMS, PARAMS, PARAMS, "active_allocated", []) for k in range(4)]
    for _ in range(passes):
        prev = None
        for k in range(6):
            out = d.alloc(ACT, forward_stack(k, ["mm", "gelu", "softmax"][k % 3]))
            if prev is not None:
                d.free(prev)
            prev = out
        d.free(prev)
    blocks = [block(BASE, SEG, 0, "inactive", [])]
    return {"segments": [segment(0, P, segs, expandable=False), segment(0, BASE, blocks, expandable=False)],
            "device_traces": [d.entries], "allocator_settings": settings(False), "external_annotations": []}


def many_places(places=12):
    """A forward pass with more places in the code than a report's tables show (12, each
    one allocation of 20 MiB + k MiB, k = 1..12), and one place more (layer 0's forward)
    that allocates 100 MiB through mm and 1 MiB through each of gelu, softmax and add:
    four stacks, the three small ones below the 10 biggest stacks. Its row: 103 MiB in 4
    allocations from 4 stacks, the biggest."""
    BASE, SEG = 0x7f0000000000, 1 << 30
    d = Trace(BASE)
    d.add("segment_alloc", BASE, SEG, LOOP)
    d.alloc(100 * MiB, forward_stack(0, "mm"))
    for k in range(1, places + 1):
        py = [frame("block%d" % k, "/home/me/model.py", 200 + k)] + MODULE + LOOP
        d.alloc((20 + k) * MiB, python_stack(py, RECORDER + ALLOCATOR + op("mm")))
    for name in ("gelu", "softmax", "add"):
        d.alloc(MiB, forward_stack(0, name))
    used = d.at - BASE
    blocks = [block(a, (s + 511) // 512 * 512, s, "active_allocated", f) for a, (s, f) in sorted(d.live.items())]
    blocks.append(block(d.at, SEG - used, 0, "inactive", []))
    return {"segments": [segment(0, BASE, blocks, expandable=False)], "device_traces": [d.entries],
            "allocator_settings": settings(False), "external_annotations": []}


def python_only(snap):
    """The same snapshot as _record_memory_history(stacks="python") records it: only the
    Python frames, so allocations on autograd's engine thread have frames == []."""
    def keep(frames):
        return [f for f in frames if f["filename"].endswith(".py")]
    for trace in snap["device_traces"]:
        for e in trace:
            if "frames" in e:
                e["frames"] = keep(e["frames"])
    for s in snap["segments"]:
        s["frames"] = keep(s["frames"])
        for b in s["blocks"]:
            b["frames"] = keep(b["frames"])
    return snap


PLAIN = [frame("f", "/home/me/t.py", 3), frame("<module>", "/home/me/t.py", 9)]  # nothing to infer a category from


def pending_free(before=False):
    """One 20 MiB segment: A (6 MiB) freed while another stream still used it
    (record_stream): its free_requested recorded, its free_completed not yet, so the block
    is active_pending_free at the end; B (4 MiB - 100) allocated; C (2 MiB) pending too,
    asked for just before the last entry. A snapshot entry in the middle, one last (an
    earlier _snapshot(): no frames). By segsum's rules: reserved 20 MiB, allocated 4 MiB -
    100, free internal 100, free external 6 + 2 + 8 MiB; active 12 MiB. A, B and C are
    live until the end, as the viewer's timeline draws them: peak 12 MiB - 100, 4 MiB - 100
    at the end. With `before`, the last 8 MiB is D, made before recording and pending
    too (asked for between A and C): active 20 MiB, free external 16 MiB as before, peak
    20 MiB - 100."""
    S, F = 0x7f3000000000, PLAIN

    def e(action, addr, size, t):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + t, "frames": F}
    trace = [e("segment_alloc", S, 20 * MiB, 1), e("alloc", S, 6 * MiB, 2), e("alloc", S + 6 * MiB, 4 * MiB - 100, 3),
             e("free_requested", S, 6 * MiB, 4),
             {"action": "snapshot", "addr": 0, "size": 10 * MiB, "stream": 0, "time_us": T0 + 5},
             e("alloc", S + 10 * MiB, 2 * MiB, 6), e("free_requested", S + 10 * MiB, 2 * MiB, 7),
             {"action": "snapshot", "addr": 0, "size": 12 * MiB, "stream": 0, "time_us": T0 + 8}]
    blocks = [block(S, 6 * MiB, 6 * MiB, "active_pending_free", F),
              block(S + 6 * MiB, 4 * MiB, 4 * MiB - 100, "active_allocated", F),
              block(S + 10 * MiB, 2 * MiB, 2 * MiB, "active_pending_free", F),
              block(S + 12 * MiB, 8 * MiB, 0, "inactive", [])]
    if before:
        trace.insert(5, e("free_requested", S + 12 * MiB, 8 * MiB, 5))
        blocks[3] = block(S + 12 * MiB, 8 * MiB, 8 * MiB, "active_pending_free", [])
    return {"segments": [segment(0, S, blocks, expandable=False)], "device_traces": [trace]}


def legacy_list():
    """The oldest layout (torch.cuda.memory_snapshot() of 2022): a list of segments whose
    blocks carry history (newest first), no trace. By segsum's rules (history[0]'s
    real_size): reserved 22 MiB, allocated 11 MiB - 96, free internal 1 MiB + 608, free
    external 10 MiB - 512; active 12 MiB + 512."""
    L, F = 0x7f5000000000, PLAIN

    def h(addr, real, frames=F):
        return {"addr": addr, "frames": frames, "real_size": real}
    return [{"device": 0, "address": L, "total_size": 20 * MiB, "allocated_size": 12 * MiB, "active_size": 12 * MiB,
             "segment_type": "large", "stream": 0,
             "blocks": [{"size": 8 * MiB, "state": "active_allocated", "history": [h(L, 8 * MiB - 100)]},
                        {"size": 4 * MiB, "state": "active_allocated",
                         "history": [h(L + 8 * MiB, 3 * MiB), h(L + 9 * MiB, MiB - 512)]},
                        {"size": 8 * MiB, "state": "inactive", "history": [h(L + 12 * MiB, 5 * MiB)]}]},
            {"device": 1, "address": L + 64 * MiB, "total_size": 2 * MiB, "allocated_size": 512, "active_size": 512,
             "segment_type": "small", "stream": 0,
             "blocks": [{"size": 512, "state": "active_allocated", "history": [h(L + 64 * MiB, 4, [])]},
                        {"size": 2 * MiB - 512, "state": "inactive"}]}]


def jit_dumps(obj):
    """obj pickled as torch::cuda::_memory_snapshot_pickled writes a snapshot (C++ libtorch,
    R's torch, backends' copies of it): torch::jit::Pickler's protocol 2 without type tags,
    each dict EMPTY_DICT MARK ... SETITEMS and each list EMPTY_LIST MARK ... APPENDS in one
    batch however long, strings BINUNICODE memoized by value, ints BININT1/2, BININT or an
    8-byte LONG1, floats BINFLOAT, a tuple of two TUPLE2."""
    import struct
    out, memo, strings = bytearray(b"\x80\x02"), [0], {}

    def put():
        out.extend(b"q" + bytes([memo[0]]) if memo[0] < 256 else b"r" + struct.pack("<I", memo[0]))
        memo[0] += 1
        return memo[0] - 1

    def write(x):
        if isinstance(x, bool):
            out.extend(b"\x88" if x else b"\x89")
        elif isinstance(x, int):
            out.extend(b"K" + bytes([x]) if 0 <= x < 256 else b"M" + struct.pack("<H", x) if 0 <= x < 65536 else
                       b"J" + struct.pack("<i", x) if -2 ** 31 <= x < 2 ** 31 else b"\x8a\x08" + struct.pack("<q", x))
        elif isinstance(x, float):
            out.extend(b"G" + struct.pack(">d", x))
        elif x is None:
            out.extend(b"N")
        elif isinstance(x, str):
            if x in strings:
                k = strings[x]
                out.extend(b"h" + bytes([k]) if k < 256 else b"j" + struct.pack("<I", k))
            else:
                b = x.encode()
                out.extend(b"X" + struct.pack("<I", len(b)) + b)
                strings[x] = put()
        elif isinstance(x, tuple):
            out.extend(b"(" if len(x) > 3 else b"")
            for y in x:
                write(y)
            out.extend(bytes([0x84 + len(x)]) if 0 < len(x) <= 3 else b")" if not x else b"t")
        elif isinstance(x, dict):
            out.extend(b"}(")
            for k, y in x.items():
                write(k)
                write(y)
            out.extend(b"u")
        elif isinstance(x, list):
            out.extend(b"](")
            for y in x:
                write(y)
            out.extend(b"e")
        else:
            raise TypeError(type(x))
    write(obj)
    return bytes(out + b".")
