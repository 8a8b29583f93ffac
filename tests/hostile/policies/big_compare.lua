-- One VM instruction that compares two 4 MB strings, in a loop: the work is inside
-- single instructions, so it is charged as the strings are made and bounded by the
-- largest block a script may make.
-- job: workload nvtx
-- options: policy_budget=100M policy_deadline_ms=4000
-- expect: time limit exceeded
local a, b = ("x"):rep(4000000 - 30), ("x"):rep(4000000 - 31) .. "x"
local once = false
memtap.on_phase(".", function(ev)
  if once then return end
  once = true
  while true do local _ = a == b end
end)
