-- A CI check: fail when a category at the peak exceeds its budget.
--   memtap lua peak_budget run.trace -- activations 12GiB
local category, budget = arg[1] or "activations", arg[2] or "12GiB"
local units = {B = 1, KiB = 1 << 10, MiB = 1 << 20, GiB = 1 << 30, TiB = 1 << 40}
local n, unit = budget:match("^([%d.]+)%s*(%a*)$")
local limit = n and math.floor(tonumber(n) * (units[unit ~= "" and unit or "B"] or error("unknown unit " .. unit)))
assert(limit, "a budget like 12GiB, not " .. budget)

for _, device in ipairs(memtap.trace:report().devices) do
  local bytes = device.composition_at_peak[category] or error("no category " .. category)
  local verdict = bytes > limit and "over budget" or "within budget"
  print(string.format("device %d: %s at the peak %s, budget %s: %s", device.device, category,
                      memtap.format_size(bytes), memtap.format_size(limit), verdict))
  if bytes > limit then
    error(string.format("device %d: %s over budget by %s", device.device, category, memtap.format_size(bytes - limit)), 0)
  end
end
