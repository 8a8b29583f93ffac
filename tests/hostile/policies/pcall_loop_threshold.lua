-- A threshold handler that loops inside pcall.
-- job: workload runtime
-- expect: instruction budget exceeded
memtap.on_threshold("1KiB", function(ev)
  while true do pcall(function() while true do end end) end
end)
