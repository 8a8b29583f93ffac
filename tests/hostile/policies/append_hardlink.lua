-- A hard link planted in the policy folder: a second name of a file outside it, which
-- appending would write (a symbolic link is refused; a hard link is a regular file).
-- job: workload runtime
-- plant: hardlink out.txt
-- expect: a hard link (the file has another name, maybe outside the folder): not written
memtap.on_exit(function(ev)
  local ok1, e1 = memtap.append("out.txt", "x")
  local ok2, e2 = memtap.snapshot("out.txt")
  memtap.log(tostring(ok1), e1, tostring(ok2), e2)
end)
