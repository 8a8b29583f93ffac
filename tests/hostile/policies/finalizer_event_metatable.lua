-- A finalizer put on the metatable memtap gives event tables: every event table made
-- after it would be finalized, with hooks off, where no budget can stop it.
-- job: workload nvtx
-- expect-not: did not finish
memtap.on_phase(".", function(ev)
  local mt = getmetatable(ev)
  if type(mt) == "table" then mt.__gc = function() while true do end end end
  collectgarbage()
end)
