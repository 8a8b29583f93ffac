-- A to-be-closed variable in a coroutine the budget ends: Lua would run its close method
-- with the coroutine's hooks still off (coroutine.wrap closes it on the error's way out).
-- job: workload nvtx
-- expect: instruction budget exceeded
-- expect-not: did not finish
memtap.on_phase(".", function(ev)
  coroutine.wrap(function()
    local x <close> = setmetatable({}, {__close = function() while true do end end})
    while true do end
  end)()
end)
