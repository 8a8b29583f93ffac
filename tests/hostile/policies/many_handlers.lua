-- A million handlers: registration stops at the cap.
-- job: workload nvtx
-- expect: too many handlers
for i = 1, 1000000 do memtap.on_phase(".", function() end) end
