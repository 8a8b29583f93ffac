/* The caching allocator's cache-hit path: alloc+free pairs of a size the cache holds, on
 * one thread and no recording, against glibc's malloc+free of the same size in the same
 * run. Prints nanoseconds per pair for both and the ratio.
 *   bench/alloc_bench [PAIRS [POLICY]]     (POLICY: memtap, the default, memtap-vmm, native) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "analyze/simulate.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? atol(argv[1]) : 2000000;
	struct mt_sim_device dev;
	struct mt_cache_backend b;
	struct mt_cache_config c;
	struct mt_cache *m;
	const size_t sizes[] = {4096, 262144, 8u << 20};
	double best_cache = 1e30, best_libc = 1e30;

	const char *policy = argc > 2 ? argv[2] : "memtap";

	mt_sim_device_init(&dev, 0, &b);
	if (mt_cache_preset(&c, policy) || mt_cache_new(&m, &c, &b, 0))
		return 1;
	for (int round = 0; round < 5; round++) { /* alternate, keep the best of each */
		double t0 = now();
		uint64_t a;
		void *volatile p;

		for (long i = 0; i < pairs; i++) {
			mt_cache_alloc(m, sizes[i % 3], 0, 0, &a);
			mt_cache_free(m, a);
		}
		double t1 = now();
		for (long i = 0; i < pairs; i++) {
			p = malloc(sizes[i % 3]);
			free(p);
		}
		double t2 = now();
		if ((t1 - t0) / pairs < best_cache)
			best_cache = (t1 - t0) / pairs;
		if ((t2 - t1) / pairs < best_libc)
			best_libc = (t2 - t1) / pairs;
	}
	printf("cache-hit alloc+free pair (%s): %.1f ns; glibc malloc+free pair: %.1f ns; ratio %.2f\n", policy,
	       best_cache, best_libc, best_cache / best_libc);
	mt_cache_delete(m);
	return 0;
}
