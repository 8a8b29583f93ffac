#!/bin/sh
# An opened trace's walk against the whole trace read into memory (stream_check.c), on
# traces of every shape bench/gen_trace makes (one to eight threads; stragglers a little or
# far back, a thread going backwards, equal times, cut short), on real ones (simtrain under memtap, the golden
# traces of older memtaps) and on the hostile corpus (damage in every table): the same
# events in the same order. Then memtap dump, which walks: its memory stays with what is
# open, not with the trace's length.
. "$MT_SRCDIR/tests/tap.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
B=$MT_BUILDDIR
S=$MT_SRCDIR/tests
set --
n=0
for shape in sbt f fs fS fb ft fsbt fc fsbtc; do
	for threads in 1 3 8; do
		n=$((n + 1))
		"$B/bench/gen_trace" "$dir/gen-$threads-$shape.trace" 300000 "$threads" "$n" "$shape"
		set -- "$@" "$dir/gen-$threads-$shape.trace"
	done
done
"$B/tools/memtap/memtap" run -q -o "$dir/simtrain.trace" -- "$B/tools/simtrain/simtrain" --preset tiny \
	--iters 3 > /dev/null && set -- "$@" "$dir/simtrain.trace"
"$B/tests/core/stream_check" "$@" "$S"/golden/*.trace "$S"/hostile/traces/*.trace | grep -v '^1\.\.' |
	sed 's/^\(not \)\{0,1\}ok [0-9]* - /\1ok /' > "$dir/tap"
while read -r line; do
	case $line in
	"ok "*) ok 0 "${line#ok }" ;;
	*) ok 1 "${line#not ok }" ;;
	esac
done < "$dir/tap"

# 4M events are 256 MB read into memory; dump walks them from the file
"$B/bench/gen_trace" "$dir/big.trace" 4000000 4 7 sbt
"$PYTHON3" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w")).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r)' "$dir/dump" "$B/tools/memtap/memtap" dump "$dir/big.trace" > "$dir/rss"
ok $? "memtap dump of 4M events"
lines=$(wc -l < "$dir/dump")
[ "$lines" -eq 4000000 ]
ok $? "every event dumped ($lines)"
kb=$(head -n 1 "$dir/rss")
case $MT_SANITIZERS in
"" | no) # the sanitizers' runtimes hold memory of their own
	[ "$kb" -lt 80000 ]
	ok $? "dump held ${kb} KB at most, not the 256 MB of events" ;;
esac
done_testing
