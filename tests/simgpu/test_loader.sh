#!/bin/sh
# simgpu's runtime reaches the driver as the real libcudart.so.13 does: it does not
# link libcuda, it dlsym()s only cuGetProcAddress_v2, fetches cuInit and cuGetProcAddress
# through it and every other driver function through the driver's own cuGetProcAddress,
# by base name, version and per-thread flag, and it answers
# cudaGetDriverEntryPointByVersion through the driver's own cuGetProcAddress.
. "$MT_SRCDIR/tests/tap.sh"
spy="$MT_BUILDDIR/tests/simgpu/.libs/libspy.so"
rt="$MT_BUILDDIR/tools/simgpu/.libs/libcudart.so.13"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

readelf -d "$rt" | grep NEEDED | grep -q libcuda
ok $((! $?)) "libcudart.so.13 does not link libcuda"
SPY_LOG=$log LD_PRELOAD=$spy "$MT_BUILDDIR/tests/simgpu/test_runtime" > /dev/null 2>&1
ok $? "the runtime tests pass with the spy preloaded"
[ "$(grep '^dlsym ' "$log")" = "dlsym cuGetProcAddress_v2" ]
ok $? "the only driver symbol looked up with dlsym is cuGetProcAddress_v2"
for want in "gpa [] 0 0" "gpa [cuInit] 2000 0" "gpa [cuGetProcAddress] 12000 0" "gpa-self [cuMemAlloc] 3020 0" \
	"gpa-self [cuMemFree] 3020 0" "gpa-self [cuMemAllocAsync] 11020 0" "gpa-self [cuMemAllocAsync] 11020 2" \
	"gpa-self [cuMemFreeAsync] 11020 2" "gpa-self [cuMemAllocFromPoolAsync] 11020 2" \
	"gpa-self [cuMemHostAlloc] 2020 0" "gpa-self [cuMemCreate] 12000 0" "gpa-self [cuMemRelease] 12000 0"; do
	grep -qxF "$want" "$log"
	ok $? "looked up: $want"
done
n=$(grep -c '^gpa ' "$log")
[ "$n" -eq 4 ]
ok $? "the probe and the first three lookups go through the dlsym'd cuGetProcAddress_v2 ($n)"
n=$(grep -c '^gpa-self ' "$log")
[ "$n" -ge 400 ]
ok $? "the rest through the driver's own cuGetProcAddress ($n lookups)"
done_testing
