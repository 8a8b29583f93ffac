-- A policy that writes without limit: appends and snapshots in every timer call. All it
-- writes stops at policy_output (a snapshot past it is removed), the refused writes are
-- counted and said, and memtap.stats() says what was written.
-- job: workload sleep 1000
-- options: policy_output=300K policy_budget=10M
-- max-bytes: 307200
-- max-files: 40
-- expect: memtap: policy: policies reached policy_output=300.00 KiB: what they write from now on is refused
-- expect: refused past policy_output
-- expect: over the quota of what policies may write (policy_output)
local chunk = string.rep("x", 10000)
local said = false
memtap.every(0.01, function(ev)
  for _ = 1, 5 do
    local ok, err = memtap.append("out.txt", chunk)
    if not ok and not said then
      said = true
      memtap.log(err, memtap.stats().policy_output)
    end
  end
  memtap.snapshot()
end)
