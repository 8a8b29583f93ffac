/* Leak detection over iteration boundaries: choose the boundaries, replay the trace,
 * sample per-stack live device bytes at each, then look for steady growth. */
#include "analyze/leaks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/map.h"
#include "analyze/replay.h"

/* Event indices of the boundaries; the description goes into out->boundary. Marks come
 * first; then a range: the one named, or the most repeated at the top of a thread's
 * stack. One scan notes both the marks and the candidate ranges' pushes. */
static size_t *boundaries(const struct mt_trace *t, const char *name, struct mt_leaks *out, size_t *n)
{
	size_t *idx = NULL, *push = NULL, k = 0, npush = 0, cap = 0, cap_push = 0, best_count = 0;
	uint32_t best = 0, *depth = NULL, *count = calloc(t->nstrings + 1, sizeof *count);

	if (!count)
		goto fail;
	for (size_t i = 0; i < t->nevents; i++) {
		const struct mt_event *e = &t->events[i];
		size_t **list = NULL, *len = NULL, *lcap = NULL;
		if (e->kind == MT_EV_MARK && (!name || strcmp(mt_trace_string(t, e->aux), name) == 0)) {
			list = &idx, len = &k, lcap = &cap;
		} else if (e->kind == MT_EV_RANGE_PUSH || e->kind == MT_EV_RANGE_POP) {
			if (e->thread >= t->nthreads)
				continue;
			if (!depth && !(depth = calloc(t->nthreads, sizeof *depth)))
				goto fail;
			if (e->kind == MT_EV_RANGE_POP) {
				depth[e->thread] -= depth[e->thread] > 0;
				continue;
			}
			if ((name ? strcmp(mt_trace_string(t, e->aux), name) == 0 : depth[e->thread] == 0) && e->aux < t->nstrings) {
				if (++count[e->aux] > best_count) {
					best_count = count[e->aux];
					best = (uint32_t)e->aux;
				}
				list = &push, len = &npush, lcap = &cap_push;
			}
			depth[e->thread]++;
		}
		if (!list)
			continue;
		if (*len == *lcap) {
			size_t *v = realloc(*list, (*lcap = *lcap ? 2 * *lcap : 256) * sizeof *v);
			if (!v)
				goto fail;
			*list = v;
		}
		(*list)[(*len)++] = i;
	}
	if (k) {
		snprintf(out->boundary, sizeof out->boundary, "memtap_mark%s%s", name ? " " : "", name ? name : "");
	} else if (best_count < (name ? 1 : 3)) {
		snprintf(out->boundary, sizeof out->boundary, "none found");
	} else {
		free(idx);
		idx = push;
		push = NULL;
		for (size_t i = 0; i < npush; i++)
			if (t->events[idx[i]].aux == best)
				idx[k++] = idx[i];
		snprintf(out->boundary, sizeof out->boundary, "NVTX range %.100s", mt_trace_string(t, best));
	}
	if (!idx && !(idx = malloc(sizeof *idx)))
		goto fail;
	free(push);
	free(depth);
	free(count);
	*n = k;
	return idx;
fail:
	free(idx);
	free(push);
	free(depth);
	free(count);
	return NULL;
}

static int sample(struct mt_leak_scan *s, const struct mt_replay *rp, size_t at)
{
	if (rp->slots.n > s->nslots) {
		uint32_t *v = realloc(s->slot_row, rp->slots.n * sizeof *v);
		if (!v)
			return ENOMEM;
		memset(v + s->nslots, 0, (rp->slots.n - s->nslots) * sizeof *v);
		s->slot_row = v;
		s->nslots = rp->slots.n;
	}
	for (size_t i = 0; i < rp->slots.n; i++) {
		const struct mt_live *l = &rp->live[i];
		uint64_t key = (uint64_t)l->stack << 8 | l->device, row = s->slot_row[i];
		if (!l->in_use || (l->kind != MT_LIVE_DEVICE && l->kind != MT_LIVE_VMM) || l->device == MT_NO_DEVICE)
			continue;
		if (row && s->stack[row - 1] == l->stack && s->device[row - 1] == l->device) {
			s->bytes[(row - 1) * s->samples + at] += l->size;
			continue;
		}
		if (!mt_map_get(&s->index, key, &row)) {
			if (s->rows == s->cap) {
				size_t cap = s->cap ? 2 * s->cap : 256;
				uint64_t *b = realloc(s->bytes, cap * s->samples * sizeof *b);
				uint32_t *st = realloc(s->stack, cap * sizeof *st);
				uint8_t *d = realloc(s->device, cap);
				if (b)
					s->bytes = b;
				if (st)
					s->stack = st;
				if (d)
					s->device = d;
				if (!b || !st || !d)
					return ENOMEM;
				memset(s->bytes + s->cap * s->samples, 0, (cap - s->cap) * s->samples * sizeof *b);
				s->cap = cap;
			}
			row = ++s->rows;
			s->stack[row - 1] = l->stack;
			s->device[row - 1] = l->device;
			if (mt_map_put(&s->index, key, row))
				return ENOMEM;
		}
		s->slot_row[i] = (uint32_t)row;
		s->bytes[(row - 1) * s->samples + at] += l->size;
	}
	return 0;
}

static int by_growth(const void *a, const void *b)
{
	const struct mt_leak *x = a, *y = b;

	if (x->growth != y->growth)
		return x->growth < y->growth ? 1 : -1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

int mt_leaks_start(struct mt_leak_scan *s, struct mt_leaks *out, const struct mt_trace *t, const char *name)
{
	memset(s, 0, sizeof *s);
	memset(out, 0, sizeof *out);
	if (!(s->at = boundaries(t, name, out, &s->samples)))
		return ENOMEM;
	out->boundaries = s->samples;
	return 0;
}

int mt_leaks_step(struct mt_leak_scan *s, const struct mt_replay *rp, size_t i)
{
	return s->next < s->samples && s->at[s->next] == i ? sample(s, rp, s->next++) : 0;
}

int mt_leaks_finish(struct mt_leak_scan *s, struct mt_leaks *out, unsigned k)
{
	size_t nb = s->samples;
	int err = 0;

	for (size_t row = 0; row < s->rows && nb > k && !err; row++) {
		const uint64_t *b = s->bytes + row * nb;
		size_t run = 0;
		while (run + 1 < nb && b[nb - 1 - run] > b[nb - 2 - run])
			run++;
		if (run >= k) {
			struct mt_leak *n = realloc(out->items, (out->n + 1) * sizeof *n);
			if (!n) {
				err = ENOMEM;
				break;
			}
			out->items = n;
			out->items[out->n++] = (struct mt_leak){s->stack[row], s->device[row], b[nb - 1],
								 (b[nb - 1] - b[nb - 1 - run]) / run, (uint32_t)run};
		}
	}
	if (out->n)
		qsort(out->items, out->n, sizeof *out->items, by_growth);
	mt_map_free(&s->index);
	free(s->bytes);
	free(s->stack);
	free(s->device);
	free(s->slot_row);
	free(s->at);
	memset(s, 0, sizeof *s);
	return err;
}

void mt_leaks_free(struct mt_leaks *l)
{
	free(l->items);
	memset(l, 0, sizeof *l);
}
