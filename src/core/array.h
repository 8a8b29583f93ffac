/* Growable arrays for the offline side. mt_grow doubles an array until an index fits.
 * mt_slots reuses freed slots, for tables of live things (allocations in a replay,
 * blocks, lives): the items stay one plain array, so an index is stable while the item
 * lives; free slots wait on a stack of their own, so items need no spare field, and
 * giving a slot back never allocates. */
#ifndef MT_ARRAY_H
#define MT_ARRAY_H

#include <stddef.h>

/* Grows *arr (elem bytes per item, *cap items) so that index `need` fits; new items are
 * not zeroed. 0 or ENOMEM. */
int mt_grow(void **arr, size_t *cap, size_t need, size_t elem);

struct mt_slots {
	size_t n, cap; /* slots used so far (live or free), slots allocated */
	size_t *free;  /* indices given back, cap of them at most */
	size_t nfree;
};

/* A slot in *items (elem bytes each, grown as needed), zeroed; SIZE_MAX when out of memory. */
size_t mt_slot_take(struct mt_slots *s, void **items, size_t elem);
void mt_slot_give(struct mt_slots *s, size_t i);
void mt_slots_free(struct mt_slots *s); /* the stack; the caller frees its items */

#endif
