#!/bin/sh
# The same program gets the same device pointers on every run, freed addresses included.
. "$MT_SRCDIR/tests/tap.sh"
prog="$MT_BUILDDIR/tests/simgpu/test_runtime"
case "$MT_SANITIZERS" in *thread*) skip_all "ThreadSanitizer keeps its own address-space layout" ;; esac
a=$("$prog" --print-addresses)
ok $? "first run"
b=$("$prog" --print-addresses)
ok $? "second run"
[ -n "$a" ] && [ "$a" = "$b" ]
ok $? "identical addresses"
[ "$(echo "$a" | sort -u | wc -l)" -ge 8 ]
ok $? "distinct live allocations get distinct addresses"
done_testing
