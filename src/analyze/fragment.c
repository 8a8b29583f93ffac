/* Fragmentation: one pass over the events keeps each device's segments in address
 * order and the live blocks inside them; a measurement sorts the device's blocks and
 * walks them against its segments to find the gaps. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/fragment.h"
#include "core/array.h"
#include "reader/progress.h"

struct seg {
	uint64_t addr, size;
	uint32_t stack;
	bool mapped;
	bool pool; /* a private pool's (a snapshot's segment_pool_id) */
};

struct dev {
	struct seg *segs; /* by address, never overlapping */
	size_t n, cap;
	uint64_t reserved, allocated, requested;
	uint64_t pools; /* ... of the reserved, in private pools */
	bool known;
};

struct block {
	uint64_t addr, size, requested;
	uint8_t device;
	bool live;
};

struct pass {
	const struct mt_trace *t;
	struct mt_fragment *f;
	const struct mt_replay *peaks; /* each device's peak event */
	uint64_t start, span, bucket;  /* the timeline's samples */
	uint64_t last;		       /* the time of the event stepped last */
	struct dev *dev;
	struct block *blocks;
	struct mt_slots slots;
	struct mt_map by_addr; /* block address -> index + 1 */
	struct mt_frag_block *scratch;
	size_t cap_scratch;
};

/* The index of the last segment starting at or below addr, or n when none. */
static size_t seg_at(const struct dev *d, uint64_t addr)
{
	size_t lo = 0, hi = d->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->segs[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? lo - 1 : d->n;
}

static bool inside(const struct dev *d, uint64_t addr)
{
	size_t i = seg_at(d, addr);
	return i < d->n && addr - d->segs[i].addr < d->segs[i].size;
}

static int seg_insert(struct dev *d, size_t at, struct seg s)
{
	if (mt_grow((void **)&d->segs, &d->cap, d->n, sizeof *d->segs))
		return ENOMEM;
	memmove(&d->segs[at + 1], &d->segs[at], (d->n - at) * sizeof *d->segs);
	d->segs[at] = s;
	d->n++;
	return 0;
}

static void seg_remove(struct dev *d, size_t at)
{
	memmove(&d->segs[at], &d->segs[at + 1], (d->n - at - 1) * sizeof *d->segs);
	d->n--;
}

static int segment_alloc(struct dev *d, const struct mt_event *e)
{
	struct seg s = {.addr = e->addr,
			.size = e->size,
			.stack = e->stack,
			.mapped = e->flags & MT_SEG_MAPPED,
			.pool = e->aux2 != 0};
	size_t i = seg_at(d, e->addr), at = i == d->n ? 0 : i + 1;

	if (!e->size || (i < d->n && e->addr - d->segs[i].addr < d->segs[i].size))
		return 0; /* empty, or already reserved: a malformed trace */
	if (at < d->n && d->segs[at].addr < e->addr + e->size)
		return 0;
	d->known = true;
	d->reserved += e->size;
	d->pools += s.pool ? e->size : 0;
	if (s.mapped && i < d->n && d->segs[i].mapped && d->segs[i].pool == s.pool &&
	    d->segs[i].addr + d->segs[i].size == s.addr) {
		d->segs[i].size += s.size; /* joins the pages before it */
		at = i;
	} else if (seg_insert(d, at, s)) {
		return ENOMEM;
	}
	if (s.mapped && at + 1 < d->n && d->segs[at + 1].mapped && d->segs[at + 1].pool == s.pool &&
	    d->segs[at].addr + d->segs[at].size == d->segs[at + 1].addr) {
		d->segs[at].size += d->segs[at + 1].size; /* and the pages after it */
		seg_remove(d, at + 1);
	}
	return 0;
}

/* Frees [addr, addr + size): a whole segment, or pages of an expandable one. */
static int segment_free(struct dev *d, const struct mt_event *e)
{
	size_t i = seg_at(d, e->addr);
	struct seg *s = i < d->n ? &d->segs[i] : NULL;
	uint64_t end = e->addr + e->size;

	if (!s || e->addr - s->addr >= s->size)
		return 0;
	if (!s->mapped || (e->addr == s->addr && e->size >= s->size)) {
		d->reserved -= s->size;
		d->pools -= s->pool ? s->size : 0;
		seg_remove(d, i);
		return 0;
	}
	if (end > s->addr + s->size)
		end = s->addr + s->size;
	d->reserved -= end - e->addr;
	d->pools -= s->pool ? end - e->addr : 0;
	if (e->addr == s->addr) {
		s->size -= end - e->addr;
		s->addr = end;
	} else if (end == s->addr + s->size) {
		s->size = e->addr - s->addr;
	} else { /* a hole in the middle: two segments */
		struct seg after = *s;
		after.addr = end;
		after.size = s->addr + s->size - end;
		s->size = e->addr - s->addr;
		return seg_insert(d, i + 1, after);
	}
	return 0;
}

static int block_alloc(struct pass *p, const struct mt_event *e)
{
	struct dev *d = &p->dev[e->device];
	uint64_t exact = mt_api(e) == MT_API_BLOCK ? e->aux2 : 0;
	uint64_t size = exact ? exact : (e->size + MT_FRAG_GRANULE - 1) / MT_FRAG_GRANULE * MT_FRAG_GRANULE;
	size_t i;

	if (!d->n || !inside(d, e->addr))
		return 0; /* not carved from a segment */
	if (!exact)
		p->f->estimated = true;
	if (!size)
		size = MT_FRAG_GRANULE;
	if ((i = mt_slot_take(&p->slots, (void **)&p->blocks, sizeof *p->blocks)) == SIZE_MAX)
		return ENOMEM;
	p->blocks[i] =
	    (struct block){.addr = e->addr, .size = size, .requested = e->size, .device = e->device, .live = true};
	d->allocated += size;
	d->requested += e->size;
	return mt_map_put(&p->by_addr, e->addr, i + 1);
}

static void block_free(struct pass *p, const struct mt_event *e)
{
	uint64_t k;
	struct block *b;

	if (!mt_map_del(&p->by_addr, e->addr, &k))
		return;
	b = &p->blocks[k - 1];
	p->dev[b->device].allocated -= b->size;
	p->dev[b->device].requested -= b->requested;
	b->live = false;
	mt_slot_give(&p->slots, k - 1);
}

static int by_addr(const void *a, const void *b)
{
	const struct mt_frag_block *x = a, *y = b;
	return (x->addr > y->addr) - (x->addr < y->addr);
}

/* The device's state now; with out, also its segments and blocks. */
static int measure(struct pass *p, int device, uint64_t time, struct mt_frag_state *s, struct mt_frag_device *out)
{
	const struct dev *d = &p->dev[device];
	size_t n = 0, b = 0;

	*s = (struct mt_frag_state){.time = time,
				    .segments = d->n,
				    .reserved = d->reserved,
				    .allocated = d->allocated,
				    .requested = d->requested,
				    .pools = d->pools};
	for (size_t i = 0; i < p->slots.n; i++) {
		if (!p->blocks[i].live || p->blocks[i].device != device)
			continue;
		if (n == p->cap_scratch) {
			size_t cap = n ? 2 * n : 1024;
			struct mt_frag_block *v = realloc(p->scratch, cap * sizeof *v);
			if (!v)
				return ENOMEM;
			p->scratch = v;
			p->cap_scratch = cap;
		}
		p->scratch[n++] = (struct mt_frag_block){p->blocks[i].addr, p->blocks[i].size};
	}
	if (n > 1)
		qsort(p->scratch, n, sizeof *p->scratch, by_addr);
	if (out) {
		out->segments = calloc(d->n ? d->n : 1, sizeof *out->segments);
		out->blocks = malloc((n ? n : 1) * sizeof *out->blocks);
		if (!out->segments || !out->blocks)
			return ENOMEM;
		if (n)
			memcpy(out->blocks, p->scratch, n * sizeof *out->blocks);
		out->nblocks = n;
		out->nsegments = d->n;
	}
	for (size_t i = 0; i < d->n; i++) {
		const struct seg *g = &d->segs[i];
		uint64_t at = g->addr, end = g->addr + g->size, largest = 0, allocated = 0;
		uint32_t count = 0;
		while (b < n && p->scratch[b].addr < g->addr)
			b++;
		for (; b < n && p->scratch[b].addr < end; b++) {
			const struct mt_frag_block *k = &p->scratch[b];
			if (k->addr > at && k->addr - at > largest)
				largest = k->addr - at;
			if (k->addr + k->size > at)
				at = k->addr + k->size;
			allocated += k->size;
			count++;
		}
		if (end > at && end - at > largest)
			largest = end - at;
		if (largest > s->largest_free)
			s->largest_free = largest;
		if (out)
			out->segments[i] = (struct mt_frag_segment){.addr = g->addr,
								    .size = g->size,
								    .allocated = allocated,
								    .largest_free = largest,
								    .blocks = count,
								    .stack = g->stack};
	}
	return 0;
}

/* One moment of device d in its timeline. */
static int sample(struct pass *p, int d, uint64_t time)
{
	struct mt_frag_device *fd = &p->f->dev[d];
	struct mt_frag_state *v;

	if (!(fd->ntimeline & (fd->ntimeline + 1))) { /* 0, 1, 3, 7...: grow */
		v = realloc(fd->timeline, (2 * fd->ntimeline + 1) * sizeof *v);
		if (!v)
			return ENOMEM;
		fd->timeline = v;
	}
	int r = measure(p, d, time, &fd->timeline[fd->ntimeline], NULL);
	if (!r)
		fd->ntimeline++;
	return r;
}

static int sample_all(struct pass *p, uint64_t time)
{
	int r = 0;

	for (int d = 0; d < MT_MAX_DEVICES && !r; d++)
		if (p->dev[d].known)
			r = sample(p, d, time);
	return r;
}

static int oom(struct pass *p, const struct mt_event *e, size_t i)
{
	struct mt_fragment *f = p->f;
	struct mt_frag_oom *o;
	int r = 0;

	if (mt_grow((void **)&f->ooms, &f->cap_ooms, f->nooms, sizeof *f->ooms))
		return ENOMEM;
	o = &f->ooms[f->nooms++];
	*o = (struct mt_frag_oom){.event = i, .fits = -1};
	if (e->device == MT_NO_DEVICE || !p->dev[e->device].known || e->error != 2 /* CUDA_ERROR_OUT_OF_MEMORY */)
		return 0;
	if ((r = measure(p, e->device, e->time, &o->state, NULL)))
		return r;
	/* more was free than asked for, in the driver and inside segments together, but no
	 * free block (nor the driver) had it */
	o->fits = e->size <= o->state.reserved - o->state.allocated + e->aux && e->size > o->state.largest_free &&
		  e->size > e->aux;
	return 0;
}

static int apply(struct pass *p, const struct mt_event *e, size_t i)
{
	if (e->error && e->kind != MT_EV_ALLOC_FAILED)
		return 0;
	switch (e->kind) {
	case MT_EV_SEGMENT_ALLOC:
		return e->device == MT_NO_DEVICE ? 0 : segment_alloc(&p->dev[e->device], e);
	case MT_EV_SEGMENT_FREE:
		return e->device == MT_NO_DEVICE ? 0 : segment_free(&p->dev[e->device], e);
	case MT_EV_ALLOC:
		return e->device == MT_NO_DEVICE ? 0 : block_alloc(p, e);
	case MT_EV_FREE:
		block_free(p, e);
		return 0;
	case MT_EV_ALLOC_FAILED:
		return oom(p, e, i);
	default:
		return 0;
	}
}

int mt_fragment_start(struct mt_fragment_scan **out, struct mt_fragment *f, const struct mt_trace *t,
		      const struct mt_replay *peaks, bool segments)
{
	struct pass *p = calloc(1, sizeof *p);

	memset(f, 0, sizeof *f);
	*out = (struct mt_fragment_scan *)p;
	if (!p || !(f->dev = calloc(MT_MAX_DEVICES, sizeof *f->dev)))
		return ENOMEM;
	p->t = t;
	p->f = f;
	p->peaks = peaks;
	p->start = mt_trace_start(t);
	p->span = t->nevents ? mt_trace_end(t) - p->start : 0;
	if (segments && !(p->dev = calloc(MT_MAX_DEVICES, sizeof *p->dev)))
		return ENOMEM;
	return 0;
}

int mt_fragment_step(struct mt_fragment_scan *scan, const struct mt_event *e, size_t i)
{
	struct pass *p = (struct pass *)scan;
	uint64_t b = e->time > p->start && p->span ? (e->time - p->start) * (MT_FRAG_SAMPLES - 1) / p->span : 0;
	uint64_t last = p->last;
	int r = 0;

	p->last = e->time;
	if (!p->dev) /* no segments: nothing to know */
		return 0;
	if (b > p->bucket && i) {
		r = sample_all(p, last);
		p->bucket = b;
	}
	if (!r)
		r = apply(p, e, i);
	if (!r && e->device != MT_NO_DEVICE && p->dev[e->device].known && p->peaks->dev[e->device].peak &&
	    p->peaks->dev[e->device].peak_event == i) {
		r = measure(p, e->device, e->time, &p->f->dev[e->device].at_peak, &p->f->dev[e->device]);
		/* the peak is a moment of the timeline too: a bucket's sample is its end, and a
		   peak shorter than a bucket would be missing from it */
		if (!r)
			r = sample(p, e->device, e->time);
	}
	return r;
}

int mt_fragment_map(struct mt_fragment_scan *scan, int device, struct mt_frag_device *out)
{
	struct pass *p = (struct pass *)scan;
	struct mt_frag_state s;

	memset(out, 0, sizeof *out);
	if (!p || !p->dev || device < 0 || device >= MT_MAX_DEVICES || !p->dev[device].known)
		return 0;
	return measure(p, device, 0, &s, out);
}

int mt_fragment_finish(struct mt_fragment_scan *scan, int r)
{
	struct pass *p = (struct pass *)scan;
	const struct mt_trace *t;

	if (!p)
		return r ? r : ENOMEM;
	t = p->t;
	for (int d = 0; d < MT_MAX_DEVICES && !r && p->dev; d++) {
		p->f->dev[d].known = p->dev[d].known;
		p->f->known |= p->dev[d].known;
		if (p->dev[d].known)
			r = measure(p, d, mt_trace_end(t), &p->f->dev[d].at_end, NULL);
	}
	if (!r && t->nevents && p->dev)
		r = sample_all(p, mt_trace_end(t));
	for (int d = 0; d < MT_MAX_DEVICES && p->dev; d++)
		free(p->dev[d].segs);
	free(p->dev);
	free(p->blocks);
	mt_slots_free(&p->slots);
	free(p->scratch);
	mt_map_free(&p->by_addr);
	free(p);
	return r;
}

int mt_fragment_build(struct mt_fragment *f, const struct mt_trace *t, const struct mt_replay *peaks, bool segments)
{
	struct mt_fragment_scan *s;
	int r = mt_fragment_start(&s, f, t, peaks, segments);
	struct mt_walk *w = r || !segments ? NULL : mt_walk_start(t);
	const struct mt_event *batch;
	size_t i = 0, n;

	r = r || !segments || w ? r : ENOMEM;
	while (!r && w && (n = mt_walk_next(w, &batch)) != 0)
		for (size_t k = 0; k < n && !r; k++, i++) {
			mt_progress("fragmentation", i, t->nevents);
			r = mt_fragment_step(s, &batch[k], i);
		}
	mt_walk_end(w);
	return mt_fragment_finish(s, r);
}

void mt_fragment_free(struct mt_fragment *f)
{
	for (int d = 0; d < MT_MAX_DEVICES && f->dev; d++) {
		free(f->dev[d].segments);
		free(f->dev[d].blocks);
		free(f->dev[d].timeline);
	}
	free(f->dev);
	free(f->ooms);
	memset(f, 0, sizeof *f);
}

const struct mt_frag_oom *mt_fragment_oom(const struct mt_fragment *f, size_t event)
{
	size_t lo = 0, hi = f->nooms;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (f->ooms[mid].event < event)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < f->nooms && f->ooms[lo].event == event ? &f->ooms[lo] : NULL;
}
