-- A count given as a float (2^29, not 1 << 29) or a numeric string is an integer to
-- Lua's libraries, and was charged as nothing: string.rep of nothing 2^29 times,
-- table.move over 2^27 empty slots.
-- job: workload nvtx
-- expect: 'rep' may take
-- expect: 'move' may take
-- expect-not: ran to its end
local done = {}
memtap.on_phase(".", function(ev)
  if done.rep then return end
  done.rep = true
  string.rep("", 2^29)
  memtap.log("string.rep ran to its end")
end)
memtap.on_phase(".", function(ev)
  if done.move then return end
  done.move = true
  table.move({}, 1, "134217728", 2)
  memtap.log("table.move ran to its end")
end)
