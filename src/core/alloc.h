/* The one seam for memory in the shared core (maps, arrays, the replay, the event sort):
 * the C library's heap unless a host sets its own. The tool uses the default; the policy
 * engine sets memtap's capped pages before anything allocates (policy/heap.c), so that
 * inside a job nothing comes from the application's heap. */
#ifndef MT_ALLOC_H
#define MT_ALLOC_H

#include <stddef.h>

struct mt_allocator {
	void *(*malloc)(size_t n);
	void *(*realloc)(void *p, size_t n);
	void (*free)(void *p);
};

/* Before the core's first allocation, once; NULL: the C library's heap. */
void mt_set_allocator(const struct mt_allocator *a);

void *mt_malloc(size_t n);
void *mt_calloc(size_t n, size_t size);
void *mt_realloc(void *p, size_t n);
void mt_free(void *p);

#endif
