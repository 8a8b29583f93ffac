#!/bin/sh
# The replay engine's fuzz target (fuzz_replay.c): every policy over the regression seeds
# and the hostile corpus's traces, snapshots and RMM logs, each whole, cut and through a
# fixed set of mutations (deterministic); under the sanitizer builds ASan and UBSan watch
# the engine, and debug=2's assertions walk its blocks.
S=$MT_SRCDIR/tests
exec "$MT_BUILDDIR/tests/fuzz/fuzz_replay_check" 200 "$S/fuzz/seeds/replay" "$S/hostile/traces" "$S/hostile/pickles" \
	"$S/hostile/rmm"
