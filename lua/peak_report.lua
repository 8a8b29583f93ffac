-- peak_report.lua: at each new peak of a device's allocated memory (growing at least 1%
-- over the last one reported, at most once a second), append one JSON line to
-- memtap-peaks-<pid>.jsonl in the policy folder: when, where, how much, and what is live
-- by tag and by NVTX range. MEMTAP_PEAK_FILE names the file; MEMTAP_PEAK_INTERVAL
-- (seconds) and MEMTAP_PEAK_GROWTH (fraction) tune the rate.

local file = os.getenv("MEMTAP_PEAK_FILE") or ("memtap-peaks-" .. memtap.pid .. ".jsonl")

memtap.on_peak(function(ev)
  local c = memtap.composition(ev.device)
  local ok, err = memtap.append(file, memtap.json({
    time = ev.time, device = ev.device, peak = ev.peak, allocated = ev.allocated, total = ev.total,
    iteration = ev.iteration, phase = ev.phase, stack = ev.stack,
    by_tag = c.by_tag, by_phase = c.by_phase,
  }) .. "\n")
  if not ok then error(err) end
end, {interval = tonumber(os.getenv("MEMTAP_PEAK_INTERVAL") or "1"),
      growth = tonumber(os.getenv("MEMTAP_PEAK_GROWTH") or "0.01")})
