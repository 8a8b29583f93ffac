/* The caching allocator engine's insides, shared by its files, with the bins' and block
 * records' small steps inline here: cache.c (best fit, freeing and handing out blocks,
 * the address table, streams, plain segments, release and GC, the API), knobs.c (the
 * configuration) and vmm.c (VMM pages: stitching and expandable segments). Blocks tile
 * each segment in address order; a free block sits in its pool's size bins, a used one in
 * the address table, a freed one waiting for other streams' events in the pending list.
 * In expandable segments unmapped pages are HOLE blocks, and a FREE block never contains
 * one, so neighbours that are both free are always both mapped and merge. memtap-vmm's
 * segments are lazy instead: laid out exactly as plain ones, with pages mapped only where
 * a block was handed out, so a FREE block may span unmapped pages (handles[i] == 0) and
 * `unmapped` counts them; a block is mapped before it is handed out. With expandable
 * segments memtap-vmm's range is both: its HOLEs are native's unmapped pages (`xpage`),
 * and its FREE and USED blocks are lazy, 2 MiB granules (`page`) mapped only under blocks
 * handed out. */
#ifndef MT_CACHE_ENGINE_H
#define MT_CACHE_ENGINE_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"
#include "core/assert.h"

#define MIB (1024ull * 1024)
#define BINS 704
#define BIN_WORDS ((BINS + 63) / 64)
#define SHARDS 64
#define SPARE_CHUNK 64
#define MT_NOINLINE __attribute__((noinline))

enum state { FREE, USED, HOLE, PENDING };

struct block {
	uint64_t addr, size, requested;
	struct block *prev, *next;   /* address order in the segment */
	struct block *fprev, *fnext; /* its bin, the pending list, the spare list or its segment's holes */
	struct segment *seg;
	uint64_t uses[MT_CACHE_USES]; /* other streams (record_stream); their events once pending; below nuses */
	uint64_t freed;		      /* the engine's free count when it was freed (GC age) */
	uint16_t bin;
	uint8_t state, nuses;
	bool sync_all; /* used by more streams than uses[] holds */
	bool spare;    /* lazy segments, free: may hold whole pages mapped (set by a change, cleared by a look) */
};

struct pool;

struct segment {
	uint64_t addr, size;
	uint64_t page;	   /* VMM page; 0: a plain segment */
	uint64_t *handles; /* VMM: per page, 0 when unmapped */
	uint64_t mapped;   /* VMM: pages mapped */
	uint64_t unmapped; /* lazy (memtap-vmm): pages not mapped; 0 in other segments */
	uint64_t *bits;	   /* VMM: per page, a bit set while mapped (lazy segments) */
	uint64_t xpage;	   /* expandable segments: native's page (its holes' unit); 0 elsewhere */
	bool lazy;
	bool spare; /* lazy: a free block may hold mapped whole pages (set by frees, cleared by a look) */
	struct pool *pool;
	struct block *first;
	struct block *holes;			 /* expandable segments: the HOLE blocks, in address order */
	struct segment *prev, *next;		 /* the device's segments */
	struct segment *spare_prev, *spare_next; /* its pool's, while `spare` (pool lock) */
};

struct pool {
	int lock;
	uint64_t stream;
	uint8_t tag;
	bool small;
	uint64_t hits, allocs, frees, allocated, requested; /* under the lock, summed by mt_cache_stats */
	struct segment *expandable;
	struct segment *spares; /* lazy segments with `spare` set, last marked first */
	struct block *spare;
	void *chunks; /* spare-block allocations, linked through their first word */
	uint64_t bitmap[BIN_WORDS];
	struct block *bins[BINS];
};

struct pools {
	struct pool small, large;
	struct pools *next; /* every stream's, newest first (device lock) */
};

struct shard {
	int lock;
	uint64_t *keys;
	struct block **vals;
	size_t cap, count;
};

struct config_node {
	struct config_node *next;
	struct mt_cache_config c;
};

struct mt_cache {
	struct mt_cache_config c;	   /* the first config */
	const struct mt_cache_config *cur; /* the one in force (mt_cache_reconfigure) */
	struct config_node *old_configs;
	struct mt_cache_backend b;
	int device;
	pthread_mutex_t lock; /* the device: segments, streams table, pending, VMM pages */
	struct segment *segments;
	struct pools *streams[2 * MT_CACHE_MAX_STREAMS];
	struct pools *all; /* the same, as a list */
	struct block *pending;
	int npending;
	uint64_t *phys; /* free physical pages (stitch) */
	size_t nphys, capphys;
	uint64_t nspare;      /* lazy segments with `spare` set */
	uint64_t nexpandable; /* expandable segments */
	uint64_t frees_stamp;
	uint64_t trim_next; /* trim: no cached segment can be stale before this stamp (device lock) */
	struct mt_cache_stats st;
	struct shard shards[SHARDS];
};

/* ---- small helpers ---- */

static inline void spin_lock(int *l)
{
	for (int n = 0; __atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE); n++) {
		while (__atomic_load_n(l, __ATOMIC_RELAXED))
			if (++n > 64) {
				sched_yield();
				n = 0;
			}
	}
}

static inline void spin_unlock(int *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

static inline void stat_add(uint64_t *v, uint64_t *peak, uint64_t d)
{
	uint64_t now = __atomic_add_fetch(v, d, __ATOMIC_RELAXED), p = __atomic_load_n(peak, __ATOMIC_RELAXED);

	while (now > p && !__atomic_compare_exchange_n(peak, &p, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static inline void stat_sub(uint64_t *v, uint64_t d)
{
	__atomic_sub_fetch(v, d, __ATOMIC_RELAXED);
}

static inline void count(uint64_t *v)
{
	__atomic_add_fetch(v, 1, __ATOMIC_RELAXED);
}

static inline uint64_t align_up(uint64_t v, uint64_t a)
{
	if ((a & (a - 1)) == 0) /* no division on the hot path: sizes are powers of two */
		return (v + a - 1) & ~(a - 1);
	return (v + a - 1) / a * a;
}

static inline void note(struct mt_cache *m, enum mt_cache_change what, uint64_t addr, uint64_t size, uint64_t req,
			uint64_t stream, bool mapped)
{
	if (m->b.change)
		m->b.change(m->b.ctx, m->device, what, addr, size, req, stream, mapped);
}

/* a free block of lazy segment s may now hold mapped whole pages (pool lock held) */
/* Lazy segment s may have whole free pages mapped: on its pool's list of them, for
 * mtc_unmap_pages to find without walking every segment. Pool lock held. */
static inline void mark_spare(struct mt_cache *m, struct segment *s)
{
	if (s->lazy && !s->spare) {
		s->spare = true;
		s->spare_prev = NULL;
		s->spare_next = s->pool->spares;
		if (s->spare_next)
			s->spare_next->spare_prev = s;
		s->pool->spares = s;
		__atomic_add_fetch(&m->nspare, 1, __ATOMIC_RELAXED);
	}
}

/* s is off its pool's list of spare segments. Pool lock held. */
static inline void clear_spare(struct mt_cache *m, struct segment *s)
{
	if (!s->spare)
		return;
	s->spare = false;
	if (s->spare_prev)
		s->spare_prev->spare_next = s->spare_next;
	else
		s->pool->spares = s->spare_next;
	if (s->spare_next)
		s->spare_next->spare_prev = s->spare_prev;
	__atomic_sub_fetch(&m->nspare, 1, __ATOMIC_RELAXED);
}

/* The bin of a block of `size`. */
static inline unsigned mtc_bin_of(uint64_t size)
{
	uint64_t u = size >> 9;
	unsigned lg;

	if (u < 128)
		return (unsigned)u;
	lg = 63 - (unsigned)__builtin_clzll(u);
	return 128 + (lg - 7) * 16 + (unsigned)((u >> (lg - 4)) & 15);
}

/* The first bin from `from` on that holds a block, or -1. */
static inline int mtc_next_bin(const struct pool *p, unsigned from)
{
	for (unsigned w = from / 64; w < BIN_WORDS; w++) {
		uint64_t bits = p->bitmap[w] & (w == from / 64 ? ~0ull << (from % 64) : ~0ull);

		if (bits)
			return (int)(w * 64 + (unsigned)__builtin_ctzll(bits));
	}
	return -1;
}

/* ---- bins and block records: inline, as every cache hit splits and merges ---- */

static inline void mtc_bin_insert(struct pool *p, struct block *b)
{
	unsigned i = mtc_bin_of(b->size);

	b->bin = (uint16_t)i;
	b->fprev = NULL;
	b->fnext = p->bins[i];
	if (b->fnext)
		b->fnext->fprev = b;
	p->bins[i] = b;
	p->bitmap[i / 64] |= 1ull << (i % 64);
}

static inline void mtc_bin_remove(struct pool *p, struct block *b)
{
	if (b->fprev)
		b->fprev->fnext = b->fnext;
	else if (!(p->bins[b->bin] = b->fnext))
		p->bitmap[b->bin / 64] &= ~(1ull << (b->bin % 64));
	if (b->fnext)
		b->fnext->fprev = b->fprev;
}

bool mtc_more_blocks(struct mt_cache *m, struct pool *p); /* mtc_new_block's slow path (cache.c) */

/* A record off the pool's spare list, for its caller to fill; NULL: no memory. */
static inline struct block *mtc_new_block(struct mt_cache *m, struct pool *p)
{
	struct block *b = p->spare;

	if (!b) {
		if (!mtc_more_blocks(m, p))
			return NULL;
		b = p->spare;
	}
	p->spare = b->fnext;
	return b;
}

/* a record back on its pool's spare list */
static inline void mtc_drop_block(struct pool *p, struct block *b)
{
	b->fnext = p->spare;
	p->spare = b;
}

/* b joins its neighbour n (after it); n's record is dropped. */
static inline void mtc_merge_next(struct pool *p, struct block *b)
{
	struct block *n = b->next;

	mt_assert(n && n->seg == b->seg && b->addr + b->size == n->addr);
	b->size += n->size;
	b->spare = true;
	b->next = n->next;
	if (n->next)
		n->next->prev = b;
	mtc_drop_block(p, n);
}

/* b shrinks to `size`; the rest becomes a new block after it in `state`. NULL: no memory. */
static inline struct block *mtc_split(struct mt_cache *m, struct pool *p, struct block *b, uint64_t size, int state)
{
	struct block *r;

	mt_assert(size > 0 && size < b->size);
	if (!(r = mtc_new_block(m, p)))
		return NULL;
	/* every field but uses[], which is read only below nuses (zeroing the whole record
	   took 23 of a cache hit's 675 instructions) */
	r->addr = b->addr + size;
	r->size = b->size - size;
	r->requested = 0;
	r->prev = b;
	r->next = b->next;
	r->fprev = r->fnext = NULL;
	r->seg = b->seg;
	r->freed = 0;
	r->bin = 0;
	r->state = (uint8_t)state;
	r->nuses = 0;
	r->sync_all = false;
	r->spare = true;
	if (b->next)
		b->next->prev = r;
	b->next = r;
	b->size = size;
	return r;
}

/* ---- across the engine's files (mtc_: hidden inside memtap's libraries) ---- */

int mtc_backend_error(int err);
void mtc_drop_segment(struct mt_cache *m, struct segment *s);
int mtc_grow_expandable(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
			uint64_t requested, uint64_t stream, struct block **out);
int mtc_grow_plain(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
		   uint64_t requested, struct block **out);
int mtc_grow_lazy(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
		  uint64_t requested, uint64_t stream, struct block **out);
int mtc_map_lazy(struct mt_cache *m, const struct mt_cache_config *c, struct block *b, uint64_t size, uint64_t stream);
bool mtc_release_lazy(struct mt_cache *m, struct segment *s);
uint64_t mtc_segment_bytes(const struct mt_cache_config *c, const struct pool *p, uint64_t size);
struct block *mtc_make_free(struct mt_cache *m, struct pool *p, struct block *b);
/* every page under [addr, addr + size) of lazy segment s is mapped; pool lock held */
static inline bool mtc_lazy_mapped(const struct segment *s, uint64_t addr, uint64_t size)
{
	uint64_t i = (addr - s->addr) / s->page, e = (addr + size - 1 - s->addr) / s->page + 1;

	for (; i < e; i = (i | 63) + 1) {
		uint64_t want = ~0ull << (i % 64);

		if (e - (i & ~63ull) < 64)
			want &= ~(~0ull << (e % 64));
		if ((s->bits[i / 64] & want) != want)
			return false;
	}
	return true;
}

struct segment *mtc_new_segment(struct mt_cache *m, struct pool *p, uint64_t addr, uint64_t size, uint64_t page);
bool mtc_over_limit(struct mt_cache *m, const struct mt_cache_config *c, uint64_t bytes);
uint64_t mtc_unmap_pages(struct mt_cache *m, uint64_t want, bool keep, uint64_t stream);
void mtc_take(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, struct block *b, uint64_t size,
	      uint64_t requested, bool binned);

#endif
