-- table.sort compares strings in C: 500 times the same 1 MiB string makes some 4,500
-- comparisons of 1 MiB each, which were charged as 4,500 steps.
-- job: workload nvtx
-- expect: 'sort' may take
-- expect-not: ran to its end
local s, t, done = ("a"):rep(1 << 20), {}, false
for i = 1, 500 do t[i] = s end
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  table.sort(t)
  memtap.log("table.sort ran to its end")
end)
