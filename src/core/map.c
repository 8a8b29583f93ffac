/* The offline side's hash map: linear probing, tombstones dropped when it regrows. */
#include "core/map.h"

#include <errno.h>
#include <stdint.h>
#include "core/alloc.h"

static size_t slot(uint64_t key, size_t cap)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & (cap - 1);
}

/* The slot holding key, or SIZE_MAX. */
static size_t find(const struct mt_map *m, uint64_t key)
{
	if (!m->cap)
		return SIZE_MAX;
	for (size_t i = slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (m->used[i] == 0)
			return SIZE_MAX;
		if (m->used[i] == 1 && m->keys[i] == key)
			return i;
	}
}

bool mt_map_get(const struct mt_map *m, uint64_t key, uint64_t *val)
{
	size_t i = find(m, key);

	if (i == SIZE_MAX)
		return false;
	if (val)
		*val = m->vals[i];
	return true;
}

static int regrow(struct mt_map *m)
{
	struct mt_map n = {0};

	n.cap = 64;
	while (n.cap < 4 * (m->count + 1))
		n.cap *= 2;
	n.keys = mt_malloc(n.cap * sizeof *n.keys);
	n.vals = mt_malloc(n.cap * sizeof *n.vals);
	n.used = mt_calloc(n.cap, 1);
	if (!n.keys || !n.vals || !n.used) {
		mt_map_free(&n);
		return ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->used[i] == 1)
			mt_map_put(&n, m->keys[i], m->vals[i]);
	mt_map_free(m);
	*m = n;
	return 0;
}

uint64_t *mt_map_at(struct mt_map *m, uint64_t key, bool *had)
{
	size_t i, tomb = SIZE_MAX;

	if (2 * (m->occupied + 1) > m->cap && regrow(m))
		return NULL;
	for (i = slot(key, m->cap); m->used[i]; i = (i + 1) & (m->cap - 1)) {
		if (m->used[i] == 1 && m->keys[i] == key) {
			*had = true;
			return &m->vals[i];
		}
		if (m->used[i] == 2 && tomb == SIZE_MAX)
			tomb = i;
	}
	if (tomb != SIZE_MAX)
		i = tomb;
	else
		m->occupied++;
	m->used[i] = 1;
	m->keys[i] = key;
	m->vals[i] = 0;
	m->count++;
	*had = false;
	return &m->vals[i];
}

int mt_map_put(struct mt_map *m, uint64_t key, uint64_t val)
{
	bool had;
	uint64_t *v = mt_map_at(m, key, &had);

	if (!v)
		return ENOMEM;
	*v = val;
	return 0;
}

bool mt_map_del(struct mt_map *m, uint64_t key, uint64_t *val)
{
	size_t i = find(m, key);

	if (i == SIZE_MAX)
		return false;
	if (val)
		*val = m->vals[i];
	m->count--;
	/* a slot whose next is empty ends every probe that reaches it: it is empty too, and so
	 * is each tombstone before it (no entry moves, so a walk over the slots that deletes
	 * is safe); only the rest are tombstones, which kept probes long in tables where most
	 * keys come and go */
	if (m->used[(i + 1) & (m->cap - 1)]) {
		m->used[i] = 2;
		return true;
	}
	do {
		m->used[i] = 0;
		m->occupied--;
		i = (i - 1) & (m->cap - 1);
	} while (m->used[i] == 2);
	return true;
}

void mt_map_free(struct mt_map *m)
{
	mt_free(m->keys);
	mt_free(m->vals);
	mt_free(m->used);
	*m = (struct mt_map){0};
}
