#!/bin/sh
# The reader's fuzz target over real traces (one from simtrain, one cut short by
# kill -9), every truncation and thousands of mutations; under the sanitizer builds
# this is where ASan and UBSan look at the parser.
. "$MT_SRCDIR/tests/tap.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
B=$MT_BUILDDIR
"$B/tools/memtap/memtap" run -q -o "$dir/simtrain.trace" -- "$B/tools/simtrain/simtrain" --preset tiny \
	--iters 2 > /dev/null || { echo "1..0 # SKIP no trace to start from"; exit 0; }
"$B/tools/memtap/memtap" run -q -o "$dir/api.trace" -- "$B/tests/recorder/workload" driver > /dev/null
exec "$B/tests/fuzz/fuzz_reader_check" 3000 "$dir/simtrain.trace" "$dir/api.trace"
