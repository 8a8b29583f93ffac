-- A close method on the strings' shared metatable, a string to be closed in a coroutine
-- the budget ends.
-- job: workload nvtx
-- expect: instruction budget exceeded
-- expect-not: did not finish
getmetatable("").__close = function() while true do end end
memtap.on_phase(".", function(ev)
  coroutine.wrap(function()
    local s <close> = "x"
    while true do end
  end)()
end)
