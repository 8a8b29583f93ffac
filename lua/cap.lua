-- cap.lua: emulate a smaller GPU. Allocations that would take a device past the cap fail
-- with the driver's real out-of-memory error, so a job shows on an 80 GB device where it
-- would run out on a 40 GB one. MEMTAP_CAP is the cap: a size ("40GiB", "40GB") or a
-- share of the device ("50%"); MEMTAP_CAP_DEVICE caps one device (default: every device).

local cap = os.getenv("MEMTAP_CAP")
local device = tonumber(os.getenv("MEMTAP_CAP_DEVICE") or "")

if not cap or cap == "" then
  memtap.log("cap.lua: MEMTAP_CAP is not set; nothing is capped")
  return
end
memtap.set_cap(device, cap)
memtap.log(string.format("device memory capped at %s on %s", cap, device and ("device " .. device) or "every device"))
