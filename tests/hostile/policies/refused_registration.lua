-- Registrations refused inside pcall, the function good and an option bad, then iteration
-- boundaries: a refused call must leave no half-registered handler behind.
-- job: workload sleep 300
-- expect: option 'iterations' is from 2 to 64
-- expect: option 'device' is from -1 to 254
local function h() end
memtap.log(select(2, pcall(memtap.on_leak, h, {iterations = 0})))
memtap.log(select(2, pcall(memtap.on_leak, h, {device = 999})))
pcall(memtap.on_peak, h, {device = 999})
pcall(memtap.on_threshold, "1KiB", h, {device = 999})
pcall(memtap.on_iteration, h, {name = {}})
memtap.every(0.01, function(ev) memtap.mark("iteration") end)
