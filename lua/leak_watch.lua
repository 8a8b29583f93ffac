-- leak_watch.lua: when device memory grows at every iteration boundary for a few
-- iterations in a row, write a snapshot and log how fast it grows and where the new bytes
-- were allocated. Boundaries are memtap marks (memtap.mark, python memtap.mark), else the
-- first top-level NVTX range that repeats. MEMTAP_LEAK_ITERATIONS (default 3) and
-- MEMTAP_LEAK_MIN (least growth per iteration that counts, default 1MiB) tune it.

local size = memtap.format_size
local iterations = tonumber(os.getenv("MEMTAP_LEAK_ITERATIONS") or "3")
local min = os.getenv("MEMTAP_LEAK_MIN") or "1MiB"
local n = 0

memtap.on_leak(function(ev)
  n = n + 1
  local path, err = memtap.snapshot("memtap-leak-%p-" .. n .. ".trace")
  memtap.log(string.format("device %d grows by at least %s per iteration (iteration %d, %s allocated); most new bytes (%s) from %s; %s",
    ev.device, size(ev.growth), ev.iteration, size(ev.allocated), size(ev.size or 0), ev.stack[1] or "?",
    path and ("snapshot " .. path) or ("no snapshot: " .. err)))
end, {iterations = iterations, min_bytes = memtap.parse_size(min)})
