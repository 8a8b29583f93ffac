#include "core/array.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

int mt_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *p;

	if (need < *cap)
		return 0;
	while (n <= need)
		n *= 2;
	if (!(p = mt_realloc(*arr, n * elem)))
		return ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

size_t mt_slot_take(struct mt_slots *s, void **items, size_t elem)
{
	size_t i;

	if (s->nfree) {
		i = s->free[--s->nfree];
	} else {
		size_t cap = s->cap, free_cap = s->cap;
		/* the free stack keeps the items' capacity, so giving back never allocates */
		if (mt_grow(items, &cap, s->n, elem) || mt_grow((void **)&s->free, &free_cap, s->n, sizeof *s->free))
			return SIZE_MAX;
		s->cap = cap < free_cap ? cap : free_cap;
		i = s->n++;
	}
	memset((char *)*items + i * elem, 0, elem);
	return i;
}

void mt_slot_give(struct mt_slots *s, size_t i)
{
	s->free[s->nfree++] = i;
}

void mt_slots_free(struct mt_slots *s)
{
	mt_free(s->free);
	memset(s, 0, sizeof *s);
}
