-- Unbounded recursion: the Lua stack is one block, no larger than a script may make.
-- job: workload nvtx
-- options: policy_budget=1G
-- expect: ran out of memory
local function f(n) return f(n + 1) + 1 end
memtap.on_phase(".", function(ev) f(1) end)
