-- string.find asked for a plain search compares the pattern's bytes at every position of
-- the subject: 30,000 positions of 30,000 bytes.
-- job: workload nvtx
-- expect: 'find' may take
-- expect-not: ran to its end
local s, p, done = ("a"):rep(60000), ("a"):rep(30000) .. "b", false
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  s:find(p, 1, true)
  memtap.log("string.find ran to its end")
end)
