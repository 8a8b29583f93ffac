-- Errors raised inside xpcall's message handler, in a loop.
-- job: workload nvtx
-- expect: instruction budget exceeded
memtap.on_phase(".", function(ev)
  while true do xpcall(error, function() while true do end end) end
end)
