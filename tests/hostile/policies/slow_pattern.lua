-- One string.find whose backtracking would run for hours in C, where the count hook
-- cannot see it.
-- job: workload nvtx
-- expect: instruction budget exceeded
memtap.on_phase(".", function(ev)
  return ("a"):rep(20000):find(".-.-.-.-.-.-b")
end)
