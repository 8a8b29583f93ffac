-- Every function of the memtap table (as the policy finds it: new ones are called too)
-- with wrong types, nils, huge numbers and tables, at the top level and in a handler,
-- and the tables memtap gives a handler with their fields set to those values: each
-- returns or raises a Lua error; none crashes the job or leaves a half-registered
-- handler behind for the iteration boundaries that follow.
-- job: workload sleep 300
-- options: policy_budget=1G policy_deadline_ms=60000 policy_output=64K
-- max-lines: 100
-- max-files: 80
-- max-bytes: 65536
-- skip-tsan: its hundreds of thousands of Lua errors overflow ThreadSanitizer's shadow stack (docs/ARCHITECTURE.md)
-- expect: memtap: policy: called every function at the top level and in a handler
local function noop() end
local loud = setmetatable({}, {
  __index = function() error("index") end, __newindex = function() error("newindex") end,
  __len = function() error("len") end, __tostring = function() error("tostring") end,
  __call = function() error("call") end, __eq = function() error("eq") end,
  __lt = function() error("lt") end, __le = function() error("le") end,
  __concat = function() error("concat") end, __name = {}, __pairs = function() error("pairs") end,
})
local cyclic = {}
cyclic.self, cyclic[1] = cyclic, cyclic
local deep = {}
do local t = deep for _ = 1, 300 do t[1] = {x = {}} t = t[1] end end
local wide = {}
for i = 1, 2000 do wide[i] = i wide["k" .. i] = {string.rep("y", i % 40)} end
local function options(x) -- every option name a registrar or action reads, set to x
  return {iterations = x, device = x, growth = x, interval = x, min_bytes = x, below = x, name = x,
          policy = x, max_split_size_mb = x, layers = x, measured = x, run = x, [1] = x}
end
local values = table.pack(noop,
  options(0), options(999), options(-1), options(0 / 0), options(1e308), options(math.mininteger),
  options({}), options("x"), options(loud), options(cyclic),
  nil, false, true, 0, 1, -1, 2, 255, 256, 999, 0.5, -0.5, 1e308, -1e308, math.huge, -math.huge, 0 / 0,
  math.maxinteger, math.mininteger, 1 << 40, 2 ^ 63, -2 ^ 63,
  "", "x", "0", "-1", "90%", "0%", "101%", "1GiB", "99999999999GiB", "1e999", "nan", "..", "../x", "/",
  "//", "/etc/passwd", "a/b/c", "%p%n%%", "%", "x\0y", string.rep("x", 5000), string.rep("/", 3000),
  string.rep("a/", 1500), {}, {1, 2, 3}, cyclic, deep, wide, loud, error, coroutine.create(noop),
  coroutine.running())

local names = {}
for name, fn in pairs(memtap) do
  if type(fn) == "function" then names[#names + 1] = name end
end
table.sort(names)

local function call_all()
  for i = 1, values.n do
    local a = values[i]
    for _, name in ipairs(names) do pcall(memtap[name], a) end
    for j = 1, values.n do
      local b = values[j]
      for _, name in ipairs(names) do
        pcall(memtap[name], a, b)
        pcall(memtap[name], a, noop, b)
      end
    end
    memtap.set_cap(nil, nil) -- what a call capped, lifted: the job must run as without memtap
  end
end

-- the tables memtap gives a handler (an event, memtap.top's), every field set to a value,
-- then the stack they name read
local function tables_all(ev)
  for i = 1, values.n do
    for _, t in ipairs({ev, memtap.top(1)[1]}) do
      for k in pairs(t) do t[k] = values[i] end
      pcall(function() return t.stack end)
    end
  end
end

local done = false
memtap.every(0.01, function(ev)
  memtap.mark("iteration") -- boundaries, for whatever the calls registered
  if done or not memtap.top(1)[1] then return end -- once the job's allocation is seen
  done = true
  ev.stack_id = math.maxinteger
  tables_all(ev)
  call_all()
  local t = os.clock() -- memtap says a line a second once the calls' lines used its first twenty
  while os.clock() < t + 1.2 do end
  memtap.log("called every function at the top level and in a handler")
end)
call_all()
