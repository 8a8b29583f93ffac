/* Fuzz target for the replay engine behind memtap replay (analyze/simulate.c over the
 * caching allocator, cache/): whatever reads as a trace, snapshot or RMM log is replayed
 * through every policy (native, memtap, memtap-vmm, bump), in segments and in expandable
 * segments, on the device a replay gets without --capacity (the most any device holds)
 * and on a small one, where OOMs, releases and retries are common. Never a crash, a leak,
 * an engine assertion (debug builds) or work past what the device could hold (libFuzzer's
 * -timeout and -rss_limit_mb watch); and the figures hold together: nothing reserved past
 * the device, no more requested than handed out, memtap-vmm never above native where
 * native served every request. A memtap trace is also replayed with its checksums made
 * right (checksums.h), so that mutations reach the sizes and addresses. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "analyze/simulate.h"
#include "checksums.h"
#include "reader/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const policies[] = {"native", "memtap", "memtap-vmm", "bump"};
enum { NPOLICIES = sizeof policies / sizeof *policies };

static void check(bool holds)
{
	if (!holds)
		__builtin_trap();
}

/* The input through each policy on a device of `capacity` (0: replay's default). */
static void run(const struct mt_sim_input *in, bool expandable, uint64_t capacity)
{
	struct mt_sim_result r[NPOLICIES];
	uint64_t device = capacity ? capacity : MT_CACHE_DEVICE_MAX;
	size_t allocs = in->nops - in->frees - in->releases;
	for (int p = 0; p < NPOLICIES; p++) {
		struct mt_cache_config c;
		const char *bad;
		int err;

		check(mt_cache_preset(&c, policies[p]) == 0);
		if (expandable && p != NPOLICIES - 1) /* bump makes no segments to expand */
			check(mt_cache_configure(&c, "expandable_segments:True", &bad) == 0);
		err = mt_sim_run(in, &c, capacity, false, &r[p]);
		check(err == 0 || err == ENOMEM);
		if (err)
			return;
		check(r[p].stats.peak_reserved <= device && r[p].stats.reserved <= r[p].stats.peak_reserved);
		check(r[p].peak_requested <= r[p].peak_allocated && r[p].ooms <= allocs);
	}
	if (!r[0].ooms) /* memtap-vmm's promise (docs/ALLOCATOR.md): never above native */
		check(r[2].stats.peak_reserved <= r[0].stats.peak_reserved);
}

static void replay(const uint8_t *data, size_t size)
{
	struct mt_trace t;
	struct mt_sim_input in;

	if (mt_trace_parse(data, size, "fuzz", &t) == 0 &&
	    mt_sim_input(&t, (uint8_t)mt_sim_first_device(&t), NULL, &in) == 0) {
		for (int expandable = 0; expandable < 2; expandable++) {
			run(&in, expandable, 0);
			run(&in, expandable, 256u << 20);
		}
		mt_sim_input_free(&in);
	}
	mt_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	as_is_and_checksummed(data, size, replay);
	return 0;
}
