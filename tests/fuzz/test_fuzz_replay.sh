#!/bin/sh
# The replay engine's fuzz target (fuzz_replay.c): every policy over the regression seeds
# and the hostile corpus's traces, snapshots and RMM logs, each whole, cut and through a
# fixed set of mutations (deterministic); under the sanitizer builds ASan and UBSan watch
# the engine, and debug=2's assertions walk its blocks.
S=$MT_SRCDIR/tests
rounds=200
# these inputs are read and replayed on one thread (none is near the 1 MiB at which the
# reader starts a second), so ThreadSanitizer has nothing to watch: its build makes ten
# mutations of each (its 200 took 24 minutes, the last of CI's TSan step)
case "${MT_SANITIZERS:-}" in *thread*) rounds=10 ;; esac
exec "$MT_BUILDDIR/tests/fuzz/fuzz_replay_check" "$rounds" "$S/fuzz/seeds/replay" "$S/hostile/traces" "$S/hostile/pickles" \
	"$S/hostile/rmm"
