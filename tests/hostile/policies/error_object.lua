-- Errors that are not strings, one with a __tostring that never returns.
-- job: workload nvtx
-- expect: an error that is not a string
memtap.on_phase(".", function(ev)
  error(setmetatable({}, {__tostring = function() while true do end end}))
end)
