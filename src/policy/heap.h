/* The policy engine's heap (heap.c): memtap's own pages, capped; once initialised, the
 * shared core's allocator (core/alloc.h) inside libmemtap-policy.so. */
#ifndef MT_HEAP_H
#define MT_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

void mt_heap_init(const struct mt_policy_host *host, uint64_t cap);
uint64_t mt_heap_used(void);

#endif
