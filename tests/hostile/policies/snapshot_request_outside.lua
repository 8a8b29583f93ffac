-- Lines the policy writes into its run directory's event log (the policy folder is the
-- run directory), asking every rank for a snapshot whose id climbs out of the directory.
-- job: workload sleep 300
-- options: dir={folder}
-- max-files: 12
-- expect: not a request's id
local n = 0
memtap.every(0.05, function(ev) -- after the rank's first allocation: what came before is not its business
  n = n + 1
  if n <= 4 then assert(memtap.append(".memtap/events", "snapshot ../../outside 1 1 1 host\n")) end
end)
