/* Leak detection over iteration boundaries: choose the boundaries, replay the trace,
 * sample per-stack live device bytes at each, then look for steady growth. */
#include "analyze/leaks.h"
#include "analyze/composition.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array.h"
#include "core/map.h"
#include "core/replay.h"

/* A candidate boundary: its event, and the string it names. */
struct at {
	size_t event;
	uint64_t aux;
};

struct ats {
	struct at *items;
	size_t n, cap;
};

/* The events of `from` that name `aux` (all of them for UINT64_MAX), into a list of their
 * indices; NULL when out of memory. */
static size_t *events_of(const struct ats *from, uint64_t aux, size_t *n)
{
	size_t *idx = malloc((from->n ? from->n : 1) * sizeof *idx);

	*n = 0;
	for (size_t i = 0; idx && i < from->n; i++)
		if (aux == UINT64_MAX || from->items[i].aux == aux)
			idx[(*n)++] = from->items[i].event;
	return idx;
}

/* Event indices of the boundaries; the description goes into out->boundary. Marks come
 * first; then a range: the one named, or the most repeated at the top of a thread's
 * stack; then a start/end range (a snapshot's external annotations): the one named, or
 * the most repeated; then, with no name, where the stacks say an optimizer's step begins.
 * One walk notes the marks, the candidate ranges' starts and the optimizer's steps (the
 * last only while no mark or repeated range has come, which would come before them). */
static size_t *boundaries(const struct mt_trace *t, const char *name, struct mt_leaks *out, size_t *n,
			  void (*look)(void *, const struct mt_event *), void *arg)
{
	struct ats marks = {0}, push = {0}, start = {0};
	size_t *idx = NULL, best_count = 0, best_start_count = 0, i = 0, k, k_steps;
	uint32_t best = 0, best_start = 0, *depth = NULL, *count = calloc(t->nstrings + 1, sizeof *count),
		 *start_count = calloc(t->nstrings + 1, sizeof *start_count);
	struct mt_walk *w = mt_walk_start(t);
	struct mt_steps_scan *steps = name ? NULL : mt_composition_steps_start(t);
	const struct mt_event *batch;
	bool failed = !count || !start_count || !w || (!name && !steps);

	while (!failed && (k = mt_walk_next(w, &batch)) != 0)
		for (const struct mt_event *e = batch; e < batch + k && !failed; e++, i++) {
			struct ats *list = NULL;
			if (look)
				look(arg, e);
			if (steps && !marks.n && best_count < 2)
				mt_composition_steps_step(steps, e, i);
			if (e->kind == MT_EV_MARK && (!name || strcmp(mt_trace_string(t, e->aux), name) == 0)) {
				list = &marks;
			} else if (e->kind == MT_EV_RANGE_PUSH || e->kind == MT_EV_RANGE_POP) {
				if (e->thread >= t->nthreads)
					continue;
				if (!depth && !(depth = calloc(t->nthreads, sizeof *depth))) {
					failed = true;
					continue;
				}
				if (e->kind == MT_EV_RANGE_POP) {
					depth[e->thread] -= depth[e->thread] > 0;
					continue;
				}
				if ((name ? strcmp(mt_trace_string(t, e->aux), name) == 0 : depth[e->thread] == 0) &&
				    e->aux < t->nstrings) {
					if (++count[e->aux] > best_count) {
						best_count = count[e->aux];
						best = (uint32_t)e->aux;
					}
					list = &push;
				}
				depth[e->thread]++;
			} else if (e->kind == MT_EV_RANGE_START && e->aux < t->nstrings &&
				   (!name || strcmp(mt_trace_string(t, e->aux), name) == 0)) {
				/* start/end ranges: a snapshot's external annotations (Optimizer.step#AdamW.step) */
				if (++start_count[e->aux] > best_start_count) {
					best_start_count = start_count[e->aux];
					best_start = (uint32_t)e->aux;
				}
				list = &start;
			}
			if (!list)
				continue;
			failed = mt_grow((void **)&list->items, &list->cap, list->n, sizeof *list->items) != 0;
			if (!failed)
				list->items[list->n++] = (struct at){i, e->aux};
		}
	mt_walk_end(w);
	k = 0;
	if (failed) {
		/* out of memory */
	} else if (marks.n) {
		idx = events_of(&marks, UINT64_MAX, &k);
		snprintf(out->boundary, sizeof out->boundary, "memtap_mark%s%s", name ? " " : "", name ? name : "");
	} else if (best_count < (name ? 1 : 2) && best_start_count >= (name ? 1 : 2)) {
		idx = events_of(&start, best_start, &k);
		snprintf(out->boundary, sizeof out->boundary, "range %.100s", mt_trace_string(t, best_start));
	} else if (best_count < (name ? 1 : 2) && !name) {
		/* no marks or ranges: where the stacks say an optimizer's step begins (a snapshot) */
		size_t nsteps = 0, *at = mt_composition_steps_finish(steps, &nsteps);
		steps = NULL;
		if (at && nsteps >= 3) {
			idx = at;
			k = nsteps;
			snprintf(out->boundary, sizeof out->boundary, "the optimizer's step (from the stacks)");
		} else if (at && nsteps) { /* too few to tell growth from what a step makes */
			idx = at;
			snprintf(out->boundary, sizeof out->boundary,
				 "none found: the stacks show %zu optimizer step%s, growth needs 3", nsteps,
				 nsteps == 1 ? "" : "s");
		} else if (at) {
			idx = at;
			snprintf(out->boundary, sizeof out->boundary, "none found");
		}
	} else if (best_count < (name ? 1 : 2)) {
		idx = malloc(sizeof *idx);
		snprintf(out->boundary, sizeof out->boundary, "none found");
	} else {
		idx = events_of(&push, best, &k);
		snprintf(out->boundary, sizeof out->boundary, "NVTX range %.100s", mt_trace_string(t, best));
	}
	if (steps) /* not needed: a mark or a range came */
		free(mt_composition_steps_finish(steps, &k_steps));
	free(marks.items);
	free(push.items);
	free(start.items);
	free(depth);
	free(count);
	free(start_count);
	*n = k;
	return idx;
}

static int row_of(struct mt_leak_scan *s, uint32_t stack, uint8_t device, size_t *row)
{
	uint64_t key = (uint64_t)stack << 8 | device, v;

	if (mt_map_get(&s->index, key, &v)) {
		*row = v - 1;
		return 0;
	}
	if (mt_grow((void **)&s->rows, &s->cap, s->nrows, sizeof *s->rows))
		return ENOMEM;
	s->rows[s->nrows] = (struct mt_leak_row){.stack = stack, .device = device};
	*row = s->nrows++;
	return mt_map_put(&s->index, key, s->nrows);
}

static int mark(struct mt_leak_scan *s, size_t row)
{
	if (s->rows[row].dirty)
		return 0;
	if (mt_grow((void **)&s->dirty, &s->cap_dirty, s->ndirty, sizeof *s->dirty))
		return ENOMEM;
	s->rows[row].dirty = true;
	s->dirty[s->ndirty++] = row;
	return 0;
}

/* A live slot changed: what it counted for comes off its old row, what it holds now goes
 * on its row (device memory and VMM physical memory on a device). */
static int follow(struct mt_leak_scan *s, const struct mt_replay *rp, size_t k)
{
	struct mt_leak_slot *c;
	const struct mt_live *l = &rp->live[k];
	int r;

	if (k >= s->nslots) {
		size_t n = s->nslots;
		if (mt_grow((void **)&s->slots, &n, k, sizeof *s->slots))
			return ENOMEM;
		memset(s->slots + s->nslots, 0, (n - s->nslots) * sizeof *s->slots);
		s->nslots = n;
	}
	c = &s->slots[k];
	if (c->row) {
		s->rows[c->row - 1].now -= c->bytes;
		if ((r = mark(s, c->row - 1)))
			return r;
		*c = (struct mt_leak_slot){0, 0};
	}
	if (l->in_use && mt_live_on_device(l) && l->device != MT_NO_DEVICE) {
		size_t row;
		if ((r = row_of(s, l->stack, l->device, &row)) || (r = mark(s, row)))
			return r;
		s->rows[row].now += l->size;
		*c = (struct mt_leak_slot){row + 1, l->size};
	}
	return 0;
}

/* Boundary j: each row that changed since boundary j - 1 is sampled. A row that did not
 * change kept its value, so it did not grow: its run is over, which its last sample's
 * index says without visiting it. */
static void sample(struct mt_leak_scan *s, size_t j)
{
	for (size_t i = 0; i < s->ndirty; i++) {
		struct mt_leak_row *w = &s->rows[s->dirty[i]];
		size_t run = w->sampled == j ? w->run : 0; /* sampled at boundary j - 1, or not */
		if (j > 0 && w->now > w->last) {
			if (run == 0)
				w->run_from = w->last;
			w->run = run + 1;
		} else {
			w->run = 0;
		}
		w->last = w->now;
		w->sampled = j + 1;
		w->dirty = false;
	}
	s->ndirty = 0;
}

static int by_growth(const void *a, const void *b)
{
	const struct mt_leak *x = a, *y = b;

	if (x->growth != y->growth)
		return x->growth < y->growth ? 1 : -1;
	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	return x->device < y->device ? -1 : x->device > y->device;
}

int mt_leaks_start(struct mt_leak_scan *s, struct mt_leaks *out, const struct mt_trace *t, const char *name,
		   void (*look)(void *, const struct mt_event *), void *arg)
{
	memset(s, 0, sizeof *s);
	memset(out, 0, sizeof *out);
	if (!(s->at = boundaries(t, name, out, &s->samples, look, arg)))
		return ENOMEM;
	out->boundaries = s->samples;
	return 0;
}

int mt_leaks_step(struct mt_leak_scan *s, const struct mt_replay *rp, size_t i)
{
	int r = 0;

	if (s->next >= s->samples)
		return 0;	      /* past the last boundary: nothing more counts */
	if (rp->ntouched == SIZE_MAX) /* the replay lost its note (out of memory): look at every slot */
		for (size_t k = 0; k < rp->slots.n && !r; k++)
			r = follow(s, rp, k);
	else
		for (size_t k = 0; k < rp->ntouched && !r; k++)
			r = follow(s, rp, rp->touched[k]);
	if (!r && s->at[s->next] == i)
		sample(s, s->next++);
	return r;
}

int mt_leaks_finish(struct mt_leak_scan *s, struct mt_leaks *out, unsigned k)
{
	size_t nb = s->samples;
	int err = 0;

	for (size_t row = 0; row < s->nrows && nb > k && !err; row++) {
		const struct mt_leak_row *w = &s->rows[row];
		size_t run = w->sampled == nb ? w->run : 0; /* sampled at the last boundary, or flat since */
		if (run >= k && run > 0) {
			if (mt_grow((void **)&out->items, &out->cap, out->n, sizeof *out->items)) {
				err = ENOMEM;
				break;
			}
			out->items[out->n++] = (struct mt_leak){w->stack, w->device, w->last,
								(w->last - w->run_from) / run, (uint32_t)run};
		}
	}
	if (out->n)
		qsort(out->items, out->n, sizeof *out->items, by_growth);
	mt_map_free(&s->index);
	free(s->rows);
	free(s->dirty);
	free(s->slots);
	free(s->at);
	memset(s, 0, sizeof *s);
	return err;
}

void mt_leaks_free(struct mt_leaks *l)
{
	free(l->items);
	memset(l, 0, sizeof *l);
}
