-- threshold_capture.lua: a capture range while memory is high. When a device's allocated
-- memory crosses 90% of its capacity (or of a cap), start a capture (cuProfilerStart, so
-- Nsight Systems' capture-range mode records it, and stacks for every event when memtap
-- runs with capture_stacks=1); stop it when memory falls below 80%.
-- MEMTAP_CAPTURE_ABOVE and MEMTAP_CAPTURE_BELOW change the levels ("90%", "60GiB").

local above = os.getenv("MEMTAP_CAPTURE_ABOVE") or "90%"
local below = os.getenv("MEMTAP_CAPTURE_BELOW") or "80%"

memtap.on_threshold(above, function(ev)
  local ok, err
  if ev.direction == "up" then
    ok, err = memtap.capture_start(ev.device)
  else
    ok, err = memtap.capture_stop(ev.device)
  end
  memtap.log(string.format("capture %s on device %d at %s allocated (%s)%s",
    ev.direction == "up" and "started" or "stopped", ev.device, memtap.format_size(ev.allocated),
    ev.phase or "no range", ok and "" or ": " .. err))
end, {below = below})
