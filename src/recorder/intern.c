/* Interning tables: a key (a stack's frames, a string's bytes) gets a small id once.
 * Readers probe without a lock: a slot's hash is published with release order after
 * its id and bytes are in place. Only inserting takes the table's lock. The tables
 * are fixed reservations of address space that fill page by page; when one is full,
 * new keys get id 0 and are counted, as are keys from a signal handler that interrupted
 * an insert on the same thread. */
#include "recorder/mtp.h"

#include <string.h>

struct mtp_table mtp_stacks = {.lock = PTHREAD_MUTEX_INITIALIZER};
struct mtp_table mtp_strings = {.lock = PTHREAD_MUTEX_INITIALIZER};

int mtp_table_init(struct mtp_table *t, uint32_t max_ids, size_t blob_size)
{
	uint32_t slots = 1;

	while (slots < 2 * max_ids)
		slots *= 2;
	t->keys = mtp_map(slots * sizeof *t->keys);
	t->ids = mtp_map(slots * sizeof *t->ids);
	t->entries = mtp_map(((size_t)max_ids + 1) * sizeof *t->entries);
	t->blob = mtp_map(blob_size);
	if (!t->keys || !t->ids || !t->entries || !t->blob)
		return -1;
	t->slots = slots;
	t->max_ids = max_ids;
	t->blob_size = blob_size;
	return 0;
}

static uint64_t hash(const void *key, size_t len)
{
	const uint8_t *p = key;
	uint64_t h = 0xcbf29ce484222325ull ^ len;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	h ^= h >> 32;
	return h | 1; /* never 0: 0 marks an empty slot */
}

static uint32_t probe(struct mtp_table *t, uint64_t h, const void *key, size_t len, uint32_t *slot)
{
	for (uint32_t i = (uint32_t)h & (t->slots - 1);; i = (i + 1) & (t->slots - 1)) {
		uint64_t k = __atomic_load_n(&t->keys[i], __ATOMIC_ACQUIRE);
		if (k == 0) {
			*slot = i;
			return 0;
		}
		if (k == h) {
			uint32_t id = t->ids[i];
			uint64_t e = t->entries[id];
			if ((e & 0xffff) == len && memcmp(t->blob + (e >> 16), key, len) == 0)
				return id;
		}
	}
}

static MTP_NOINLINE uint32_t insert(struct mtp_table *t, uint64_t h, const void *key, size_t len)
{
	uint32_t slot, id;

	/* a signal handler (NVTX, memtap_mark) interrupted this thread inside an insert:
	   no id, rather than waiting forever on a lock this thread holds */
	if (mtp_self.interning) {
		__atomic_add_fetch(&t->full, 1, __ATOMIC_RELAXED);
		return 0;
	}
	mtp_self.interning = true;
	pthread_mutex_lock(&t->lock);
	id = probe(t, h, key, len, &slot);
	if (id == 0) {
		if (t->count + 1 > t->max_ids || t->blob_used + len > t->blob_size || len > 0xffff) {
			__atomic_add_fetch(&t->full, 1, __ATOMIC_RELAXED);
		} else {
			id = t->count + 1;
			memcpy(t->blob + t->blob_used, key, len);
			t->entries[id] = (uint64_t)t->blob_used << 16 | len;
			t->blob_used += len;
			t->ids[slot] = id;
			__atomic_store_n(&t->keys[slot], h, __ATOMIC_RELEASE);
			__atomic_store_n(&t->count, id, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&t->lock);
	mtp_self.interning = false;
	return id;
}

uint32_t mtp_table_intern(struct mtp_table *t, const void *key, size_t len)
{
	uint64_t h;
	uint32_t slot, id;

	if (unlikely(!t->slots))
		return 0;
	h = hash(key, len);
	id = probe(t, h, key, len, &slot);
	return likely(id) ? id : insert(t, h, key, len);
}

const void *mtp_table_get(struct mtp_table *t, uint32_t id, size_t *len)
{
	uint64_t e = t->entries[id];

	*len = e & 0xffff;
	return t->blob + (e >> 16);
}

uint32_t mtp_table_count(struct mtp_table *t)
{
	return __atomic_load_n(&t->count, __ATOMIC_ACQUIRE);
}

uint32_t mtp_intern(const char *s)
{
	size_t n;

	if (!s)
		return 0;
	n = strnlen(s, 4096);
	return mtp_table_intern(&mtp_strings, s, n);
}
