/* The caching allocator's engine (cache.h). Blocks tile each segment in address order;
 * a free block sits in its pool's size bins, a used one in the address table, a freed one
 * waiting for other streams' events in the pending list. In VMM segments unmapped pages
 * are HOLE blocks, and a FREE block never contains one, so neighbours that are both free
 * are always both mapped and merge. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"

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
	struct block *fprev, *fnext; /* its bin, the pending list or the spare list */
	struct segment *seg;
	uint64_t uses[MT_CACHE_USES]; /* other streams (record_stream); their events once pending */
	uint64_t freed;               /* the engine's free count when it was freed (GC age) */
	uint16_t bin;
	uint8_t state, nuses;
	bool sync_all;                /* used by more streams than uses[] holds */
};

struct pool;

struct segment {
	uint64_t addr, size;
	uint64_t page;     /* VMM page; 0: a plain segment */
	uint64_t *handles; /* VMM: per page, 0 when unmapped */
	uint64_t mapped;   /* VMM: pages mapped */
	struct pool *pool;
	struct block *first;
	struct segment *prev, *next; /* the device's segments */
};

struct pool {
	int lock;
	uint64_t stream;
	uint8_t tag;
	bool small;
	uint64_t hits, allocs, frees, allocated, requested; /* under the lock, summed by mt_cache_stats */
	struct segment *expandable;
	struct block *spare;
	void *chunks; /* spare-block allocations, linked through their first word */
	uint64_t bitmap[BIN_WORDS];
	struct block *bins[BINS];
};

struct pools {
	struct pool small, large;
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
	struct mt_cache_config c;             /* the first config */
	const struct mt_cache_config *cur;    /* the one in force (mt_cache_reconfigure) */
	struct config_node *old_configs;
	struct mt_cache_backend b;
	int device;
	pthread_mutex_t lock; /* the device: segments, streams table, pending, VMM pages */
	struct segment *segments;
	struct pools *streams[2 * MT_CACHE_MAX_STREAMS];
	struct block *pending;
	int npending;
	uint64_t *phys; /* free physical pages (stitch) */
	size_t nphys, capphys;
	uint64_t frees_stamp;
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

static void stat_add(uint64_t *v, uint64_t *peak, uint64_t d)
{
	uint64_t now = __atomic_add_fetch(v, d, __ATOMIC_RELAXED), p = __atomic_load_n(peak, __ATOMIC_RELAXED);

	while (now > p && !__atomic_compare_exchange_n(peak, &p, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void stat_sub(uint64_t *v, uint64_t d)
{
	__atomic_sub_fetch(v, d, __ATOMIC_RELAXED);
}

static void count(uint64_t *v)
{
	__atomic_add_fetch(v, 1, __ATOMIC_RELAXED);
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	if ((a & (a - 1)) == 0) /* no division on the hot path: sizes are powers of two */
		return (v + a - 1) & ~(a - 1);
	return (v + a - 1) / a * a;
}

static void note(struct mt_cache *m, enum mt_cache_change what, uint64_t addr, uint64_t size, uint64_t req,
		 uint64_t stream, bool mapped)
{
	if (m->b.change)
		m->b.change(m->b.ctx, m->device, what, addr, size, req, stream, mapped);
}

/* ---- configuration ---- */

int mt_cache_preset(struct mt_cache_config *c, const char *name)
{
	/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp) */
	*c = (struct mt_cache_config){
		.min_block = 512, .small_size = 1 * MIB, .small_segment = 2 * MIB, .mid_segment = 20 * MIB,
		.min_large = 10 * MIB, .large_round = 2 * MIB, .max_split = UINT64_MAX, .split_remainder = 1 * MIB,
		.oversize = 20 * MIB, .cache = true, .granule = 2 * MIB,
	};
	if (strcmp(name, "native") == 0)
		return 0;
	if (strcmp(name, "bump") == 0) {
		c->cache = false;
		return 0;
	}
	if (strcmp(name, "memtap") != 0 && strcmp(name, "memtap-vmm") != 0)
		return EINVAL;
	/* memtap: segments no larger than the request needs, and every block splits */
	c->mid_segment = 0;
	c->split_remainder = 0;
	c->stitch = strcmp(name, "memtap-vmm") == 0;
	return 0;
}

static bool parse_bool(const char *v, size_t n, bool *out)
{
	if ((n == 4 && strncasecmp(v, "true", 4) == 0) || (n == 1 && *v == '1'))
		return *out = true, true;
	if ((n == 5 && strncasecmp(v, "false", 5) == 0) || (n == 1 && *v == '0'))
		return *out = false, true;
	return false;
}

static bool parse_num(const char *v, size_t n, double *out)
{
	char buf[32], *end;

	if (n == 0 || n >= sizeof buf)
		return false;
	memcpy(buf, v, n);
	buf[n] = 0;
	*out = strtod(buf, &end);
	return *end == 0 && *out >= 0;
}

static int set_key(struct mt_cache_config *c, const char *k, size_t kn, const char *v, size_t vn)
{
	double x;
	bool f;
#define KEY(s) (kn == sizeof(s) - 1 && strncmp(k, s, kn) == 0)
	if (KEY("expandable_segments") || KEY("stitch") || KEY("tag_pools") || KEY("caching")) {
		if (!parse_bool(v, vn, &f))
			return EINVAL;
		if (KEY("stitch"))
			c->stitch = f;
		else if (KEY("tag_pools"))
			c->tag_pools = f;
		else if (KEY("caching"))
			c->cache = f;
		else
			c->expandable = f;
		return 0;
	}
	if (!parse_num(v, vn, &x))
		return EINVAL;
	if (KEY("max_split_size_mb"))
		c->max_split = x * MIB < 20.0 * MIB ? 20 * MIB : (uint64_t)(x * MIB);
	else if (KEY("roundup_power2_divisions"))
		c->power2_divisions = (unsigned)x;
	else if (KEY("garbage_collection_threshold") && x < 1)
		c->gc_threshold = x;
	else if (KEY("granule_mb") && x >= 2 && (uint64_t)x % 2 == 0)
		c->granule = (uint64_t)x * MIB;
	else if (KEY("limit_mb"))
		c->limit = (uint64_t)(x * MIB);
	else
		return EINVAL;
	return 0;
#undef KEY
}

int mt_cache_configure(struct mt_cache_config *c, const char *conf, const char **bad)
{
	for (const char *p = conf; p && *p;) {
		const char *end = strchr(p, ','), *colon;
		size_t n = end ? (size_t)(end - p) : strlen(p);

		colon = memchr(p, ':', n);
		if (!colon || set_key(c, p, (size_t)(colon - p), colon + 1, n - (size_t)(colon - p) - 1)) {
			*bad = p;
			return EINVAL;
		}
		p += n + (end ? 1 : 0);
	}
	return 0;
}

int mt_cache_describe(const struct mt_cache_config *c, char *buf, size_t n)
{
	static const char *const tf[2] = { "False", "True" };
	int k = snprintf(buf, n, "caching:%s,expandable_segments:%s,stitch:%s,tag_pools:%s,roundup_power2_divisions:%u,"
			 "garbage_collection_threshold:%.15g,limit_mb:%.15g", tf[c->cache], tf[c->expandable],
			 tf[c->stitch], tf[c->tag_pools], c->power2_divisions, c->gc_threshold, (double)c->limit / MIB);

	if (c->max_split != UINT64_MAX && k >= 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, ",max_split_size_mb:%.15g", (double)c->max_split / MIB);
	return k;
}

uint64_t mt_cache_round(const struct mt_cache_config *c, uint64_t size)
{
	unsigned d = c->power2_divisions;

	if (size < c->min_block)
		return c->min_block;
	if (d > 1 && size > c->min_block * d && (size & (size - 1)) != 0) {
		/* PyTorch's roundup_power2_next_division: the power-of-two interval below
		 * size split in d (a power of two) equal steps */
		uint64_t floor = 1ull << (63 - __builtin_clzll(size));
		uint64_t step = floor >> (31 - __builtin_clz(d));

		if (step == 0)
			return floor << 1;
		return (size & ~(step - 1)) == size ? size : (size & ~(step - 1)) + step;
	}
	return align_up(size, c->min_block);
}

/* ---- bins ---- */

static unsigned bin_of(uint64_t size)
{
	uint64_t u = size >> 9;
	unsigned lg;

	if (u < 128)
		return (unsigned)u;
	lg = 63 - (unsigned)__builtin_clzll(u);
	return 128 + (lg - 7) * 16 + (unsigned)((u >> (lg - 4)) & 15);
}

static void bin_insert(struct pool *p, struct block *b)
{
	unsigned i = bin_of(b->size);

	b->bin = (uint16_t)i;
	b->fprev = NULL;
	b->fnext = p->bins[i];
	if (b->fnext)
		b->fnext->fprev = b;
	p->bins[i] = b;
	p->bitmap[i / 64] |= 1ull << (i % 64);
}

static void bin_remove(struct pool *p, struct block *b)
{
	if (b->fprev)
		b->fprev->fnext = b->fnext;
	else if (!(p->bins[b->bin] = b->fnext))
		p->bitmap[b->bin / 64] &= ~(1ull << (b->bin % 64));
	if (b->fnext)
		b->fnext->fprev = b->fprev;
}

static int next_bin(const struct pool *p, unsigned from)
{
	for (unsigned w = from / 64; w < BIN_WORDS; w++) {
		uint64_t bits = p->bitmap[w] & (w == from / 64 ? ~0ull << (from % 64) : ~0ull);

		if (bits)
			return (int)(w * 64 + (unsigned)__builtin_ctzll(bits));
	}
	return -1;
}

/* PyTorch's get_free_block rules, then best fit (lowest address among equals). */
static bool usable(const struct mt_cache_config *c, uint64_t size, uint64_t cand)
{
	if (size < c->max_split && cand >= c->max_split)
		return false;
	return !(size >= c->max_split && cand >= size + c->oversize);
}

static struct block *find_fit(const struct mt_cache_config *c, struct pool *p, uint64_t size)
{
	for (int i = next_bin(p, bin_of(size)); i >= 0; i = next_bin(p, (unsigned)i + 1)) {
		struct block *best = NULL;

		for (struct block *b = p->bins[i]; b; b = b->fnext)
			if (b->size >= size && usable(c, size, b->size) &&
			    (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr)))
				best = b;
		if (best)
			return best;
	}
	return NULL;
}

/* ---- block records ---- */

static struct block *new_block(struct mt_cache *m, struct pool *p)
{
	struct block *b = p->spare;

	if (!b) {
		size_t bytes = sizeof(void *) + SPARE_CHUNK * sizeof(struct block);
		void **chunk = m->b.mem_alloc(m->b.ctx, bytes);

		if (!chunk)
			return NULL;
		*chunk = p->chunks;
		p->chunks = chunk;
		b = (struct block *)(chunk + 1);
		for (int i = 0; i < SPARE_CHUNK - 1; i++)
			b[i].fnext = &b[i + 1];
	}
	p->spare = b->fnext;
	memset(b, 0, sizeof *b);
	return b;
}

static void drop_block(struct pool *p, struct block *b)
{
	b->fnext = p->spare;
	p->spare = b;
}

/* b shrinks to `size`; the rest becomes a new block after it in `state`. NULL: no memory. */
static struct block *split(struct mt_cache *m, struct pool *p, struct block *b, uint64_t size, int state)
{
	struct block *r = new_block(m, p);

	if (!r)
		return NULL;
	r->addr = b->addr + size;
	r->size = b->size - size;
	r->seg = b->seg;
	r->state = (uint8_t)state;
	r->prev = b;
	r->next = b->next;
	if (b->next)
		b->next->prev = r;
	b->next = r;
	b->size = size;
	return r;
}

/* b joins its neighbour n (after it); n's record is dropped. */
static void merge_next(struct pool *p, struct block *b)
{
	struct block *n = b->next;

	b->size += n->size;
	b->next = n->next;
	if (n->next)
		n->next->prev = b;
	drop_block(p, n);
}

/* A block becomes free: it joins free neighbours and goes into the bins. */
static struct block *make_free(struct mt_cache *m, struct pool *p, struct block *b)
{
	b->state = FREE;
	/* an age for GC, not a count: racing frees may share a stamp, and no atomic RMW is paid */
	b->freed = __atomic_load_n(&m->frees_stamp, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&m->frees_stamp, b->freed, __ATOMIC_RELAXED);
	if (b->next && b->next->state == FREE) {
		bin_remove(p, b->next);
		merge_next(p, b);
	}
	if (b->prev && b->prev->state == FREE) {
		struct block *q = b->prev;

		bin_remove(p, q);
		merge_next(p, q);
		b = q;
	}
	bin_insert(p, b);
	return b;
}

/* A block the caller freed rejoins its pool. Pool lock held. */
static struct block *put_back(struct mt_cache *m, struct pool *p, struct block *b)
{
	p->frees++;
	p->allocated -= b->size;
	p->requested -= b->requested;
	return make_free(m, p, b);
}

static bool should_split(const struct mt_cache_config *c, const struct pool *p, const struct block *b, uint64_t size)
{
	uint64_t rest = b->size - size;

	if (p->small || b->seg->page)
		return rest >= c->min_block;
	return size < c->max_split && rest > c->split_remainder && rest >= c->min_block;
}

/* A free block (out of the bins when `binned` is false) is handed out for `size`. */
static void take(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, struct block *b, uint64_t size,
		 uint64_t requested, bool binned)
{
	if (binned)
		bin_remove(p, b);
	if (should_split(c, p, b, size)) {
		struct block *r = split(m, p, b, size, FREE);

		if (r)
			bin_insert(p, r);
	}
	b->state = USED;
	b->requested = requested;
	p->allocs++;
	p->allocated += b->size;
	p->requested += requested;
	b->nuses = 0;
	b->sync_all = false;
}

/* ---- the address table: sharded, linear probing ---- */

static struct shard *shard_of(struct mt_cache *m, uint64_t addr)
{
	return &m->shards[((addr >> 9) * 0x9e3779b97f4a7c15ull) >> 58];
}

static size_t slot_of(uint64_t addr, size_t cap)
{
	return (size_t)(((addr >> 9) * 0xff51afd7ed558ccdull) >> 20) & (cap - 1);
}

static int shard_put(struct mt_cache *m, struct shard *s, uint64_t addr, struct block *b)
{
	if ((s->count + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		uint64_t *keys = m->b.mem_alloc(m->b.ctx, cap * sizeof *keys);
		struct block **vals = m->b.mem_alloc(m->b.ctx, cap * sizeof *vals);

		if (!keys || !vals) {
			if (keys)
				m->b.mem_free(m->b.ctx, keys, cap * sizeof *keys);
			if (vals)
				m->b.mem_free(m->b.ctx, vals, cap * sizeof *vals);
			return ENOMEM;
		}
		for (size_t i = 0; i < s->cap; i++)
			if (s->keys[i]) {
				size_t j = slot_of(s->keys[i], cap);

				while (keys[j])
					j = (j + 1) & (cap - 1);
				keys[j] = s->keys[i];
				vals[j] = s->vals[i];
			}
		if (s->cap) {
			m->b.mem_free(m->b.ctx, s->keys, s->cap * sizeof *keys);
			m->b.mem_free(m->b.ctx, s->vals, s->cap * sizeof *vals);
		}
		s->keys = keys;
		s->vals = vals;
		s->cap = cap;
	}
	size_t j = slot_of(addr, s->cap);

	while (s->keys[j])
		j = (j + 1) & (s->cap - 1);
	s->keys[j] = addr;
	s->vals[j] = b;
	s->count++;
	return 0;
}

static size_t shard_find(const struct shard *s, uint64_t addr)
{
	if (!s->cap)
		return SIZE_MAX;
	for (size_t j = slot_of(addr, s->cap);; j = (j + 1) & (s->cap - 1)) {
		if (s->keys[j] == addr)
			return j;
		if (!s->keys[j])
			return SIZE_MAX;
	}
}

/* Backward-shift deletion keeps every probe chain unbroken. */
static void shard_erase(struct shard *s, size_t j)
{
	size_t mask = s->cap - 1;

	for (size_t i = (j + 1) & mask; s->keys[i]; i = (i + 1) & mask) {
		size_t home = slot_of(s->keys[i], s->cap);

		if (((i - home) & mask) >= ((i - j) & mask)) {
			s->keys[j] = s->keys[i];
			s->vals[j] = s->vals[i];
			j = i;
		}
	}
	s->keys[j] = 0;
	s->count--;
}

/* ---- streams ---- */

static size_t stream_slot(uint64_t stream, uint8_t tag)
{
	return (size_t)(((stream ^ ((uint64_t)tag << 56)) * 0x9e3779b97f4a7c15ull) >> 40) %
	       (2 * MT_CACHE_MAX_STREAMS);
}

static struct pools *find_pools(struct mt_cache *m, uint64_t stream, uint8_t tag)
{
	for (size_t i = stream_slot(stream, tag), n = 0; n < 2 * MT_CACHE_MAX_STREAMS; n++) {
		struct pools *ps = __atomic_load_n(&m->streams[i], __ATOMIC_ACQUIRE);

		if (!ps || (ps->small.stream == stream && ps->small.tag == tag))
			return ps;
		i = (i + 1) % (2 * MT_CACHE_MAX_STREAMS);
	}
	return NULL;
}

static struct pools *add_pools(struct mt_cache *m, uint64_t stream, uint8_t tag)
{
	struct pools *ps;
	size_t i = stream_slot(stream, tag), n = 0;

	pthread_mutex_lock(&m->lock);
	for (; n < MT_CACHE_MAX_STREAMS && (ps = m->streams[i]); n++) {
		if (ps->small.stream == stream && ps->small.tag == tag)
			goto out;
		i = (i + 1) % (2 * MT_CACHE_MAX_STREAMS);
	}
	ps = n < MT_CACHE_MAX_STREAMS ? m->b.mem_alloc(m->b.ctx, sizeof *ps) : NULL;
	if (ps) {
		ps->small.stream = ps->large.stream = stream;
		ps->small.tag = ps->large.tag = tag;
		ps->small.small = true;
		__atomic_store_n(&m->streams[i], ps, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&m->lock);
	return ps;
}

static struct pool *pool_for(struct mt_cache *m, const struct mt_cache_config *c, uint64_t size, uint64_t stream,
			     uint8_t tag)
{
	struct pools *ps;

	if (!c->tag_pools)
		tag = 0;
	ps = find_pools(m, stream, tag);
	if (!ps)
		ps = add_pools(m, stream, tag);
	if (!ps)
		return NULL;
	return size <= c->small_size && !c->stitch ? &ps->small : &ps->large;
}

/* ---- segments ---- */

static bool over_limit(struct mt_cache *m, const struct mt_cache_config *c, uint64_t bytes)
{
	return c->limit && __atomic_load_n(&m->st.reserved, __ATOMIC_RELAXED) + bytes > c->limit;
}

static int backend_error(int err)
{
	return err == MT_CACHE_OOM ? MT_CACHE_OOM : EIO;
}

/* A segment of one block (FREE, or HOLE when its pages are not mapped yet), linked into
 * the device's list. Device and pool locks held. */
static struct segment *new_segment(struct mt_cache *m, struct pool *p, uint64_t addr, uint64_t size, uint64_t page)
{
	struct segment *s = m->b.mem_alloc(m->b.ctx, sizeof *s);

	if (!s)
		return NULL;
	s->first = new_block(m, p);
	if (page)
		s->handles = m->b.mem_alloc(m->b.ctx, size / page * sizeof *s->handles);
	if (!s->first || (page && !s->handles)) {
		if (s->first)
			drop_block(p, s->first);
		m->b.mem_free(m->b.ctx, s, sizeof *s);
		return NULL;
	}
	*s->first = (struct block){ .addr = addr, .size = size, .seg = s, .state = page ? HOLE : FREE };
	s->addr = addr;
	s->size = size;
	s->page = page;
	s->pool = p;
	s->next = m->segments;
	if (s->next)
		s->next->prev = s;
	m->segments = s;
	count(&m->st.segments);
	return s;
}

/* A segment whose only block is unbinned and unused goes: its record, not its memory. */
static void drop_segment(struct mt_cache *m, struct segment *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		m->segments = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->pool->expandable == s)
		s->pool->expandable = NULL;
	drop_block(s->pool, s->first);
	if (s->handles)
		m->b.mem_free(m->b.ctx, s->handles, s->size / s->page * sizeof *s->handles);
	m->b.mem_free(m->b.ctx, s, sizeof *s);
	__atomic_sub_fetch(&m->st.segments, 1, __ATOMIC_RELAXED);
}

/* A plain segment that is one free block goes back to the device. Device and pool locks held. */
static bool release_plain(struct mt_cache *m, struct segment *s)
{
	struct block *b = s->first;

	if (s->page || b->next || b->state != FREE)
		return false;
	bin_remove(s->pool, b);
	note(m, MT_CACHE_SEGMENT_FREE, s->addr, s->size, 0, s->pool->stream, false);
	m->b.seg_free(m->b.ctx, m->device, s->addr, s->size);
	stat_sub(&m->st.reserved, s->size);
	drop_segment(m, s);
	count(&m->st.released);
	return true;
}

static void phys_push(struct mt_cache *m, uint64_t handle, uint64_t page)
{
	if (m->nphys == m->capphys) {
		size_t cap = m->capphys ? m->capphys * 2 : 64;
		uint64_t *a = m->b.mem_alloc(m->b.ctx, cap * sizeof *a);

		if (!a) {
			m->b.phys_release(m->b.ctx, m->device, handle);
			stat_sub(&m->st.reserved, page);
			return;
		}
		if (m->nphys)
			memcpy(a, m->phys, m->nphys * sizeof *a);
		if (m->capphys)
			m->b.mem_free(m->b.ctx, m->phys, m->capphys * sizeof *a);
		m->phys = a;
		m->capphys = cap;
	}
	m->phys[m->nphys++] = handle;
}

/* n pages mapped at the start of hole h: pooled physical pages first, then new ones.
 * The range becomes a free block joined with free neighbours (returned, binned).
 * Device and pool locks held. */
static int map_pages(struct mt_cache *m, const struct mt_cache_config *c, struct segment *s, struct block *h,
		     uint64_t n, struct block **out)
{
	uint64_t at = h->addr, first = (h->addr - s->addr) / s->page, i;
	int err = 0;

	for (i = 0; i < n; i++) {
		uint64_t handle;

		if (m->nphys) {
			handle = m->phys[--m->nphys];
		} else if (over_limit(m, c, s->page)) {
			err = MT_CACHE_OOM;
			break;
		} else if ((err = m->b.phys_create(m->b.ctx, m->device, s->page, &handle)) != 0) {
			err = backend_error(err);
			break;
		} else {
			stat_add(&m->st.reserved, &m->st.peak_reserved, s->page);
		}
		if ((err = m->b.map(m->b.ctx, m->device, at + i * s->page, s->page, handle)) != 0) {
			phys_push(m, handle, s->page);
			err = backend_error(err);
			break;
		}
		s->handles[first + i] = handle;
	}
	if (!err && h->size > n * s->page && !split(m, s->pool, h, n * s->page, HOLE))
		err = ENOMEM;
	if (err) {
		while (i-- > 0) {
			m->b.unmap(m->b.ctx, m->device, at + i * s->page, s->page);
			phys_push(m, s->handles[first + i], s->page);
			s->handles[first + i] = 0;
		}
		return err;
	}
	for (i = 0; i < n; i++)
		note(m, MT_CACHE_SEGMENT_ALLOC, at + i * s->page, s->page, 0, s->pool->stream, true);
	s->mapped += n;
	*out = make_free(m, s->pool, h);
	return 0;
}

/* Up to `want` whole pages inside free block b are unmapped: into the physical pool
 * (`keep`), else back to the device. Returns the pages taken and, in *next, the block
 * to go on from. Device and pool locks held. */
static uint64_t unmap_free(struct mt_cache *m, struct segment *s, struct block *b, uint64_t want, bool keep,
			   struct block **next)
{
	struct pool *p = s->pool;
	uint64_t lo = s->addr + align_up(b->addr - s->addr, s->page);
	uint64_t hi = s->addr + (b->addr + b->size - s->addr) / s->page * s->page, n;
	struct block *mid = b;

	*next = b->next;
	if (hi <= lo)
		return 0;
	n = (hi - lo) / s->page < want ? (hi - lo) / s->page : want;
	hi = lo + n * s->page;
	bin_remove(p, b);
	if (lo > b->addr) {
		if (!(mid = split(m, p, b, lo - b->addr, FREE))) {
			bin_insert(p, b);
			return 0;
		}
		bin_insert(p, b);
	}
	if (mid->addr + mid->size > hi) {
		struct block *tail = split(m, p, mid, hi - mid->addr, FREE);

		if (!tail) {
			bin_insert(p, mid);
			return 0;
		}
		bin_insert(p, tail);
	}
	for (uint64_t a = lo; a < hi; a += s->page) {
		uint64_t *h = &s->handles[(a - s->addr) / s->page];

		note(m, MT_CACHE_SEGMENT_FREE, a, s->page, 0, p->stream, true);
		m->b.unmap(m->b.ctx, m->device, a, s->page);
		if (keep) {
			phys_push(m, *h, s->page);
		} else {
			m->b.phys_release(m->b.ctx, m->device, *h);
			stat_sub(&m->st.reserved, s->page);
		}
		*h = 0;
	}
	s->mapped -= n;
	mid->state = HOLE;
	if (mid->next && mid->next->state == HOLE)
		merge_next(p, mid);
	if (mid->prev && mid->prev->state == HOLE) {
		mid = mid->prev;
		merge_next(p, mid);
	}
	*next = mid->next;
	return n;
}

/* Free whole pages of VMM segments are unmapped, up to `want`, into the physical pool
 * (`keep`) or back to the device. Memory another stream freed may still be in use by its
 * queued work: that stream is synchronized first. A range left with nothing mapped gives
 * its addresses back. Device lock held. */
static uint64_t unmap_pages(struct mt_cache *m, uint64_t want, bool keep, uint64_t stream)
{
	uint64_t got = 0;

	for (struct segment *s = m->segments, *sn; s && got < want; s = sn) {
		struct pool *p = s->pool;
		bool synced = p->stream == stream;

		sn = s->next;
		if (!s->page)
			continue;
		spin_lock(&p->lock);
		for (struct block *b = s->first, *bn; b && got < want; b = bn) {
			bn = b->next;
			if (b->state != FREE)
				continue;
			if (!synced && align_up(b->addr - s->addr, s->page) + s->page <= b->addr + b->size - s->addr) {
				m->b.stream_sync(m->b.ctx, m->device, p->stream);
				synced = true;
			}
			got += unmap_free(m, s, b, want - got, keep, &bn);
		}
		if (!s->mapped && p->expandable != s) {
			m->b.va_free(m->b.ctx, m->device, s->addr, s->size);
			drop_segment(m, s);
		}
		spin_unlock(&p->lock);
	}
	return got;
}

static int grow_plain(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
		      uint64_t requested, struct block **out)
{
	uint64_t bytes = !c->cache	? size
			 : p->small	? c->small_segment
			 : c->mid_segment && size < c->min_large ? c->mid_segment
								   : align_up(size, c->large_round);
	uint64_t addr;
	struct segment *s;
	int err;

	if (over_limit(m, c, bytes))
		return MT_CACHE_OOM;
	if ((err = m->b.seg_alloc(m->b.ctx, m->device, bytes, &addr)) != 0)
		return backend_error(err);
	stat_add(&m->st.reserved, &m->st.peak_reserved, bytes);
	note(m, MT_CACHE_SEGMENT_ALLOC, addr, bytes, 0, p->stream, false);
	spin_lock(&p->lock);
	if ((s = new_segment(m, p, addr, bytes, 0)) != NULL)
		take(m, c, p, s->first, size, requested, false);
	spin_unlock(&p->lock);
	if (!s) {
		note(m, MT_CACHE_SEGMENT_FREE, addr, bytes, 0, p->stream, false);
		m->b.seg_free(m->b.ctx, m->device, addr, bytes);
		stat_sub(&m->st.reserved, bytes);
		return ENOMEM;
	}
	*out = s->first;
	return 0;
}

/* memtap-vmm: a new address range for the request, its pages the physical pool's (pages
 * unmapped from free space anywhere on the device when short), new ones only for the rest. */
static int grow_stitched(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
			 uint64_t requested, uint64_t stream, struct block **out)
{
	uint64_t page = c->granule, n = (size + page - 1) / page, addr;
	struct segment *s;
	struct block *b;
	int err;

	if (m->nphys < n && unmap_pages(m, n - m->nphys, true, stream))
		count(&m->st.stitched);
	if ((err = m->b.va_reserve(m->b.ctx, m->device, n * page, &addr)) != 0)
		return backend_error(err);
	spin_lock(&p->lock);
	if (!(s = new_segment(m, p, addr, n * page, page)))
		err = ENOMEM;
	else if ((err = map_pages(m, c, s, s->first, n, &b)) != 0)
		drop_segment(m, s);
	else
		take(m, c, p, b, size, requested, true);
	spin_unlock(&p->lock);
	if (err) {
		m->b.va_free(m->b.ctx, m->device, addr, n * page);
		return err;
	}
	*out = b;
	return 0;
}

/* PyTorch's expandable segments: one address range per pool, pages (2 MiB small, 20 MiB
 * large) mapped at the lowest hole where they extend a free block far enough. */
static int grow_expandable(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
			   uint64_t requested, struct block **out)
{
	uint64_t page = p->small ? c->small_segment : c->mid_segment ? c->mid_segment : c->large_round;
	struct segment *s = p->expandable;
	int err;

	if (!s) {
		uint64_t span = align_up(c->limit ? c->limit + c->limit / 8 : 256ull << 30, page), addr;

		if ((err = m->b.va_reserve(m->b.ctx, m->device, span, &addr)) != 0)
			return backend_error(err);
		spin_lock(&p->lock);
		s = p->expandable = new_segment(m, p, addr, span, page);
		spin_unlock(&p->lock);
		if (!s) {
			m->b.va_free(m->b.ctx, m->device, addr, span);
			return ENOMEM;
		}
	}
	err = MT_CACHE_OOM; /* no hole is large enough */
	spin_lock(&p->lock);
	for (struct block *h = s->first; h; h = h->next) {
		uint64_t have = h->prev && h->prev->state == FREE ? h->prev->size : 0;
		uint64_t n = size > have ? (size - have + page - 1) / page : 1;
		struct block *b;

		if (h->state != HOLE || n * page > h->size)
			continue;
		if ((err = map_pages(m, c, s, h, n, &b)) == 0)
			take(m, c, p, b, size, requested, true);
		if (!err)
			*out = b;
		break;
	}
	spin_unlock(&p->lock);
	return err;
}

static int grow(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
		uint64_t requested, uint64_t stream, struct block **out)
{
	if (c->stitch && c->cache)
		return grow_stitched(m, c, p, size, requested, stream, out);
	if (c->expandable && c->cache)
		return grow_expandable(m, c, p, size, requested, out);
	return grow_plain(m, c, p, size, requested, out);
}

/* ---- release, GC, cross-stream events ---- */

/* A freed block rejoins its pool (counted as freed unless `counted`); without caching,
 * its segment goes back at once. Device lock held when !cache. */
static void give_back(struct mt_cache *m, const struct mt_cache_config *c, struct block *b, bool counted)
{
	struct pool *p = b->seg->pool;

	spin_lock(&p->lock);
	b = counted ? make_free(m, p, b) : put_back(m, p, b);
	if (!c->cache)
		release_plain(m, b->seg);
	spin_unlock(&p->lock);
}

static void process_pending(struct mt_cache *m, const struct mt_cache_config *c)
{
	for (struct block *b = m->pending, *next; b; b = next) {
		bool waiting = false;

		next = b->fnext;
		for (int i = 0; i < b->nuses; i++) {
			if (b->uses[i] && m->b.event_done(m->b.ctx, b->uses[i]))
				b->uses[i] = 0;
			waiting |= b->uses[i] != 0;
		}
		if (waiting)
			continue;
		if (b->fprev)
			b->fprev->fnext = b->fnext;
		else
			m->pending = b->fnext;
		if (b->fnext)
			b->fnext->fprev = b->fprev;
		__atomic_sub_fetch(&m->npending, 1, __ATOMIC_RELAXED);
		give_back(m, c, b, true);
	}
}

/* Every cached segment with nothing live, and every free VMM page, back to the device.
 * Device lock held. */
static void release_all(struct mt_cache *m, const struct mt_cache_config *c, uint64_t stream)
{
	if (m->pending) {
		m->b.stream_sync(m->b.ctx, m->device, 0);
		process_pending(m, c);
	}
	for (struct segment *s = m->segments, *sn; s; s = sn) {
		struct pool *p = s->pool;

		sn = s->next;
		if (!s->page) {
			spin_lock(&p->lock);
			release_plain(m, s);
			spin_unlock(&p->lock);
		}
	}
	unmap_pages(m, UINT64_MAX, false, stream);
	while (m->nphys) {
		m->b.phys_release(m->b.ctx, m->device, m->phys[--m->nphys]);
		stat_sub(&m->st.reserved, c->granule);
	}
}

/* PyTorch's garbage_collect_cached_blocks: once reserved passes the threshold, unsplit
 * cached large segments at least as old as the average go, until it is back under. */
static void collect(struct mt_cache *m, const struct mt_cache_config *c)
{
	uint64_t reserved = __atomic_load_n(&m->st.reserved, __ATOMIC_RELAXED);
	uint64_t goal = (uint64_t)(c->gc_threshold * (double)c->limit), now;

	if (c->gc_threshold <= 0 || !c->limit || reserved <= goal)
		return;
	count(&m->st.gc_runs);
	now = __atomic_load_n(&m->frees_stamp, __ATOMIC_RELAXED);
	for (uint64_t freed = 0, progress = 1; freed < reserved - goal && progress;) {
		uint64_t total = 0, n = 0, avg;

		progress = 0;
		for (struct segment *s = m->segments; s; s = s->next)
			if (!s->page && !s->pool->small && s->first->state == FREE && !s->first->next)
				total += now - s->first->freed, n++;
		if (!n)
			break;
		avg = total / n;
		for (struct segment *s = m->segments, *sn; s && freed < reserved - goal; s = sn) {
			uint64_t size = s->size;
			struct pool *p = s->pool;

			sn = s->next;
			if (s->page || p->small)
				continue;
			spin_lock(&p->lock);
			if (s->first->state == FREE && !s->first->next && now - s->first->freed >= avg &&
			    release_plain(m, s))
				freed += size, progress = 1;
			spin_unlock(&p->lock);
		}
	}
}

/* A freed block other streams used: events on those streams, and the block waits until
 * they complete. */
static void defer(struct mt_cache *m, const struct mt_cache_config *c, struct block *b)
{
	struct pool *p = b->seg->pool;
	bool waiting = false;

	pthread_mutex_lock(&m->lock);
	spin_lock(&p->lock);
	p->frees++;
	p->allocated -= b->size;
	p->requested -= b->requested;
	spin_unlock(&p->lock);
	if (b->sync_all)
		m->b.stream_sync(m->b.ctx, m->device, 0);
	for (int i = 0; i < b->nuses; i++) {
		uint64_t stream = b->uses[i];

		b->uses[i] = b->sync_all ? 0 : m->b.event_record(m->b.ctx, m->device, stream);
		if (!b->uses[i] && !b->sync_all)
			m->b.stream_sync(m->b.ctx, m->device, stream);
		waiting |= b->uses[i] != 0;
	}
	if (waiting) {
		/* neighbours read its state under the pool lock */
		spin_lock(&p->lock);
		b->state = PENDING;
		spin_unlock(&p->lock);
		b->fprev = NULL;
		b->fnext = m->pending;
		if (m->pending)
			m->pending->fprev = b;
		m->pending = b;
		__atomic_add_fetch(&m->npending, 1, __ATOMIC_RELAXED);
	} else {
		give_back(m, c, b, true);
	}
	pthread_mutex_unlock(&m->lock);
}

/* ---- the API ---- */

static const struct mt_cache_config *conf(struct mt_cache *m)
{
	return __atomic_load_n(&m->cur, __ATOMIC_ACQUIRE);
}

int mt_cache_new(struct mt_cache **out, const struct mt_cache_config *c, const struct mt_cache_backend *b,
		 int device)
{
	struct mt_cache *m;

	if ((c->stitch || c->expandable) && (!b->va_reserve || !b->phys_create || !b->map))
		return EINVAL;
	if (!(m = b->mem_alloc(b->ctx, sizeof *m)))
		return ENOMEM;
	m->c = *c;
	m->cur = &m->c;
	m->b = *b;
	m->device = device;
	pthread_mutex_init(&m->lock, NULL);
	*out = m;
	return 0;
}

static MT_NOINLINE int alloc_slow(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p,
				  uint64_t size, uint64_t requested, uint64_t stream, struct block **out)
{
	int err;

	pthread_mutex_lock(&m->lock);
	process_pending(m, c);
	if (c->cache) {
		spin_lock(&p->lock);
		if ((*out = find_fit(c, p, size)) != NULL)
			take(m, c, p, *out, size, requested, true);
		spin_unlock(&p->lock);
		if (*out) {
			pthread_mutex_unlock(&m->lock);
			return 0;
		}
	}
	collect(m, c);
	err = grow(m, c, p, size, requested, stream, out);
	if (err == MT_CACHE_OOM && c->cache) {
		count(&m->st.retries);
		release_all(m, c, stream);
		err = grow(m, c, p, size, requested, stream, out);
	}
	pthread_mutex_unlock(&m->lock);
	if (err)
		count(&m->st.ooms);
	return err;
}

int mt_cache_alloc(struct mt_cache *m, uint64_t requested, uint64_t stream, uint8_t tag, uint64_t *addr)
{
	const struct mt_cache_config *c = conf(m);
	uint64_t size = mt_cache_round(c, requested);
	struct pool *p = pool_for(m, c, size, stream, tag);
	struct block *b = NULL;
	struct shard *sh;
	int err;

	*addr = 0;
	if (!requested)
		return 0; /* as cudaMalloc: no memory, no address */
	if (size < requested)
		return MT_CACHE_OOM; /* rounding up wrapped: larger than any device */
	if (!p)
		return ENOMEM;
	if (__atomic_load_n(&m->npending, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&m->lock);
		process_pending(m, c);
		pthread_mutex_unlock(&m->lock);
	}
	if (c->cache) {
		spin_lock(&p->lock);
		if ((b = find_fit(c, p, size)) != NULL) {
			take(m, c, p, b, size, requested, true);
			p->hits++;
		}
		spin_unlock(&p->lock);
	}
	if (!b && (err = alloc_slow(m, c, p, size, requested, stream, &b)) != 0)
		return err;
	sh = shard_of(m, b->addr);
	spin_lock(&sh->lock);
	err = shard_put(m, sh, b->addr, b);
	spin_unlock(&sh->lock);
	if (err) {
		pthread_mutex_lock(&m->lock);
		give_back(m, c, b, false);
		pthread_mutex_unlock(&m->lock);
		return err;
	}
	note(m, MT_CACHE_BLOCK_ALLOC, b->addr, b->size, requested, stream, false);
	*addr = b->addr;
	return 0;
}

int mt_cache_free(struct mt_cache *m, uint64_t addr)
{
	const struct mt_cache_config *c = conf(m);
	struct shard *sh = shard_of(m, addr);
	struct block *b = NULL;
	size_t j;

	spin_lock(&sh->lock);
	if ((j = shard_find(sh, addr)) != SIZE_MAX) {
		b = sh->vals[j];
		shard_erase(sh, j);
	}
	spin_unlock(&sh->lock);
	if (!b)
		return ENOENT;
	/* told before the memory can be handed out again */
	note(m, MT_CACHE_BLOCK_FREE, b->addr, b->size, b->requested, b->seg->pool->stream, false);
	if (b->nuses || b->sync_all) {
		defer(m, c, b);
	} else if (!c->cache) {
		pthread_mutex_lock(&m->lock);
		give_back(m, c, b, false);
		pthread_mutex_unlock(&m->lock);
	} else {
		struct pool *p = b->seg->pool;

		spin_lock(&p->lock);
		put_back(m, p, b);
		spin_unlock(&p->lock);
	}
	return 0;
}

int mt_cache_record_stream(struct mt_cache *m, uint64_t addr, uint64_t stream)
{
	struct shard *sh = shard_of(m, addr);
	size_t j;
	int err = ENOENT;

	spin_lock(&sh->lock);
	if ((j = shard_find(sh, addr)) != SIZE_MAX) {
		struct block *b = sh->vals[j];
		bool known = stream == b->seg->pool->stream || b->sync_all;

		for (int i = 0; i < b->nuses && !known; i++)
			known = b->uses[i] == stream;
		if (!known && b->nuses < MT_CACHE_USES)
			b->uses[b->nuses++] = stream;
		else if (!known)
			b->sync_all = true;
		err = 0;
	}
	spin_unlock(&sh->lock);
	return err;
}

bool mt_cache_block(struct mt_cache *m, uint64_t addr, uint64_t *requested, uint64_t *size)
{
	struct shard *sh = shard_of(m, addr);
	size_t j;

	spin_lock(&sh->lock);
	if ((j = shard_find(sh, addr)) != SIZE_MAX) {
		*requested = sh->vals[j]->requested;
		*size = sh->vals[j]->size;
	}
	spin_unlock(&sh->lock);
	return j != SIZE_MAX;
}

void mt_cache_release(struct mt_cache *m)
{
	pthread_mutex_lock(&m->lock);
	release_all(m, conf(m), 0);
	pthread_mutex_unlock(&m->lock);
}

/* Knobs change by publishing a new config; a thread mid-call keeps the one it read. The
 * old ones stay until the engine goes (policies change them rarely). The sizes blocks and
 * pages are cut to, and whether freed blocks are cached at all, stay as the engine began. */
int mt_cache_reconfigure(struct mt_cache *m, const struct mt_cache_config *c)
{
	struct config_node *n;

	if (c->cache != m->c.cache || ((c->stitch || c->expandable) && (!m->b.va_reserve || !m->b.map)))
		return EINVAL;
	if (!(n = m->b.mem_alloc(m->b.ctx, sizeof *n)))
		return ENOMEM;
	pthread_mutex_lock(&m->lock);
	n->c = *c;
	n->c.min_block = m->c.min_block;
	n->c.granule = m->c.granule;
	n->c.small_size = m->c.small_size;
	n->next = m->old_configs;
	m->old_configs = n;
	__atomic_store_n(&m->cur, &n->c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

void mt_cache_current(struct mt_cache *m, struct mt_cache_config *c)
{
	*c = *conf(m);
}

int mt_cache_set_limit(struct mt_cache *m, uint64_t limit)
{
	struct mt_cache_config c = *conf(m);

	c.limit = limit;
	return mt_cache_reconfigure(m, &c);
}

void mt_cache_stats(struct mt_cache *m, struct mt_cache_stats *s)
{
	uint64_t *to = (uint64_t *)s, *from = (uint64_t *)&m->st;

	for (size_t i = 0; i < sizeof *s / sizeof(uint64_t); i++)
		to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
	for (size_t i = 0; i < 2 * MT_CACHE_MAX_STREAMS; i++) {
		struct pools *ps = __atomic_load_n(&m->streams[i], __ATOMIC_ACQUIRE);

		for (int k = 0; ps && k < 2; k++) {
			struct pool *p = k ? &ps->large : &ps->small;

			spin_lock(&p->lock);
			s->hits += p->hits;
			s->allocs += p->allocs;
			s->frees += p->frees;
			s->allocated += p->allocated;
			s->requested += p->requested;
			spin_unlock(&p->lock);
		}
	}
}

uint64_t mt_cache_largest_free(struct mt_cache *m)
{
	uint64_t best = 0;

	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < 2 * MT_CACHE_MAX_STREAMS; i++) {
		struct pools *ps = m->streams[i];

		for (int k = 0; ps && k < 2; k++) {
			struct pool *p = k ? &ps->large : &ps->small;

			spin_lock(&p->lock);
			for (int w = BIN_WORDS - 1; w >= 0; w--)
				if (p->bitmap[w]) {
					int bin = w * 64 + 63 - __builtin_clzll(p->bitmap[w]);

					for (struct block *b = p->bins[bin]; b; b = b->fnext)
						best = b->size > best ? b->size : best;
					break;
				}
			spin_unlock(&p->lock);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return best;
}

void mt_cache_delete(struct mt_cache *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	while (m->segments) {
		struct segment *s = m->segments;

		if (s->page) {
			for (uint64_t i = 0; i < s->size / s->page; i++)
				if (s->handles[i]) {
					m->b.unmap(m->b.ctx, m->device, s->addr + i * s->page, s->page);
					m->b.phys_release(m->b.ctx, m->device, s->handles[i]);
				}
			m->b.va_free(m->b.ctx, m->device, s->addr, s->size);
		} else {
			m->b.seg_free(m->b.ctx, m->device, s->addr, s->size);
		}
		m->segments = s->next;
		if (s->handles)
			m->b.mem_free(m->b.ctx, s->handles, s->size / s->page * sizeof *s->handles);
		m->b.mem_free(m->b.ctx, s, sizeof *s);
	}
	while (m->nphys)
		m->b.phys_release(m->b.ctx, m->device, m->phys[--m->nphys]);
	if (m->capphys)
		m->b.mem_free(m->b.ctx, m->phys, m->capphys * sizeof *m->phys);
	for (size_t i = 0; i < 2 * MT_CACHE_MAX_STREAMS; i++) {
		struct pools *ps = m->streams[i];

		for (int k = 0; ps && k < 2; k++)
			for (void **ch = (k ? &ps->large : &ps->small)->chunks, **nx; ch; ch = nx) {
				nx = *ch;
				m->b.mem_free(m->b.ctx, ch, sizeof(void *) + SPARE_CHUNK * sizeof(struct block));
			}
		if (ps)
			m->b.mem_free(m->b.ctx, ps, sizeof *ps);
	}
	for (int i = 0; i < SHARDS; i++)
		if (m->shards[i].cap) {
			m->b.mem_free(m->b.ctx, m->shards[i].keys, m->shards[i].cap * sizeof(uint64_t));
			m->b.mem_free(m->b.ctx, m->shards[i].vals, m->shards[i].cap * sizeof(struct block *));
		}
	for (struct config_node *n = m->old_configs, *nx; n; n = nx) {
		nx = n->next;
		m->b.mem_free(m->b.ctx, n, sizeof *n);
	}
	pthread_mutex_unlock(&m->lock);
	pthread_mutex_destroy(&m->lock);
	m->b.mem_free(m->b.ctx, m, sizeof *m);
}
