-- A custom report from the events: bytes allocated in each NVTX phase, and the largest
-- single allocation of each.
--   memtap lua phases run.trace
local total, largest = {}, {}
for e in memtap.trace:events("alloc") do
  local phase = e.phase or "(no phase)"
  total[phase] = (total[phase] or 0) + e.size
  if e.size > (largest[phase] or 0) then largest[phase] = e.size end
end
local names = {}
for name in pairs(total) do names[#names + 1] = name end
table.sort(names, function(a, b) return total[a] > total[b] end)
for _, name in ipairs(names) do
  print(string.format("%-24s %12s allocated, largest %s", name, memtap.format_size(total[name]),
                      memtap.format_size(largest[name])))
end
