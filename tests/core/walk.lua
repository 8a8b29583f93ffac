-- memtap lua tests/core/walk.lua TRACE (tests/core/test_stream.sh): every event, counted
-- and summed by field, the first thousand as they are; what was live at three moments; an
-- iterator left half way, and a trace closed under one. Each event's index is its place.
local t = memtap.trace
local n, sums = 0, {}
for e in t:events() do
	n = n + 1
	assert(e.index == n, "event " .. n .. " says it is event " .. e.index)
	for _, k in ipairs({"index", "size", "addr", "aux", "aux2", "stack", "thread", "device", "error"}) do
		sums[k] = (sums[k] or 0) + (e[k] or 0) * n
	end
	sums.time = (sums.time or 0) + e.time
	if n <= 1000 then
		print(e.index, e.kind, e.time, e.thread, e.device, e.addr, e.size, e.stack, e.phase, e.category, e.name)
	end
end
print("events", n, t.nevents)
for _, k in ipairs({"index", "size", "addr", "aux", "aux2", "stack", "thread", "device", "error", "time"}) do
	print(k, sums[k])
end
local frees, at = 0, 0
for e in t:events("free") do
	assert(e.index > at and e.kind == "free", "a free out of order")
	frees, at = frees + 1, e.index
end
print("frees", frees)
local last = 0
for e in t:events() do last = e.time end
for _, f in ipairs({0.25, 0.5, 1}) do
	local live, bytes = t:live_at(last * f), 0
	for _, l in ipairs(live) do bytes = bytes + l.size end
	print("live at", f, #live, bytes)
end
local half = t:events()
half()
half = nil
collectgarbage()
local u <close> = memtap.open(t.path)
local it = u:events()
it()
