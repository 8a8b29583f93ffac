/* The policy engine's heap (lua/heap.c): memtap's own pages, capped. It also provides
 * util/alloc.h's functions inside libmemtap-policy.so. */
#ifndef MT_HEAP_H
#define MT_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "lua/policy.h"

void mt_heap_init(const struct mt_policy_host *host, uint64_t cap);
uint64_t mt_heap_used(void);

#endif
