/* Leak detection over iteration boundaries: choose the boundaries, replay the trace,
 * sample per-stack live device bytes at each, then look for steady growth. */
#include "analyze/leaks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/map.h"
#include "analyze/replay.h"

/* Event indices of the boundaries; the description goes into out->boundary. */
static size_t *boundaries(const struct mt_trace *t, const char *name, struct mt_leaks *out, size_t *n)
{
	size_t *idx = malloc((t->nevents + 1) * sizeof *idx), k = 0, best_count = 0;
	uint32_t best = 0, *depth = NULL, *count = calloc(t->nstrings + 1, sizeof *count);
	size_t nthreads = 0;

	if (!idx || !count)
		goto fail;
	/* marks first */
	for (size_t i = 0; i < t->nevents; i++)
		if (t->events[i].kind == MT_EV_MARK && (!name || strcmp(mt_trace_string(t, t->events[i].aux), name) == 0))
			idx[k++] = i;
	if (k) {
		snprintf(out->boundary, sizeof out->boundary, "memtap_mark%s%s", name ? " " : "", name ? name : "");
		goto done;
	}
	/* then a range: the one named, or the most repeated at the top of a thread's stack */
	for (size_t i = 0; i < t->nevents; i++) {
		const struct mt_event *e = &t->events[i];
		if (e->thread >= nthreads) {
			uint32_t *d = realloc(depth, (e->thread + 16) * sizeof *d);
			if (!d)
				goto fail;
			memset(d + nthreads, 0, (e->thread + 16 - nthreads) * sizeof *d);
			depth = d;
			nthreads = e->thread + 16;
		}
		if (e->kind == MT_EV_RANGE_PUSH) {
			if (name ? strcmp(mt_trace_string(t, e->aux), name) == 0 : depth[e->thread] == 0)
				if (e->aux < t->nstrings && ++count[e->aux] > best_count) {
					best_count = count[e->aux];
					best = (uint32_t)e->aux;
				}
			depth[e->thread]++;
		} else if (e->kind == MT_EV_RANGE_POP && depth[e->thread]) {
			depth[e->thread]--;
		}
	}
	if (best_count < (name ? 1 : 3)) {
		snprintf(out->boundary, sizeof out->boundary, "none found");
		goto done;
	}
	for (size_t i = 0; i < t->nevents; i++)
		if (t->events[i].kind == MT_EV_RANGE_PUSH && t->events[i].aux == best)
			idx[k++] = i;
	snprintf(out->boundary, sizeof out->boundary, "NVTX range %.100s", mt_trace_string(t, best));
done:
	free(depth);
	free(count);
	*n = k;
	return idx;
fail:
	free(idx);
	free(depth);
	free(count);
	return NULL;
}

/* One sample: stack/device -> live bytes, as parallel arrays keyed through a map. */
struct series {
	struct mt_map index; /* stack << 8 | device -> row + 1 */
	uint64_t *bytes;     /* rows x samples */
	uint32_t *stack;
	uint8_t *device;
	size_t rows, cap, samples;
};

static int sample(struct series *s, const struct mt_replay *rp, size_t at)
{
	for (size_t i = 0; i < rp->nlive; i++) {
		const struct mt_live *l = &rp->live[i];
		uint64_t key = (uint64_t)l->stack << 8 | l->device, row;
		if (!l->in_use || (l->kind != MT_LIVE_DEVICE && l->kind != MT_LIVE_VMM) || l->device == MT_NO_DEVICE)
			continue;
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

int mt_leaks_find(struct mt_leaks *out, const struct mt_trace *t, const char *name, unsigned k)
{
	struct series s = {0};
	struct mt_replay rp;
	size_t nb = 0, next = 0, *at;
	int err = 0;

	memset(out, 0, sizeof *out);
	at = boundaries(t, name, out, &nb);
	if (!at)
		return ENOMEM;
	out->boundaries = nb;
	if (nb < k + 1) {
		free(at);
		return 0;
	}
	s.samples = nb;
	mt_replay_init(&rp, t);
	for (size_t i = 0; i < t->nevents && !err; i++) {
		if (next < nb && at[next] == i)
			err = sample(&s, &rp, next++);
		mt_replay_apply(&rp, &t->events[i]);
	}
	for (size_t row = 0; row < s.rows && !err; row++) {
		const uint64_t *b = s.bytes + row * s.samples;
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
			out->items[out->n++] = (struct mt_leak){s.stack[row], s.device[row], b[nb - 1],
								 (b[nb - 1] - b[nb - 1 - run]) / run, (uint32_t)run};
		}
	}
	if (out->n)
		qsort(out->items, out->n, sizeof *out->items, by_growth);
	mt_replay_free(&rp);
	mt_map_free(&s.index);
	free(s.bytes);
	free(s.stack);
	free(s.device);
	free(at);
	return err;
}

void mt_leaks_free(struct mt_leaks *l)
{
	free(l->items);
	memset(l, 0, sizeof *l);
}
