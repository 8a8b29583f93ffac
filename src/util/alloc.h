/* Where the shared tables (util/map, util/array, analyze/replay) get their memory: libc's
 * heap on the offline side (util/alloc.c); memtap's own capped pages when the policy
 * engine runs them inside a job (lua/heap.c), so nothing comes from the application's heap. */
#ifndef MT_ALLOC_H
#define MT_ALLOC_H

#include <stddef.h>

void *mt_malloc(size_t n);
void *mt_calloc(size_t n, size_t size);
void *mt_realloc(void *p, size_t n);
void mt_free(void *p);

#endif
