#!/bin/sh
# The pickle reader's and snapshot importer's fuzz target (fuzz_pickle.c) over its regression seeds and the
# hostile corpus: each whole, cut and through a fixed set of mutations (deterministic).
S=$MT_SRCDIR/tests
exec "$MT_BUILDDIR/tests/fuzz/fuzz_pickle_check" 1000 "$S/fuzz/seeds/pickle" "$S/hostile/pickles"
