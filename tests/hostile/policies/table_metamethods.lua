-- Tables whose metatable says what the table functions see: a __len of 2^40 makes
-- table.insert and table.remove shift 2^40 slots in C, and a table.sort of an empty
-- table whose __index holds 500 times one 1 MiB string compares them in C; each was
-- charged by the table's own (empty) length.
-- job: workload nvtx
-- expect: instruction budget exceeded
-- expect-not: ran to its end
-- expect-not: did not finish
local huge = {__len = function() return 1 << 40 end}
local s, strings = ("a"):rep(1 << 20), {}
for i = 1, 500 do strings[i] = s end
local done = {}
local calls = {
  insert = function() table.insert(setmetatable({}, huge), 1, 0) end,
  remove = function() table.remove(setmetatable({}, huge), 1) end,
  sort = function() table.sort(setmetatable({}, {__index = strings, __len = function() return #strings end})) end,
}
for name, call in pairs(calls) do
  memtap.on_phase(".", function(ev)
    if done[name] then return end
    done[name] = true
    call()
    memtap.log("table." .. name .. " ran to its end")
  end)
end
