-- A number is a string to the string library: backtracking over the 22 characters of
-- -1.2345678901234e-300 was charged as over nothing.
-- job: workload nvtx
-- expect: 'find' may take
-- expect-not: ran to its end
local p, done = (".-"):rep(10) .. "x", false
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  string.find(-1.2345678901234e-300, p)
  memtap.log("string.find ran to its end")
end)
