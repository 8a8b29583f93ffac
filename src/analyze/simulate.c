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

int mt_sim_input(const struct mt_trace *t, uint8_t device, struct mt_sim_input *in)
{
	struct mt_map live = {0}, segs = {0};
	uint64_t reserved = 0, v;
	size_t cap = 0, cap_places = 0;
	char backend[32], by[32];
	/* a PyTorch snapshot's segment frees are the job's releases; a memtap recording's (and
	 * its export's) are cudaFree of plain allocations or memtap's allocator's own, which
	 * the replay's policies decide anew */
	bool releases = mt_trace_info(t, "backend", backend, sizeof backend) && !strcmp(backend, "pytorch-snapshot") &&
			!(mt_trace_info(t, "torch.recorded_by", by, sizeof by) && !strcmp(by, "memtap"));
	struct mt_walk *w = mt_walk_start(t);
	const struct mt_event *batch, *e;
	int err = w ? 0 : ENOMEM;
	size_t k;

	memset(in, 0, sizeof *in);
	while (w && !in->blocks && (k = mt_walk_next(w, &batch)) != 0)
		for (e = batch; e < batch + k && !in->blocks; e++)
			in->blocks = e->kind == MT_EV_ALLOC && mt_api(e) == MT_API_BLOCK && e->device == device;
	mt_walk_end(w);
	w = err ? NULL : mt_walk_start(t);
	err = err ? err : w ? 0 : ENOMEM;
	while (!err && (k = mt_walk_next(w, &batch)) != 0)
		for (e = batch; e < batch + k && !err; e++) {
			struct mt_sim_op op = {0};

			/* an expandable segment's maps and unmaps are the exact pages each changed (the
			   reader makes them so), not one address per range */
			bool pages = (e->flags & MT_SEG_MAPPED) && e->device == device;

			if (e->kind == MT_EV_SEGMENT_ALLOC && e->device == device) {
				reserved += e->size;
				err = pages ? 0 : mt_map_put(&segs, e->addr, e->size);
				/* the job's segments, where a counter past them cannot wrap: none at 0, the
				 * engine's empty key, nor past 2^56 */
				if (!err && !pages && releases && e->addr >= (2u << 20) &&
				    e->addr + e->size <= (1ull << 56) &&
				    !(err =
					  mt_grow((void **)&in->places, &cap_places, in->nplaces, sizeof *in->places)))
					in->places[in->nplaces++] = (struct mt_sim_place){e->addr, e->size};
				continue;
			}
			if (e->kind == MT_EV_SEGMENT_FREE && (pages || mt_map_del(&segs, e->addr, &v))) {
				reserved -= pages ? e->size : v;
				if (!releases || !in->blocks || (in->nops && in->ops[in->nops - 1].release))
					continue;
				op.release = true; /* one per run of segment frees */
				in->releases++;
			} else if (is_device_alloc(e) && e->device == device &&
				   (mt_api(e) == MT_API_BLOCK) == in->blocks) {
				op.size = e->size;
				op.stream = e->aux;
				err = mt_map_put(&live, e->addr, in->nops);
			} else if (e->kind == MT_EV_FREE && mt_map_del(&live, e->addr, &v)) {
				op.free = true;
				op.alloc = (uint32_t)v;
				op.stream = in->ops[v].stream;
			} else {
				continue;
			}
			if (!err && in->nops == cap) {
				struct mt_sim_op *ops = realloc(in->ops, (cap = cap ? cap * 2 : 1024) * sizeof *ops);

				if (!ops)
					err = ENOMEM;
				else
					in->ops = ops;
			}
			if (!err)
				in->ops[in->nops++] = op;
		}
	mt_walk_end(w);
	in->final_segments = reserved;
	mt_map_free(&live);
	mt_map_free(&segs);
	if (err)
		mt_sim_input_free(in);
	return err;
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

int mt_sim_run(const struct mt_sim_input *in, const struct mt_cache_config *c, uint64_t capacity,
	       struct mt_sim_result *r)
{
	struct mt_sim_device dev;
	struct mt_cache_backend b;
	/* per allocation op: its block's address and size */
	uint64_t *addrs = calloc(in->nops ? in->nops : 1, sizeof *addrs), t0, spent = 0;
	uint64_t *sizes = calloc(in->nops ? in->nops : 1, sizeof *sizes), requested = 0, allocated = 0;
	size_t every = in->nops / MT_SIM_SAMPLES + 1;
	struct mt_cache *m;
	int err;

	memset(r, 0, sizeof *r);
	mt_sim_device_init(&dev, capacity ? capacity : MT_CACHE_DEVICE_MAX, &b);
	dev.places = places_new(in->places, in->nplaces);
	if (dev.places && dev.places->top > dev.next_addr) /* the counter's addresses past the job's */
		dev.next_addr = round_page(dev.places->top);
	if (!addrs || !sizes || !dev.places)
		err = ENOMEM;
	else
		err = mt_cache_new(&m, c, &b, 0);
	if (err) {
		free(addrs);
		free(sizes);
		places_free(dev.places);
		return err;
	}
	for (size_t i = 0; i < in->nops && !err; i++) {
		const struct mt_sim_op *op = &in->ops[i];

		t0 = now_ns();
		if (op->release) {
			mt_cache_release(m);
		} else if (op->free) {
			if (addrs[op->alloc])
				mt_cache_free(m, addrs[op->alloc]);
		} else if ((err = mt_cache_alloc(m, op->size, op->stream, 0, &addrs[i])) == MT_CACHE_OOM) {
			if (!r->ooms++)
				r->first_oom = i;
			err = 0;
		}
		spent += now_ns() - t0;
		if (op->free && addrs[op->alloc]) {
			requested -= in->ops[op->alloc].size;
			allocated -= sizes[op->alloc];
		} else if (!op->free && !op->release && addrs[i]) {
			uint64_t req;

			mt_cache_block(m, addrs[i], &req, &sizes[i]);
			if ((requested += op->size) > r->peak_requested)
				r->peak_requested = requested;
			if ((allocated += sizes[i]) > r->peak_allocated)
				r->peak_allocated = allocated;
		}
		if (i % every == every - 1 && r->nsamples < MT_SIM_SAMPLES)
			sample(m, i, r);
	}
	mt_cache_stats(m, &r->stats);
	r->ns_per_op = in->nops ? (double)spent / (double)in->nops : 0;
	mt_cache_delete(m);
	places_free(dev.places);
	free(addrs);
	free(sizes);
	return err;
}

int mt_sim_min_capacity(const struct mt_sim_input *in, const struct mt_cache_config *c, uint64_t step,
			uint64_t *capacity)
{
	struct mt_sim_result *r = malloc(sizeof *r);
	uint64_t lo, hi;
	int err;

	if (!r)
		return ENOMEM;
	if ((err = mt_sim_run(in, c, 0, r)) != 0)
		goto out;
	lo = r->peak_allocated / step * step;
	hi = (r->stats.peak_reserved + step - 1) / step * step;
	while (hi - lo > step && !err) {
		uint64_t mid = lo + (hi - lo) / 2 / step * step;

		if ((err = mt_sim_run(in, c, mid, r)) == 0)
			*(r->ooms ? &lo : &hi) = mid;
	}
	*capacity = hi;
out:
	free(r);
	return err;
}
