-- A pattern of one set of 20,000 characters: the matcher reads the whole set at each of
-- the subject's 60,000 positions.
-- job: workload nvtx
-- expect: 'find' may take
-- expect-not: ran to its end
local s, p, done = ("a"):rep(60000), "[" .. ("b"):rep(20000) .. "]", false
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  s:find(p)
  memtap.log("string.find ran to its end")
end)
