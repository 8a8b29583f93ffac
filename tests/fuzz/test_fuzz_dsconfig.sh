#!/bin/sh
# The DeepSpeed config reader's fuzz target (fuzz_dsconfig.c) over its regression seeds and the
# hostile corpus: each whole, cut and through a fixed set of mutations (deterministic).
S=$MT_SRCDIR/tests
exec "$MT_BUILDDIR/tests/fuzz/fuzz_dsconfig_check" 1000 "$S/fuzz/seeds/dsconfig" "$S/hostile/deepspeed"
