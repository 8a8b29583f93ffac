-- table.insert at the front of a long array shifts all of it in C, each call.
-- job: workload nvtx
-- options: policy_memory=64M
-- expect: instruction budget exceeded
local t = {}
for i = 1, 200000 do t[i] = i end
memtap.on_phase(".", function(ev)
  while true do table.insert(t, 1, 0); table.remove(t, 1) end
end)
