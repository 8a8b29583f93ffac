-- string.match of a pattern without special characters (a reviewer's): the matcher
-- compares it at every position of the subject, 60,000 x 30,000 steps in C where the
-- count hook cannot see them; charged as one pass, it delayed the exit by 4 s.
-- job: workload runtime
-- expect: 'match' may take
-- expect-not: ran to its end
local s, p = ("a"):rep(60000), ("a"):rep(30000) .. "b"
memtap.on_exit(function(ev)
  string.match(s, p)
  memtap.log("string.match ran to its end")
end)
