/* The ordered set (core/ordered.h). A full block splits in two halves, an emptied block
 * leaves the list; the list of blocks moves only then, at most once per half a block of
 * keys added or removed. */
#include "core/ordered.h"

#include <errno.h>
#include <string.h>

#include "core/alloc.h"
#include "core/array.h"

/* The last block whose first key is <= key; block 0 when key comes before them all. */
static size_t block_of(const struct mt_ordered *o, uint64_t key)
{
	size_t lo = 0, hi = o->n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->blocks[mid]->keys[0] <= key)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* The position of the first key >= key in b. */
static size_t position(const struct mt_ordered_block *b, uint64_t key)
{
	size_t lo = 0, hi = b->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (b->keys[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int insert_block(struct mt_ordered *o, size_t at, struct mt_ordered_block *b)
{
	if (mt_grow((void **)&o->blocks, &o->cap, o->n, sizeof *o->blocks))
		return ENOMEM;
	memmove(o->blocks + at + 1, o->blocks + at, (o->n - at) * sizeof *o->blocks);
	o->blocks[at] = b;
	o->n++;
	return 0;
}

int mt_ordered_add(struct mt_ordered *o, uint64_t key)
{
	struct mt_ordered_block *b;
	size_t i, k;

	if (!o->n) {
		if (!(b = mt_malloc(sizeof *b)))
			return ENOMEM;
		b->n = 0;
		if (insert_block(o, 0, b)) {
			mt_free(b);
			return ENOMEM;
		}
	}
	i = block_of(o, key);
	b = o->blocks[i];
	k = position(b, key);
	if (k < b->n && b->keys[k] == key)
		return 0;
	if (b->n == MT_ORDERED_BLOCK) { /* split: the upper half goes to a new block after it */
		struct mt_ordered_block *c = mt_malloc(sizeof *c);
		if (!c || insert_block(o, i + 1, c)) {
			mt_free(c);
			return ENOMEM;
		}
		c->n = MT_ORDERED_BLOCK / 2;
		memcpy(c->keys, b->keys + MT_ORDERED_BLOCK / 2, c->n * sizeof *c->keys);
		b->n = MT_ORDERED_BLOCK / 2;
		if (k > b->n) {
			k -= b->n;
			b = c;
		}
	}
	memmove(b->keys + k + 1, b->keys + k, (b->n - k) * sizeof *b->keys);
	b->keys[k] = key;
	b->n++;
	return 0;
}

void mt_ordered_del(struct mt_ordered *o, uint64_t key)
{
	struct mt_ordered_block *b;
	size_t i, k;

	if (!o->n)
		return;
	i = block_of(o, key);
	b = o->blocks[i];
	k = position(b, key);
	if (k == b->n || b->keys[k] != key)
		return;
	memmove(b->keys + k, b->keys + k + 1, (b->n - k - 1) * sizeof *b->keys);
	if (--b->n == 0) {
		mt_free(b);
		memmove(o->blocks + i, o->blocks + i + 1, (o->n - i - 1) * sizeof *o->blocks);
		o->n--;
	}
}

bool mt_ordered_next(const struct mt_ordered *o, uint64_t key, uint64_t *out)
{
	size_t i, k;

	if (!o->n)
		return false;
	i = block_of(o, key);
	k = position(o->blocks[i], key);
	if (k == o->blocks[i]->n) { /* past this block's last key: the next block's first */
		if (++i == o->n)
			return false;
		k = 0;
	}
	*out = o->blocks[i]->keys[k];
	return true;
}

void mt_ordered_free(struct mt_ordered *o)
{
	for (size_t i = 0; i < o->n; i++)
		mt_free(o->blocks[i]);
	mt_free(o->blocks);
	*o = (struct mt_ordered){0};
}
