-- Fills policy_memory from inside pcall and keeps it full (a global holds it): the
-- engine's next call into Lua needs memory for the event's table (it used to abort the job).
-- job: workload nvtx
-- options: policy_memory=2M policy_budget=10M
-- expect: ran out of memory (policy_memory): switched off
head = nil
memtap.on_phase(".", function(ev)
  pcall(function() while true do head = {head, string.rep("x", 60000)} end end)
  pcall(function() while true do head = {head} end end) -- to the last few bytes
end)
