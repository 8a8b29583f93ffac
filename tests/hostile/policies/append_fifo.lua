-- A FIFO planted in the policy folder: opening it for writing could block forever.
-- job: workload runtime
-- plant: fifo pipe
-- expect: not a regular file
memtap.on_exit(function(ev) memtap.log(select(2, memtap.append("pipe", "x"))) end)
