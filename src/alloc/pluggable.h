/* memtap's caching allocator inside the job (pluggable.c), for the runtime hooks that
 * serve cudaMalloc and friends from it under `memtap run --allocator=caching`. */
#ifndef MT_PLUGGABLE_H
#define MT_PLUGGABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "preload/mtp.h"

/* 0, MT_CACHE_OOM (after the policies' OOM handlers had their say) or another error. */
MTP_HIDDEN int mtp_cache_malloc(void **ptr, size_t size, int device, uint64_t stream);
/* ptr goes back to memtap's cache, after the work `stream` has queued when not 0; false
 * when ptr is not memtap's (then it is someone else's to free). */
MTP_HIDDEN bool mtp_cache_free(void *ptr, uint64_t stream);

/* --allocator=caching (the options are unset until memtap has started) */
static inline bool mtp_caching(void)
{
	return mtp_opt.allocator && mtp_opt.allocator[0] == 'c';
}

#endif
