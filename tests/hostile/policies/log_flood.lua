-- Tens of thousands of lines a second: memtap says a few and counts the rest.
-- job: workload sleep 300
-- options: policy_budget=50M
-- expect: lines not said: too many in too short a time
-- max-lines: 40
memtap.every(0.01, function(ev) for i = 1, 10000 do memtap.log("flood", i) end end)
