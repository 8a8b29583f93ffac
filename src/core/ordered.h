/* An ordered set of 64-bit keys, for the range questions a hash map cannot answer
 * (which VMM mappings lie inside an unmapped range). Sorted blocks of at most
 * MT_ORDERED_BLOCK keys, found by bisection over the blocks' first keys: adding,
 * removing and finding the first key at or after a key cost O(log n + block) in any
 * order of keys, so no input makes them quadratic. Memory from core/alloc.h. */
#ifndef MT_ORDERED_H
#define MT_ORDERED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_ORDERED_BLOCK 256

struct mt_ordered_block {
	size_t n;
	uint64_t keys[MT_ORDERED_BLOCK];
};

struct mt_ordered {
	struct mt_ordered_block **blocks; /* in key order, none empty */
	size_t n, cap;
};

int mt_ordered_add(struct mt_ordered *o, uint64_t key); /* 0 or ENOMEM; a key is held once */
void mt_ordered_del(struct mt_ordered *o, uint64_t key);
bool mt_ordered_next(const struct mt_ordered *o, uint64_t key, uint64_t *out); /* the first key >= key */
void mt_ordered_free(struct mt_ordered *o);

#endif
