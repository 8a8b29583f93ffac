/* The live view's state: the core's replay, applied as events arrive, plus what the
 * view shows beside it. Everything here is recomputed from the replay's live slots when
 * asked (once a refresh), or kept per event in constant time, so a long job costs one
 * pass over its events in all. */
#include "analyze/now.h"
#include "core/array.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int mt_now_init(struct mt_now *n, const struct mt_trace *t)
{
	memset(n, 0, sizeof *n);
	n->t = t;
	return mt_replay_init(&n->rp);
}

static bool device_bytes(const struct mt_live *l)
{
	return l->in_use && mt_live_on_device(l) && l->device != MT_NO_DEVICE;
}

/* Live bytes by stack and device into m (cleared first). */
static int by_stack(const struct mt_now *n, struct mt_map *m)
{
	mt_map_free(m);
	for (size_t i = 0; i < n->rp.slots.n; i++) {
		const struct mt_live *l = &n->rp.live[i];
		uint64_t key = (uint64_t)l->stack << 8 | l->device, v = 0;
		if (!device_bytes(l))
			continue;
		mt_map_get(m, key, &v);
		if (mt_map_put(m, key, v + l->size))
			return ENOMEM;
	}
	return 0;
}

static int boundary(struct mt_now *n)
{
	struct mt_map swap = n->prev;

	n->prev = n->last;
	n->last = swap;
	n->iterations++;
	return by_stack(n, &n->last);
}

static void note(struct mt_now *n, const struct mt_event *e, uint32_t text)
{
	struct mt_now_note w = {e->time, e->kind, e->device, e->size, e->stack, text};

	if (n->nnotes == MT_NOW_NOTES)
		memmove(n->notes, n->notes + 1, (MT_NOW_NOTES - 1) * sizeof *n->notes);
	else
		n->nnotes++;
	n->notes[n->nnotes - 1] = w;
}

/* Before event e is applied: is it a boundary, and is it worth a line? */
static int look(struct mt_now *n, const struct mt_event *e)
{
	uint64_t depth = 0, pushes = 0;
	const char *name;

	switch (e->kind) {
	case MT_EV_ALLOC_FAILED:
		n->oom = (struct mt_now_note){e->time, e->kind, e->device, e->size, e->stack, 0};
		n->ooms++;
		note(n, e, 0);
		break;
	case MT_EV_MARK:
		note(n, e, (uint32_t)e->aux);
		n->marks = true;
		return boundary(n);
	case MT_EV_SNAPSHOT:
		note(n, e, (uint32_t)e->aux);
		break;
	case MT_EV_NVTX_MARK: /* memtap's own notes are NVTX marks named memtap.* */
		name = mt_trace_string(n->t, e->aux);
		if (!strncmp(name, "memtap.", 7))
			note(n, e, (uint32_t)e->aux);
		break;
	case MT_EV_RANGE_PUSH:
		mt_map_get(&n->depth, e->thread, &depth);
		if (mt_map_put(&n->depth, e->thread, depth + 1))
			return ENOMEM;
		if (depth || n->marks || !e->aux)
			break;
		if (n->boundary)
			return e->aux == n->boundary ? boundary(n) : 0;
		mt_map_get(&n->tops, e->aux, &pushes);
		if (mt_map_put(&n->tops, e->aux, pushes + 1))
			return ENOMEM;
		if (pushes) { /* the first range that repeats at the top */
			n->boundary = (uint32_t)e->aux;
			return boundary(n);
		}
		break;
	case MT_EV_RANGE_POP:
		if (mt_map_get(&n->depth, e->thread, &depth) && depth)
			return mt_map_put(&n->depth, e->thread, depth - 1);
		break;
	default:
		break;
	}
	return 0;
}

int mt_now_apply(struct mt_now *n, size_t end)
{
	for (; n->applied < end && n->applied < n->t->nevents; n->applied++) {
		const struct mt_event *e = &n->t->events[n->applied];
		if (look(n, e))
			return ENOMEM;
		mt_replay_apply(&n->rp, e);
		n->last_time = e->time;
	}
	return 0;
}

static int by_bytes(const void *a, const void *b)
{
	const struct mt_now_stack *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	if (x->grew != y->grew)
		return x->grew > y->grew ? -1 : 1;
	return x->stack != y->stack ? (x->stack < y->stack ? -1 : 1)
				    : (x->device > y->device) - (x->device < y->device);
}

/* The row of a stack on a device (key: stack << 8 | device), added when new; NULL: no memory. */
struct rows {
	struct mt_map index; /* key -> row + 1 */
	struct mt_now_stack *v;
	size_t n, cap;
};

static struct mt_now_stack *row(struct rows *r, uint64_t key)
{
	uint64_t k;

	if (mt_map_get(&r->index, key, &k))
		return &r->v[k - 1];
	if (mt_grow((void **)&r->v, &r->cap, r->n, sizeof *r->v) || mt_map_put(&r->index, key, r->n + 1))
		return NULL;
	r->v[r->n] = (struct mt_now_stack){.stack = (uint32_t)(key >> 8), .device = (uint8_t)key};
	return &r->v[r->n++];
}

int mt_now_stacks(const struct mt_now *n, struct mt_now_stack **out, size_t *count)
{
	struct rows r = {0};
	struct mt_now_stack *x;
	int err = ENOMEM;

	for (size_t i = 0; i < n->rp.slots.n; i++) {
		const struct mt_live *l = &n->rp.live[i];
		if (!device_bytes(l))
			continue;
		if (!(x = row(&r, (uint64_t)l->stack << 8 | l->device)))
			goto out;
		x->bytes += l->size;
		x->count++;
	}
	/* growth over the last iteration; a stack gone since is a row of its own */
	for (size_t i = 0; n->iterations >= 2 && i < n->last.cap; i++) {
		uint64_t key = n->last.keys[i], before = 0;
		if (n->last.used[i] != 1)
			continue;
		mt_map_get(&n->prev, key, &before);
		if (n->last.vals[i] == before)
			continue;
		if (!(x = row(&r, key)))
			goto out;
		x->grew = (int64_t)(n->last.vals[i] - before);
	}
	for (size_t i = 0; n->iterations >= 2 && i < n->prev.cap; i++) { /* gone by the last boundary */
		uint64_t key = n->prev.keys[i];
		if (n->prev.used[i] != 1 || mt_map_get(&n->last, key, NULL))
			continue;
		if (!(x = row(&r, key)))
			goto out;
		x->grew = -(int64_t)n->prev.vals[i];
	}
	if (r.n)
		qsort(r.v, r.n, sizeof *r.v, by_bytes);
	*out = r.v;
	*count = r.n;
	r.v = NULL;
	err = 0;
out:
	free(r.v);
	mt_map_free(&r.index);
	return err;
}

int mt_now_composition(const struct mt_now *n, int d, uint64_t tags[MT_TAG_COUNT], struct mt_map *phases)
{
	memset(tags, 0, MT_TAG_COUNT * sizeof *tags);
	for (size_t i = 0; i < n->rp.slots.n; i++) {
		const struct mt_live *l = &n->rp.live[i];
		uint64_t v = 0;
		if (!device_bytes(l) || l->device != d)
			continue;
		tags[l->tag < MT_TAG_COUNT ? l->tag : 0] += l->size;
		mt_map_get(phases, l->phase, &v);
		if (mt_map_put(phases, l->phase, v + l->size))
			return ENOMEM;
	}
	return 0;
}

void mt_now_free(struct mt_now *n)
{
	mt_replay_free(&n->rp);
	mt_map_free(&n->depth);
	mt_map_free(&n->tops);
	mt_map_free(&n->last);
	mt_map_free(&n->prev);
	memset(n, 0, sizeof *n);
}
