/* A u64 -> u64 hash map: open addressing over core/alloc.h (libc offline; memtap's own
 * pages in the policy engine inside a job). */
#ifndef MT_MAP_H
#define MT_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mt_map {
	uint64_t *keys, *vals;
	uint8_t *used; /* 0 empty, 1 full, 2 deleted */
	size_t cap, count, occupied;
};

bool mt_map_get(const struct mt_map *m, uint64_t key, uint64_t *val);
int mt_map_put(struct mt_map *m, uint64_t key, uint64_t val); /* 0 or ENOMEM */
/* Key's value, key added with 0 if it was not there (*had says which): one probe where a
 * delete and a put take two. NULL when out of memory; the pointer holds until the map
 * next changes. */
uint64_t *mt_map_at(struct mt_map *m, uint64_t key, bool *had);
bool mt_map_del(struct mt_map *m, uint64_t key, uint64_t *val);
void mt_map_free(struct mt_map *m);

/* FNV-1a over n bytes, from h (MT_FNV_BASIS to start): for keys made of text. */
#define MT_FNV_BASIS 0xcbf29ce484222325ull
static inline uint64_t mt_fnv1a(uint64_t h, const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
	return h;
}

#endif
