/* The simulated device under the caching-allocator engine (simulate.h), and the
 * sequences `memtap replay` runs through it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>

#include "analyze/simulate.h"
#include "core/array.h"
#include "core/map.h"
#include "core/ordered.h"

/* The job's segments as the replay takes them: by size, each size's in the trace's order
 * (a cursor past those taken), and the ranges the replay holds now, to take none that
 * overlaps one (by end: the first held range ending past an address). */
struct mt_sim_places {
	const struct mt_sim_place *place;
	size_t n;
	uint32_t *order; /* place indices by (size, index) */
	size_t *next;	 /* per place, read at its size's first: the size's first not yet taken */
	uint8_t *taken;
	uint64_t top;		/* the highest end of the job's segments */
	bool overlap;		/* two of the job's segments overlap (an address used again) */
	struct mt_ordered ends; /* of the held ranges, where two overlap */
	struct mt_map held;	/* end -> index + 1 of the place held there, the same */
};

struct keyed {
	uint64_t key; /* a size, or an address */
	uint32_t index;
};

static int by_key(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static void places_free(struct mt_sim_places *ps)
{
	if (!ps)
		return;
	mt_ordered_free(&ps->ends);
	mt_map_free(&ps->held);
	free(ps->order);
	free(ps->next);
	free(ps->taken);
	free(ps);
}

static struct mt_sim_places *places_new(const struct mt_sim_place *place, size_t n)
{
	struct mt_sim_places *ps = calloc(1, sizeof *ps);
	struct keyed *k = malloc((n + 1) * sizeof *k);

	if (!ps || !k || !(ps->order = malloc((n + 1) * sizeof *ps->order)) ||
	    !(ps->next = malloc((n + 1) * sizeof *ps->next)) || !(ps->taken = calloc(n + 1, 1))) {
		places_free(ps);
		free(k);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) /* by address: does one overlap the next? */
		k[i] = (struct keyed){place[i].addr, (uint32_t)i};
	qsort(k, n, sizeof *k, by_key);
	for (size_t i = 0; i < n; i++) {
		const struct mt_sim_place *p = &place[k[i].index];
		ps->overlap |= i + 1 < n && p->addr + p->size > place[k[i + 1].index].addr;
		ps->top = p->addr + p->size > ps->top ? p->addr + p->size : ps->top;
	}
	for (size_t i = 0; i < n; i++)
		k[i] = (struct keyed){place[i].size, (uint32_t)i};
	qsort(k, n, sizeof *k, by_key);
	for (size_t i = 0; i < n; i++)
		ps->order[i] = k[i].index, ps->next[i] = i;
	free(k);
	ps->place = place;
	ps->n = n;
	return ps;
}

/* Whether [a, a + size) overlaps a range the replay holds. */
static bool held_over(const struct mt_sim_places *ps, uint64_t a, uint64_t size)
{
	uint64_t end, k;

	return mt_ordered_next(&ps->ends, a + 1, &end) && mt_map_get(&ps->held, end, &k) &&
	       ps->place[k - 1].addr < a + size;
}

static uint64_t round_page(uint64_t bytes)
{
	return (bytes + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
}

/* An address for a segment of `size`: the job's first segment of that size not yet taken
 * that overlaps none the replay holds, else a new one from the counter, which starts past
 * all of the job's. */
static uint64_t address(struct mt_sim_device *d, uint64_t size)
{
	struct mt_sim_places *ps = d->places;
	uint64_t addr = d->next_addr;
	size_t lo = 0, hi = ps ? ps->n : 0;

	while (lo < hi) { /* the first of this size in `order` */
		size_t mid = (lo + hi) / 2;
		if (ps->place[ps->order[mid]].size < size)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (ps && lo < ps->n && ps->place[ps->order[lo]].size == size) {
		size_t first = lo, k = ps->next[first];
		while (k < ps->n && ps->place[ps->order[k]].size == size && ps->taken[ps->order[k]])
			k++;
		ps->next[first] = k;
		for (; k < ps->n && ps->place[ps->order[k]].size == size; k++) {
			const struct mt_sim_place *p = &ps->place[ps->order[k]];
			if (ps->taken[ps->order[k]] || (ps->overlap && held_over(ps, p->addr, size)))
				continue;
			if (ps->overlap && (mt_ordered_add(&ps->ends, p->addr + size) ||
					    mt_map_put(&ps->held, p->addr + size, ps->order[k] + 1ull))) {
				mt_ordered_del(&ps->ends, p->addr + size);
				break; /* out of memory: an address of its own */
			}
			ps->taken[ps->order[k]] = 1;
			return p->addr;
		}
	}
	d->next_addr += round_page(size);
	return addr;
}

static void give_address(struct mt_sim_device *d, uint64_t addr, uint64_t size)
{
	struct mt_sim_places *ps = d->places;

	if (ps && ps->overlap && mt_map_del(&ps->held, addr + size, NULL))
		mt_ordered_del(&ps->ends, addr + size);
}

static int sim_seg_alloc(void *ctx, int device, uint64_t size, uint64_t *addr)
{
	struct mt_sim_device *d = ctx;

	(void)device;
	if (d->capacity && d->used + size > d->capacity)
		return MT_CACHE_OOM;
	d->used += size;
	*addr = address(d, size);
	return 0;
}

static void sim_seg_free(void *ctx, int device, uint64_t addr, uint64_t size)
{
	(void)device;
	((struct mt_sim_device *)ctx)->used -= size;
	give_address(ctx, addr, size);
}

static int sim_va_reserve(void *ctx, int device, uint64_t size, uint64_t *addr)
{
	(void)device;
	*addr = address(ctx, size);
	return 0;
}

static void sim_va_free(void *ctx, int device, uint64_t addr, uint64_t size)
{
	(void)device;
	give_address(ctx, addr, size);
}

/* A physical page's handle carries its size in MiB in its low 24 bits, so a release needs
 * no look-up (a table of handles was a fifth of replay's time on large blocks). */
#define SIZE_BITS 24

static int sim_phys_create(void *ctx, int device, uint64_t size, uint64_t *handle)
{
	struct mt_sim_device *d = ctx;

	(void)device;
	if (size % (1u << 20) || size >> (20 + SIZE_BITS))
		return EINVAL;
	if (d->capacity && d->used + size > d->capacity)
		return MT_CACHE_OOM;
	*handle = ++d->next_handle << SIZE_BITS | size >> 20;
	d->used += size;
	return 0;
}

static void sim_phys_release(void *ctx, int device, uint64_t handle)
{
	(void)device;
	((struct mt_sim_device *)ctx)->used -= (handle & ((1u << SIZE_BITS) - 1)) << 20;
}

static int sim_map(void *ctx, int device, uint64_t addr, uint64_t page, const uint64_t *handles, uint64_t n)
{
	(void)ctx, (void)device, (void)addr, (void)page, (void)handles, (void)n;
	return 0;
}

static void sim_unmap(void *ctx, int device, uint64_t addr, uint64_t page, uint64_t n)
{
	(void)ctx, (void)device, (void)addr, (void)page, (void)n;
}

static uint64_t sim_event_record(void *ctx, int device, uint64_t stream)
{
	(void)ctx, (void)device, (void)stream;
	return 1;
}

static bool sim_event_done(void *ctx, uint64_t event)
{
	(void)ctx, (void)event;
	return true;
}

static void sim_stream_sync(void *ctx, int device, uint64_t stream)
{
	(void)ctx, (void)device, (void)stream;
}

/* The engine's own tables, as a job's backend maps them: fresh zero pages, touched only
 * where used. From the heap, a second run's calloc of the 1 MiB of page handles for an
 * expandable range cleared it all first: 180 instructions an operation on a log of 3,000. */
#if defined(__SANITIZE_ADDRESS__)
enum { SIM_MAP_BYTES = 1 << 30 }; /* from the heap, where AddressSanitizer watches them */
#else
enum { SIM_MAP_BYTES = 64 * 1024 };
#endif

static void *sim_mem_alloc(void *ctx, size_t bytes)
{
	void *p;

	(void)ctx;
	if (bytes < SIM_MAP_BYTES)
		return calloc(1, bytes);
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void sim_mem_free(void *ctx, void *p, size_t bytes)
{
	(void)ctx;
	if (bytes < SIM_MAP_BYTES)
		free(p);
	else if (p)
		munmap(p, bytes);
}

void mt_sim_device_init(struct mt_sim_device *d, uint64_t capacity, struct mt_cache_backend *b)
{
	*d = (struct mt_sim_device){.capacity = capacity, .next_addr = 1ull << 40};
	*b = (struct mt_cache_backend){
	    .ctx = d,
	    .seg_alloc = sim_seg_alloc,
	    .seg_free = sim_seg_free,
	    .va_reserve = sim_va_reserve,
	    .va_free = sim_va_free,
	    .phys_create = sim_phys_create,
	    .phys_release = sim_phys_release,
	    .map = sim_map,
	    .unmap = sim_unmap,
	    .event_record = sim_event_record,
	    .event_done = sim_event_done,
	    .stream_sync = sim_stream_sync,
	    .mem_alloc = sim_mem_alloc,
	    .mem_free = sim_mem_free,
	};
}

/* ---- the sequence from a trace ---- */

static bool is_device_alloc(const struct mt_event *e)
{
	return e->kind == MT_EV_ALLOC && mt_api(e) != MT_API_MANAGED && mt_api(e) != MT_API_HOST;
}

void mt_sim_job_conf(const struct mt_trace *t, char *out, size_t n)
{
	char v[64], key[64];
	long long split = 0, div = -1, d;
	size_t k = 0;

	out[0] = '\0';
	if (mt_trace_info(t, "torch.expandable_segments", v, sizeof v) && !strcmp(v, "True"))
		k += (size_t)snprintf(out + k, n - k, ",expandable_segments:True");
	if (mt_trace_info(t, "torch.max_split_size", v, sizeof v) && (split = atoll(v)) > 0 && split < 1ll << 50)
		k += (size_t)snprintf(out + k, n - k, ",max_split_size_mb:%lld", split >> 20);
	if (mt_trace_info(t, "torch.roundup_power2_divisions", v, sizeof v))
		div = atoll(v);					   /* one value (before PyTorch 2.1) */
	for (long long i = 1; i <= 1 << 15 && div != -2; i *= 2) { /* per interval: one value for all */
		snprintf(key, sizeof key, "torch.roundup_power2_divisions.%lld", i);
		if (!mt_trace_info(t, key, v, sizeof v))
			continue;
		d = atoll(v);
		div = div == -1 || div == d ? d : -2; /* -2: the intervals differ */
	}
	if (div > 1 && k < n)
		k += (size_t)snprintf(out + k, n - k, ",roundup_power2_divisions:%lld", div);
	if (out[0]) /* the leading comma goes */
		memmove(out, out + 1, strlen(out));
}

void mt_sim_memtap_conf(const struct mt_trace *t, char *out, size_t n)
{
	static const char head[] = "memtap.allocator ";
	const char *s, *start;

	struct mt_walk *w = mt_walk_start(t);
	const struct mt_event *batch;
	bool found = false;
	size_t k;

	out[0] = '\0';
	while (w && !found && (k = mt_walk_next(w, &batch)) != 0)
		for (const struct mt_event *e = batch; e < batch + k && !found; e++)
			if (e->kind == MT_EV_NVTX_MARK && (s = mt_trace_string(t, e->aux)) &&
			    !strncmp(s, head, sizeof head - 1) && (start = strstr(s, " start "))) {
				snprintf(out, n, "%s", start + strlen(" start "));
				found = true; /* the first, even with nothing after " start " */
			}
	mt_walk_end(w);
}

int mt_sim_first_device(const struct mt_trace *t)
{
	struct mt_walk *w = mt_walk_start(t);
	const struct mt_event *batch;
	int first = -1;
	size_t k;

	while (w && (k = mt_walk_next(w, &batch)) != 0)
		for (const struct mt_event *e = batch; e < batch + k; e++)
			if (is_device_alloc(e) && e->device != MT_NO_DEVICE && (first < 0 || e->device < first))
				first = e->device;
	mt_walk_end(w);
	return first < 0 ? 0 : first;
}

/* The ops of a trace's device, made one at a time as a walk reads its events (or an
 * input's own ops, given in turn): what a walk holds is what is live, not the trace. */
struct source {
	const struct mt_sim_input *in;
	struct mt_walk *w;	   /* NULL: in->ops */
	struct mt_map live, segs;  /* address -> its allocation's slot; a segment's address -> size */
	size_t *spare, nspare;	   /* slots free again, for the next allocations */
	size_t cap_spare, slots;   /* spare's room; slots handed out */
	size_t given;		   /* ops given so far */
	size_t cap_places;	   /* note->places' room */
	bool release;		   /* the last op given was a release */
	bool ended, then_given;	   /* the walk is over; the op after it given */
	uint64_t reserved;	   /* the job's segments held now */
	struct mt_sim_input *note; /* the input pass: the job's segments noted here (places) */
	int err;
};

static int source_start(struct source *s, const struct mt_sim_input *in, struct mt_sim_input *note)
{
	*s = (struct source){.in = in, .note = note};
	if (in->trace && !(s->w = mt_walk_start(in->trace)))
		return s->err = ENOMEM;
	return 0;
}

static void source_end(struct source *s)
{
	mt_walk_end(s->w);
	mt_map_free(&s->live);
	mt_map_free(&s->segs);
	free(s->spare);
}

/* Event e as an op in *op: true if it is one. */
static bool op_of(struct source *s, const struct mt_event *e, struct mt_sim_op *op)
{
	const struct mt_sim_input *in = s->in;
	struct mt_sim_input *note = s->note;
	/* an expandable segment's maps and unmaps are the exact pages each changed (the reader
	   makes them so), not one address per range */
	bool pages = (e->flags & MT_SEG_MAPPED) && e->device == in->device;
	uint64_t v;

	*op = (struct mt_sim_op){0};
	if (e->kind == MT_EV_SEGMENT_ALLOC && e->device == in->device) {
		s->reserved += e->size;
		s->err = pages ? 0 : mt_map_put(&s->segs, e->addr, e->size);
		/* the job's segments, where a counter past them cannot wrap: none at 0, the engine's
		 * empty key, nor past 2^56 */
		if (!s->err && note && !pages && in->releases_are_frees && e->addr >= (2u << 20) &&
		    e->addr + e->size <= (1ull << 56) &&
		    !(s->err = mt_grow((void **)&note->places, &s->cap_places, note->nplaces, sizeof *note->places)))
			note->places[note->nplaces++] = (struct mt_sim_place){e->addr, e->size};
		return false;
	}
	if (e->kind == MT_EV_SEGMENT_FREE && (pages || mt_map_del(&s->segs, e->addr, &v))) {
		s->reserved -= pages ? e->size : v;
		if (!in->releases_are_frees || !in->blocks || s->release)
			return false;
		op->release = true; /* one per run of segment frees */
	} else if (is_device_alloc(e) && e->device == in->device && (mt_api(e) == MT_API_BLOCK) == in->blocks) {
		bool had; /* an address made again while live (a damaged trace): the later allocation
			     takes the slot, and the earlier stays allocated, never freed */
		uint64_t *slot = mt_map_at(&s->live, e->addr, &had);
		if (!slot) {
			s->err = ENOMEM;
			return false;
		}
		if (!had)
			*slot = s->nspare ? s->spare[--s->nspare] : s->slots++;
		op->size = e->size;
		op->stream = e->aux;
		op->slot = *slot;
	} else if (e->kind == MT_EV_FREE && mt_map_del(&s->live, e->addr, &v)) {
		op->free = true;
		op->slot = v;
		if ((s->err = mt_grow((void **)&s->spare, &s->cap_spare, s->nspare, sizeof *s->spare)))
			return false;
		s->spare[s->nspare++] = v;
	} else {
		return false;
	}
	return true;
}

/* The next op into *op: false at the end, or on an error (s->err). */
static bool next_op(struct source *s, struct mt_sim_op *op)
{
	const struct mt_sim_input *in = s->in;
	const struct mt_event *e;

	if (!in->trace) {
		if (s->given == in->nops)
			return false;
		*op = in->ops[s->given];
	} else {
		for (;;) {
			if (!s->ended && (e = mt_walk_one(s->w)) != NULL) {
				if (op_of(s, e, op) || s->err)
					break;
				continue;
			}
			s->ended = true; /* after the trace's own ops: the caller's, once */
			if (!in->then_too || s->then_given)
				return false;
			s->then_given = true;
			*op = in->then;
			break;
		}
		if (s->err)
			return false;
	}
	s->release = op->release;
	s->given++;
	return true;
}

/* Up to n ops into ops[]: how many (0: the end, or an error in s->err). */
static size_t next_ops(struct source *s, struct mt_sim_op *ops, size_t n)
{
	size_t k = 0;

	while (k < n && next_op(s, &ops[k]))
		k++;
	return k;
}

int mt_sim_input(const struct mt_trace *t, uint8_t device, const struct mt_sim_op *then, struct mt_sim_input *in)
{
	char backend[32], by[32];
	struct mt_walk *w = mt_walk_start(t);
	const struct mt_event *e;
	struct mt_sim_op op;
	struct source s;

	memset(in, 0, sizeof *in);
	in->trace = t;
	in->device = device;
	/* a PyTorch snapshot's segment frees are the job's releases; a memtap recording's (and
	 * its export's) are cudaFree of plain allocations or memtap's allocator's own, which
	 * the replay's policies decide anew */
	in->releases_are_frees = mt_trace_info(t, "backend", backend, sizeof backend) &&
				 !strcmp(backend, "pytorch-snapshot") &&
				 !(mt_trace_info(t, "torch.recorded_by", by, sizeof by) && !strcmp(by, "memtap"));
	while (w && !in->blocks && (e = mt_walk_one(w)))
		in->blocks = e->kind == MT_EV_ALLOC && mt_api(e) == MT_API_BLOCK && e->device == device;
	mt_walk_end(w);
	if (then) {
		in->then = *then;
		in->then_too = true;
	}
	if (!w || source_start(&s, in, in))
		return ENOMEM;
	while (next_op(&s, &op)) {
		in->frees += op.free;
		in->releases += op.release;
	}
	in->nops = s.given;
	in->final_segments = s.reserved;
	source_end(&s);
	if (s.err)
		mt_sim_input_free(in);
	return s.err;
}

void mt_sim_input_free(struct mt_sim_input *in)
{
	free(in->places);
	free(in->ops);
	memset(in, 0, sizeof *in);
}

/* ---- running it ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sample(struct mt_cache *m, size_t op, struct mt_sim_result *r)
{
	struct mt_cache_stats s;
	struct mt_sim_sample *x = &r->samples[r->nsamples++];

	mt_cache_stats(m, &s);
	*x = (struct mt_sim_sample){.op = op,
				    .reserved = s.reserved,
				    .allocated = s.allocated,
				    .requested = s.requested,
				    .largest_free = mt_cache_largest_free(m)};
}

#define OPS_AT_ONCE 16384 /* ops made at a time (512 KiB), then run through each engine */

/* An allocation's block in an engine; addr 0: none (it failed, or was freed). */
struct held {
	uint64_t addr, size, requested;
};

/* One setup's simulated device and engine, fed the sequence's ops in turn. */
struct engine {
	struct mt_sim_device dev; /* the engine's backend points at it: engines do not move */
	struct mt_cache *m;
	struct held *held; /* by the allocations' slots */
	size_t cap_held;
	uint64_t requested, allocated, spent;
	struct mt_sim_result *r;
};

static int engine_start(struct engine *g, const struct mt_sim_input *in, const struct mt_sim_setup *s,
			struct mt_sim_result *r)
{
	struct mt_cache_backend b;

	memset(r, 0, sizeof *r);
	g->r = r;
	mt_sim_device_init(&g->dev, s->capacity ? s->capacity : MT_CACHE_DEVICE_MAX, &b);
	if (!(g->dev.places = places_new(in->places, in->nplaces)))
		return ENOMEM;
	if (g->dev.places->top > g->dev.next_addr) /* the counter's addresses past the job's */
		g->dev.next_addr = round_page(g->dev.places->top);
	return mt_cache_new(&g->m, s->config, &b, 0);
}

/* Op i through the engine: 0, or ENOMEM. */
static int engine_step(struct engine *g, const struct mt_sim_op *op, size_t i, bool timed)
{
	struct mt_sim_result *r = g->r;
	uint64_t t0 = timed ? now_ns() : 0, req;
	struct held *h;
	int err = 0;

	if (!op->release && op->slot >= g->cap_held) { /* slots are dense: the room doubles */
		size_t cap = g->cap_held ? g->cap_held : 1024;
		while (cap <= op->slot)
			cap *= 2;
		if (!(h = realloc(g->held, cap * sizeof *h)))
			return ENOMEM;
		memset(h + g->cap_held, 0, (cap - g->cap_held) * sizeof *h);
		g->held = h;
		g->cap_held = cap;
	}
	h = op->release ? NULL : &g->held[op->slot];
	if (op->release) {
		mt_cache_release(g->m);
	} else if (op->free) {
		if (h->addr) {
			mt_cache_free(g->m, h->addr);
			g->requested -= h->requested;
			g->allocated -= h->size;
			h->addr = 0;
		}
	} else if ((err = mt_cache_alloc(g->m, op->size, op->stream, 0, &h->addr)) == MT_CACHE_OOM) {
		if (!r->ooms++)
			r->first_oom = i;
		err = 0;
	} else if (!err && h->addr) {
		h->requested = op->size;
		mt_cache_block(g->m, h->addr, &req, &h->size);
		if ((g->requested += op->size) > r->peak_requested)
			r->peak_requested = g->requested;
		if ((g->allocated += h->size) > r->peak_allocated)
			r->peak_allocated = g->allocated;
	}
	if (timed)
		g->spent += now_ns() - t0;
	return err;
}

static void engine_end(struct engine *g, size_t ops)
{
	if (g->m) {
		mt_cache_stats(g->m, &g->r->stats);
		g->r->ns_per_op = ops ? (double)g->spent / (double)ops : 0;
		mt_cache_delete(g->m);
	}
	places_free(g->dev.places);
	free(g->held);
}

int mt_sim_runs(const struct mt_sim_input *in, size_t n, const struct mt_sim_setup *setups, bool timed,
		struct mt_sim_result *results)
{
	struct engine *g = calloc(n ? n : 1, sizeof *g);
	struct mt_sim_op *ops = malloc(OPS_AT_ONCE * sizeof *ops);
	size_t every = in->nops / MT_SIM_SAMPLES + 1, i = 0, got;
	struct source s;
	int err = g && ops ? source_start(&s, in, NULL) : ENOMEM;

	if (!g || !ops) {
		free(g);
		free(ops);
		return err;
	}
	for (size_t k = 0; k < n && !err; k++)
		err = engine_start(&g[k], in, &setups[k], &results[k]);
	/* a batch of ops through each engine in turn: one engine's tables stay in the cache */
	for (; !err && (got = next_ops(&s, ops, OPS_AT_ONCE)) != 0; i += got)
		for (size_t k = 0; k < n && !err; k++)
			for (size_t j = 0; j < got && !err; j++) {
				err = engine_step(&g[k], &ops[j], i + j, timed);
				if ((i + j) % every == every - 1 && results[k].nsamples < MT_SIM_SAMPLES)
					sample(g[k].m, i + j, &results[k]);
			}
	err = err ? err : s.err;
	for (size_t k = 0; k < n; k++)
		engine_end(&g[k], i);
	source_end(&s);
	free(ops);
	free(g);
	return err;
}

int mt_sim_run(const struct mt_sim_input *in, const struct mt_cache_config *c, uint64_t capacity, bool timed,
	       struct mt_sim_result *r)
{
	return mt_sim_runs(in, 1, &(struct mt_sim_setup){c, capacity}, timed, r);
}

int mt_sim_min_capacity(const struct mt_sim_input *in, const struct mt_cache_config *c, uint64_t step,
			uint64_t *capacity)
{
	struct mt_sim_result *r = malloc(sizeof *r);
	uint64_t lo, hi;
	int err;

	if (!r)
		return ENOMEM;
	if ((err = mt_sim_run(in, c, 0, false, r)) != 0)
		goto out;
	lo = r->peak_allocated / step * step;
	hi = (r->stats.peak_reserved + step - 1) / step * step;
	while (hi - lo > step && !err) {
		uint64_t mid = lo + (hi - lo) / 2 / step * step;

		if ((err = mt_sim_run(in, c, mid, false, r)) == 0)
			*(r->ooms ? &lo : &hi) = mid;
	}
	*capacity = hi;
out:
	free(r);
	return err;
}
