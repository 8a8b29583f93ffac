-- string.format works a float out digit by digit over its binary expansion: "%.6f" of
-- 1e308 writes 316 bytes in some 14 us, a thousand times what its bytes were charged.
-- job: workload nvtx
-- expect: 'format' may take
-- expect-not: ran to its end
local big, f, done = {}, ("%.6f"):rep(1000), false
for i = 1, 1000 do big[i] = 1e308 end
memtap.on_phase(".", function(ev)
  if done then return end
  done = true
  string.format(f, table.unpack(big))
  memtap.log("string.format ran to its end")
end)
