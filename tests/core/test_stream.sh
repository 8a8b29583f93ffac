#!/bin/sh
# An opened trace's walk against the whole trace read into memory (stream_check.c), on
# traces of every shape bench/gen_trace makes (one to eight threads; stragglers a little or
# far back, a thread going backwards, equal times, cut short), on real ones (simtrain under
# memtap, with and without an out-of-memory failure; the golden traces of older memtaps)
# and on the hostile corpus (damage in every table): the same events in the same order.
# memtap report (text, --json, --html, --plan, --gpu-mem; of one trace or a job's), export
# (perfetto, folded, memviz) and diff walk the file too: their output must be the one they give reading the
# trace whole (MEMTAP_READ=memory), byte for byte. Then dump, report, the page and the exports of 5M events (78 MB: walked by
# default), and of an OOM diagnosed by replaying a caching allocator's 1.6M blocks: their
# memory stays with what is open and live, not the trace's length.
. "$MT_SRCDIR/tests/tap.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
B=$MT_BUILDDIR
S=$MT_SRCDIR/tests
M=$B/tools/memtap/memtap
set --
n=0
for shape in sbt f fs fS fb ft fsbt fc fsbtc; do
	for threads in 1 3 8; do
		n=$((n + 1))
		"$B/bench/gen_trace" "$dir/gen-$threads-$shape.trace" 300000 "$threads" "$n" "$shape"
		set -- "$@" "$dir/gen-$threads-$shape.trace"
	done
done
"$M" run -q -o "$dir/simtrain.trace" -- "$B/tools/simtrain/simtrain" --preset tiny --iters 3 > /dev/null &&
	set -- "$@" "$dir/simtrain.trace"
# an out-of-memory failure: the report's diagnosis replays the trace up to it
SIMGPU_MEM=2M "$M" run -q -o "$dir/oom.trace" -- "$B/tools/simtrain/simtrain" --preset tiny --iters 3 \
	> /dev/null 2>&1
[ -s "$dir/oom.trace" ] && set -- "$@" "$dir/oom.trace"
set -- "$@" "$S"/golden/*.trace "$S"/hostile/traces/*.trace
# over 1 MiB, with what the index pass's second thread must leave to the pass in the second half
"$PYTHON3" "$S/core/make_halves.py" "$dir" && set -- "$@" "$dir"/halves-*.trace

relay() { # a C checker's TAP lines, as this script's own
	"$@" | grep -v '^1\.\.' | sed 's/^\(not \)\{0,1\}ok [0-9]* - /\1ok /' > "$dir/tap"
	while read -r line; do
		case $line in
		"ok "*) ok 0 "${line#ok }" ;;
		*) ok 1 "${line#not ok }" ;;
		esac
	done < "$dir/tap"
}
relay "$B/tests/core/stream_check" "$@"
same() { # $1: what; the rest a memtap command whose output, and file $dir/page when it
	# writes one, must be the same walked from the file as read whole
	what=$1
	shift
	rm -f "$dir/page" "$dir/whole.page"
	MEMTAP_READ=memory "$M" "$@" > "$dir/whole" 2>&1
	whole=$?
	[ -f "$dir/page" ] && mv "$dir/page" "$dir/whole.page"
	MEMTAP_READ=file "$M" "$@" > "$dir/walked" 2>&1
	[ $? -eq $whole ] && cmp -s "$dir/whole" "$dir/walked" &&
		{ [ ! -f "$dir/whole.page" ] || cmp -s "$dir/whole.page" "$dir/page"; }
	ok $? "$what: walked from the file as read whole (exit $whole)"
}
k=0
for trace in "$@"; do
	name=${trace##*/}
	same "report $name" report --top=10 "$trace"
	same "report --json $name" report --json "$trace"
	k=$((k + 1))
	# the page and the exports on every trace; under the sanitizers (ten times slower) on
	# simtrain's, the OOM and one trace in nine (their fuzz target walks damaged ones)
	case $MT_SANITIZERS:$name in
	:* | no:* | *:simtrain.trace | *:oom.trace) ;;
	*) [ $((k % 9)) -eq 1 ] || continue ;;
	esac
	same "report --html $name" report --html "$dir/page" "$trace"
	same "export perfetto $name" export --format perfetto "$trace"
	same "export folded $name" export --format folded --what leaks "$trace"
	same "export memviz $name" export --format memviz -o "$dir/page" "$trace"
done
for trace in "$dir/simtrain.trace" "$dir/oom.trace" "$dir/gen-3-fsbt.trace" "$dir/gen-8-fsbtc.trace" \
	"$S"/golden/*.trace; do # a script's events, each iterator a walk of its own
	same "memtap lua ${trace##*/}" lua "$S/core/walk.lua" "$trace"
done
MEMTAP_READ=file "$M" lua "$S/core/walk.lua" "$dir/oom.trace" > /dev/null
ok $? "memtap lua: each event walked says its place (index)"
plan="--layers 2 --hidden 64 --heads 2 --ffn 256 --vocab 1000 --seq 64 --micro-batch 2 --optimizer adamw"
for trace in "$dir/simtrain.trace" "$dir/oom.trace"; do # what to change, and the plan beside it
	same "report --gpu-mem --plan ${trace##*/}" report --json --gpu-mem 1MiB --plan "$plan" "$trace"
	same "report --plan ${trace##*/}" report --plan "$plan" "$trace"
done
same "diff" diff "$dir/simtrain.trace" "$dir/oom.trace" # two runs side by side, each walked
same "diff --json" diff --json "$dir/simtrain.trace" "$dir/oom.trace"
mkdir "$dir/ranks" # a job's ranks, one row each
cp "$dir/simtrain.trace" "$dir/oom.trace" "$dir/gen-3-fsbt.trace" "$dir/ranks/"
same "report DIR" report "$dir/ranks"
same "report DIR --json" report --json "$dir/ranks"
same "report DIR --html" report --html "$dir/page" "$dir/ranks"

# a trace rewritten while a walk reads it: said, and nothing more given
cp "$dir/gen-3-fsbt.trace" "$dir/changed.trace"
relay "$B/tests/core/stream_check" --changed "$dir/changed.trace"

rss() { # the most resident memory of a command in KB ("failed" if it failed); its output in $dir/out
	"$PYTHON3" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w")).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r == 0 else "failed")' "$dir/out" "$@"
}
# 5M events are 320 MB read into memory
"$B/bench/gen_trace" "$dir/big.trace" 5000000 4 7 sbt
dump_kb=$(rss "$M" dump "$dir/big.trace")
lines=$(wc -l < "$dir/out")
[ "$dump_kb" != failed ] && [ "$lines" -eq 5000000 ]
ok $? "memtap dump of 5M events: every one ($lines)"
report_kb=$(rss "$M" report --json "$dir/big.trace")
grep -q '"total": 5000000' "$dir/out"
ok $? "memtap report --json of 5M events: every one"
page_kb=$(rss "$M" report --html "$dir/big.html" "$dir/big.trace")
grep -q '"total": 5000000' "$dir/big.html"
ok $? "memtap report --html of 5M events: every one"
perfetto_kb=$(rss "$M" export --format perfetto "$dir/big.trace")
tail -c 3 "$dir/out" | grep -q '^]}'
ok $? "memtap export --format perfetto of 5M events: to its end"
memviz_kb=$(rss "$M" export --format memviz -o /dev/null "$dir/big.trace")
[ "$memviz_kb" != failed ]
ok $? "memtap export --format memviz of 5M events"
case $MT_SANITIZERS in
"" | no) # the sanitizers' runtimes hold memory of their own
	# an out-of-memory failure among a caching allocator's blocks (1.6M events): the
	# diagnosis replays the job's allocator and each setting in one walk of the file
	SIMGPU_MEM=14.6GiB "$M" run -q --allocator=caching -O alloc_policy=memtap -o "$dir/blocks.trace" -- \
		"$B/tools/simtrain/simtrain" --preset gpt2-small --iters 5000 --leak 1M > /dev/null 2>&1
	same "report --json blocks.trace" report --json "$dir/blocks.trace"
	blocks_kb=$(rss env MEMTAP_READ=file "$M" report --json "$dir/blocks.trace")
	grep -q '"predicted_by": "replayed"' "$dir/out"
	ok $? "memtap report --json of an OOM among a caching allocator's blocks: its settings replayed"
	[ "$blocks_kb" -lt 60000 ]
	ok $? "... walked from the file, it held $blocks_kb KB at most, not an op per event"
	[ "$dump_kb" -lt 80000 ]
	ok $? "dump held $dump_kb KB at most, not the 320 MB of events"
	for held in "report --json:$report_kb" "report --html:$page_kb" "export --format perfetto:$perfetto_kb" \
		"export --format memviz:$memviz_kb"; do
		[ "${held#*:}" -lt 120000 ]
		ok $? "${held%:*} held ${held#*:} KB at most, not the 320 MB of events"
	done ;;
esac
done_testing
