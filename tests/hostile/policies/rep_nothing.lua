-- string.rep of an empty string 2^62 times: no memory, but 2^62 steps in C.
-- job: workload nvtx
-- expect: instruction budget exceeded
memtap.on_phase(".", function(ev) return ("").rep("", 1 << 62) end)
