-- Nested pcall loops in on_exit: the exiting thread must not wait forever.
-- job: workload runtime
-- expect: instruction budget exceeded
memtap.on_exit(function(ev)
  while true do
    pcall(function() while true do pcall(function() while true do end end) end end)
  end
end)
