"""A few PyTorch training steps on the GPU, for tests/gpu/run: a small MLP, AdamW, a fixed
seed. Run under `memtap run`. Writes OUT (JSON): the loss, torch.cuda.memory_stats()'s
reserved and allocated bytes (current and peak) and the total of the segments in
torch.cuda.memory._snapshot(), all taken while the memory is still held, right before a
torch.cuda.mem_get_info() call that gives memtap the driver's count at that moment.
  torch_step.py OUT [--allocator]   (--allocator: memtap.use_allocator() first)
An out-of-memory failure (under a cap) is caught and written as {"oom": true}."""
import json
import sys

import torch

out = sys.argv[1]
if "--allocator" in sys.argv:
    import memtap
    memtap.use_allocator(torch)

torch.manual_seed(0)
try:
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device=dev)
    y = torch.randn(256, 1024, device=dev)
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    result = {"oom": False, "loss": float(loss)}
    if "--allocator" not in sys.argv:  # a pluggable allocator has no stats of PyTorch's
        stats = torch.cuda.memory_stats()
        snap = torch.cuda.memory._snapshot()
        result.update(reserved_current=stats["reserved_bytes.all.current"],
                      reserved_peak=stats["reserved_bytes.all.peak"],
                      allocated_peak=stats["allocated_bytes.all.peak"],
                      snapshot_segments=sum(s["total_size"] for s in snap["segments"]))
    torch.cuda.mem_get_info()  # memtap's driver count, at this moment
except torch.cuda.OutOfMemoryError:
    result = {"oom": True}
with open(out, "w") as f:
    json.dump(result, f)
