-- The file's top level loops inside pcall: loading must end, and the job start.
-- job: workload runtime
-- expect: this policy is not run
while true do pcall(function() while true do end end) end
