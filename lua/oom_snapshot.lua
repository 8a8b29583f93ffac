-- oom_snapshot.lua: on the first out-of-memory failure, write a snapshot of that moment
-- (every live allocation with its stack, the failed request included; `memtap report`
-- reads it and says what to change so that it fits) and log the request, what the failure
-- looks like from inside the job, and the stacks holding the most memory, each by its
-- first frame past those they all share (an allocating helper, the runtime), or by the
-- job's own Python frame where it has them.
-- MEMTAP_OOM_SNAPSHOT names the file (default memtap-oom-%p.trace, in the policy folder).
-- In a job of several ranks with a run directory (memtap run --dir, or a launcher's job
-- id), every rank takes a snapshot of that moment (memtap.snapshot_all) into
-- DIR/snapshots/ID/, and the other ranks log which rank failed; `memtap report DIR`.

local size = memtap.format_size
local done = false
local whole_job = memtap.run_dir ~= nil and (memtap.world_size or 1) > 1

-- The cause as the job sees it, by the report's first rules that need no history:
-- the request free in memtap's allocator's segments, or memory no allocation holds.
local function cause(ev)
  local a = memtap.allocator_stats(ev.device)
  local held = a and a.reserved or ev.allocated or 0
  local outside = (ev.total or 0) - (ev.free or 0) - held
  if a and a.reserved - a.allocated >= ev.size then
    return string.format("fragmentation: %s free in the allocator's segments, the largest block %s",
      size(a.reserved - a.allocated), size(a.largest_free))
  elseif outside >= ev.size and outside * 20 > (ev.total or 0) then
    return string.format("memory outside what memtap saw: %s of the device held by no allocation it recorded",
      size(outside))
  end
  return string.format("%s in use and %s asked, more than the %s the job had", size(held), size(ev.size),
    size((ev.total or 0) - outside))
end

-- The innermost frames every one of the top stacks shares (an allocating helper, the
-- runtime, the allocator): each stack is shown by its first frame past them.
local function told_apart(tops)
  local shared = 0
  while #tops > 1 do
    local frame = tops[1].stack[shared + 1]
    for i = 2, #tops do
      if tops[i].stack[shared + 1] ~= frame then frame = nil end
    end
    if frame == nil then return shared end
    shared = shared + 1
  end
  return shared
end

-- The frame a stack is shown by: past those the top stacks share, the first Python frame
-- of the job's own code (not a library's: torch, site-packages) where it has Python frames
-- (its native frames are PyTorch's operators and the runtime), else the first past them.
local function shown(stack, shared)
  for i = shared + 1, #stack do
    local f = stack[i]
    if f:match("%.py:%d+%)$") and not f:match("/torch/") and not f:match("%-packages/") and
       not f:match("^<frozen ") then
      return f
    end
  end
  return stack[shared + 1] or stack[1] or "?"
end

memtap.on_oom(function(ev)
  if done then return end
  done = true
  memtap.log(string.format("out of memory: %s asked on device %s in %s%s; %s allocated, %s free of %s",
    size(ev.size or 0), tostring(ev.device), ev.phase or "no range",
    ev.iteration > 0 and (", iteration " .. ev.iteration) or "",
    size(ev.allocated or 0), size(ev.free or 0), size(ev.total or 0)))
  local path, err
  if whole_job then
    path, err = memtap.snapshot_all()
    if path then
      memtap.log("snapshot " .. path .. "; every rank takes one of this moment (memtap report " ..
        memtap.run_dir .. ")")
    end
  else
    path, err = memtap.snapshot(os.getenv("MEMTAP_OOM_SNAPSHOT") or "memtap-oom-%p.trace")
    if path then memtap.log("snapshot " .. path .. " (memtap report " .. path .. ")") end
  end
  if not path then memtap.log("no snapshot: " .. err) end
  memtap.log("cause: " .. cause(ev) .. "; what to change: memtap report " .. (path or "TRACE") ..
    " (--plan 'SETUP' adds the training setup's changes)")
  local tops = memtap.top(5, ev.device)
  local shared = told_apart(tops)
  for i, t in ipairs(tops) do
    memtap.log(string.format("  %d. %s in %d allocation%s from %s", i, size(t.bytes), t.count,
      t.count == 1 and "" or "s", shown(t.stack, shared)))
  end
end)

if whole_job then
  memtap.on_peer_oom(function(ev)
    memtap.log(string.format("rank %d (pid %d on %s) ran out of memory; this rank's snapshot of that moment " ..
      "goes to %s/snapshots/%s/", ev.rank, ev.pid, ev.host or "?", memtap.run_dir, ev.id))
  end)
end
