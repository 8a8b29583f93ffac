-- A finalizer that never ends: Lua runs __gc with hooks off, so none is allowed.
-- job: workload nvtx
-- expect: a policy cannot set __gc
memtap.on_phase(".", function(ev)
  setmetatable({}, {__gc = function() while true do end end})
  collectgarbage()
end)
