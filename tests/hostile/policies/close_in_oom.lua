-- The same escape in on_oom, where the failing thread waits: it must not wait the
-- deadline, nor policies be switched off.
-- job: workload ooms
-- expect: instruction budget exceeded
-- expect-not: did not finish
local mt = {}
local obj = setmetatable({}, mt)
mt.__close = function() while true do end end
memtap.on_oom(function(ev)
  coroutine.wrap(function()
    local x <close> = obj
    while true do end
  end)()
end)
