-- Coroutines the budget ended, closed by coroutine.close in the next call: their pending
-- close methods (a to-be-closed variable, a generic for's closing value) must still be
-- stopped by a budget.
-- job: workload nvtx
-- expect: instruction budget exceeded
-- expect-not: did not finish
local mt = {}
local closing = setmetatable({}, mt)
mt.__close = function() while true do end end
local ended = {}
memtap.on_phase(".", function(ev)
  for _, co in ipairs(ended) do coroutine.close(co) end
  local co = coroutine.create(function()
    local x <close> = closing
    for _ in function() return 1 end, nil, nil, closing do while true do end end
  end)
  ended[#ended + 1] = co
  coroutine.resume(co)
end)
