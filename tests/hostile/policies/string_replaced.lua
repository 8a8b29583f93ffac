-- The script replaces the string library the engine matches range names with.
-- job: workload nvtx
-- expect-not: failed
string = nil
memtap.on_phase("layer", function(ev) end)
