-- A close method added to a metatable after setmetatable, on a to-be-closed variable of a
-- coroutine the budget ends: Lua closes the dead coroutine (coroutine.wrap) with the
-- hooks its budget error left off, so the method must run where the budget still holds.
-- job: workload nvtx
-- expect: instruction budget exceeded
-- expect-not: did not finish
memtap.on_phase(".", function(ev)
  local mt = {}
  local obj = setmetatable({}, mt)
  mt.__close = function() while true do end end
  coroutine.wrap(function()
    local x <close> = obj
    while true do end
  end)()
end)
