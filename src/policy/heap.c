/* The policy engine's memory: the Lua state and the replay's tables come from memtap's
 * own pages, never from the application's heap, and stop at the policy's memory cap (Lua
 * then raises "not enough memory" inside the handler, which is caught). Blocks up to
 * 4 KiB come in power-of-two classes carved from 64 KiB pages and return to a free list
 * per class; larger ones are mappings of their own. A 16-byte header holds each block's
 * size. One lock, for the writer thread and the policy thread alike. mt_heap_init makes
 * it the shared core's allocator (core/alloc.h) inside libmemtap-policy.so. */
#include "policy/heap.h"

#include <pthread.h>
#include <string.h>

#include "core/alloc.h"

#define HEADER 16
#define CLASSES 8 /* 32 B .. 4 KiB, header included */
#define PAGE (64u << 10)

struct block {
	size_t size; /* usable bytes */
	size_t cls;  /* class, or CLASSES for a mapping of its own */
};

static struct heap {
	pthread_mutex_t lock;
	const struct mt_policy_host *host;
	uint64_t cap, used;
	void *free[CLASSES];
	char *carve; /* the rest of the newest page */
	size_t left;
} h = {.lock = PTHREAD_MUTEX_INITIALIZER};

uint64_t mt_heap_used(void)
{
	return __atomic_load_n(&h.used, __ATOMIC_RELAXED);
}

static size_t class_of(size_t n)
{
	size_t cls = 0;

	while ((32u << cls) < n + HEADER)
		cls++;
	return cls;
}

static size_t mapping(size_t n)
{
	return (n + HEADER + 4095) & ~(size_t)4095;
}

static void *heap_malloc(size_t n)
{
	size_t cls = class_of(n), bytes = cls < CLASSES ? 32u << cls : mapping(n);
	struct block *b = NULL;

	if (!h.host || n > (size_t)1 << 40)
		return NULL;
	pthread_mutex_lock(&h.lock);
	if (h.used + bytes > h.cap)
		goto out;
	if (cls >= CLASSES) {
		cls = CLASSES;
		b = h.host->map(bytes);
	} else if (h.free[cls]) {
		b = h.free[cls];
		memcpy(&h.free[cls], (char *)b + HEADER, sizeof(void *));
	} else {
		if (h.left < bytes) {
			char *page = h.host->map(PAGE);
			if (!page)
				goto out;
			h.carve = page; /* the old page's tail is too small for this class: left unused */
			h.left = PAGE;
		}
		b = (struct block *)h.carve;
		h.carve += bytes;
		h.left -= bytes;
	}
	if (b) {
		b->size = bytes - HEADER;
		b->cls = cls;
		h.used += bytes;
	}
out:
	pthread_mutex_unlock(&h.lock);
	return b ? (char *)b + HEADER : NULL;
}

static void heap_free(void *p)
{
	struct block *b;

	if (!p)
		return;
	b = (struct block *)((char *)p - HEADER);
	pthread_mutex_lock(&h.lock);
	h.used -= b->size + HEADER;
	if (b->cls == CLASSES) {
		h.host->unmap(b, b->size + HEADER);
	} else {
		memcpy(p, &h.free[b->cls], sizeof(void *));
		h.free[b->cls] = b;
	}
	pthread_mutex_unlock(&h.lock);
}

static void *heap_realloc(void *p, size_t n)
{
	size_t have;
	void *q;

	if (!p)
		return heap_malloc(n);
	have = ((struct block *)((char *)p - HEADER))->size;
	if (n <= have && (n > have / 4 || have <= 4096 - HEADER))
		return p;
	if ((q = heap_malloc(n)))
		memcpy(q, p, n < have ? n : have);
	if (q || n == 0)
		heap_free(p);
	return q;
}

void mt_heap_init(const struct mt_policy_host *host, uint64_t cap)
{
	static const struct mt_allocator heap = {heap_malloc, heap_realloc, heap_free};

	h.host = host;
	h.cap = cap;
	mt_set_allocator(&heap);
}
