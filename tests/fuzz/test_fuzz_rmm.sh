#!/bin/sh
# The RMM log reader's fuzz target (fuzz_rmm.c) over its regression seeds and the
# hostile corpus: each whole, cut and through a fixed set of mutations (deterministic).
S=$MT_SRCDIR/tests
exec "$MT_BUILDDIR/tests/fuzz/fuzz_rmm_check" 1000 "$S/fuzz/seeds/rmm" "$S/hostile/rmm"
