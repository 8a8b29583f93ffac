-- The loop runs in a coroutine, whose hook is its own: every coroutine must stop too.
-- job: workload nvtx
-- expect: instruction budget exceeded
memtap.on_phase(".", function(ev)
  local co = coroutine.wrap(function()
    while true do pcall(function() while true do end end) end
  end)
  co()
end)
