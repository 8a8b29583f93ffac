/* The caching allocator's engine (cache.h): best fit, blocks freed and handed out, the
 * address table, streams, plain segments, release, GC and cross-stream events, and the
 * API. How blocks, segments and pools relate, and the bins' and records' small steps, are
 * in engine.h; the knobs are knobs.c, VMM pages vmm.c. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine.h"

/* ---- bins ---- */

/* PyTorch's get_free_block rules, then best fit (lowest address among equals). */
static bool usable(const struct mt_cache_config *c, uint64_t size, uint64_t cand)
{
	if (size < c->max_split && cand >= c->max_split)
		return false;
	return !(size >= c->max_split && cand >= size + c->oversize);
}

static struct block *find_fit(const struct mt_cache_config *c, struct pool *p, uint64_t size)
{
	for (int i = mtc_next_bin(p, mtc_bin_of(size)); i >= 0; i = mtc_next_bin(p, (unsigned)i + 1)) {
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

/* The pool's spare list, empty, gets a chunk of records; false: no memory. */
bool mtc_more_blocks(struct mt_cache *m, struct pool *p)
{
	size_t bytes = sizeof(void *) + SPARE_CHUNK * sizeof(struct block);
	void **chunk = m->b.mem_alloc(m->b.ctx, bytes);
	struct block *b;

	if (!chunk)
		return false;
	*chunk = p->chunks;
	p->chunks = chunk;
	b = (struct block *)(chunk + 1);
	for (int i = 0; i < SPARE_CHUNK - 1; i++)
		b[i].fnext = &b[i + 1];
	b[SPARE_CHUNK - 1].fnext = NULL;
	p->spare = b;
	return true;
}

/* The segment's blocks tile it in address order; no two free neighbours (they merge) and,
 * in a VMM segment, a hole only where a page is unmapped; an expandable segment's list of
 * holes is its HOLE blocks in order. For mt_assert_walk. */
static bool tiled(const struct segment *s)
{
	const struct block *h = s->holes;
	uint64_t at = s->addr;

	for (const struct block *b = s->first; b; b = b->next) {
		if (b->addr != at || b->seg != s || (b->prev && b->prev->next != b) ||
		    (b->state == FREE && b->next && b->next->state == FREE) || (b->state == HOLE && !s->page))
			return false;
		if (s->xpage && b->state == HOLE) {
			if (h != b)
				return false;
			h = h->fnext;
		}
		at += b->size;
	}
	return at == s->addr + s->size && (!s->xpage || !h);
}

/* A block becomes free: it joins free neighbours and goes into the bins. */
struct block *mtc_make_free(struct mt_cache *m, struct pool *p, struct block *b)
{
	mt_assert(b->state != FREE); /* used, pending, or a hole just mapped */
	b->state = FREE;
	mark_spare(m, b->seg);
	/* an age for GC, not a count: racing frees may share a stamp, and no atomic RMW is paid */
	b->freed = __atomic_load_n(&m->frees_stamp, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&m->frees_stamp, b->freed, __ATOMIC_RELAXED);
	if (b->next && b->next->state == FREE) {
		mtc_bin_remove(p, b->next);
		mtc_merge_next(p, b);
	}
	if (b->prev && b->prev->state == FREE) {
		struct block *q = b->prev;

		q->freed = b->freed; /* as PyTorch's merge keeps the freed block's GC count */
		mtc_bin_remove(p, q);
		mtc_merge_next(p, q);
		b = q;
	}
	b->spare = true;
	mtc_bin_insert(p, b);
	mt_assert((!b->prev || b->prev->state != FREE) && (!b->next || b->next->state != FREE));
	mt_assert_walk(tiled(b->seg));
	return b;
}

/* A block the caller freed rejoins its pool. Pool lock held. */
static struct block *put_back(struct mt_cache *m, struct pool *p, struct block *b)
{
	p->frees++;
	p->allocated -= b->size;
	p->requested -= b->requested;
	return mtc_make_free(m, p, b);
}

static bool should_split(const struct mt_cache_config *c, const struct pool *p, const struct block *b, uint64_t size)
{
	uint64_t rest = b->size - size;

	if (p->small || b->seg->xpage) /* expandable segments split every remainder */
		return rest >= c->min_block;
	return size < c->max_split && rest > c->split_remainder && rest >= c->min_block;
}

/* A free block (out of the bins when `binned` is false) is handed out for `size`. */
void mtc_take(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, struct block *b, uint64_t size,
	      uint64_t requested, bool binned)
{
	mt_assert(b->state == FREE && b->size >= size);
	if (binned)
		mtc_bin_remove(p, b);
	if (should_split(c, p, b, size)) {
		struct block *r = mtc_split(m, p, b, size, FREE);

		if (r)
			mtc_bin_insert(p, r);
	}
	b->state = USED;
	b->requested = requested;
	p->allocs++;
	p->allocated += b->size;
	p->requested += requested;
	b->nuses = 0;
	b->sync_all = false;
	mt_assert_walk(tiled(b->seg));
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
	return (size_t)(((stream ^ ((uint64_t)tag << 56)) * 0x9e3779b97f4a7c15ull) >> 40) % (2 * MT_CACHE_MAX_STREAMS);
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
		ps->next = m->all;
		m->all = ps;
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
	return size <= c->small_size ? &ps->small : &ps->large;
}

/* ---- segments ---- */

bool mtc_over_limit(struct mt_cache *m, const struct mt_cache_config *c, uint64_t bytes)
{
	return c->limit && __atomic_load_n(&m->st.reserved, __ATOMIC_RELAXED) + bytes > c->limit;
}

int mtc_backend_error(int err)
{
	return err == MT_CACHE_OOM ? MT_CACHE_OOM : EIO;
}

/* A segment of one block (FREE, or HOLE when its pages are not mapped yet), linked into
 * the device's list. Device and pool locks held. */
struct segment *mtc_new_segment(struct mt_cache *m, struct pool *p, uint64_t addr, uint64_t size, uint64_t page)
{
	struct segment *s = m->b.mem_alloc(m->b.ctx, sizeof *s);

	if (!s)
		return NULL;
	s->first = mtc_new_block(m, p);
	if (page) {
		s->handles = m->b.mem_alloc(m->b.ctx, size / page * sizeof *s->handles);
		s->bits = m->b.mem_alloc(m->b.ctx, (size / page + 63) / 64 * sizeof *s->bits);
	}
	if (!s->first || (page && (!s->handles || !s->bits))) {
		if (s->first)
			mtc_drop_block(p, s->first);
		if (s->handles)
			m->b.mem_free(m->b.ctx, s->handles, size / page * sizeof *s->handles);
		if (s->bits)
			m->b.mem_free(m->b.ctx, s->bits, (size / page + 63) / 64 * sizeof *s->bits);
		m->b.mem_free(m->b.ctx, s, sizeof *s);
		return NULL;
	}
	*s->first = (struct block){.addr = addr, .size = size, .seg = s, .state = page ? HOLE : FREE};
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
void mtc_drop_segment(struct mt_cache *m, struct segment *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		m->segments = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->pool->expandable == s) {
		s->pool->expandable = NULL;
		m->nexpandable--;
	}
	clear_spare(m, s);
	mtc_drop_block(s->pool, s->first);
	if (s->handles) {
		m->b.mem_free(m->b.ctx, s->handles, s->size / s->page * sizeof *s->handles);
		m->b.mem_free(m->b.ctx, s->bits, (s->size / s->page + 63) / 64 * sizeof *s->bits);
	}
	m->b.mem_free(m->b.ctx, s, sizeof *s);
	__atomic_sub_fetch(&m->st.segments, 1, __ATOMIC_RELAXED);
}

/* A plain segment that is one free block goes back to the device. Device and pool locks held. */
static bool release_plain(struct mt_cache *m, struct segment *s)
{
	struct block *b = s->first;

	if (s->page || b->next || b->state != FREE)
		return false;
	mtc_bin_remove(s->pool, b);
	note(m, MT_CACHE_SEGMENT_FREE, s->addr, s->size, 0, s->pool->stream, false);
	m->b.seg_free(m->b.ctx, m->device, s->addr, s->size);
	stat_sub(&m->st.reserved, s->size);
	mtc_drop_segment(m, s);
	count(&m->st.released);
	return true;
}

/* A cached segment that is one free block goes back. Device and pool locks held. */
static bool release_segment(struct mt_cache *m, struct segment *s)
{
	return s->lazy ? mtc_release_lazy(m, s) : release_plain(m, s);
}

static int grow(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size, uint64_t requested,
		uint64_t stream, struct block **out)
{
	if (c->expandable && c->cache) /* with stitch too: native's layout, mapped lazily */
		return mtc_grow_expandable(m, c, p, size, requested, stream, out);
	if (c->stitch && c->cache)
		return mtc_grow_lazy(m, c, p, size, requested, stream, out);
	return mtc_grow_plain(m, c, p, size, requested, out);
}

/* ---- release, GC, cross-stream events ---- */

/* A freed block rejoins its pool (counted as freed unless `counted`); without caching,
 * its segment goes back at once. Device lock held when !cache. */
static void give_back(struct mt_cache *m, const struct mt_cache_config *c, struct block *b, bool counted)
{
	struct pool *p = b->seg->pool;

	spin_lock(&p->lock);
	b = counted ? mtc_make_free(m, p, b) : put_back(m, p, b);
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
		if (!s->xpage) {
			spin_lock(&p->lock);
			release_segment(m, s);
			spin_unlock(&p->lock);
		}
	}
	mtc_unmap_pages(m, UINT64_MAX, false, stream);
	while (m->nphys) {
		m->b.phys_release(m->b.ctx, m->device, m->phys[--m->nphys]);
		stat_sub(&m->st.reserved, c->granule);
	}
}

/* memtap's trim: a new plain segment that would raise the peak reserved first frees the
 * cached segments nothing has used for TRIM_AGE frees (none fits the request, or it would
 * not be growing). Only past the peak, so a job that frees and allocates below it pays no
 * cudaFree; only stale ones, as a segment freed just before is often wanted again just
 * after (ZeRO-3's gathered buffers: trimming those made a simtrain run reserve 23% more
 * than native). 500: the least of those measured (100 to 5,000) that was never above
 * native on 35 real snapshots and simtrain's runs (docs/ALLOCATOR.md). */
enum { TRIM_AGE = 500 };

static void trim(struct mt_cache *m, const struct mt_cache_config *c, const struct pool *p, uint64_t size)
{
	uint64_t now = __atomic_load_n(&m->frees_stamp, __ATOMIC_RELAXED);

	if (!c->trim || !c->cache || c->stitch || c->expandable || now < m->trim_next ||
	    __atomic_load_n(&m->st.reserved, __ATOMIC_RELAXED) + mtc_segment_bytes(c, p, size) <=
		__atomic_load_n(&m->st.peak_reserved, __ATOMIC_RELAXED))
		return;
	/* what becomes free from now on is stale TRIM_AGE frees later at the soonest, so the
	 * next walk waits for that or for the soonest cached segment kept now (a walk per
	 * growing miss made memtap's replay four times native's cost) */
	m->trim_next = now + TRIM_AGE;
	for (struct segment *s = m->segments, *sn; s; s = sn) {
		struct pool *q = s->pool;
		const struct block *b = s->first;

		sn = s->next;
		spin_lock(&q->lock);
		if (!s->page && b->state == FREE && !b->next) {
			if (now - b->freed >= TRIM_AGE)
				release_plain(m, s);
			else if (b->freed + TRIM_AGE < m->trim_next)
				m->trim_next = b->freed + TRIM_AGE;
		}
		spin_unlock(&q->lock);
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
			if (!s->xpage && !s->pool->small && s->first->state == FREE && !s->first->next)
				total += now - s->first->freed, n++;
		if (!n)
			break;
		avg = total / n;
		for (struct segment *s = m->segments, *sn; s && freed < reserved - goal; s = sn) {
			uint64_t size = s->size;
			struct pool *p = s->pool;

			sn = s->next;
			if (s->xpage || p->small)
				continue;
			spin_lock(&p->lock);
			if (s->first->state == FREE && !s->first->next && now - s->first->freed >= avg &&
			    release_segment(m, s))
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

int mt_cache_new(struct mt_cache **out, const struct mt_cache_config *c, const struct mt_cache_backend *b, int device)
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

/* The cache's best fit, its pages mapped first when it lies on unmapped pages of a lazy
 * segment; NULL when nothing fits (*err 0) or the pages could not be had (*err). Device
 * lock held. */
static struct block *fit(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
			 uint64_t requested, uint64_t stream, int *err)
{
	struct block *b;

	*err = 0;
	spin_lock(&p->lock);
	if ((b = find_fit(c, p, size)) != NULL && b->seg->unmapped && !mtc_lazy_mapped(b->seg, b->addr, size)) {
		mtc_bin_remove(p, b);
		b->state = USED; /* neither unmapped nor merged while its pages are found */
		spin_unlock(&p->lock);
		*err = mtc_map_lazy(m, c, b, size, stream);
		spin_lock(&p->lock);
		if (*err) {
			mtc_make_free(m, p, b);
			b = NULL;
		} else {
			b->state = FREE;
			if (b->next && b->next->state == FREE) { /* freed meanwhile by another thread */
				mtc_bin_remove(p, b->next);
				mtc_merge_next(p, b);
			}
			mtc_take(m, c, p, b, size, requested, false);
			mark_spare(m, b->seg); /* what split off may hold mapped pages no look saw */
		}
	} else if (b) {
		mtc_take(m, c, p, b, size, requested, true);
	}
	spin_unlock(&p->lock);
	return b;
}

/* A miss: the cache again under the device lock, else a new segment; out of memory, the
 * cache is released and that step retried once. */
static MT_NOINLINE int alloc_slow(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
				  uint64_t requested, uint64_t stream, struct block **out)
{
	int err = 0;
	bool grew = false;

	pthread_mutex_lock(&m->lock);
	process_pending(m, c);
	if (!c->cache || (!(*out = fit(m, c, p, size, requested, stream, &err)) && !err)) {
		collect(m, c);
		trim(m, c, p, size);
		err = grow(m, c, p, size, requested, stream, out);
		grew = true;
	}
	if (err == MT_CACHE_OOM && c->cache) {
		count(&m->st.retries);
		release_all(m, c, stream);
		/* PyTorch retries only the new segment; a block whose pages failed is looked for again */
		if (grew || (!(*out = fit(m, c, p, size, requested, stream, &err)) && !err))
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
	if (size > MT_CACHE_DEVICE_MAX)
		return MT_CACHE_OOM;
	if (!p)
		return ENOMEM;
	if (__atomic_load_n(&m->npending, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&m->lock);
		process_pending(m, c);
		pthread_mutex_unlock(&m->lock);
	}
	if (c->cache) {
		spin_lock(&p->lock);
		if ((b = find_fit(c, p, size)) != NULL && b->seg->unmapped && !mtc_lazy_mapped(b->seg, b->addr, size))
			b = NULL; /* its pages are to be mapped first: the slow path */
		if (b) {
			mtc_take(m, c, p, b, size, requested, true);
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
					m->b.unmap(m->b.ctx, m->device, s->addr + i * s->page, s->page, 1);
					m->b.phys_release(m->b.ctx, m->device, s->handles[i]);
				}
			m->b.va_free(m->b.ctx, m->device, s->addr, s->size);
		} else {
			m->b.seg_free(m->b.ctx, m->device, s->addr, s->size);
		}
		m->segments = s->next;
		if (s->handles) {
			m->b.mem_free(m->b.ctx, s->handles, s->size / s->page * sizeof *s->handles);
			m->b.mem_free(m->b.ctx, s->bits, (s->size / s->page + 63) / 64 * sizeof *s->bits);
		}
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
