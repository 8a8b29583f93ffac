-- Snapshots in a loop: each is charged its copy, so a call makes at most a few (here 3
-- calls of at most 20 before the handler is switched off).
-- job: workload ooms
-- expect: instruction budget exceeded
-- max-files: 61
memtap.on_oom(function(ev) while true do memtap.snapshot() end end)
