#!/bin/sh
# simgpu's runtime reaches the driver as the real libcudart.so.13 does: it does not
# link libcuda, it dlsym()s only cuGetProcAddress_v2 and fetches every driver function
# through it by base name, version and per-thread flag, and it answers
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
for want in "gpa [] 0 0" "gpa [cuInit] 2000 0" "gpa [cuGetProcAddress] 12000 0" "gpa [cuMemAlloc] 3020 0" \
	"gpa [cuMemFree] 3020 0" "gpa [cuMemAllocAsync] 11020 0" "gpa [cuMemAllocAsync] 11020 2" \
	"gpa [cuMemFreeAsync] 11020 2" "gpa [cuMemAllocFromPoolAsync] 11020 2" "gpa [cuMemHostAlloc] 2020 0" \
	"gpa-self [cuMemCreate] 12000 0" "gpa-self [cuMemRelease] 12000 0"; do
	grep -qxF "$want" "$log"
	ok $? "looked up: $want"
done
n=$(grep -c '^gpa ' "$log")
[ "$n" -ge 30 ]
ok $? "every driver function comes through cuGetProcAddress_v2 ($n lookups)"
done_testing
