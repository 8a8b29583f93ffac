/* VMM pages (cuMemCreate/cuMemMap): memtap-vmm's lazy segments, laid out as native's
 * with pages mapped only under blocks handed out and free pages from anywhere moved to
 * where they are needed, and PyTorch's expandable segments. Free physical pages are kept
 * for reuse; a page is unmapped only when its stream's work is done. Called with the
 * device lock held. */
#include <errno.h>
#include <string.h>

#include "cache/engine.h"

/* n physical pages (handles h) into the pool (`keep`), else back to the device. The pool
 * holds pages of the engine's granule only (expandable segments' 20 MiB pages go back). */
static void phys_push(struct mt_cache *m, const uint64_t *h, uint64_t n, uint64_t page, bool keep)
{
	if (!n)
		return;
	keep = keep && page == m->c.granule;
	if (keep && m->nphys + n > m->capphys) {
		size_t cap = m->capphys ? m->capphys * 2 : 64;
		uint64_t *a;

		while (cap < m->nphys + n)
			cap *= 2;
		if ((a = m->b.mem_alloc(m->b.ctx, cap * sizeof *a)) != NULL) {
			if (m->nphys)
				memcpy(a, m->phys, m->nphys * sizeof *a);
			if (m->capphys)
				m->b.mem_free(m->b.ctx, m->phys, m->capphys * sizeof *a);
			m->phys = a;
			m->capphys = cap;
		}
		keep = a != NULL;
	}
	if (!keep) {
		for (uint64_t k = 0; k < n; k++)
			m->b.phys_release(m->b.ctx, m->device, h[k]);
		stat_sub(&m->st.reserved, n * page);
		return;
	}
	memcpy(m->phys + m->nphys, h, n * sizeof *h);
	m->nphys += n;
}

/* Up to n pooled physical pages into h[]; how many. */
static uint64_t phys_pop(struct mt_cache *m, uint64_t *h, uint64_t n)
{
	if (n > m->nphys)
		n = m->nphys;
	if (!n) /* the pool may not exist yet */
		return 0;
	m->nphys -= n;
	memcpy(h, m->phys + m->nphys, n * sizeof *h);
	return n;
}

/* The first page at or after i and before end whose bit is set (`set`) or clear; end
 * when there is none. */
static uint64_t next_bit(const uint64_t *bits, uint64_t i, uint64_t end, bool set)
{
	while (i < end) {
		uint64_t w = (set ? bits[i / 64] : ~bits[i / 64]) >> (i % 64);

		if (w) {
			i += (uint64_t)__builtin_ctzll(w);
			return i < end ? i : end;
		}
		i = (i | 63) + 1;
	}
	return end;
}

/* Bits [i, j) set (`set`) or cleared, a word at a time. */
static void set_bits(uint64_t *bits, uint64_t i, uint64_t j, bool set)
{
	while (i < j) {
		uint64_t e = (i | 63) + 1 < j ? (i | 63) + 1 : j;
		uint64_t mask = (e - i == 64 ? ~0ull : (1ull << (e - i)) - 1) << (i % 64);

		if (set)
			bits[i / 64] |= mask;
		else
			bits[i / 64] &= ~mask;
		i = e;
	}
}

/* Pages [i, i + n) of segment s, all mapped, are unmapped in one backend call: their
 * physical pages into the pool (`keep`) or back to the device. The caller keeps the
 * segment's counts. */
static void unmap_run(struct mt_cache *m, struct segment *s, uint64_t i, uint64_t n, bool keep)
{
	uint64_t a = s->addr + i * s->page, *h = &s->handles[i];

	if (m->b.change)
		for (uint64_t k = 0; k < n; k++)
			note(m, MT_CACHE_SEGMENT_FREE, a + k * s->page, s->page, 0, s->pool->stream, true);
	m->b.unmap(m->b.ctx, m->device, a, s->page, n);
	phys_push(m, h, n, s->page, keep);
	memset(h, 0, n * sizeof *h);
}

/* Pages [i, i + n) of segment s are mapped, in one backend call, on the physical pages
 * already in handles[i..]; recorded (each page its own segment_alloc). 0 or the backend's
 * answer, and then the physical pages go back to the pool. */
static int map_run(struct mt_cache *m, struct segment *s, uint64_t i, uint64_t n)
{
	uint64_t a = s->addr + i * s->page, *h = &s->handles[i];
	int err = m->b.map(m->b.ctx, m->device, a, s->page, h, n);

	if (err) {
		phys_push(m, h, n, s->page, true);
		memset(h, 0, n * sizeof *h);
		return mtc_backend_error(err);
	}
	if (m->b.change)
		for (uint64_t k = 0; k < n; k++)
			note(m, MT_CACHE_SEGMENT_ALLOC, a + k * s->page, s->page, 0, s->pool->stream, true);
	s->mapped += n;
	return 0;
}

/* n physical pages into h[]: pooled ones first (pages of the granule), new ones only once
 * the pool is empty; how many h[] holds in the end (n, or fewer and *err). */
static uint64_t phys_get(struct mt_cache *m, const struct mt_cache_config *c, uint64_t page, uint64_t *h, uint64_t n,
			 int *err)
{
	uint64_t got = page == m->c.granule ? phys_pop(m, h, n) : 0;

	for (*err = 0; got < n; got++) {
		if (mtc_over_limit(m, c, page)) {
			*err = MT_CACHE_OOM;
			break;
		}
		if ((*err = m->b.phys_create(m->b.ctx, m->device, page, &h[got])) != 0) {
			*err = mtc_backend_error(*err);
			break;
		}
		stat_add(&m->st.reserved, &m->st.peak_reserved, page);
	}
	return got;
}

/* Hole h of expandable segment s leaves its list of holes; r, a hole split off after it,
 * takes its place. The list is in address order, through fprev/fnext (a hole is in no
 * bin): the search for a hole skips the blocks between, which cost native's replay of a
 * real snapshot 1,300 instructions an operation. Pool lock held. */
static void hole_replace(struct segment *s, struct block *h, struct block *r)
{
	struct block *prev = h->fprev, *next = h->fnext;

	if (r) {
		r->fprev = prev;
		r->fnext = next;
	}
	if (prev)
		prev->fnext = r ? r : next;
	else
		s->holes = r ? r : next;
	if (next)
		next->fprev = r ? r : prev;
}

/* h, just made a hole, joins s's list of holes in address order. Pool lock held. */
static void hole_insert(struct segment *s, struct block *h)
{
	struct block *prev = NULL, *next = s->holes;

	for (; next && next->addr < h->addr; next = next->fnext)
		prev = next;
	h->fprev = prev;
	h->fnext = next;
	if (prev)
		prev->fnext = h;
	else
		s->holes = h;
	if (next)
		next->fprev = h;
}

/* n pages mapped at the start of hole h: pooled physical pages first, then new ones.
 * The range becomes a free block joined with free neighbours (returned, binned). In
 * memtap-vmm's range (lazy) nothing is mapped: the range only becomes free, its granules
 * unmapped until a block on them is handed out. Device and pool locks held. */
static int map_pages(struct mt_cache *m, const struct mt_cache_config *c, struct segment *s, struct block *h,
		     uint64_t n, struct block **out)
{
	uint64_t first = (h->addr - s->addr) / s->page, got;
	struct block *r = NULL; /* the hole left after them */
	int err;

	if (s->lazy) {
		if (h->size > n * s->xpage && !(r = mtc_split(m, s->pool, h, n * s->xpage, HOLE)))
			return ENOMEM;
		hole_replace(s, h, r);
		s->unmapped += n * s->xpage / s->page;
		*out = mtc_make_free(m, s->pool, h);
		return 0;
	}
	got = phys_get(m, c, s->page, &s->handles[first], n, &err);
	if (err) {
		phys_push(m, &s->handles[first], got, s->page, true);
		memset(&s->handles[first], 0, got * sizeof *s->handles);
		return err;
	}
	if ((err = map_run(m, s, first, n)) != 0)
		return err;
	if (h->size > n * s->page && !(r = mtc_split(m, s->pool, h, n * s->page, HOLE))) {
		unmap_run(m, s, first, n, true);
		s->mapped -= n;
		return ENOMEM;
	}
	hole_replace(s, h, r);
	*out = mtc_make_free(m, s->pool, h);
	return 0;
}

/* Up to `want` whole pages (native's, `xpage`) inside free block b of an expandable
 * segment become a hole: unmapped, their physical pages into the pool (`keep`), else back
 * to the device; in memtap-vmm's range (lazy), whatever granules are mapped there. Returns
 * the pages taken and, in *next, the block to go on from. Device and pool locks held. */
static uint64_t unmap_free(struct mt_cache *m, struct segment *s, struct block *b, uint64_t want, bool keep,
			   struct block **next)
{
	struct pool *p = s->pool;
	uint64_t u = s->xpage, lo = s->addr + align_up(b->addr - s->addr, u);
	uint64_t hi = s->addr + (b->addr + b->size - s->addr) / u * u, n;
	struct block *mid = b;

	*next = b->next;
	if (hi <= lo)
		return 0;
	n = (hi - lo) / u < want ? (hi - lo) / u : want;
	hi = lo + n * u;
	mtc_bin_remove(p, b);
	if (lo > b->addr) {
		if (!(mid = mtc_split(m, p, b, lo - b->addr, FREE))) {
			mtc_bin_insert(p, b);
			return 0;
		}
		mtc_bin_insert(p, b);
	}
	if (mid->addr + mid->size > hi) {
		struct block *tail = mtc_split(m, p, mid, hi - mid->addr, FREE);

		if (!tail) { /* the first cut is undone: no two free neighbours */
			if (mid != b) {
				mtc_bin_remove(p, b);
				mtc_merge_next(p, b);
				mid = b;
			}
			mtc_bin_insert(p, mid);
			return 0;
		}
		mtc_bin_insert(p, tail);
	}
	if (s->lazy) {
		uint64_t i = (lo - s->addr) / s->page, end = (hi - s->addr) / s->page, j, k = 0;

		for (; (i = next_bit(s->bits, i, end, true)) < end; i = j) {
			j = next_bit(s->bits, i, end, false); /* [i, j) mapped */
			set_bits(s->bits, i, j, false);
			unmap_run(m, s, i, j - i, keep);
			s->mapped -= j - i;
			k += j - i;
		}
		s->unmapped -= (hi - lo) / s->page - k; /* a hole's granules are not counted */
	} else {
		unmap_run(m, s, (lo - s->addr) / s->page, n, keep);
		s->mapped -= n;
	}
	mid->state = HOLE;
	hole_insert(s, mid);
	if (mid->next && mid->next->state == HOLE) {
		hole_replace(s, mid->next, NULL);
		mtc_merge_next(p, mid);
	}
	if (mid->prev && mid->prev->state == HOLE) {
		hole_replace(s, mid, NULL);
		mid = mid->prev;
		mtc_merge_next(p, mid);
	}
	*next = mid->next;
	return n;
}

/* The mapped pages wholly inside free block b of lazy segment s are unmapped, as
 * unmap_free does, until *got reaches want; false when it did with some left. A block
 * left with none is not looked at again until it changes (`spare`): looking again at
 * every large free block at each move cost a real snapshot's replay 700 instructions
 * an operation. */
static bool unmap_block(struct mt_cache *m, struct segment *s, struct block *b, uint64_t want, uint64_t *got, bool keep,
			bool *synced)
{
	uint64_t hi = (b->addr + b->size - s->addr) / s->page, i, j;

	if (!b->spare)
		return true;
	for (i = align_up(b->addr - s->addr, s->page) / s->page; (i = next_bit(s->bits, i, hi, true)) < hi; i = j) {
		if (*got == want)
			return false;
		j = next_bit(s->bits, i, hi, false); /* [i, j) mapped */
		if (j - i > want - *got)
			j = i + want - *got;
		if (!*synced) {
			m->b.stream_sync(m->b.ctx, m->device, s->pool->stream);
			*synced = true;
		}
		set_bits(s->bits, i, j, false);
		unmap_run(m, s, i, j - i, keep);
		s->mapped -= j - i;
		s->unmapped += j - i;
		*got += j - i;
	}
	b->spare = false;
	return true;
}

/* Up to `want` mapped pages wholly inside free blocks of lazy segment s are unmapped, as
 * unmap_free does; the blocks stay as they are. Native's expandable range holds every
 * block of its pool, so its free ones are found in the pool's bins instead, from the bin
 * of a page up: walking all its blocks cost a real snapshot's replay 2,000 instructions
 * an operation, and its smaller free blocks another 1,000. Device and pool locks held. */
static uint64_t unmap_lazy(struct mt_cache *m, struct segment *s, uint64_t want, bool keep, bool *synced)
{
	struct pool *p = s->pool;
	uint64_t got = 0;
	bool all = true; /* every free page looked at */

	if (s->xpage)
		for (int i = mtc_next_bin(p, mtc_bin_of(s->page)); i >= 0 && all && s->mapped;
		     i = mtc_next_bin(p, (unsigned)i + 1))
			for (struct block *b = p->bins[i]; b && all; b = b->fnext)
				if (b->seg == s)
					all = unmap_block(m, s, b, want, &got, keep, synced);
	for (struct block *b = s->first; !s->xpage && b && all && s->mapped; b = b->next)
		if (b->state == FREE)
			all = unmap_block(m, s, b, want, &got, keep, synced);
	if (all) /* no free page is mapped until the next free */
		clear_spare(m, s);
	return got;
}

/* Free whole pages of VMM segments are unmapped, up to `want`, into the physical pool
 * (`keep`) or back to the device. Memory another stream freed may still be in use by its
 * queued work: that stream is synchronized first. A range left with nothing mapped gives
 * its addresses back. Device lock held. */
uint64_t mtc_unmap_pages(struct mt_cache *m, uint64_t want, bool keep, uint64_t stream)
{
	uint64_t got = 0;

	/* lazy segments: each pool's list of those a free marked (a free racing with the
	 * walk may be missed, as one just after it would be); walking every segment for
	 * them cost a real snapshot's replay 1,400 instructions an operation at its peak */
	for (struct pools *ps = m->all; ps && got < want && __atomic_load_n(&m->nspare, __ATOMIC_RELAXED);
	     ps = ps->next)
		for (int k = 0; k < 2 && got < want; k++) {
			struct pool *p = k ? &ps->large : &ps->small;
			bool synced = p->stream == stream;

			spin_lock(&p->lock);
			for (struct segment *s = p->spares, *sn; s && got < want; s = sn) {
				sn = s->spare_next;
				if (s->mapped)
					got += unmap_lazy(m, s, want - got, keep, &synced);
				else
					clear_spare(m, s);
			}
			spin_unlock(&p->lock);
		}
	/* expandable segments: their free blocks' whole pages become holes, only where native's
	 * would (its release), never to move pages (keep, memtap-vmm's alone): its ranges stay
	 * native's, lazy or not (a granule that does not divide a pool's page leaves that
	 * range mapped as native's), and its free granules were taken above */
	for (struct segment *s = m->segments, *sn; s && got < want && m->nexpandable; s = sn) {
		struct pool *p = s->pool;
		bool synced = p->stream == stream;

		sn = s->next;
		if (!s->xpage || keep)
			continue;
		spin_lock(&p->lock);
		for (struct block *b = s->first, *bn; b && got < want; b = bn) {
			bn = b->next;
			if (b->state != FREE)
				continue;
			if (!synced &&
			    align_up(b->addr - s->addr, s->xpage) + s->xpage <= b->addr + b->size - s->addr) {
				m->b.stream_sync(m->b.ctx, m->device, p->stream);
				synced = true;
			}
			got += unmap_free(m, s, b, want - got, keep, &bn);
		}
		if (s->first->state == HOLE && !s->first->next && p->expandable != s) {
			m->b.va_free(m->b.ctx, m->device, s->addr, s->size);
			mtc_drop_segment(m, s);
		}
		spin_unlock(&p->lock);
	}
	return got;
}

/* The segment a plain miss gets: PyTorch's sizes (2 MiB small, 20 MiB for mid-size
 * requests, the rest rounded to 2 MiB), or the request itself without caching. */
uint64_t mtc_segment_bytes(const struct mt_cache_config *c, const struct pool *p, uint64_t size)
{
	return !c->cache			       ? size
	       : p->small			       ? c->small_segment
	       : c->mid_segment && size < c->min_large ? c->mid_segment
						       : align_up(size, c->large_round);
}

int mtc_grow_plain(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
		   uint64_t requested, struct block **out)
{
	uint64_t bytes = mtc_segment_bytes(c, p, size), addr;
	struct segment *s;
	int err;

	if (mtc_over_limit(m, c, bytes))
		return MT_CACHE_OOM;
	if ((err = m->b.seg_alloc(m->b.ctx, m->device, bytes, &addr)) != 0)
		return mtc_backend_error(err);
	stat_add(&m->st.reserved, &m->st.peak_reserved, bytes);
	note(m, MT_CACHE_SEGMENT_ALLOC, addr, bytes, 0, p->stream, false);
	spin_lock(&p->lock);
	if ((s = mtc_new_segment(m, p, addr, bytes, 0)) != NULL)
		mtc_take(m, c, p, s->first, size, requested, false);
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

/* memtap-vmm: every page under the first `size` bytes of block b (taken out of the bins
 * and marked USED by the caller, so that nothing unmaps or merges it meanwhile) is mapped:
 * pooled physical pages first, then whole free pages unmapped anywhere on the device
 * (their stream synchronized), new ones only for the rest. A new page always fills a page
 * of a segment native would hold too, so what is reserved never passes native's. Pages
 * mapped before a failure stay mapped (free, for later). Device lock held, no pool lock. */
int mtc_map_lazy(struct mt_cache *m, const struct mt_cache_config *c, struct block *b, uint64_t size, uint64_t stream)
{
	struct segment *s = b->seg;
	struct pool *p = s->pool;
	uint64_t first = (b->addr - s->addr) / s->page, last = (b->addr + size - 1 - s->addr) / s->page, need = 0;
	int err = 0;
	bool moved = false;

	for (uint64_t i = first; i <= last; i = (i | 63) + 1) {
		uint64_t w = ~s->bits[i / 64] & (~0ull << (i % 64));

		if (last - (i & ~63ull) < 63)
			w &= ~(~0ull << (last % 64 + 1));
		need += (uint64_t)__builtin_popcountll(w);
	}
	if (m->nphys < need) {
		/* Free pages elsewhere move only at the peak so far and past 1/2048 (and two pages)
		 * over what is allocated: below, new pages cost no peak, or next to nothing, and
		 * blocks that take turns on the same memory from different segments do not move
		 * it back and forth on every call. */
		uint64_t r = __atomic_load_n(&m->st.reserved, __ATOMIC_RELAXED), live = size, top, room;

		for (struct pools *ps = m->all; ps; ps = ps->next) {
			spin_lock(&ps->small.lock);
			live += ps->small.allocated;
			spin_unlock(&ps->small.lock);
			spin_lock(&ps->large.lock);
			live += ps->large.allocated;
			spin_unlock(&ps->large.lock);
		}
		top = live + live / 2048 + 2 * s->page;
		if (top < __atomic_load_n(&m->st.peak_reserved, __ATOMIC_RELAXED))
			top = __atomic_load_n(&m->st.peak_reserved, __ATOMIC_RELAXED);
		if (c->limit && top > c->limit) /* never past the limit while pages could move */
			top = c->limit;
		room = top > r ? (top - r) / s->page : 0;

		if (need - m->nphys > room && (__atomic_load_n(&m->nspare, __ATOMIC_RELAXED) || m->nexpandable) &&
		    mtc_unmap_pages(m, need - m->nphys - room, true, stream))
			count(&m->st.stitched);
	}
	spin_lock(&p->lock);
	for (uint64_t i = first, j; !err && (i = next_bit(s->bits, i, last + 1, false)) <= last; i = j) {
		uint64_t n;

		j = next_bit(s->bits, i, last + 1, true); /* [i, j) unmapped */
		n = phys_get(m, c, s->page, &s->handles[i], j - i, &err);
		if (n) {
			int e = map_run(m, s, i, n);

			if (e) {
				err = e;
				break;
			}
			set_bits(s->bits, i, i + n, true);
			s->unmapped -= n;
		}
		j = i + n;
		/* the device is full before the margin is: the rest moves after all */
		if (err == MT_CACHE_OOM && !moved) {
			spin_unlock(&p->lock);
			moved = mtc_unmap_pages(m, last - j + 1, true, stream) > 0;
			spin_lock(&p->lock);
			if (moved)
				err = 0;
		}
	}
	spin_unlock(&p->lock);
	return err;
}

/* A lazy segment that is one free block goes back: its mapped pages, then its addresses.
 * Device and pool locks held. */
bool mtc_release_lazy(struct mt_cache *m, struct segment *s)
{
	struct block *b = s->first;

	if (!s->lazy || b->next || b->state != FREE)
		return false;
	mtc_bin_remove(s->pool, b);
	for (uint64_t i = 0, j, end = s->size / s->page; (i = next_bit(s->bits, i, end, true)) < end; i = j) {
		j = next_bit(s->bits, i, end, false);
		unmap_run(m, s, i, j - i, false);
	}
	m->b.va_free(m->b.ctx, m->device, s->addr, s->size);
	mtc_drop_segment(m, s);
	count(&m->st.released);
	return true;
}

/* memtap-vmm: a segment where native would make one, as an address range whose pages are
 * mapped only under the block handed out. */
int mtc_grow_lazy(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
		  uint64_t requested, uint64_t stream, struct block **out)
{
	uint64_t page = c->granule, bytes = align_up(mtc_segment_bytes(c, p, size), page), addr;
	struct segment *s;
	struct block *b;
	int err;

	if ((err = m->b.va_reserve(m->b.ctx, m->device, bytes, &addr)) != 0)
		return mtc_backend_error(err);
	spin_lock(&p->lock);
	if ((s = mtc_new_segment(m, p, addr, bytes, page)) != NULL) {
		s->lazy = true;
		s->unmapped = bytes / page;
		s->first->state = USED; /* not FREE until mapped: nothing unmaps or merges it */
	}
	spin_unlock(&p->lock);
	if (!s) {
		m->b.va_free(m->b.ctx, m->device, addr, bytes);
		return ENOMEM;
	}
	b = s->first;
	err = mtc_map_lazy(m, c, b, size, stream);
	spin_lock(&p->lock);
	b->state = FREE;
	if (err) {
		mtc_bin_insert(p, b);
		mtc_release_lazy(m, s);
	} else {
		mtc_take(m, c, p, b, size, requested, false);
		mark_spare(m, s);
		*out = b;
	}
	spin_unlock(&p->lock);
	return err;
}

/* PyTorch's expandable segments: one address range per pool, pages (2 MiB small, 20 MiB
 * large) mapped at the lowest hole where they extend a free block far enough. With stitch
 * (memtap-vmm) the range is also lazy: native's pages only turn holes into free blocks,
 * and the block handed out gets its granules mapped, as mtc_map_lazy maps any block's. */
int mtc_grow_expandable(struct mt_cache *m, const struct mt_cache_config *c, struct pool *p, uint64_t size,
			uint64_t requested, uint64_t stream, struct block **out)
{
	struct segment *s = p->expandable;
	uint64_t page;
	int err;

	if (!s) {
		uint64_t addr, span;
		bool lazy;

		page = p->small ? c->small_segment : c->mid_segment ? c->mid_segment : c->large_round;
		lazy = c->stitch && page % c->granule == 0;
		span = align_up(c->limit ? c->limit + c->limit / 8 : 256ull << 30, page);
		/* a device whose address space is smaller (simgpu's: four times its memory) gets
		 * the largest half that fits, the same for native and memtap-vmm */
		while ((err = m->b.va_reserve(m->b.ctx, m->device, span, &addr)) != 0 && span > page)
			span = align_up(span / 2, page);
		if (err)
			return mtc_backend_error(err);
		spin_lock(&p->lock);
		s = p->expandable = mtc_new_segment(m, p, addr, span, lazy ? c->granule : page);
		if (s) {
			s->xpage = page;
			s->lazy = lazy;
			s->holes = s->first;
		}
		m->nexpandable += s != NULL;
		spin_unlock(&p->lock);
		if (!s) {
			m->b.va_free(m->b.ctx, m->device, addr, span);
			return ENOMEM;
		}
	}
	page = s->xpage;
	err = MT_CACHE_OOM; /* no hole is large enough */
	spin_lock(&p->lock);
	for (struct block *h = s->holes; h; h = h->fnext) {
		uint64_t have = h->prev && h->prev->state == FREE ? h->prev->size : 0;
		uint64_t n = size > have ? (size - have + page - 1) / page : 1;
		struct block *b;

		if (n * page > h->size)
			continue;
		if ((err = map_pages(m, c, s, h, n, &b)) != 0)
			break;
		if (s->lazy) {
			mtc_bin_remove(p, b);
			b->state = USED; /* neither unmapped nor merged while its granules are mapped */
			spin_unlock(&p->lock);
			err = mtc_map_lazy(m, c, b, size, stream);
			spin_lock(&p->lock);
			if (err) {
				mtc_make_free(m, p, b);
				break;
			}
			b->state = FREE;
			if (b->next && b->next->state == FREE) { /* freed meanwhile by another thread */
				mtc_bin_remove(p, b->next);
				mtc_merge_next(p, b);
			}
			mtc_take(m, c, p, b, size, requested, false);
			mark_spare(m, s); /* what split off may hold mapped granules */
		} else {
			mtc_take(m, c, p, b, size, requested, true);
		}
		*out = b;
		break;
	}
	spin_unlock(&p->lock);
	return err;
}
