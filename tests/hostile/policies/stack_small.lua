-- Handlers that recurse through C as deep as Lua lets them, in a job run with ulimit -s 256.
-- Threads take their stack size from that limit, but the policy thread must have the
-- stack Lua's limit of 200 nested C calls needs. Each road (string.gsub's callbacks,
-- memtap.plan's fields, __tostring under memtap.json and string.format, table.sort,
-- coroutines, metamethods) ends with a snapshot and a pattern match near the bottom.
-- job: workload nvtx
-- stack: 256
-- options: policy_budget=50M
-- max-files: 12
-- expect: memtap: policy: 11 roads down to C stack overflow, a snapshot near the bottom of each
local function bottom()
  assert(memtap.snapshot())
  assert(string.find(("a"):rep(100), ("(a)"):rep(32)))
  return true
end
-- step(next) calls next through C; down() goes as deep as Lua lets it, then again to a few
-- levels above that, where it calls bottom(): whether Lua refused and bottom() returned
local function down(step)
  local depth, deepest, refused, reached = 0, nil, false, false
  local function level()
    depth = depth + 1
    if deepest and depth == deepest - 6 then
      reached = bottom()
    else
      local ok, err = pcall(step, level)
      if not ok and not deepest then deepest, refused = depth, tostring(err):find("stack overflow") ~= nil end
    end
    depth = depth - 1
    return ""
  end
  level()
  level()
  return refused and reached
end
local meta = function(event, next) return setmetatable({}, {[event] = next}) end
local roads = {
  function(next) return ("a"):gsub(".", next) end,
  function(next) return ("a"):gsub(".", meta("__index", next)) end,
  function(next) -- plan reads every option: go down from the first only
    local first = true
    memtap.plan(meta("__index", function() if first then first = false next() end end))
  end,
  function(next) memtap.json({[meta("__tostring", next)] = 1}) end,
  function(next) return string.format("%s", meta("__tostring", next)) end,
  function(next) return tostring(meta("__tostring", next)) end,
  function(next) table.sort({2, 1}, function() next() return false end) end,
  function(next) coroutine.wrap(next)() end,
  function(next) return meta("__concat", next) .. "x" end,
  function(next) return meta("__index", next).x end,
  function(next) return memtap.allocator{max_split_size_mb = meta("__tostring", next)} end,
}
local went = 0
for _, step in ipairs(roads) do
  local once = false
  memtap.on_phase("^forward$", function(ev)
    if once then return end
    once = true
    if down(step) then went = went + 1 end
  end)
end
memtap.on_exit(function(ev)
  memtap.log(went .. " roads down to C stack overflow, a snapshot near the bottom of each")
end)
