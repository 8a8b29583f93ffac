"""PyTorch training steps on the GPU, for tests/gpu/run, under `memtap run`: a small MLP,
AdamW, a fixed seed, three steps whose phases are NVTX ranges (setup, forward, backward,
optimizer), so memtap's trace says where each allocation and a failure came. Writes OUT
(JSON): the driver's used memory once CUDA is up (used_at_start), the loss,
torch.cuda.memory_stats()'s reserve (current and peak) and the segments of
torch.cuda.memory._snapshot(), all taken while the memory is still held, right before a
torch.cuda.mem_get_info() call that marks that moment in the trace.
  torch_step.py OUT [--allocator | --graph | --nccl | --compile | --blocks | --time N [--history]]
    --allocator  memtap.use_allocator() first (PyTorch's stats are then not its own)
    --graph      then a forward pass captured in a CUDA graph and replayed (under
                 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: graph memory nodes)
    --nccl       then an all-reduce in a one-rank NCCL process group (nccl_ok)
    --compile    the model through torch.compile(mode="reduce-overhead"), five steps
    --blocks     also _snapshot()'s blocks and segments, at the moment (snapshot_blocks:
                 [address, size, requested_size, state], snapshot_segment_list: [address,
                 total_size]), for memtap's tracker of PyTorch's tensors to be held to
    --time N     then N more steps timed (step_seconds: each, after a synchronize), on
                 16 rows of the batch: the step bound by the CPU, not the GPU, so what
                 a recorder adds to each tensor shows
    --history    torch.cuda.memory._record_memory_history(stacks="python") first: what
                 PyTorch's own recording costs, beside memtap's
An out-of-memory failure is caught and written as {"oom": true, "phase": ...}."""
import contextlib
import json
import os
import sys
import tempfile

import torch

out = sys.argv[1]
flags = set(sys.argv[2:])
timed = int(sys.argv[sys.argv.index("--time") + 1]) if "--time" in sys.argv else 0
phase = "setup"
result = {"oom": False}


@contextlib.contextmanager
def in_phase(name):
    global phase
    before, phase = phase, name
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()
        phase = before


def steps(model, opt, x, y, n):
    loss = None
    for _ in range(n):
        with in_phase("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        with in_phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with in_phase("optimizer"):
            opt.step()
    return float(loss)


def graph(model, x, y):
    """A forward pass captured and replayed, as PyTorch's documentation warms one up."""
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with in_phase("capture"), torch.no_grad(), torch.cuda.graph(g):
        static_out = model(static_x)
    with in_phase("replay"):
        for _ in range(3):
            g.replay()
    torch.cuda.synchronize()
    result["graph_loss"] = float((static_out - y).pow(2).mean())


def nccl():
    import torch.distributed as dist
    fd, path = tempfile.mkstemp(prefix="memtap-nccl-")
    os.close(fd)
    os.remove(path)
    try:
        dist.init_process_group("nccl", init_method="file://" + path, rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        with in_phase("allreduce"):
            t = torch.ones(1 << 22, device="cuda")
            dist.all_reduce(t)
            torch.cuda.synchronize()
        result["nccl_ok"] = bool(t[0].item() == 1.0)
        dist.destroy_process_group()
    except Exception as e:  # the row says what failed; the step's other figures stand
        result["nccl_ok"] = False
        result["nccl_error"] = ("%s: %s" % (type(e).__name__, e))[:300]


try:
    if "--allocator" in flags:
        import memtap
        memtap.use_allocator(torch)
    torch.cuda.init()
    if "--history" in flags:
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    free, total = torch.cuda.mem_get_info()
    result["used_at_start"] = total - free
    with in_phase("setup"):
        torch.manual_seed(0)
        dev = torch.device("cuda")
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                    torch.nn.Linear(4096, 1024)).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(2048, 1024, device=dev)
        y = torch.randn(2048, 1024, device=dev)
    if "--compile" in flags:
        model = torch.compile(model, mode="reduce-overhead")
    result["loss"] = steps(model, opt, x, y, 5 if "--compile" in flags else 3)
    if timed:
        import time
        result["step_seconds"] = []
        xs, ys = x[:16].clone(), y[:16].clone()
        for _ in range(timed):
            torch.cuda.synchronize()
            t = time.perf_counter()
            steps(model, opt, xs, ys, 1)
            torch.cuda.synchronize()
            result["step_seconds"].append(time.perf_counter() - t)
    if "--graph" in flags:
        graph(model, x, y)
    if "--nccl" in flags:
        nccl()
    torch.cuda.synchronize()
    if "--allocator" not in flags:  # a pluggable allocator has no stats of PyTorch's
        stats = torch.cuda.memory_stats()
        result.update(reserved_current=stats.get("reserved_bytes.all.current", 0),
                      reserved_peak=stats.get("reserved_bytes.all.peak", 0),
                      allocated_peak=stats.get("allocated_bytes.all.peak", 0))
        try:  # the cudaMallocAsync backend has no snapshot
            snap = torch.cuda.memory._snapshot()
            result["snapshot_segments"] = sum(s["total_size"] for s in snap["segments"])
            if "--blocks" in flags:
                result["snapshot_blocks"] = [[b["address"], b["size"], b.get("requested_size", 0), b["state"]]
                                             for s in snap["segments"] for b in s["blocks"]]
                result["snapshot_segment_list"] = [[s["address"], s["total_size"]] for s in snap["segments"]]
        except RuntimeError as e:
            result["snapshot_segments"] = "none: %s" % str(e).splitlines()[0][:120]
        # PyTorch's cuBLAS workspaces, which stay allocated until this clears them (memtap
        # plan counts two in its framework); freed to the cache, so the reserve is unchanged
        if "--blocks" not in flags:  # with --blocks, the snapshot's moment stays the trace's
            allocated = torch.cuda.memory_allocated()
            torch._C._cuda_clearCublasWorkspaces()
            result["cublas_workspaces"] = allocated - torch.cuda.memory_allocated()
        result["sm"] = 10 * torch.cuda.get_device_capability()[0] + torch.cuda.get_device_capability()[1]
    torch.cuda.mem_get_info()  # the moment the figures above describe, in memtap's trace
except torch.cuda.OutOfMemoryError as e:
    result = {"oom": True, "phase": phase, "used_at_start": result.get("used_at_start"),
              "message": str(e).splitlines()[0][:300]}
with open(out, "w") as f:
    json.dump(result, f)
