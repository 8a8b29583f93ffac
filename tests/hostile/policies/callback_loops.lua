-- Endless loops in the code Lua's libraries and metamethods call back, each in a handler
-- of its own (a call's budget ends everything after it): string.gsub's replacement,
-- table.sort's comparator, __index, __lt, __concat, __tostring, __len, __eq, a
-- coroutine's close method inside one of them, and an error's close method in pcall.
-- job: workload nvtx
-- max-lines: 80
-- expect: instruction budget exceeded
-- expect-not: did not finish
local function loop() while true do end end
local meta = setmetatable({}, {__index = loop, __lt = loop, __concat = loop, __tostring = loop,
                                __len = loop, __eq = loop})
local other = setmetatable({}, getmetatable(meta))
local closing = setmetatable({}, {__close = loop})
local loops = {
  function() return ("abc"):gsub(".", loop) end,
  function() return string.gsub("abc", "%w", {a = meta.x}) end,
  function() table.sort({3, 2, 1}, loop) end,
  function() return meta.x end,
  function() return meta < other end,
  function() return meta .. "x" end,
  function() return tostring(meta) end,
  function() return #meta end,
  function() return meta == other end,
  function() return memtap.log(meta) end,
  function() return memtap.json({[meta] = 1}) end,
  function() return string.format("%s", meta) end,
  function() return ("abc"):gsub(".", function() coroutine.wrap(function() local x <close> = closing loop() end)() end) end,
  function() pcall(function() local x <close> = closing error("e") end) end,
  function() table.sort({3, 2, 1, 4}, function(a, b) return coroutine.wrap(function() local x <close> = closing loop() end)() end) end,
}
for _, f in ipairs(loops) do memtap.on_phase(".", f) end
