#!/bin/sh
# The reader's fuzz target over real traces (one from simtrain, one of every API), a
# snapshot and an RMM log, then the regression seeds and the hostile corpus: each whole,
# cut and mutated, with checksums made right (fuzz_reader.c); under the sanitizer builds
# this is where ASan and UBSan look at the reader and every analysis.
. "$MT_SRCDIR/tests/tap.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
B=$MT_BUILDDIR
"$B/tools/memtap/memtap" run -q -o "$dir/simtrain.trace" -- "$B/tools/simtrain/simtrain" --preset tiny \
	--iters 2 > /dev/null || { echo "1..0 # SKIP no trace to start from"; exit 0; }
"$B/tools/memtap/memtap" run -q -o "$dir/api.trace" -- "$B/tests/recorder/workload" driver > /dev/null
# a PyTorch snapshot, for the pickle reader and the importer
"$PYTHON3" -c 'import pickle, sys
f = [{"filename": "t.py", "line": 1, "name": "f"}]
snap = {"segments": [{"device": 0, "address": 4096, "total_size": 8192, "stream": 0, "segment_type": "large",
                      "segment_pool_id": (0, 0), "frames": f, "blocks": [
                          {"address": 4096, "size": 4096, "requested_size": 4000, "state": "active_allocated", "frames": f},
                          {"address": 8192, "size": 4096, "requested_size": 0, "state": "inactive", "frames": []}]}],
        "device_traces": [[{"action": "alloc", "addr": 4096, "size": 4000, "stream": 0, "time_us": 5, "frames": f},
                           {"action": "oom", "device_free": 1, "size": 9000, "stream": 0, "time_us": 6}]]}
pickle.dump(snap, open(sys.argv[1], "wb"), protocol=4)' "$dir/snapshot.pickle"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x1000,4096,0x0\n2,10:00:00.5,free,0x1000,4096,0x0\n1,10:00:01.0,allocate failure,(nil),99,0x0\n' > "$dir/rmm.csv"
S=$MT_SRCDIR/tests
exec "$B/tests/fuzz/fuzz_reader_check" 2000 "$dir/simtrain.trace" "$dir/api.trace" "$dir/snapshot.pickle" "$dir/rmm.csv" \
	--rounds=200 "$S/fuzz/seeds/reader" "$S/hostile/traces" "$S/hostile/pickles" "$S/hostile/rmm"
