-- Full collections over a heap kept large: each walks every object in C.
-- job: workload nvtx
-- expect: instruction budget exceeded
keep = {}
for i = 1, 100000 do keep[i] = {i} end
memtap.on_phase(".", function(ev) while true do collectgarbage() end end)
