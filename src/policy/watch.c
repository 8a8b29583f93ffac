/* The engine's live view of memory: the report's own replay (analyze/replay.c) run over
 * events as they arrive, so a policy sees the numbers `memtap report` will print, plus
 * what decides when handlers fire: threshold crossings per device with hysteresis, new
 * peaks (rate-limited), NVTX ranges entered and left, iteration boundaries (memtap marks,
 * else the first top-level NVTX range that repeats) and growth across them. */
#include <stdlib.h>
#include <string.h>

#include "policy/engine.h"
#include "core/alloc.h"
#include "core/array.h"

#define MAX_NESTING 64
#define BOUNDARIES 64 /* boundary times kept, for where a leak's bytes were made */

struct nesting {
	uint32_t id[MAX_NESTING];
	unsigned depth;
};

static struct {
	int first; /* the first device seen, -1 before */
	bool known[MT_MAX_DEVICES];
	uint8_t dev[MT_MAX_DEVICES];
	unsigned ndev;
	uint64_t last[MT_MAX_DEVICES]; /* current bytes when last looked at */
	uint32_t peak_stack[MT_MAX_DEVICES], peak_phase[MT_MAX_DEVICES];
	struct nesting *thread; /* NVTX push stacks, by thread index */
	size_t nthread;
	struct mt_map ranges;	  /* start/end range id -> name */
	struct mt_map top_pushes; /* name -> pushes at the top of a thread's stack */
	uint32_t iteration_range; /* the repeating top-level range, when there are no marks */
	bool marks;
	uint64_t boundary_time[BOUNDARIES];
	uint64_t capacity[MT_MAX_DEVICES]; /* mt_watch_capacity's answer, looked up once per batch */
	bool capacity_known[MT_MAX_DEVICES];
} w;

void mt_watch_init(void)
{
	memset(&w, 0, sizeof w);
	w.first = -1;
	mt_replay_init(&mt_pol.rp);
}

int mt_watch_device(int device)
{
	return device >= 0 ? device : w.first;
}

uint64_t mt_watch_capacity(int device)
{
	uint64_t cap, total;

	if ((device = mt_watch_device(device)) < 0)
		return 0;
	if (w.capacity_known[device])
		return w.capacity[device];
	cap = mt_pol.host->cap((uint8_t)device);
	total = mt_pol.rp.dev[device].capacity;
	w.capacity_known[device] = true;
	return w.capacity[device] = cap && (!total || cap < total) ? cap : total;
}

void mt_watch_forget_capacity(void)
{
	memset(w.capacity_known, 0, sizeof w.capacity_known);
}

uint64_t mt_watch_reserved(int device)
{
	const struct mt_device_state *d;

	if ((device = mt_watch_device(device)) < 0)
		return 0;
	d = &mt_pol.rp.dev[device];
	return d->reserved ? d->reserved : d->current; /* without an allocator's segments: what the driver gave */
}

static bool wants(const struct mt_handler *h, enum mt_hook_kind kind, int device)
{
	return h->kind == kind && !h->off && (h->device < 0 || h->device == device);
}

static void note_device(uint8_t d)
{
	if (d == MT_NO_DEVICE || w.known[d])
		return;
	w.known[d] = true;
	w.dev[w.ndev++] = d;
	if (w.first < 0)
		w.first = d;
}

/* ---- thresholds and peaks ---- */

static uint64_t level(double v, uint64_t capacity)
{
	return v <= 1 ? (uint64_t)(v * (double)capacity) : (uint64_t)v;
}

static void thresholds(uint8_t d, const struct mt_event *e)
{
	uint64_t cur = mt_pol.rp.dev[d].current, capacity = mt_watch_capacity(d);

	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		uint64_t bit = 1ull << (d % 64), *word = &h->above[d / 64];
		bool up;
		if (!wants(h, MT_ON_THRESHOLD, d) || (h->up <= 1 && !capacity))
			continue;
		if (!(*word & bit) && cur >= level(h->up, capacity))
			up = true;
		else if ((*word & bit) && cur < level(h->down, capacity))
			up = false;
		else
			continue;
		*word ^= bit;
		if (!up && !h->report_down)
			continue;
		struct mt_pol_event ev = {.kind = "threshold",
					  .device = d,
					  .size = e->size,
					  .time = e->time,
					  .stack = e->stack,
					  .phase = e->phase,
					  .direction = up ? "up" : "down",
					  .level = level(up ? h->up : h->down, capacity)};
		mt_pol_fire(h, &ev, NULL);
	}
}

/* New high-water marks past a handler's growth, no sooner than its interval after the
 * last one; one held back by the interval is reported at the end of the batch. */
static void peaks(uint64_t now)
{
	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		for (unsigned k = 0; k < w.ndev; k++) {
			uint8_t d = w.dev[k];
			const struct mt_device_state *s = &mt_pol.rp.dev[d];
			uint64_t *reported = &h->reported[d], *last = &h->reported[MT_MAX_DEVICES + d];
			if (!wants(h, MT_ON_PEAK, d) || !s->peak ||
			    (double)s->peak <= (double)*reported * (1 + h->growth))
				continue;
			if (*last && now < *last + h->interval_ns)
				continue;
			struct mt_pol_event ev = {.kind = "peak",
						  .device = d,
						  .size = s->peak,
						  .growth = s->peak - *reported,
						  .time = s->peak_time,
						  .stack = w.peak_stack[d],
						  .phase = w.peak_phase[d]};
			*reported = s->peak;
			*last = now;
			mt_pol_fire(h, &ev, NULL);
		}
	}
}

/* Device bytes may have changed: find where, note the peak's stack, check thresholds. */
static void changed(const struct mt_event *e)
{
	for (unsigned k = 0; k < w.ndev; k++) {
		uint8_t d = w.dev[k];
		const struct mt_device_state *s = &mt_pol.rp.dev[d];
		if (s->current == w.last[d])
			continue;
		w.last[d] = s->current;
		if (mt_pol.count[MT_ON_THRESHOLD])
			thresholds(d, e);
		if (s->peak_event + 1 == mt_pol.rp.index) {
			w.peak_stack[d] = e->stack;
			w.peak_phase[d] = e->phase;
			if (mt_pol.count[MT_ON_PEAK])
				peaks(e->time); /* at the moment: what a handler looks at is the peak's state */
		}
	}
}

/* ---- NVTX ranges, iterations, leaks ---- */

static bool matches(struct mt_handler *h, uint32_t id)
{
	uint64_t v;
	bool yes;

	if (mt_map_get(&h->matches, id, &v))
		return v == 1;
	yes = mt_pol_match(mt_pol_string(id), h->name);
	mt_map_put(&h->matches, id, yes ? 1 : 2);
	return yes;
}

static void phase(const struct mt_event *e, uint32_t name, const char *direction)
{
	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		if (h->kind != MT_ON_PHASE || h->off || !matches(h, name))
			continue;
		struct mt_pol_event ev = {.kind = "phase",
					  .device = -1,
					  .time = e->time,
					  .stack = e->stack,
					  .phase = name,
					  .name = name,
					  .direction = direction};
		mt_pol_fire(h, &ev, NULL);
	}
}

static void leaks(const struct mt_event *e)
{
	uint64_t it = mt_pol.iteration;

	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		for (unsigned k = 0; k < w.ndev; k++) {
			uint8_t d = w.dev[k];
			struct mt_leak_watch *s;
			uint64_t cur = mt_pol.rp.dev[d].current;
			if (!wants(h, MT_ON_LEAK, d))
				continue;
			s = &h->leak[d];
			if (s->seen && cur >= s->last + (h->min_bytes ? h->min_bytes : 1)) {
				s->least = s->run++ == 0 || cur - s->last < s->least ? cur - s->last : s->least;
			} else if (s->seen) {
				s->run = 0;
				s->fired = false;
			}
			s->seen = true;
			s->last = cur;
			if (s->run < h->window || s->fired)
				continue;
			s->fired = true;
			/* where the bytes made since the run began are */
			struct mt_stack_bytes top = {0};
			uint64_t since = it > s->run ? w.boundary_time[(it - s->run) % BOUNDARIES] : 0;
			mt_watch_top(&top, 1, since, d);
			struct mt_pol_event ev = {.kind = "leak",
						  .device = d,
						  .size = top.bytes,
						  .growth = s->least,
						  .time = e->time,
						  .stack = top.stack,
						  .phase = e->phase};
			mt_pol_fire(h, &ev, NULL);
		}
	}
}

/* An iteration boundary: `number` is the iteration that begins. */
static void boundary(const struct mt_event *e, uint32_t name, uint64_t number)
{
	mt_pol.iteration = number;
	w.boundary_time[number % BOUNDARIES] = e->time;
	if (mt_pol.count[MT_ON_LEAK])
		leaks(e);
	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		struct mt_pol_event ev = {.kind = "iteration",
					  .device = -1,
					  .time = e->time,
					  .phase = e->phase,
					  .name = name,
					  .iteration = number};
		if (h->kind == MT_ON_ITERATION && !h->off && !h->name)
			mt_pol_fire(h, &ev, NULL);
	}
}

/* Handlers that asked for boundaries by name: marks, NVTX marks or top-level ranges. */
static void named(const struct mt_event *e, uint32_t name)
{
	const char *s = NULL;

	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		if (h->kind != MT_ON_ITERATION || h->off || !h->name)
			continue;
		if (!s)
			s = mt_pol_string(name);
		if (strcmp(s, h->name) != 0)
			continue;
		struct mt_pol_event ev = {.kind = "iteration",
					  .device = -1,
					  .time = e->time,
					  .phase = e->phase,
					  .name = name,
					  .iteration = ++h->seen};
		mt_pol_fire(h, &ev, NULL);
		s = NULL; /* the handler may have asked for other strings */
	}
}

static struct nesting *nesting(uint32_t thread)
{
	size_t cap = w.nthread;

	if (thread >= w.nthread) {
		if (mt_grow((void **)&w.thread, &cap, thread, sizeof *w.thread))
			return NULL;
		memset(w.thread + w.nthread, 0, (cap - w.nthread) * sizeof *w.thread);
		w.nthread = cap;
	}
	return &w.thread[thread];
}

static void pushed(const struct mt_event *e)
{
	struct nesting *n = nesting(e->thread);
	uint64_t count = 0;

	if (!n)
		return;
	if (n->depth < MAX_NESTING)
		n->id[n->depth] = (uint32_t)e->aux;
	if (n->depth++ == 0) {
		mt_map_get(&w.top_pushes, e->aux, &count);
		mt_map_put(&w.top_pushes, e->aux, ++count);
		if (!w.marks && !w.iteration_range && count == 2)
			w.iteration_range = (uint32_t)e->aux;
		if (!w.marks && w.iteration_range == e->aux)
			boundary(e, (uint32_t)e->aux, count);
		named(e, (uint32_t)e->aux);
	}
	phase(e, (uint32_t)e->aux, "enter");
}

static void popped(const struct mt_event *e)
{
	struct nesting *n = nesting(e->thread);

	if (!n || n->depth == 0)
		return;
	n->depth--;
	if (n->depth < MAX_NESTING)
		phase(e, n->id[n->depth], "leave");
}

void mt_watch_apply(const struct mt_event *e)
{
	uint64_t name;

	mt_replay_apply(&mt_pol.rp, e);
	note_device(e->device);
	switch (e->kind) {
	case MT_EV_DEVICE:
		mt_watch_forget_capacity();
		break;
	case MT_EV_ALLOC:
	case MT_EV_FREE:
	case MT_EV_VMM_CREATE:
	case MT_EV_VMM_RELEASE:
	case MT_EV_VMM_UNMAP:
		changed(e);
		break;
	case MT_EV_RANGE_PUSH:
		pushed(e);
		break;
	case MT_EV_RANGE_POP:
		popped(e);
		break;
	case MT_EV_RANGE_START:
		mt_map_put(&w.ranges, e->aux2, e->aux);
		phase(e, (uint32_t)e->aux, "enter");
		break;
	case MT_EV_RANGE_END:
		if (mt_map_del(&w.ranges, e->aux2, &name))
			phase(e, (uint32_t)name, "leave");
		break;
	case MT_EV_MARK:
		if (!w.marks) {
			w.marks = true; /* marks say where iterations are: ranges no longer do */
			mt_pol.iteration = 0;
		}
		boundary(e, (uint32_t)e->aux, mt_pol.iteration + 1);
		named(e, (uint32_t)e->aux);
		break;
	case MT_EV_NVTX_MARK:
		named(e, (uint32_t)e->aux);
		break;
	default:
		break;
	}
}

void mt_watch_batch_end(uint64_t now)
{
	if (mt_pol.count[MT_ON_PEAK])
		peaks(now);
	for (size_t i = 0; i < mt_pol.nh; i++) {
		struct mt_handler *h = &mt_pol.h[i];
		if (h->kind != MT_EVERY || h->off || now < h->next_ns)
			continue;
		h->next_ns = h->next_ns + h->period_ns > now ? h->next_ns + h->period_ns : now + h->period_ns;
		struct mt_pol_event ev = {.kind = "timer", .device = -1, .time = now};
		mt_pol_fire(h, &ev, NULL);
	}
}

uint64_t mt_watch_next_timer(uint64_t now)
{
	uint64_t next = now + 1000000000ull;

	for (size_t i = 0; i < mt_pol.nh; i++)
		if (mt_pol.h[i].kind == MT_EVERY && !mt_pol.h[i].off && mt_pol.h[i].next_ns < next)
			next = mt_pol.h[i].next_ns;
	return next;
}

static int by_bytes(const void *a, const void *b)
{
	const struct mt_stack_bytes *x = a, *y = b;

	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : (x->stack > y->stack) - (x->stack < y->stack);
}

size_t mt_watch_top(struct mt_stack_bytes *out, size_t n, uint64_t since, int device)
{
	const struct mt_replay *rp = &mt_pol.rp;
	struct mt_stack_bytes *all = NULL;
	struct mt_map index = {0};
	size_t count = 0, cap = 0;

	for (size_t i = 0; i < rp->slots.n; i++) {
		const struct mt_live *l = &rp->live[i];
		uint64_t k;
		if (!l->in_use || !mt_live_on_device(l) || l->time < since || (device >= 0 && l->device != device))
			continue;
		if (!mt_map_get(&index, l->stack, &k)) {
			if (mt_grow((void **)&all, &cap, count, sizeof *all) || mt_map_put(&index, l->stack, count))
				break;
			all[count] = (struct mt_stack_bytes){.stack = l->stack};
			k = count++;
		}
		all[k].bytes += l->size;
		all[k].count++;
	}
	if (count)
		qsort(all, count, sizeof *all, by_bytes);
	if (n > count)
		n = count;
	if (n)
		memcpy(out, all, n * sizeof *out);
	mt_free(all);
	mt_map_free(&index);
	return n;
}
