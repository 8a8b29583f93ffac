-- on_oom runs while the failing thread waits: a loop the budget cannot stop would hang it.
-- job: workload ooms
-- expect: instruction budget exceeded
memtap.on_oom(function(ev)
  while true do pcall(function() while true do end end) end
end)
