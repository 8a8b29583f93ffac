-- table.move over 2^60 empty slots: every step in C, none of them a Lua instruction.
-- job: workload nvtx
-- expect: instruction budget exceeded
memtap.on_phase(".", function(ev) table.move({}, 1, 1 << 60, 2) end)
