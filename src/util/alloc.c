/* The offline side's memory for the shared tables: libc's heap. */
#include "util/alloc.h"

#include <stdlib.h>

void *mt_malloc(size_t n)
{
	return malloc(n);
}

void *mt_calloc(size_t n, size_t size)
{
	return calloc(n, size);
}

void *mt_realloc(void *p, size_t n)
{
	return realloc(p, n);
}

void mt_free(void *p)
{
	free(p);
}
