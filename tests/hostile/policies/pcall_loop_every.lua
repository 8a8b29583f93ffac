-- A timer handler that loops inside pcall, on the policy thread.
-- job: workload sleep 300
-- expect: instruction budget exceeded
memtap.every(0.01, function(ev)
  while true do pcall(function() while true do end end) end
end)
