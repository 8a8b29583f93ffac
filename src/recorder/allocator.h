/* memtap's caching allocator inside the job (allocator.c: the engine of src/cache over
 * the driver), for the runtime hooks that serve cudaMalloc and friends from it under
 * `memtap run --allocator=caching`, and for the policies' memtap.allocator. mtp_allocator_*
 * is this glue; mt_cache_* the engine. */
#ifndef MTP_ALLOCATOR_H
#define MTP_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "recorder/mtp.h"

/* 0, MT_CACHE_OOM (after the policies' OOM handlers had their say) or another error. */
MTP_HIDDEN int mtp_allocator_malloc(void **ptr, size_t size, int device, uint64_t stream);
/* ptr goes back to memtap's cache, after the work `stream` has queued when not 0; false
 * when ptr is not memtap's (then it is someone else's to free). */
MTP_HIDDEN bool mtp_allocator_free(void *ptr, uint64_t stream);

/* memtap.allocator: a policy's knobs for one device (-1: every device), as `policy`
 * (a preset; NULL: keep the knobs) then `conf` (mt_cache_configure's syntax), for the
 * engines running and those made later. 0, or EINVAL with the reason in `why`. */
MTP_HIDDEN int mtp_allocator_set(int device, const char *policy, const char *conf, char *why, size_t n);
/* The device's engine's counters, largest free block and knobs; false when it has none. */
MTP_HIDDEN bool mtp_allocator_stats(int device, struct mt_cache_stats *s, uint64_t *largest_free, char *conf, size_t n);

/* --allocator=caching (the options are unset until memtap has started) */
static inline bool mtp_allocator_on(void)
{
	return mtp_opt.allocator && mtp_opt.allocator[0] == 'c';
}

#endif
