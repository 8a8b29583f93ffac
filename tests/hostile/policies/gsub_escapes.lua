-- string.gsub reads its replacement at every match: an empty pattern matches at each of
-- 15,000 positions, and each match reads 15,000 escapes that write nothing.
-- job: workload nvtx
-- expect: 'gsub' may take
-- expect-not: ran to its end
local s, r, done = ("a"):rep(15000), ("%0"):rep(15000), false
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  s:gsub("", r)
  memtap.log("string.gsub ran to its end")
end)
