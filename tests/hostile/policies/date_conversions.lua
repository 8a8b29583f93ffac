-- os.date calls strftime for each conversion: 500,000 of them, charged by their bytes.
-- job: workload nvtx
-- expect: 'date' may take
-- expect-not: ran to its end
local f, done = ("%%"):rep(500000), false
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  os.date(f)
  memtap.log("os.date ran to its end")
end)
