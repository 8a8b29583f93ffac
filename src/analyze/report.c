/* Building and printing the first report. One replay finds each device's peak and keeps
 * what was live there, which the report groups by stack; a second walk, where the trace
 * has failed allocations or segments, replays to each failure and steps the
 * fragmentation. */
#include "analyze/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/diagnose.h"
#include "core/alloc.h"
#include "core/array.h"
#include "core/text.h"
#include "reader/progress.h"
#include "core/units.h"

static int add_group(struct mt_group_list *g, struct mt_map *index, const struct mt_live *l, uint8_t before)
{
	uint64_t key = (uint64_t)l->stack << 20 | (uint64_t)before << 16 | (uint64_t)l->kind << 8 | l->device, i;

	if (!mt_map_get(index, key, &i)) {
		/* lists grow by doubling: one more item at a time copies the list each time wherever
		   realloc cannot grow in place (ASan's allocator: minutes for 200000 stacks) */
		if (mt_grow((void **)&g->items, &g->cap, g->n, sizeof *g->items))
			return ENOMEM;
		g->items[g->n] = (struct mt_group){l->stack, l->device, l->kind, before, 0, 0};
		i = ++g->n;
		if (mt_map_put(index, key, i))
			return ENOMEM;
	}
	g->items[i - 1].bytes += l->size;
	g->items[i - 1].count++;
	return 0;
}

static int by_bytes(const void *a, const void *b)
{
	const struct mt_group *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* Groups the live entries (live[0 .. n), those in use) of one device (or of all, for
 * device < 0); those made before recording apart by what the composition (`category`, per
 * event) read them as. */
static int group(const struct mt_composition *c, const struct mt_live *live, size_t n, int device,
		 struct mt_group_list *out)
{
	struct mt_map index = {0};
	int r = 0;

	for (size_t i = 0; i < n && !r; i++) {
		const struct mt_live *l = &live[i];
		if (!l->in_use)
			continue;
		if (device >= 0 && (l->device != device || !mt_live_on_device(l)))
			continue;
		r = add_group(out, &index, l,
			      l->kind == MT_LIVE_DEVICE && (l->flags & MT_ALLOC_UNSEEN)
				  ? (uint8_t)(1 + mt_composition_category(c, l->event))
				  : 0);
	}
	mt_map_free(&index);
	if (out->n)
		qsort(out->items, out->n, sizeof *out->items, by_bytes);
	return r;
}

/* The categories of what is live (live[0 .. n), those in use) on device d, into `into`;
 * at the peak (`peak`), also the blocks, sources and evidence. */
static void compose(struct mt_report *r, const struct mt_live *live, size_t n, int d, uint64_t into[MT_TAG_COUNT],
		    bool peak)
{
	for (size_t i = 0; i < n; i++) {
		const struct mt_live *l = &live[i];
		uint8_t cat;
		if (!l->in_use || l->device != d || !mt_live_on_device(l))
			continue;
		cat = mt_composition_counted(&r->comp, l->event);
		into[cat] += l->size;
		if (!peak)
			continue;
		if (l->kind == MT_LIVE_DEVICE && l->block) /* its block */
			r->blocks_at_peak[d] += l->aux2 ? l->aux2 : l->size;
		r->sources[d][cat] |= (uint8_t)(1u << mt_composition_source(&r->comp, l->event));
		r->evidence[d][cat] += l->size * mt_composition_evidence(&r->comp, l->event);
	}
}

/* What of device d's live memory a checkpoint's loading made (o->loaded), with the stack
 * that loaded the most of it, and what CUDA graphs' memory nodes hold (o->graphs);
 * `loads` is each stack's answer, 1 + whether it loads. */
static void loaded(const struct mt_report *r, const struct mt_replay *rp, int d, uint8_t *loads, struct mt_oom *o)
{
	uint64_t most = 0;

	for (size_t i = 0; i < rp->slots.n && loads; i++) {
		const struct mt_live *l = &rp->live[i];
		if (!l->in_use || l->device != d || l->kind != MT_LIVE_DEVICE)
			continue;
		if ((l->flags & MT_API_MASK) == MT_API_GRAPH)
			o->graphs += l->size;
		if (l->stack >= r->trace->nstacks)
			continue;
		if (!loads[l->stack])
			loads[l->stack] = (uint8_t)(1 + mt_composition_loads(r->trace, l->stack));
		if (loads[l->stack] == 2) {
			o->loaded += l->size;
			if (l->size > most)
				most = l->size, o->loaded_stack = l->stack;
		}
	}
}

/* A cuMemGetInfo answer (the job's, or memtap's own at a device's first use and at exit),
 * or the one memtap asked for at an out-of-memory failure: the driver's used memory beside
 * what memtap saw live then. The job's and a failure's moments tell more than memtap's:
 * a later reading replaces an earlier one of the same rank or lower. */
static void driver_count(struct mt_report *r, const struct mt_event *e)
{
	bool info = e->kind == MT_EV_MEMINFO && !e->error;
	bool oom = e->kind == MT_EV_ALLOC_FAILED && e->error == 2 && e->aux2;
	uint8_t reading = oom				     ? MT_READING_OOM
			  : e->flags == MT_MEMINFO_EXIT	     ? MT_READING_EXIT
			  : e->flags == MT_MEMINFO_FIRST_USE ? MT_READING_FIRST_USE
							     : MT_READING_JOB;

	if (!(info || oom) || e->device == MT_NO_DEVICE || e->aux > e->aux2 || reading < r->driver[e->device].reading)
		return;
	const struct mt_device_state *s = &r->end.dev[e->device];
	/* what memtap saw held: its allocations, a caching allocator's segments whole */
	r->driver[e->device] =
	    (struct mt_driver_count){true, reading, e->time, e->aux2 - e->aux, s->current - s->blocks + s->reserved};
}

static const char *const reading_text[] = {"", "when memtap asked, at the device's first use",
					   "when memtap asked, at exit", "when the job asked (cuMemGetInfo)",
					   "at the out-of-memory failure"};
static const char *const reading_json[] = {"", "first_use", "exit", "job", "oom"};

/* A device's peak as it was at the last iteration boundary: the peak of the steps before. */
struct high {
	uint64_t bytes;
	size_t event;
};

static int add_oom(struct mt_report *r, const struct mt_event *e, size_t i, size_t iterations,
		   const struct high *before)
{
	if (mt_grow((void **)&r->oom, &r->cap_oom, r->noom, sizeof *r->oom))
		return ENOMEM;
	r->oom[r->noom++] = (struct mt_oom){
	    .event = i, .ev = *e, .iterations = iterations, .before_event = before->event, .before = before->bytes};
	return 0;
}

static int by_before(const void *a, const void *b)
{
	const struct mt_oom *x = *(const struct mt_oom *const *)a, *y = *(const struct mt_oom *const *)b;

	return x->before_event < y->before_event ? -1 : x->before_event > y->before_event;
}

/* ---- by library: the first module of each stack that is not CUDA's runtime or driver ---- */

static int by_start(const void *a, const void *b)
{
	const struct mt_module *x = *(const struct mt_module *const *)a, *y = *(const struct mt_module *const *)b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static const struct mt_module *module_at(const struct mt_module *const *sorted, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) { /* the last module starting at or below addr */
		size_t mid = lo + (hi - lo) / 2;
		if (sorted[mid]->start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && addr < sorted[lo - 1]->end ? sorted[lo - 1] : NULL;
}

static const char *base_name(const char *path)
{
	const char *slash = path ? strrchr(path, '/') : NULL;

	return slash ? slash + 1 : path && *path ? path : "(unknown)";
}

/* CUDA's runtime and driver (a static runtime is inside its library, which is named),
 * CUPTI (whose callback the CUPTI backend's stacks start in) and memtap */
static bool is_runtime(const char *name)
{
	return !strncmp(name, "libcudart.so", 12) || !strncmp(name, "libcuda.so", 10) ||
	       !strncmp(name, "libmemtap", 9) || !strncmp(name, "libcupti.so", 11);
}

static const char *stack_library(const struct mt_trace *t, const struct mt_module *const *sorted, uint32_t stack)
{
	const char *first = NULL;

	if (!stack || stack >= t->nstacks || !t->stacks[stack].depth)
		return "(no stack)";
	for (uint32_t i = 0; i < t->stacks[stack].depth; i++) {
		uint64_t a = t->stacks[stack].frames[i];
		const struct mt_module *m;
		if (a & MT_PYFRAME || !(m = module_at(sorted, t->nmodules, a - 1)))
			continue;
		const char *name = base_name(m->path);
		if (!is_runtime(name))
			return name;
		if (!first)
			first = name;
	}
	return first ? first : "(unknown)"; /* all of it the runtime's: the runtime itself */
}

static int by_library_bytes(const void *a, const void *b)
{
	const struct mt_library *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return strcmp(x->name, y->name);
}

/* Each device's bytes at its peak by library, from the stacks live there. Imported
 * traces (named frames, no module map) have none. */
static int libraries(struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	const struct mt_module **sorted;

	if (t->nnamed || !t->nmodules)
		return 0;
	if (!(sorted = malloc(t->nmodules * sizeof *sorted)))
		return ENOMEM;
	for (size_t i = 0; i < t->nmodules; i++)
		sorted[i] = &t->modules[i];
	qsort(sorted, t->nmodules, sizeof *sorted, by_start);
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		struct mt_library_list *l = &r->by_library[d];
		for (size_t g = 0; g < r->at_peak[d].n; g++) {
			const char *name = stack_library(t, sorted, r->at_peak[d].items[g].stack);
			size_t k;
			for (k = 0; k < l->n && strcmp(l->items[k].name, name); k++)
				;
			if (k == l->n) {
				if (mt_grow((void **)&l->items, &l->cap, l->n, sizeof *l->items)) {
					free(sorted);
					return ENOMEM;
				}
				l->items[l->n++] = (struct mt_library){name, 0};
			}
			l->items[k].bytes += r->at_peak[d].items[g].bytes;
		}
		if (l->n)
			qsort(l->items, l->n, sizeof *l->items, by_library_bytes);
	}
	free(sorted);
	return 0;
}

/* What a library loaded after memtap made in its constructor, before memtap's own ran:
 * recorded because memtap started at that call. */
static void early(struct mt_report *r, const struct mt_event *e)
{
	if ((e->kind == MT_EV_ALLOC || e->kind == MT_EV_HOST_ALLOC || e->kind == MT_EV_MANAGED_ALLOC) &&
	    (e->flags & MT_ALLOC_EARLY)) {
		r->early++;
		r->early_bytes += e->size;
	}
}

static void note_action(struct mt_report *r, const struct mt_event *e)
{
	if (r->nactions == MT_REPORT_ACTIONS || (e->kind != MT_EV_SNAPSHOT && e->kind != MT_EV_NVTX_MARK) ||
	    (e->kind == MT_EV_NVTX_MARK && strncmp(mt_trace_string(r->trace, e->aux), "memtap.", 7)))
		return;
	r->actions[r->nactions++] = (struct mt_action){e->time, e->aux, e->kind == MT_EV_SNAPSHOT};
}

static void look(void *comp, const struct mt_event *e)
{
	mt_composition_look(comp, e);
}

/* Each device's live entries at its peak, grouped and composed: the first replay kept
 * them as it went past the peak. */
static int at_peak(struct mt_report *r)
{
	int err = 0;

	for (int d = 0; d < MT_MAX_DEVICES && !err; d++) {
		struct mt_live *live;
		size_t n;
		if (!r->end.dev[d].peak)
			continue;
		if (!(err = mt_replay_at_peak(&r->end, d, &live, &n)) &&
		    !(err = group(&r->comp, live, n, d, &r->at_peak[d])))
			compose(r, live, n, d, r->composition[d], true);
		mt_free(live);
	}
	return err;
}

/* One or two passes over the events. The first replays to the end (counts, OOMs, the leak
 * scan and each allocation's category ride along) and keeps what each device had live at
 * its peak; the second, only where there are failed allocations or segments, replays
 * again to each failure to see what was live then and measures fragmentation, which
 * needs each device's peak event from the first. */
int mt_report_build(struct mt_report *r, const struct mt_trace *t, const struct mt_report_options *o)
{
	struct mt_replay second;
	struct mt_leak_scan scan;
	struct mt_composition_scan *comp;
	struct mt_fragment_scan *frag;
	int err;

	memset(r, 0, sizeof *r);
	r->trace = t;
	r->start = mt_trace_start(t);
	{
		char order[16], backend[32];
		mt_trace_info(t, "time", order, sizeof order);
		r->untraced = !strcmp(order, "none");
		r->block_history = r->untraced && mt_trace_info(t, "history", order, sizeof order);
		r->order = r->untraced || !strcmp(order, "order");
		/* a snapshot's times are whole microseconds: entries within one are one moment; so is
		 * a snapshot of one entry without times (entries' places: blocks before it at 0) */
		r->one_moment = r->untraced || (t->nevents && mt_trace_info(t, "backend", backend, sizeof backend) &&
						!strcmp(backend, "pytorch-snapshot") &&
						mt_trace_end(t) < r->start + (r->order ? 2 : 1000));
	}
	/* the composition's look ahead rides on the leak scan's walk for its boundaries */
	if ((err = mt_composition_start(&comp, &r->comp, t)) ||
	    (err = mt_leaks_start(&scan, &r->leaks, t, o ? o->iteration : NULL, look, comp)))
		return mt_composition_finish(comp, err);
	mt_composition_ready(comp);
	mt_replay_init(&r->end);
	r->end.track = true;					  /* for the leak scan */
	struct high *high = calloc(MT_MAX_DEVICES, sizeof *high); /* at the last boundary */
	size_t passed = 0, i = 0, n;
	const struct mt_event *batch;
	struct mt_walk *w = mt_walk_start(t);
	if (!high || !w)
		err = ENOMEM;
	else
		err = mt_replay_keep_peaks(&r->end);
	while (!err && (n = mt_walk_next(w, &batch)) != 0)
		for (const struct mt_event *e = batch; e < batch + n && !err; e++, i++) {
			mt_progress("replaying", i, t->nevents);
			err = mt_leaks_step(&scan, &r->end, i);
			if (scan.next != passed) { /* a boundary, before event i: each device's peak so far */
				passed = scan.next;
				for (int d = 0; d < MT_MAX_DEVICES; d++)
					high[d] = (struct high){r->end.dev[d].peak, r->end.dev[d].peak_event};
			}
			mt_replay_apply(&r->end, e);
			r->kinds[e->kind]++;
			early(r, e);
			driver_count(r, e);
			note_action(r, e);
			if (e->kind == MT_EV_ALLOC_FAILED && e->device != MT_NO_DEVICE && !err)
				err = add_oom(r, e, i, scan.next, &high[e->device]);
			if (!err)
				err = mt_composition_step(comp, e, i);
		}
	mt_walk_end(w);
	w = NULL;
	free(high);
	err = mt_composition_finish(comp, err);
	int found = mt_leaks_finish(&scan, &r->leaks, o && o->leak_iterations ? o->leak_iterations : 3);
	if (err || (err = found) || (err = group(&r->comp, r->end.live, r->end.slots.n, -1, &r->at_exit)) ||
	    (err = at_peak(r)))
		return err;
	/* the second replay stops at each failed allocation, and at the peak before it */
	size_t k = 0, b = 0;
	struct mt_oom **before = malloc(r->noom * sizeof *before + 1); /* by the event of their peak before */
	uint8_t *loads = r->noom ? calloc(t->nstacks, 1) : NULL;       /* per stack, at a failure */
	for (size_t j = 0; j < r->noom && before; j++)
		before[j] = &r->oom[j];
	if (r->noom && before)
		qsort(before, r->noom, sizeof *before, by_before);
	mt_replay_init(&second);
	bool segments = r->kinds[MT_EV_SEGMENT_ALLOC] > 0, ahead = segments || r->noom;
	err = before ? mt_fragment_start(&frag, &r->frag, t, &r->end, segments) : ENOMEM;
	if (!err && ahead && !(w = mt_walk_start(t)))
		err = ENOMEM;
	/* to the last failure, or to the end where the fragmentation follows segments */
	for (i = 0; !err && ahead && (n = mt_walk_next(w, &batch)) != 0;)
		for (const struct mt_event *e = batch; e < batch + n && !err && ahead; e++, i++) {
			uint8_t d;
			mt_progress("failures and segments", i, t->nevents);
			err = mt_fragment_step(frag, e, i);
			if (k == r->noom) {
				ahead = segments;
				continue;
			}
			mt_replay_apply(&second, e);
			d = e->device;
			for (; b < r->noom && before[b]->before_event == i; b++)
				if (before[b]->before)
					compose(r, second.live, second.slots.n, d, before[b]->before_composition,
						false);
			for (; k < r->noom && r->oom[k].event == i; k++) {
				r->oom[k].allocated = second.dev[d].current;
				compose(r, second.live, second.slots.n, d, r->oom[k].composition, false);
				loaded(r, &second, d, loads, &r->oom[k]);
			}
		}
	mt_walk_end(w);
	err = before ? mt_fragment_finish(frag, err) : err;
	free(before);
	free(loads);
	mt_replay_free(&second);
	return err ? err : libraries(r);
}

void mt_report_free(struct mt_report *r)
{
	mt_replay_free(&r->end);
	mt_composition_free(&r->comp);
	mt_fragment_free(&r->frag);
	free(r->oom);
	mt_leaks_free(&r->leaks);
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		free(r->at_peak[d].items);
		free(r->by_library[d].items);
	}
	free(r->at_exit.items);
}

/* ---- text ---- */

/* What prints a report: the views of its stacks are made once, as they are needed (the
 * text opens its own; a caller of mt_report_emit may keep them across reports). */
struct pr {
	FILE *out;
	const struct mt_report *r;
	struct mt_symbols *sym;
	struct mt_views *views;
	bool python; /* some stack of the trace has Python frames */
};

static void pr_open(struct pr *p, FILE *out, const struct mt_report *r, struct mt_symbols *sym, struct mt_views *views)
{
	const struct mt_trace *t = r->trace;

	*p = (struct pr){.out = out, .r = r, .sym = sym, .views = views};
	/* a recording's Python frames, or a snapshot's named frames in .py files (no stack's
	   view is made for this: a view symbolizes its frames) */
	p->python = mt_symbols_python(sym);
	for (size_t i = 0; i < t->nnamed && !p->python; i++) {
		struct mt_frame f = {.function = t->named[i].function, .file = t->named[i].file, .line = 1};
		p->python = mt_frame_is_python(&f);
	}
}

static const char *size_text(uint64_t bytes, char *buf)
{
	return mt_format_size(bytes, buf, 32);
}

/* The view's line at k: a frame, or a run of the same frame (a recursion) as one line,
 * "f (file:line) ×N"; *n: how many frames it stands for. */
static const char *view_line(struct pr *p, uint32_t stack, uint32_t k, uint32_t *n, char *buf, size_t len)
{
	const struct mt_stack *st = &p->r->trace->stacks[stack];
	const struct mt_view *v = mt_view(p->views, stack);
	size_t used;

	*n = 1;
	while (k + *n < v->nshown && st->frames[v->shown[k + *n]] == st->frames[v->shown[k]])
		(*n)++;
	mt_frame_text(mt_symbols_frame(p->sym, st->frames[v->shown[k]]), false, buf, len);
	used = strlen(buf);
	if (*n > 1 && used + 16 < len)
		snprintf(buf + used, len - used, " \xc3\x97%u", *n);
	return buf;
}

/* What a block made before recording (`before`: 1 + its category) is, in words: a
 * snapshot with no trace at all was taken without history, so nothing says when its
 * blocks were made; else what the composition read it as, parameters by default. */
const char *mt_report_before_text(const struct mt_report *r, uint8_t before)
{
	static const char *const as[MT_TAG_COUNT] = {
	    [MT_TAG_GRADS] = "allocated before recording started, read as gradients",
	    [MT_TAG_OPTIMIZER] = "allocated before recording started, read as optimizer state",
	    [MT_TAG_ACTIVATIONS] = "allocated before recording started, read as activations (freed in backward)",
	    [MT_TAG_TEMPORARIES] = "allocated before recording started, read as temporaries",
	    [MT_TAG_OTHER] = "allocated before recording started (nothing says what it is)"};

	if (r->untraced && !r->block_history)
		return MT_NO_HISTORY;
	return before > 1 && before - 1 < MT_TAG_COUNT && as[before - 1] ? as[before - 1] : MT_BEFORE_RECORDING;
}

/* Whether a stack has frames: a snapshot keeps those of blocks made before its trace that
 * live to its end, and these read as any other stack. */
static bool framed(const struct pr *p, uint32_t stack)
{
	return stack && stack < p->r->trace->nstacks && p->r->trace->stacks[stack].depth;
}

/* No frames: in a trace of Python stacks (stacks="python") a thread without Python,
 * autograd's engine thread most often; else nothing was recorded. */
static const char *no_stack(const struct pr *p)
{
	return p->python ? "(no frames: a thread without Python, autograd's engine thread likely)" : "(no stack)";
}

/* A stack as a person reads it (its view), or every frame with full names (--frames=all). */
static void stack_text(struct pr *p, uint32_t stack, uint8_t before, const char *indent)
{
	const struct mt_trace *t = p->r->trace;
	const struct mt_view *v = mt_view(p->views, stack);
	char buf[4096];

	if (!framed(p, stack)) {
		fprintf(p->out, "%s%s\n", indent, before ? mt_report_before_text(p->r, before) : no_stack(p));
		return;
	}
	if (p->r->all_frames) {
		for (uint32_t i = 0; i < t->stacks[stack].depth; i++)
			fprintf(
			    p->out, "%s%s\n", indent,
			    mt_frame_text(mt_symbols_frame(p->sym, t->stacks[stack].frames[i]), true, buf, sizeof buf));
		return;
	}
	if (p->python && !v->python)
		fprintf(p->out, "%s(no Python frames: %s)\n", indent,
			v->autograd ? "autograd's engine thread" : "a thread without Python");
	for (uint32_t k = 0, n; k < v->nshown; k += n)
		fprintf(p->out, "%s%s\n", indent, view_line(p, stack, k, &n, buf, sizeof buf));
	if (v->depth > v->nshown)
		fprintf(p->out, "%s+ %u frames of the allocator, PyTorch, the interpreter or memtap (--frames=all)\n",
			indent, v->depth - v->nshown);
}

/* Where in the code a stack was, in a few words: its first user frame (and whether before
 * recording). */
static const char *where_text(struct pr *p, uint32_t stack, uint8_t before, char *buf, size_t n)
{
	const struct mt_view *v = mt_view(p->views, stack);
	size_t k;

	if (before && !framed(p, stack))
		return mt_report_before_text(p->r, before);
	if (v->where == MT_NO_FRAME)
		return no_stack(p);
	mt_frame_text(mt_symbols_frame(p->sym, p->r->trace->stacks[stack].frames[v->where]), false, buf, n);
	/* its frames were recorded, so recording was on: the ring buffer of trace entries
	   lost its entry, or recording stopped and began again */
	if (before && (k = strlen(buf)) < n)
		snprintf(buf + k, n - k, " (made before the trace's first entry)");
	return buf;
}

/* Rows of a table grouped by where in the code (the first user frame), apart by device,
 * kind and whether made before recording; biggest first. */
struct site {
	uint64_t key, bytes, count, growth, biggest;
	uint32_t stack, stacks, iterations; /* the biggest stack; how many */
	uint8_t device, kind;
	uint8_t before;
};

static int by_site_bytes(const void *a, const void *b)
{
	const struct site *x = a, *y = b;

	if (x->growth != y->growth)
		return x->growth < y->growth ? 1 : -1;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static uint64_t site_key(struct pr *p, uint32_t stack, uint8_t before, uint8_t device, uint8_t kind)
{
	uint64_t site = before && !framed(p, stack) ? 1 : stack ? mt_view(p->views, stack)->site : 2;

	return (site ^ ((uint64_t)before << 16 | (uint64_t)device << 8 | kind) * 0x9e3779b97f4a7c15ull) | 1;
}

/* One row more (or into its site's row): stack's bytes, allocations and growth. */
static int site_add(struct site **s, size_t *n, size_t *cap, struct mt_map *index, struct pr *p, uint32_t stack,
		    uint8_t before, uint8_t device, uint8_t kind, uint64_t bytes, uint64_t count, uint64_t growth,
		    uint32_t iterations)
{
	uint64_t key = site_key(p, stack, before, device, kind), i;
	struct site *x;

	if (!mt_map_get(index, key, &i)) {
		if (mt_grow((void **)s, cap, *n, sizeof **s) || mt_map_put(index, key, *n + 1))
			return ENOMEM;
		(*s)[(*n)++] =
		    (struct site){.key = key, .stack = stack, .device = device, .kind = kind, .before = before};
		i = *n;
	}
	x = &(*s)[i - 1];
	x->bytes += bytes;
	x->count += count;
	x->growth += growth;
	x->stacks++;
	if (iterations > x->iterations)
		x->iterations = iterations;
	if (bytes + growth > x->biggest) {
		x->biggest = bytes + growth;
		x->stack = stack;
	}
	return 0;
}

/* The rows of a table of stacks, biggest first (*n 0 when out of memory); `index` maps
 * a site's key to its row + 1 before the sort. */
static struct site *sites_of(struct pr *p, const struct mt_group_list *g, size_t *n, struct mt_map *index)
{
	struct site *s = NULL;
	size_t cap = 0;

	*n = 0;
	for (size_t i = 0; i < g->n; i++)
		if (site_add(&s, n, &cap, index, p, g->items[i].stack, g->items[i].before, g->items[i].device,
			     g->items[i].kind, g->items[i].bytes, g->items[i].count, 0, 0)) {
			*n = 0;
			break;
		}
	if (*n)
		qsort(s, *n, sizeof *s, by_site_bytes);
	return s;
}

static void groups_text(struct pr *p, const struct mt_group_list *g, size_t top, bool show_kind)
{
	struct mt_map index = {0};
	size_t n;
	struct site *s = sites_of(p, g, &n, &index);
	char sz[32], where[4096];

	if (!n && g->n)
		fprintf(p->out, "  (out of memory grouping the stacks)\n");
	for (size_t i = 0; i < n && i < top; i++) {
		const struct site *x = &s[i];
		fprintf(p->out, "  %s in %" PRIu64 " allocation%s", size_text(x->bytes, sz), x->count,
			x->count == 1 ? "" : "s");
		if (show_kind)
			fprintf(p->out, " (%s%s", mt_live_kind_names[x->kind],
				x->device != MT_NO_DEVICE ? ", device " : ")");
		if (show_kind && x->device != MT_NO_DEVICE)
			fprintf(p->out, "%u)", x->device);
		if (x->stacks > 1)
			fprintf(p->out, " from %u stacks", x->stacks);
		fprintf(p->out, ": %s\n", where_text(p, x->stack, x->before, where, sizeof where));
		if (!p->r->all_frames) {
			if (!x->before || framed(p, x->stack))
				stack_text(p, x->stack, x->before, "      ");
			continue;
		}
		for (size_t k = 0; k < g->n; k++) { /* every stack of the row, every frame */
			const struct mt_group *y = &g->items[k];
			if (site_key(p, y->stack, y->before, y->device, y->kind) != x->key)
				continue;
			if (x->stacks > 1)
				fprintf(p->out, "    %s in %" PRIu64 " allocation%s:\n", size_text(y->bytes, sz),
					y->count, y->count == 1 ? "" : "s");
			stack_text(p, y->stack, y->before, "      ");
		}
	}
	if (n > top)
		fprintf(p->out, "  ... %zu more places\n", n - top);
	free(s);
	mt_map_free(&index);
}

static const char *source_name(uint8_t bits)
{
	static const char *const names[] = {"none", "tags", "inferred", "tags+inferred", "frames", "tags+frames"};
	bool tag = bits & (1u << MT_SOURCE_TAG), inferred = bits & (1u << MT_SOURCE_INFERRED),
	     frames = bits & (1u << MT_SOURCE_FRAMES);

	return names[frames ? 4 + tag : inferred ? 2 + tag : tag];
}

/* How sure a category's figure is: the bytes' evidence, 0 (a guess) to 1 (their own frames or tags). */
static double confidence(const struct mt_report *r, int d, int c)
{
	return r->composition[d][c] ? (double)r->evidence[d][c] / (2.0 * (double)r->composition[d][c]) : 0;
}

static const char *confidence_word(double c)
{
	return c >= 0.9 ? "sure" : c >= 0.5 ? "likely" : "a guess";
}

static void composition_text(FILE *out, const struct mt_report *r, int d)
{
	char sz[32];

	fprintf(out, "at the peak, by what it was for:\n");
	for (int c = 1; c < MT_TAG_COUNT; c++) {
		if (!r->composition[d][c])
			continue;
		fprintf(out, "  %-12s %12s  (%s", mt_tag_names[c], size_text(r->composition[d][c], sz),
			source_name(r->sources[d][c]));
		if (r->sources[d][c] & (1u << MT_SOURCE_FRAMES))
			fprintf(out, ", %s", confidence_word(confidence(r, d, c)));
		fputs(")\n", out);
	}
}

static void leaks_text(struct pr *p, size_t top)
{
	const struct mt_leaks *l = &p->r->leaks;
	struct site *s = NULL;
	size_t n = 0, cap = 0;
	struct mt_map index = {0};
	char sz[32], sz2[32], where[4096];

	for (size_t i = 0; i < l->n; i++)
		if (site_add(&s, &n, &cap, &index, p, l->items[i].stack, false, l->items[i].device, 0,
			     l->items[i].bytes, 0, l->items[i].growth, l->items[i].iterations))
			n = 0;
	if (n)
		qsort(s, n, sizeof *s, by_site_bytes);
	fprintf(p->out, "\ngrowing across iterations (%zu boundaries: %s):%s\n", l->boundaries, l->boundary,
		n ? "" : " nothing");
	for (size_t i = 0; i < n && i < top; i++) {
		fprintf(p->out, "  +%s per iteration for %u iterations, %s live (device %u)",
			size_text(s[i].growth, sz), s[i].iterations, size_text(s[i].bytes, sz2), s[i].device);
		if (s[i].stacks > 1)
			fprintf(p->out, " from %u stacks", s[i].stacks);
		fprintf(p->out, ": %s\n", where_text(p, s[i].stack, false, where, sizeof where));
		stack_text(p, s[i].stack, false, "      ");
	}
	free(s);
	mt_map_free(&index);
}

static double seconds(const struct mt_report *r, uint64_t t)
{
	return t > r->start ? (double)(t - r->start) / 1e9 : 0.0;
}

uint64_t mt_report_cache(const struct mt_report *r, int d)
{
	uint64_t reserved = r->end.dev[d].reserved_at_peak;

	return reserved > r->blocks_at_peak[d] ? reserved - r->blocks_at_peak[d] : 0;
}

static void libraries_text(FILE *out, const struct mt_report *r, int d)
{
	const struct mt_library_list *l = &r->by_library[d];
	const struct mt_driver_count *c = &r->driver[d];
	char sz[32], sz2[32], sz3[32];

	if (l->n)
		fprintf(out, "at the peak, by the library that asked:\n");
	for (size_t i = 0; i < l->n; i++)
		fprintf(out, "  %-24s %12s\n", l->items[i].name, size_text(l->items[i].bytes, sz));
	if (c->known)
		fprintf(out,
			"in use on the device as the driver said %s, at %.3f s: %s; memtap recorded %s of it; %s%s it "
			"could not see (CUDA contexts, memory libraries keep for themselves)\n",
			reading_text[c->reading], seconds(r, c->time), size_text(c->used, sz),
			size_text(c->recorded, sz2), c->used < c->recorded ? "-" : "",
			size_text(c->used < c->recorded ? c->recorded - c->used : c->used - c->recorded, sz3));
}

static const struct mt_frag_device *fragmentation(const struct mt_report *r, int d)
{
	return r->frag.known && r->frag.dev[d].known ? &r->frag.dev[d] : NULL;
}

static void frag_text(FILE *out, const char *when, const struct mt_frag_state *f, bool estimated)
{
	char a[32], b[32], c[32], d[32], e[32];

	fprintf(out,
		"segments %s: %" PRIu64 ", %s reserved, %s allocated (%s lost to rounding%s), %s free in segments, "
		"largest free block %s\n",
		when, f->segments, size_text(f->reserved, a), size_text(f->allocated, b),
		size_text(f->allocated - f->requested, c), estimated ? ", estimated" : "",
		size_text(f->reserved - f->allocated, d), size_text(f->largest_free, e));
}

static void frag_state_json(struct mt_emit *e, const char *key, const struct mt_report *r,
			    const struct mt_frag_state *f)
{
	mt_emit_open(e, key, false, 0);
	mt_emit_uint(e, "time_ns", mt_report_since(r, f->time));
	mt_emit_uint(e, "segments", f->segments);
	mt_emit_uint(e, "reserved_bytes", f->reserved);
	mt_emit_uint(e, "allocated_bytes", f->allocated);
	mt_emit_uint(e, "requested_bytes", f->requested);
	mt_emit_uint(e, "internal_bytes", f->allocated - f->requested);
	mt_emit_uint(e, "external_bytes", f->reserved - f->allocated);
	mt_emit_uint(e, "largest_free_block_bytes", f->largest_free);
	mt_emit_close(e);
}

static void fragmentation_json(struct mt_emit *e, const struct mt_report *r, int d)
{
	const struct mt_frag_device *f = fragmentation(r, d);

	if (!f) {
		mt_emit_null(e, "fragmentation");
		return;
	}
	mt_emit_open(e, "fragmentation", false, 0);
	mt_emit_str(e, "block_sizes", r->frag.estimated ? "estimated" : "exact");
	frag_state_json(e, "at_peak", r, &f->at_peak);
	frag_state_json(e, "at_exit", r, &f->at_end);
	mt_emit_open(e, "segments_at_peak", true, 0);
	for (size_t i = 0; i < f->nsegments; i++) {
		const struct mt_frag_segment *g = &f->segments[i];
		mt_emit_open(e, NULL, false, 0);
		mt_emit_uint(e, "address", g->addr);
		mt_emit_uint(e, "size", g->size);
		mt_emit_uint(e, "allocated_bytes", g->allocated);
		mt_emit_uint(e, "blocks", g->blocks);
		mt_emit_uint(e, "largest_free_block_bytes", g->largest_free);
		mt_emit_close(e);
	}
	mt_emit_close(e);
	mt_emit_open(e, "timeline", true, 3);
	for (size_t i = 0; i < f->ntimeline; i++)
		frag_state_json(e, NULL, r, &f->timeline[i]);
	mt_emit_close(e);
	mt_emit_close(e);
}

static void libraries_json(struct mt_emit *e, const struct mt_report *r, int d)
{
	const struct mt_library_list *l = &r->by_library[d];
	const struct mt_driver_count *c = &r->driver[d];

	mt_emit_open(e, "by_library_at_peak", true, 0);
	for (size_t i = 0; i < l->n; i++) {
		mt_emit_open(e, NULL, false, 0);
		mt_emit_str(e, "library", l->items[i].name);
		mt_emit_uint(e, "bytes", l->items[i].bytes);
		mt_emit_close(e);
	}
	mt_emit_close(e);
	if (r->end.dev[d].reserved_at_peak) {
		mt_emit_open(e, "caching_allocator_at_peak", false, 0);
		mt_emit_uint(e, "reserved_bytes", r->end.dev[d].reserved_at_peak);
		mt_emit_uint(e, "tensor_bytes", r->blocks_at_peak[d]);
		mt_emit_uint(e, "cache_bytes", mt_report_cache(r, d));
		mt_emit_close(e);
	} else {
		mt_emit_null(e, "caching_allocator_at_peak");
	}
	if (!c->known) {
		mt_emit_null(e, "driver_count");
		return;
	}
	mt_emit_open(e, "driver_count", false, 0);
	mt_emit_uint(e, "time_ns", mt_report_since(r, c->time));
	mt_emit_str(e, "reading", reading_json[c->reading]);
	mt_emit_uint(e, "used_bytes", c->used);
	mt_emit_uint(e, "recorded_bytes", c->recorded);
	mt_emit_int(e, "unseen_bytes", (int64_t)(c->used - c->recorded));
	mt_emit_close(e);
}

/* ---- the capacity plan of a measured run (memtap report --plan) ---- */

static const enum mt_tag plan_tags[MT_PLAN_COMPONENTS] = {MT_TAG_PARAMS, MT_TAG_GRADS, MT_TAG_OPTIMIZER,
							  MT_TAG_ACTIVATIONS, MT_TAG_TEMPORARIES};

void mt_report_unfinished(const struct mt_plan *model, double measured[MT_PLAN_COMPONENTS])
{
	for (int j = MT_PLAN_GRADS; j < MT_PLAN_COMPONENTS; j++)
		if (measured[j] < model->bytes[j])
			measured[j] = 0; /* the model's, whole */
}

bool mt_report_components(const uint64_t composition[MT_TAG_COUNT], uint64_t total, double measured[MT_PLAN_COMPONENTS],
			  double *other)
{
	double known = 0;

	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		known += measured[j] = (double)composition[plan_tags[j]];
	*other = (double)total - known;
	return known > 0;
}

int mt_report_measured(const struct mt_report *r, int d, double measured[MT_PLAN_COMPONENTS], double *other)
{
	if (d < 0)
		for (int k = 0; k < MT_MAX_DEVICES; k++)
			if (r->end.dev[k].seen && (d < 0 || r->end.dev[k].peak > r->end.dev[d].peak))
				d = k;
	if (d < 0 || d >= MT_MAX_DEVICES || !r->end.dev[d].seen)
		return -1;
	return mt_report_components(r->composition[d], r->end.dev[d].peak, measured, other) ? d : -1;
}

/* The plan at the run's own setting and the ZeRO x recomputation table, calibrated on the
 * measurement; false when there is nothing to calibrate on. */
static bool plan_build(const struct mt_report *r, int *d, double measured[MT_PLAN_COMPONENTS], double *other,
		       struct mt_plan *est, double table[4][3])
{
	struct mt_plan_scale s;

	if (!r->plan || (*d = mt_report_measured(r, -1, measured, other)) < 0)
		return false;
	mt_plan_compute(r->plan, NULL, est);
	for (size_t k = 0; k < r->noom; k++) /* the device's first failure came before a whole step ran */
		if (r->oom[k].ev.device == *d) {
			if (!mt_oom_after_a_step(&r->oom[k]))
				mt_report_unfinished(est, measured);
			break;
		}
	mt_plan_calibrate(r->plan, measured, *other, &s);
	mt_plan_table(r->plan, &s, table);
	return true;
}

static void plan_text(FILE *out, const struct mt_report *r)
{
	double measured[MT_PLAN_COMPONENTS], other, table[4][3];
	struct mt_plan est;
	char setup[256], sz[32], sz2[32];
	int d;

	if (!r->plan)
		return;
	if (!plan_build(r, &d, measured, &other, &est, table)) {
		fprintf(out,
			"\ncapacity plan: nothing at the peak is known as params, grads, optimizer or activations\n");
		return;
	}
	mt_plan_describe(r->plan, setup, sizeof setup);
	fprintf(out, "\ncapacity plan for device %d, the run as %s:\n", d, setup);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		fprintf(out, "  %-12s measured %12s  estimated %12s\n", mt_plan_component_names[j],
			size_text((uint64_t)measured[j], sz), size_text((uint64_t)est.bytes[j], sz2));
	if (est.bytes[MT_PLAN_PARAMS] > 0 && measured[MT_PLAN_PARAMS] > 0 &&
	    fabs(log(measured[MT_PLAN_PARAMS] / est.bytes[MT_PLAN_PARAMS])) > log(1.25))
		fprintf(out,
			"  note: the parameters measure %.2f times the model's: is the setup right (the model, "
			"--precision, ZeRO)?\n",
			measured[MT_PLAN_PARAMS] / est.bytes[MT_PLAN_PARAMS]);
	fprintf(out, "  projected total per GPU by ZeRO stage and recomputation:\n  %-7s", "");
	for (int k = 0; k < 3; k++)
		fprintf(out, " %12s", mt_plan_recompute_names[k]);
	for (int z = 0; z <= 3; z++) {
		fprintf(out, "\n  ZeRO-%d ", z);
		for (int k = 0; k < 3; k++)
			fprintf(out, " %12s", isinf(table[z][k]) ? "-" : size_text((uint64_t)table[z][k], sz));
	}
	fputc('\n', out);
}

static void plan_json(struct mt_emit *e, const struct mt_report *r)
{
	double measured[MT_PLAN_COMPONENTS], other, table[4][3];
	struct mt_plan est;
	char setup[256];
	int d;

	if (!plan_build(r, &d, measured, &other, &est, table)) {
		mt_emit_null(e, "plan");
		return;
	}
	mt_plan_describe(r->plan, setup, sizeof setup);
	mt_emit_open(e, "plan", false, 0);
	mt_emit_int(e, "device", d);
	mt_emit_str(e, "setup", setup);
	mt_emit_open(e, "components", true, 0);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++) {
		mt_emit_open(e, NULL, false, 0);
		mt_emit_str(e, "name", mt_plan_component_names[j]);
		mt_emit_num(e, "measured", measured[j], 0);
		mt_emit_num(e, "estimated", est.bytes[j], 0);
		mt_emit_close(e);
	}
	mt_emit_close(e);
	mt_emit_num(e, "other_bytes", other, 0);
	mt_emit_num(e, "estimated_total", est.total, 0);
	mt_emit_str(e, "moment", est.moment);
	mt_emit_open(e, "table", true, 0);
	for (int z = 0; z <= 3; z++) {
		mt_emit_open(e, NULL, false, 0);
		mt_emit_int(e, "zero", z);
		for (int k = 0; k < 3; k++)
			if (isinf(table[z][k]))
				mt_emit_null(e, mt_plan_recompute_names[k]);
			else
				mt_emit_num(e, mt_plan_recompute_names[k], table[z][k], 0);
		mt_emit_close(e);
	}
	mt_emit_close(e);
	mt_emit_close(e);
}

/* A moment of the trace: seconds since its start, or an entry's place where the trace has
 * no times (a snapshot without time_us). */
static const char *when_text(const struct mt_report *r, uint64_t t, char *buf, size_t n)
{
	if (r->one_moment)
		snprintf(buf, n, "the snapshot");
	else if (r->order)
		snprintf(buf, n, "entry %" PRIu64, t > r->start ? t - r->start : 0);
	else
		snprintf(buf, n, "%.3f s", seconds(r, t));
	return buf;
}

const char *mt_capacity_text(const struct mt_device_state *s, char *buf, size_t n)
{
	char a[32], b[32];

	if (!s->capacity)
		snprintf(buf, n, "capacity unknown");
	else if (s->device_bytes > s->capacity)
		snprintf(buf, n, "capped at %s by a policy; the device has %s", size_text(s->capacity, a),
			 size_text(s->device_bytes, b));
	else
		snprintf(buf, n, "%s", size_text(s->capacity, a));
	return buf;
}

/* What a failed request ran out of, after "out of memory with F free of T": a policy's
 * cap below the device's size, the device's memory, or, with the request's size free,
 * neither. */
static const char *limit_text(const struct mt_report *r, const struct mt_event *ev, char *buf, size_t n)
{
	const struct mt_device_state *s = ev->device != MT_NO_DEVICE ? &r->end.dev[ev->device] : NULL;
	char a[32];

	buf[0] = '\0';
	if (ev->error != 2 || !ev->aux2)
		return buf;
	if (s && s->device_bytes > ev->aux2)
		snprintf(buf, n, " (a policy's cap; the device has %s)", size_text(s->device_bytes, a));
	else if (ev->aux >= ev->size)
		snprintf(buf, n, " (it would have fit: an injected failure, or a limit of the driver's)");
	else
		snprintf(buf, n, " (the device's whole memory)");
	return buf;
}

void mt_report_oom_summary(FILE *out, const struct mt_report *r, struct mt_symbols *sym, const char *prefix)
{
	const struct mt_event *ev;
	char sz[32], sz2[32], sz3[32], when[64], where[512], limit[160];
	struct pr p;

	if (!r->noom)
		return;
	ev = &r->oom[0].ev;
	pr_open(&p, out, r, sym, mt_views_open(r->trace, sym));
	fprintf(out, "%sthe job's allocation failed%s: %s asked on device %d at %s", prefix,
		ev->error == 2 ? ", out of memory" : "", size_text(ev->size, sz),
		ev->device == MT_NO_DEVICE ? -1 : ev->device, when_text(r, ev->time, when, sizeof when));
	if (ev->phase)
		fprintf(out, " in NVTX range %s", mt_trace_string(r->trace, ev->phase));
	if (framed(&p, ev->stack))
		fprintf(out, ", from %s", where_text(&p, ev->stack, 0, where, sizeof where));
	if (ev->error == 2 && ev->aux2)
		fprintf(out, "; %s free of %s%s", size_text(ev->aux, sz2), size_text(ev->aux2, sz3),
			limit_text(r, ev, limit, sizeof limit));
	else if (ev->error != 2)
		fprintf(out, "; error %d", ev->error);
	if (r->noom > 1)
		fprintf(out, " (%zu failures in all)", r->noom);
	fputc('\n', out);
	mt_views_close(p.views);
}

/* ---- what to change so that it fits (analyze/diagnose.c) ---- */

/* What was live, biggest first, in one line ("activations 9.58 GiB, params 237.35 MiB"). */
static void live_text(FILE *out, const uint64_t *composition)
{
	bool done[MT_TAG_COUNT] = {true};
	char sz[32];

	for (int n = 0;; n++) {
		int best = 0;
		for (int c = 1; c < MT_TAG_COUNT; c++)
			if (!done[c] && composition[c] && (!best || composition[c] > composition[best]))
				best = c;
		if (!best)
			break;
		done[best] = true;
		fprintf(out, "%s%s %s", n ? ", " : "", mt_tag_names[best], size_text(composition[best], sz));
	}
}

static void cause_text(struct pr *p, const struct mt_diagnosis *g)
{
	FILE *out = p->out;
	char sz[32], sz2[32], where[4096];

	fprintf(out, "    cause: ");
	switch (g->cause) {
	case MT_CAUSE_GROWTH:
		fprintf(out, "memory grew across iterations, %s, most at %s; without it, it would have fit\n",
			size_text(g->cause_bytes, sz), where_text(p, g->cause_stack, 0, where, sizeof where));
		stack_text(p, g->cause_stack, 0, "        ");
		fprintf(out, "    what grew: %s\n", mt_growth_words[g->growth]);
		break;
	case MT_CAUSE_CHECKPOINT:
		fprintf(out,
			"a checkpoint loaded onto the device beside the live model, %s, most at %s; without it, it "
			"would have fit\n",
			size_text(g->cause_bytes, sz), where_text(p, g->cause_stack, 0, where, sizeof where));
		stack_text(p, g->cause_stack, 0, "        ");
		break;
	case MT_CAUSE_POOLS:
		fprintf(
		    out,
		    "CUDA graphs' private pools (torch.compile's reduce-overhead, torch.cuda.graph, MemPool) hold %s; "
		    "without them, it would have fit\n",
		    size_text(g->cause_bytes, sz));
		break;
	case MT_CAUSE_FRAGMENTATION:
		fprintf(out,
			"fragmentation: %s free in the allocator's segments, enough for the request, but not in one "
			"block\n",
			size_text(g->cause_bytes, sz));
		break;
	case MT_CAUSE_CACHE:
		fprintf(out,
			"the allocator's cache: the tensors peak at %s, within the capacity, but the allocator held %s "
			"more\n",
			size_text(g->allocated, sz), size_text(g->cause_bytes, sz2));
		break;
	case MT_CAUSE_OUTSIDE:
		fprintf(out,
			"memory outside what memtap saw: %s of the device was used by no allocation it recorded (CUDA "
			"contexts, other processes, libraries' own pools)\n",
			size_text(g->cause_bytes, sz));
		break;
	case MT_CAUSE_OPTIMIZER:
		fprintf(
		    out,
		    "the optimizer's state, %s made at the first step, leaves the next step no room: without it, it "
		    "would have fit\n",
		    size_text(g->cause_bytes, sz));
		break;
	default:
		fprintf(out, "the step needs more than the device: it needs %s%s\n", size_text((uint64_t)g->need, sz),
			g->peak ? ", its peak"
			: g->need_estimated
			    ? ", estimated: the first step had not finished, and the planner, calibrated "
			      "on what was measured, gives the rest"
			    : " or more: what was in use and the request");
	}
	fprintf(out, g->peak ? "    at the peak: " : "    in use then: ");
	live_text(out, g->composition);
	fputc('\n', out);
}

static bool fits_any(const struct mt_diagnosis *g)
{
	for (size_t k = 0; k < g->nremedies; k++)
		if (g->remedy[k].fits)
			return true;
	return false;
}

/* The changes that fit, cheapest for the user first, then in one line those tried that
 * would not. */
static void remedies_text(struct pr *p, const struct mt_diagnosis *g)
{
	FILE *out = p->out;
	char sz[32], sz2[32];
	size_t tried = 0;

	if (fits_any(g))
		fprintf(out, "    what would fit, cheapest for you first (the peak each predicts):\n");
	for (size_t k = 0; k < g->nremedies; k++) {
		const struct mt_remedy *m = &g->remedy[k];
		if (!m->fits)
			continue;
		fprintf(out, "      %s\n", m->change);
		fprintf(out, "        %s allocated, %s reserved (%s); %s\n", size_text((uint64_t)m->allocated, sz),
			size_text((uint64_t)m->reserved, sz2), m->how, m->cost);
	}
	for (size_t k = 0; k < g->nremedies; k++) {
		const struct mt_remedy *m = &g->remedy[k];
		if (m->fits)
			continue;
		fprintf(out, "%s%s (",
			tried++ ? ", " : "    tried, would not fit: ", m->options[0] ? m->options : m->change);
		if (m->kind == MT_FIX_ALLOCATOR) /* its reserve without a limit is no figure to use */
			fprintf(out, "an allocation still fails)");
		else
			fprintf(out, "needs %s)", size_text((uint64_t)m->reserved, sz));
	}
	if (tried)
		fputc('\n', out);
}

/* What --gpu-mem says of each device the diagnoses above do not cover. */
static void gpu_mem_text(struct pr *p, const struct mt_diagnosis *all, size_t n)
{
	const struct mt_report *r = p->r;
	char sz[32], sz2[32];
	bool head = n > 0;

	for (int d = 0; d < MT_MAX_DEVICES && r->target; d++) {
		const struct mt_device_state *s = &r->end.dev[d];
		uint64_t held = s->peak_reserved > s->peak ? s->peak_reserved : s->peak;
		bool over = false, failed = false;
		for (size_t k = 0; k < n; k++)
			if (all[k].device == d)
				*(all[k].peak ? &over : &failed) = true;
		if (!s->peak || over)
			continue;
		if (!head)
			fprintf(p->out, "\nwhat to change so that it fits:\n");
		head = true;
		if (failed)
			fprintf(p->out,
				"  --gpu-mem %s: not applied to device %d, which ran out of memory: the failure's "
				"diagnosis is above\n",
				size_text(r->target, sz), d);
		else
			fprintf(p->out, "  --gpu-mem %s: device %d's peak, %s %s, fits; nothing to change\n",
				size_text(r->target, sz), d, size_text(held, sz2),
				s->peak_reserved > s->peak ? "reserved" : "allocated");
	}
}

static void diagnosis_text(struct pr *p)
{
	const struct mt_report *r = p->r;
	FILE *out = p->out;
	struct mt_diagnosis *all;
	size_t n;
	char sz[32], sz2[32], sz3[32], when[64];

	if (mt_diagnose(r, &all, &n)) {
		fprintf(out, "\nwhat to change so that it fits: not worked out (out of memory)\n");
		return;
	}
	if (n)
		fprintf(out, "\nwhat to change so that it fits:\n");
	if (n >= MT_DIAGNOSED && !all[MT_DIAGNOSED - 1].peak && r->noom > MT_DIAGNOSED)
		fprintf(out, "  the first %d failures (of %zu):\n", MT_DIAGNOSED, r->noom);
	for (size_t i = 0; i < n; i++) {
		const struct mt_diagnosis *g = &all[i];
		if (g->peak && g->reserved)
			fprintf(out, "  device %u's peak, %s reserved (%s allocated), is over the %s of --gpu-mem:\n",
				g->device, size_text(g->reserved, sz), size_text(g->allocated, sz3),
				size_text(g->capacity, sz2));
		else if (g->peak)
			fprintf(out, "  device %u's peak, %s allocated, is over the %s of --gpu-mem:\n", g->device,
				size_text(g->allocated, sz), size_text(g->capacity, sz2));
		else
			fprintf(out,
				"  the out-of-memory failure at %s on device %u: %s asked with %s in use, of %s:\n",
				when_text(r, g->time, when, sizeof when), g->device, size_text(g->request, sz),
				size_text(g->allocated, sz2), size_text(g->capacity, sz3));
		cause_text(p, g);
		remedies_text(p, g);
		if (g->replay)
			fprintf(out, "    allocator settings not tried: %s\n", g->replay);
		if (!g->planned && (g->cause == MT_CAUSE_STEP || g->cause == MT_CAUSE_OPTIMIZER ||
				    g->cause == MT_CAUSE_OUTSIDE || !fits_any(g)))
			fprintf(
			    out,
			    "    give the model and the run's setup (report --plan '--model config.json --seq N "
			    "--micro-batch N ...') for what a smaller micro-batch, recomputation, precision, offload "
			    "or ZeRO would need\n");
	}
	gpu_mem_text(p, all, n);
	free(all);
}

static void diagnosis_json(struct pr *p, struct mt_emit *e)
{
	const struct mt_report *r = p->r;
	struct mt_diagnosis *all;
	size_t n;
	char where[4096];

	if (mt_diagnose(r, &all, &n)) {
		mt_emit_null(e, "diagnosis");
		return;
	}
	mt_emit_open(e, "diagnosis", true, 0);
	for (size_t i = 0; i < n; i++) {
		const struct mt_diagnosis *g = &all[i];
		mt_emit_open(e, NULL, false, 0);
		mt_emit_str(e, "of", g->peak ? "peak" : "oom");
		mt_emit_int(e, "device", g->device);
		mt_emit_uint(e, "time_ns", mt_report_since(r, g->time));
		mt_emit_uint(e, "capacity_bytes", g->capacity);
		mt_emit_uint(e, "outside_bytes", g->outside);
		mt_emit_uint(e, "request_bytes", g->request);
		mt_emit_uint(e, "allocated_bytes", g->allocated);
		mt_emit_uint(e, "reserved_bytes", g->reserved);
		mt_emit_open(e, "live", false, 0);
		for (int c = 1; c < MT_TAG_COUNT; c++)
			mt_emit_uint(e, mt_tag_names[c], g->composition[c]);
		mt_emit_close(e);
		mt_emit_bool(e, "step_finished", g->step_finished);
		mt_emit_str(e, "cause", mt_cause_names[g->cause]);
		mt_emit_uint(e, "cause_bytes", g->cause_bytes);
		if (g->cause == MT_CAUSE_GROWTH || g->cause == MT_CAUSE_CHECKPOINT)
			mt_emit_str(e, "cause_where", where_text(p, g->cause_stack, 0, where, sizeof where));
		if (g->cause == MT_CAUSE_GROWTH) {
			mt_emit_str(e, "growth", mt_growth_names[g->growth]);
			mt_emit_str(e, "what_grew", mt_growth_words[g->growth]);
		}
		mt_emit_num(e, "need_bytes", g->need, 0);
		mt_emit_str(e, "need", g->need_estimated ? "estimated" : "at_least");
		mt_emit_bool(e, "planned", g->planned);
		mt_emit_str(e, "allocator_not_tried", g->replay);
		mt_emit_open(e, "remedies", true, 0);
		for (size_t k = 0; k < g->nremedies; k++) {
			const struct mt_remedy *m = &g->remedy[k];
			mt_emit_open(e, NULL, false, 0);
			mt_emit_str(e, "kind", mt_fix_names[m->kind]);
			mt_emit_str(e, "change", m->change);
			mt_emit_str(e, "options", m->options);
			if (m->kind == MT_FIX_LEAK || m->kind == MT_FIX_CHECKPOINT)
				mt_emit_str(e, "where", where_text(p, m->stack, 0, where, sizeof where));
			mt_emit_num(e, "allocated_bytes", m->allocated, 0);
			mt_emit_num(e, "reserved_bytes", m->reserved, 0);
			mt_emit_bool(e, "fits", m->fits);
			mt_emit_str(e, "cost", m->cost);
			mt_emit_str(e, "predicted_by", m->how);
			mt_emit_close(e);
		}
		mt_emit_close(e);
		mt_emit_close(e);
	}
	mt_emit_close(e);
	free(all);
}

/* The end as torch/cuda/_memory_viz.py's segsum counts it: allocated is what was asked for
 * (requested), free is everything else, the part lost to rounding internal. */
static void segsum_text(FILE *out, const char *what, const struct mt_frag_state *f)
{
	char a[32], b[32], c[32];
	uint64_t free = f->reserved - f->requested, internal = f->allocated - f->requested;

	fprintf(out, "%s: total_reserved %s, total_allocated %s, total_free %s", what, size_text(f->reserved, a),
		size_text(f->requested, b), size_text(free, c));
	if (free)
		fprintf(out, " (%.1f%% internal)", 100.0 * (double)internal / (double)free);
	fputc('\n', out);
}

void mt_report_text(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top)
{
	const struct mt_trace *t = r->trace;
	const struct mt_replay *e = &r->end;
	char sz[32], sz2[32], sz3[32], when[64], pid[32] = "?", host[256] = "?", backend[32] = "", capacity[128],
						 limit[160], line[256];
	bool snapshot;
	struct pr p;

	pr_open(&p, out, r, sym, mt_views_open(t, sym));
	mt_trace_info(t, "pid", pid, sizeof pid);
	mt_trace_info(t, "host", host, sizeof host);
	mt_trace_info(t, "backend", backend, sizeof backend);
	snapshot = !strcmp(backend, "pytorch-snapshot");
	/* imports say what they were; a memtap trace names its process */
	if (snapshot)
		fprintf(out, "memtap report: %s (a PyTorch memory snapshot%s)\n", t->path,
			r->untraced && r->block_history
			    ? " with no trace: it holds only what was live then, the blocks made while memory "
			      "history was on with their stacks"
			: r->untraced ? " with no trace: taken without memory history, it holds only what was live then"
			: r->order && r->one_moment ? "; it has no times and one entry: one moment, no time axis"
			: r->order		    ? "; it has no times, so entries are numbered in order"
			: r->one_moment ? "; its entries all fall in one microsecond: one moment, no time axis"
					: "");
	else if (!strcmp(backend, "rmm-log"))
		fprintf(out, "memtap report: %s (an RMM log)\n", t->path);
	else if (!mt_trace_info(t, "pid", pid, sizeof pid))
		fprintf(out, "memtap report: %s (no process information%s)\n", t->path,
			t->complete ? "" : ", cut short");
	else
		fprintf(out, "memtap report: %s (pid %s on %s%s)\n", t->path, pid, host,
			t->complete ? "" : ", cut short");
	fprintf(out, "events: %" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64 " failed, %" PRIu64 " dropped\n",
		e->allocs, e->frees, e->failed, t->dropped);
	if (t->waits)
		fprintf(out, "%s\n", mt_report_waits_text(t, line, sizeof line));
	if (r->early)
		fprintf(out,
			"%" PRIu64 " of them (%s) made in constructors of libraries loaded after memtap, before its "
			"own: memtap started at the first such call and recorded them\n",
			r->early, size_text(r->early_bytes, sz));
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		const struct mt_device_state *s = &e->dev[d];
		if (!s->seen)
			continue;
		fprintf(out, "\ndevice %d (%s, %s): ", d, s->name ? mt_trace_string(t, s->name) : "unnamed",
			mt_capacity_text(s, capacity, sizeof capacity));
		if (!s->peak) { /* a device the trace names, or a snapshot's list of snapshot entries */
			fprintf(out, "nothing allocated\n");
		} else {
			fprintf(out, "peak %s allocated at %s; %s allocated at exit\n", size_text(s->peak, sz),
				when_text(r, s->peak_time, when, sizeof when), size_text(s->current, sz3));
			composition_text(out, r, d);
		}
		if (s->reserved_at_peak)
			fprintf(out,
				"the caching allocator's reserve at the peak: %s: %s in tensors' blocks, %s cache\n",
				size_text(s->reserved_at_peak, sz), size_text(r->blocks_at_peak[d], sz2),
				size_text(mt_report_cache(r, d), sz3));
		if (fragmentation(r, d)) {
			frag_text(out, "at the peak", &fragmentation(r, d)->at_peak, r->frag.estimated);
			frag_text(out, "at the end", &fragmentation(r, d)->at_end, r->frag.estimated);
			if (snapshot)
				segsum_text(out, "as PyTorch's segsum counts the end", &fragmentation(r, d)->at_end);
		}
		libraries_text(out, r, d);
		if (r->at_peak[d].n) {
			fprintf(out, "live at the peak, by where in the code:\n");
			groups_text(&p, &r->at_peak[d], top, false);
		}
	}
	if (snapshot) { /* segsum sums every device of the file */
		struct mt_frag_state all = {0};
		int n = 0;
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			if (e->dev[d].seen && fragmentation(r, d)) {
				const struct mt_frag_state *f = &fragmentation(r, d)->at_end;
				all.reserved += f->reserved, all.allocated += f->allocated,
				    all.requested += f->requested;
				n++;
			}
		if (n > 1) {
			fputc('\n', out);
			segsum_text(out, "every device, as PyTorch's segsum sums the file", &all);
		}
	}
	if (e->host_peak)
		fprintf(out, "\npinned host memory: peak %s\n", size_text(e->host_peak, sz));
	fprintf(out, "\nlive at exit:%s\n", r->at_exit.n ? "" : " nothing");
	groups_text(&p, &r->at_exit, top, true);
	leaks_text(&p, top);
	fprintf(out, "\nout-of-memory events:%s\n", r->kinds[MT_EV_ALLOC_FAILED] ? "" : " none");
	for (size_t k = 0; k < r->noom; k++) {
		size_t i = r->oom[k].event;
		const struct mt_event *ev = &r->oom[k].ev;
		const struct mt_frag_oom *fo = mt_fragment_oom(&r->frag, i);
		fprintf(out, "  %s requested on device %d at %s", size_text(ev->size, sz),
			ev->device == MT_NO_DEVICE ? -1 : ev->device, when_text(r, ev->time, when, sizeof when));
		if (ev->error == 2 && ev->aux2)
			fprintf(out, ": out of memory with %s free of %s%s", size_text(ev->aux, sz),
				size_text(ev->aux2, sz2), limit_text(r, ev, limit, sizeof limit));
		else if (ev->error == 2)
			fprintf(out, ": out of memory with %s free", size_text(ev->aux, sz));
		else
			fprintf(out, ": error %d", ev->error);
		if (fo && fo->fits == 1)
			fprintf(out,
				" (it would have fit without fragmentation: %s free in segments, the largest block %s)",
				size_text(fo->state.reserved - fo->state.allocated, sz),
				size_text(fo->state.largest_free, sz2));
		else if (fo && fo->fits == 0)
			fprintf(out, " (not fragmentation: %s of %s reserved was allocated, %s free in segments)",
				size_text(fo->state.allocated, sz), size_text(fo->state.reserved, sz2),
				size_text(fo->state.reserved - fo->state.allocated, sz3));
		if (ev->phase)
			fprintf(out, " in %s", mt_trace_string(t, ev->phase));
		fputc('\n', out);
		stack_text(&p, ev->stack, false, "      ");
	}
	diagnosis_text(&p);
	plan_text(out, r);
	if (t->problem[0])
		fprintf(out, "\nnote: %s\n", t->problem);
	mt_views_close(p.views);
}

/* ---- JSON, and any other sink ---- */

static void frames_json(struct mt_emit *e, const struct mt_report *r, struct mt_symbols *sym, uint32_t stack)
{
	const struct mt_trace *t = r->trace;
	char hex[24];

	mt_emit_open(e, "frames", true, 0);
	for (uint32_t i = 0; stack && stack < t->nstacks && i < t->stacks[stack].depth; i++) {
		const struct mt_frame *f = mt_symbols_frame(sym, t->stacks[stack].frames[i]);
		mt_emit_open(e, NULL, false, 0);
		snprintf(hex, sizeof hex, "0x%" PRIx64, f->addr);
		mt_emit_str(e, "address", hex);
		mt_emit_str(e, "function", f->function);
		mt_emit_str(e, "file", f->file);
		mt_emit_int(e, "line", f->line);
		mt_emit_str(e, "module", f->module);
		snprintf(hex, sizeof hex, "0x%" PRIx64, f->offset);
		mt_emit_str(e, "offset", hex);
		mt_emit_close(e);
	}
	mt_emit_close(e);
}

/* A stack's frames, and how it reads (docs/REPORT.md): its view's lines, where in the
 * code, whether made before recording. */
static void stack_json(struct pr *p, struct mt_emit *e, uint32_t stack, uint8_t before, bool whole)
{
	const struct mt_trace *t = p->r->trace;
	const struct mt_view *v = mt_view(p->views, stack);
	char buf[4096];

	if (whole) {
		frames_json(e, p->r, p->sym, stack);
	} else {
		mt_emit_open(e, "frames", true, 0);
		mt_emit_close(e);
	}
	if ((before && !framed(p, stack)) || v->where == MT_NO_FRAME)
		mt_emit_null(e, "where");
	else
		mt_emit_str(e, "where", where_text(p, stack, false, buf, sizeof buf));
	mt_emit_open(e, "view", true, 0);
	for (uint32_t k = 0, n; whole && k < v->nshown && stack < t->nstacks; k += n)
		mt_emit_str(e, NULL, view_line(p, stack, k, &n, buf, sizeof buf));
	mt_emit_close(e);
	mt_emit_bool(e, "before_recording", before);
	if (before) { /* what the composition read it as, and the text's words for it (only
		       * here: old reports stay as they were) */
		mt_emit_str(e, "read_as", mt_tag_names[before - 1 < MT_TAG_COUNT ? before - 1 : 0]);
		mt_emit_str(e, "before_text", mt_report_before_text(p->r, before));
	}
}

/* The page's stacks are bounded whatever the trace holds (a hostile one repeats a frame
 * name of 100 kB in thousands of stacks): each list at most MT_PAGE_LINES lines of at most
 * MT_PAGE_TEXT bytes, and past MT_PAGE_STACK_BYTES in all a stack keeps only its "where". */
#define MT_PAGE_LINES 48
#define MT_PAGE_TEXT 256
#define MT_PAGE_STACK_BYTES (16u << 20)

static const char *clip(const char *s, char *buf)
{
	return mt_text_clip(s, buf, MT_PAGE_TEXT);
}

/* The view's frames in the order of the calls, the outermost first (the view shows the
 * user's frames first, which is not that order where a Python line calls into C++), a
 * frame repeated at once written once. */
static void calls_json(struct pr *p, struct mt_emit *e, uint32_t stack)
{
	const struct mt_trace *t = p->r->trace;
	const struct mt_view *v = mt_view(p->views, stack);
	char buf[2][MT_PAGE_TEXT];
	uint32_t last = MT_NO_FRAME, written = 0;

	mt_emit_open(e, "calls", true, 0);
	for (uint32_t k = 0, shown = 0; stack < t->nstacks && shown < v->nshown && written < MT_PAGE_LINES; shown++) {
		uint32_t next = MT_NO_FRAME; /* the outermost frame shown that is inside the last */
		for (uint32_t j = 0; j < v->nshown; j++)
			if (v->shown[j] < last && (next == MT_NO_FRAME || v->shown[j] > next))
				next = v->shown[j];
		last = next;
		mt_frame_text(mt_symbols_frame(p->sym, t->stacks[stack].frames[next]), false, buf[k], sizeof buf[k]);
		if (!shown || strcmp(buf[k], buf[!k])) {
			mt_emit_str(e, NULL, buf[k]);
			k = !k;
			written++;
		}
	}
	mt_emit_close(e);
}

/* A stack for the page, as --json's rows have it but bounded (above), with its depth and
 * its calls. */
static void page_stack_json(struct pr *p, struct mt_emit *e, uint32_t stack, bool whole)
{
	const struct mt_trace *t = p->r->trace;
	const struct mt_view *v = mt_view(p->views, stack);
	uint32_t depth = stack && stack < t->nstacks ? t->stacks[stack].depth : 0;
	char buf[4][MT_PAGE_TEXT], where[4096];

	mt_emit_open(e, "frames", true, 0);
	for (uint32_t i = 0; whole && i < depth && i < MT_PAGE_LINES; i++) {
		const struct mt_frame *f = mt_symbols_frame(p->sym, t->stacks[stack].frames[i]);
		mt_emit_open(e, NULL, false, 0);
		mt_emit_str(e, "function", clip(f->function, buf[0]));
		mt_emit_str(e, "file", clip(f->file, buf[1]));
		mt_emit_int(e, "line", f->line);
		mt_emit_str(e, "module", clip(f->module, buf[2]));
		mt_emit_close(e);
	}
	mt_emit_close(e);
	mt_emit_uint(e, "depth", depth);
	if (v->where == MT_NO_FRAME)
		mt_emit_null(e, "where");
	else
		mt_emit_str(e, "where", clip(where_text(p, stack, false, where, sizeof where), buf[3]));
	mt_emit_open(e, "view", true, 0);
	for (uint32_t k = 0, n, lines = 0; whole && k < v->nshown && lines < MT_PAGE_LINES; k += n, lines++)
		mt_emit_str(e, NULL, clip(view_line(p, stack, k, &n, where, sizeof where), buf[0]));
	mt_emit_close(e);
	if (whole)
		calls_json(p, e, stack);
}

/* Stacks for the page's allocations and caller trees, keyed by their number. */
void mt_report_stacks_emit(struct mt_emit *e, FILE *out, const struct mt_report *r, struct mt_symbols *sym,
			   struct mt_views *views, const uint32_t *stacks, size_t n)
{
	long begin = ftell(out);
	char key[16];
	struct pr p;

	pr_open(&p, NULL, r, sym, views);
	mt_emit_open(e, NULL, false, 1);
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "%" PRIu32, stacks[i]);
		mt_emit_open(e, key, false, 0);
		page_stack_json(&p, e, stacks[i], begin < 0 || ftell(out) - begin < (long)MT_PAGE_STACK_BYTES);
		mt_emit_close(e);
	}
	mt_emit_close(e);
}

/* The first `top` stacks, and every other stack of the text's first `top` rows, so that
 * the HTML, which groups the stacks into rows as the text does, sums the same rows; those
 * others without their frames, but a row's biggest stack, which the HTML shows. */
static void groups_json(struct pr *p, struct mt_emit *e, const struct mt_group_list *g, size_t top)
{
	struct mt_map index = {0}, shown = {0};
	size_t n;
	struct site *s = sites_of(p, g, &n, &index);

	for (size_t i = 0; i < n && i < top; i++)
		if (mt_map_put(&shown, s[i].key, s[i].stack + 1ull))
			break;
	for (size_t i = 0; i < g->n; i++) {
		const struct mt_group *x = &g->items[i];
		uint64_t biggest = 0;
		bool row = mt_map_get(&shown, site_key(p, x->stack, x->before, x->device, x->kind), &biggest);
		if (i >= top && !row)
			continue;
		mt_emit_open(e, NULL, false, 0);
		mt_emit_int(e, "device", x->device == MT_NO_DEVICE ? -1 : x->device);
		mt_emit_str(e, "kind", mt_live_kind_names[x->kind]);
		mt_emit_uint(e, "bytes", x->bytes);
		mt_emit_uint(e, "count", x->count);
		stack_json(p, e, x->stack, x->before, i < top || biggest == x->stack + 1ull);
		mt_emit_close(e);
	}
	free(s);
	mt_map_free(&index);
	mt_map_free(&shown);
}

static void events_json(struct mt_emit *e, const struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	const struct mt_replay *end = &r->end;

	mt_emit_open(e, "events", false, 0);
	mt_emit_uint(e, "total", t->nevents);
	mt_emit_uint(e, "allocs", end->allocs);
	mt_emit_uint(e, "frees", end->frees);
	mt_emit_uint(e, "failed", end->failed);
	mt_emit_uint(e, "dropped", t->dropped);
	mt_emit_uint(e, "unmatched_frees", end->unmatched_frees);
	mt_emit_uint(e, "early_allocs", r->early);
	mt_emit_uint(e, "early_alloc_bytes", r->early_bytes);
	mt_emit_open(e, "by_kind", false, 0);
	for (int k = 0; k < MT_EV_COUNT; k++)
		if (r->kinds[k])
			mt_emit_uint(e, mt_kind_names[k], r->kinds[k]);
	mt_emit_close(e);
	/* why events are missing, where the trace says; "written": what its END chunk counted */
	mt_emit_open(e, "dropped_by", false, 0);
	for (int k = 0; k < MT_DROP_COUNT; k++)
		if (t->drops[k])
			mt_emit_uint(e, mt_drop_names[k], t->drops[k]);
	mt_emit_close(e);
	mt_emit_uint(e, "written", t->written);
	/* the job's threads waited for the writer to make room in a full ring */
	if (t->waits) {
		mt_emit_open(e, "waited_for_writer", false, 0);
		mt_emit_uint(e, "times", t->waits);
		mt_emit_uint(e, "ns", t->waited_ns);
		mt_emit_close(e);
	}
	mt_emit_close(e);
}

const char *mt_report_waits_text(const struct mt_trace *t, char *buf, size_t len)
{
	char ring[32];

	if (!t->waits)
		return buf && len ? (*buf = 0, buf) : "";
	if (!mt_trace_info(t, "ring", ring, sizeof ring))
		snprintf(ring, sizeof ring, "?");
	snprintf(buf, len,
		 "the job's threads waited %" PRIu64 " time%s for memtap's writer to make room in a full buffer, "
		 "%.3f s in all (to wait less, raise -O ring=N, now %s)",
		 t->waits, t->waits == 1 ? "" : "s", (double)t->waited_ns / 1e9, ring);
	return buf;
}

static void device_json(struct mt_emit *e, const struct mt_report *r, int d)
{
	const struct mt_device_state *s = &r->end.dev[d];

	mt_emit_open(e, NULL, false, 0);
	mt_emit_int(e, "device", d);
	mt_emit_str(e, "name", s->name ? mt_trace_string(r->trace, s->name) : "");
	mt_emit_uint(e, "capacity_bytes", s->capacity);
	mt_emit_uint(e, "device_bytes", s->device_bytes);
	mt_emit_uint(e, "peak_allocated_bytes", s->peak);
	mt_emit_uint(e, "peak_time_ns", mt_report_since(r, s->peak_time));
	mt_emit_uint(e, "allocated_at_exit_bytes", s->current);
	mt_emit_uint(e, "peak_reserved_bytes", s->peak_reserved);
	mt_emit_open(e, "composition_at_peak", false, 0);
	for (int c = 1; c < MT_TAG_COUNT; c++)
		mt_emit_uint(e, mt_tag_names[c], r->composition[d][c]);
	mt_emit_uint(e, "reserved_unallocated", s->reserved_at_peak > s->peak ? s->reserved_at_peak - s->peak : 0);
	mt_emit_close(e);
	mt_emit_open(e, "composition_source", false, 0);
	for (int c = 1; c < MT_TAG_COUNT; c++)
		mt_emit_str(e, mt_tag_names[c], source_name(r->sources[d][c]));
	mt_emit_close(e);
	mt_emit_open(e, "composition_confidence", false, 0);
	for (int c = 1; c < MT_TAG_COUNT; c++)
		mt_emit_num(e, mt_tag_names[c], confidence(r, d, c), 3);
	mt_emit_close(e);
	fragmentation_json(e, r, d);
	libraries_json(e, r, d);
	mt_emit_close(e);
}

static void oom_json(struct pr *p, struct mt_emit *e, const struct mt_oom *o)
{
	const struct mt_report *r = p->r;
	const struct mt_event *ev = &o->ev;
	const struct mt_frag_oom *fo = mt_fragment_oom(&r->frag, o->event);

	mt_emit_open(e, NULL, false, 0);
	mt_emit_int(e, "device", ev->device == MT_NO_DEVICE ? -1 : ev->device);
	mt_emit_uint(e, "size", ev->size);
	mt_emit_int(e, "error", ev->error);
	mt_emit_bool(e, "out_of_memory", ev->error == 2);
	mt_emit_uint(e, "free_bytes", ev->aux);
	mt_emit_uint(e, "total_bytes", ev->aux2);
	mt_emit_uint(e, "time_ns", mt_report_since(r, ev->time));
	mt_emit_str(e, "phase", mt_trace_string(r->trace, ev->phase));
	if (!fo || fo->fits < 0) {
		mt_emit_null(e, "fits_without_fragmentation");
		mt_emit_null(e, "fragmentation");
	} else {
		mt_emit_bool(e, "fits_without_fragmentation", fo->fits);
		frag_state_json(e, "fragmentation", r, &fo->state);
	}
	stack_json(p, e, ev->stack, false, true);
	mt_emit_close(e);
}

void mt_report_emit(struct mt_emit *e, const struct mt_report *r, struct mt_symbols *sym, struct mt_views *views,
		    size_t top)
{
	const struct mt_trace *t = r->trace;
	char buf[4096];
	struct pr p;
	static const char *const info_keys[] = {"pid",	      "host",	 "rank",	  "local_rank",
						"world_size", "cmdline", "memtap_version"};

	pr_open(&p, NULL, r, sym, views);
	mt_emit_open(e, NULL, false, 1);
	mt_emit_int(e, "memtap_report", 1);
	mt_emit_str(e, "trace", t->path);
	mt_emit_bool(e, "complete", t->complete);
	mt_emit_str(e, "times", r->one_moment ? "none" : r->order ? "order" : "ns");
	mt_emit_bool(e, "python_frames", p.python);
	mt_emit_str(e, "problem", t->problem[0] ? t->problem : NULL);
	mt_emit_open(e, "process", false, 0);
	for (size_t i = 0; i < sizeof info_keys / sizeof info_keys[0]; i++)
		mt_emit_str(e, info_keys[i], mt_trace_info(t, info_keys[i], buf, sizeof buf) ? buf : NULL);
	mt_emit_close(e);
	events_json(e, r);
	mt_emit_open(e, "devices", true, 2);
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (r->end.dev[d].seen)
			device_json(e, r, d);
	mt_emit_close(e);
	mt_emit_uint(e, "host_pinned_peak_bytes", r->end.host_peak);
	mt_emit_open(e, "top_at_peak", true, 2);
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		groups_json(&p, e, &r->at_peak[d], top);
	mt_emit_close(e);
	mt_emit_open(e, "live_at_exit", true, 2);
	groups_json(&p, e, &r->at_exit, top);
	mt_emit_close(e);
	mt_emit_open(e, "iterations", false, 0);
	mt_emit_str(e, "boundary", r->leaks.boundary);
	mt_emit_uint(e, "count", r->leaks.boundaries);
	mt_emit_close(e);
	mt_emit_open(e, "leaks", true, 2);
	for (size_t i = 0; i < r->leaks.n && i < top; i++) {
		const struct mt_leak *l = &r->leaks.items[i];
		mt_emit_open(e, NULL, false, 0);
		mt_emit_uint(e, "device", l->device);
		mt_emit_uint(e, "bytes", l->bytes);
		mt_emit_uint(e, "growth_bytes_per_iteration", l->growth);
		mt_emit_uint(e, "iterations", l->iterations);
		stack_json(&p, e, l->stack, false, true);
		mt_emit_close(e);
	}
	mt_emit_close(e);
	mt_emit_open(e, "oom", true, 2);
	for (size_t k = 0; k < r->noom; k++)
		oom_json(&p, e, &r->oom[k]);
	mt_emit_close(e);
	diagnosis_json(&p, e);
	plan_json(e, r);
	mt_emit_close(e);
}

void mt_report_json(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top)
{
	struct mt_json_sink j;
	struct mt_emit e = mt_emit_json(&j, out);
	struct mt_views *views = mt_views_open(r->trace, sym);

	mt_report_emit(&e, r, sym, views, top);
	mt_views_close(views);
}
