-- Two hundred handlers, each failing with a traceback: rate-limited like any line.
-- job: workload nvtx
-- expect: lines not said
-- max-lines: 200
for i = 1, 200 do memtap.on_phase(".", function(ev) error("failure " .. i) end) end
