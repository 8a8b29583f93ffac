-- An endless loop inside pcall, in a loop: the budget's error must not be catchable.
-- job: workload nvtx
-- expect: instruction budget exceeded
memtap.on_phase(".", function(ev)
  while true do pcall(function() while true do end end) end
end)
