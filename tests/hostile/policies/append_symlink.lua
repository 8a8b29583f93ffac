-- A symbolic link planted in the policy folder, pointing outside it.
-- job: workload runtime
-- plant: link out.txt
-- plant: dirlink dir
-- expect: a symbolic link on the way (not followed)
memtap.on_exit(function(ev)
  local ok1, e1 = memtap.append("link", "x")
  local ok2, e2 = memtap.append("dir/x", "x")
  local ok3, e3 = memtap.snapshot("dir/snap.trace")
  memtap.log(tostring(ok1), e1, tostring(ok2), e2, tostring(ok3), e3)
end)
