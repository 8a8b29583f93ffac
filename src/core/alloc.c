/* The core's memory: the C library's heap, or the allocator a host set. */
#include "core/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const struct mt_allocator libc = {malloc, realloc, free};
static const struct mt_allocator *use = &libc;

void mt_set_allocator(const struct mt_allocator *a)
{
	use = a ? a : &libc;
}

void *mt_malloc(size_t n)
{
	return use->malloc(n);
}

void *mt_calloc(size_t n, size_t size)
{
	void *p;

	if (size && n > SIZE_MAX / size)
		return NULL;
	if ((p = use->malloc(n * size)))
		memset(p, 0, n * size);
	return p;
}

void *mt_realloc(void *p, size_t n)
{
	return use->realloc(p, n);
}

void mt_free(void *p)
{
	use->free(p);
}
