#!/bin/sh
# make_golden.sh COMMIT LABEL: builds memtap as it was at COMMIT in a temporary folder,
# records the golden workloads with it into tests/golden/v1-LABEL-*.trace, and removes
# the build (so no machine can symbolize those frames the same way by accident). Then
# MT_GOLDEN_WRITE=1 make check TESTS=tests/golden/test_golden.py writes the expected
# reports. Made so far: 5b7c812 (the first recorder, IEEE CRC-32), 06e1a0a (before drop
# reasons), drops (the END chunk's drops by reason, the DROPS chunk).
set -eu
commit=$1 label=$2
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/memtap-golden-XXXXXX)
git -C "$top" worktree add -q "$tmp/src" "$commit"
(cd "$tmp/src" && ./autogen.sh > /dev/null 2>&1 && mkdir build && cd build && ../configure -q && make -s -j2 > /dev/null)
b=$tmp/src/build
run() {
	name=$1
	shift
	rm -f "$top/tests/golden/v1-$label-$name.trace"
	LD_LIBRARY_PATH=$b/tools/simgpu/.libs "$b/tools/memtap/memtap" run -q -o "$top/tests/golden/v1-$label-$name.trace" "$@"
}
# simtrain with tags where the commit has them; memtap's caching allocator; the driver API workload
run simtrain -- "$b/tools/simtrain/simtrain" --preset tiny --iters 2 --tag > /dev/null 2>&1 ||
	run simtrain -- "$b/tools/simtrain/simtrain" --preset tiny --iters 2 > /dev/null
(run allocator --allocator=caching -- "$b/tools/simtrain/simtrain" --preset tiny --iters 2 > /dev/null 2>&1) || true
(make -C "$b" -s tests/recorder/workload > /dev/null 2>&1 && run driver -- "$b/tests/recorder/workload" driver > /dev/null 2>&1) || true
git -C "$top" worktree remove --force "$tmp/src"
rm -rf "$tmp"
