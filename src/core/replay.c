/* Event replay. Frees of unknown addresses are counted, never fatal: a trace may
 * start after allocations were made or lose events to a full buffer. A call that
 * failed (error set) changes nothing but its counter. Every change to a live entry after
 * it is made comes after keep(r, i): what was live at a device's peak is rebuilt from
 * those copies (mt_replay_at_peak), and a change without one would go into it unseen. */
#include "core/replay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

const char *const mt_live_kind_names[MT_LIVE_KINDS] = {"device", "vmm", "managed", "host"};

int mt_replay_init(struct mt_replay *r)
{
	memset(r, 0, sizeof *r);
	return 0;
}

void mt_replay_free(struct mt_replay *r)
{
	mt_free(r->live);
	mt_slots_free(&r->slots);
	mt_map_free(&r->by_addr);
	mt_map_free(&r->by_handle);
	mt_map_free(&r->mappings);
	mt_map_free(&r->map_handle);
	mt_ordered_free(&r->mapped);
	mt_free(r->touched);
	if (r->kept)
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			mt_free(r->kept[d].items);
	mt_free(r->kept);
}

int mt_replay_keep_peaks(struct mt_replay *r)
{
	if (r->index || r->kept)
		return EINVAL; /* what changed before would be missing */
	if (!(r->kept = mt_calloc(MT_MAX_DEVICES, sizeof *r->kept)))
		return ENOMEM;
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		r->kept[d].gen = 1;
	return 0;
}

static void keep_as_was(struct mt_replay *r, size_t i)
{
	struct mt_live *l = &r->live[i];
	struct mt_peak_keep *k = &r->kept[l->device];

	if (!mt_live_on_device(l) || l->device == MT_NO_DEVICE || l->kept_gen == k->gen || !r->dev[l->device].peak)
		return;
	if (mt_grow((void **)&k->items, &k->cap, k->n, sizeof *k->items)) {
		k->lost = true;
		return;
	}
	k->items[k->n++] = (struct mt_kept){i, *l};
	l->kept_gen = k->gen;
}

/* Live slot i is about to change: as it was, if it was live at its device's peak and this
 * is its first change since. Most changes come after the peak to what was made after it. */
static inline void keep(struct mt_replay *r, size_t i)
{
	if (r->kept && r->live[i].event <= r->dev[r->live[i].device].peak_event)
		keep_as_was(r, i);
}

/* A new peak on device d: what was kept for the last one is done with. */
static void keep_afresh(struct mt_replay *r, uint8_t d)
{
	struct mt_peak_keep *k = &r->kept[d];

	if (!k->n && !k->lost)
		return;
	k->n = 0;
	k->lost = false;
	if (++k->gen == 0) { /* the stamps start over: none may look current */
		for (size_t i = 0; i < r->slots.n; i++)
			if (r->live[i].device == d)
				r->live[i].kept_gen = 0;
		k->gen = 1;
	}
}

static int by_slot(const void *a, const void *b)
{
	const struct mt_kept *x = a, *y = b;

	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Slot i now, if it was made by device d's peak and is still live (mt_replay_at_peak takes
 * the kept copy instead where there is one). */
static const struct mt_live *since_peak(const struct mt_replay *r, size_t i, int d)
{
	const struct mt_live *l = &r->live[i];

	if (!l->in_use || l->device != d || !mt_live_on_device(l) || l->event > r->dev[d].peak_event)
		return NULL;
	return l;
}

int mt_replay_at_peak(struct mt_replay *r, int d, struct mt_live **out, size_t *n)
{
	struct mt_peak_keep *k = r->kept ? &r->kept[d] : NULL;
	size_t count = 0, j = 0;

	*out = NULL;
	*n = 0;
	if (!k)
		return EINVAL;
	if (k->lost)
		return ENOMEM;
	if (!r->dev[d].peak)
		return 0;
	for (size_t i = 0; i < r->slots.n; i++) /* at most: a kept slot may also count here */
		count += since_peak(r, i, d) != NULL;
	if (!(count += k->n))
		return 0;
	if (!(*out = mt_malloc(count * sizeof **out)))
		return ENOMEM;
	if (k->n)
		qsort(k->items, k->n, sizeof *k->items, by_slot);
	for (size_t i = 0; i < r->slots.n; i++) {
		const struct mt_live *l = j < k->n && k->items[j].slot == i ? &k->items[j++].was : since_peak(r, i, d);
		if (l)
			(*out)[(*n)++] = *l;
	}
	return 0;
}

static void touch_more(struct mt_replay *r, size_t index)
{
	if (r->ntouched == SIZE_MAX)
		return;
	if (mt_grow((void **)&r->touched, &r->cap_touched, r->ntouched, sizeof *r->touched)) {
		r->ntouched = SIZE_MAX;
		return;
	}
	r->touched[r->ntouched++] = index;
}

/* Noted for readers that follow the replay event by event (the leak scan), so they look
 * at what changed instead of every live slot. Out of memory, the note is lost: touched
 * is then incomplete, and the reader is told by ntouched == SIZE_MAX. */
static inline void touch(struct mt_replay *r, size_t index)
{
	if (!r->track)
		return;
	if (r->ntouched < r->cap_touched)
		r->touched[r->ntouched++] = index;
	else
		touch_more(r, index);
}

static struct mt_live *new_live(struct mt_replay *r, size_t *index)
{
	if ((*index = mt_slot_take(&r->slots, (void **)&r->live, sizeof *r->live)) == SIZE_MAX)
		return NULL;
	r->live[*index].in_use = true;
	touch(r, *index);
	return &r->live[*index];
}

static inline void drop_live(struct mt_replay *r, size_t index)
{
	keep(r, index);
	r->live[index].in_use = false;
	mt_slot_give(&r->slots, index);
	touch(r, index);
}

static void charge(struct mt_replay *r, uint8_t dev, int64_t bytes, const struct mt_event *e)
{
	struct mt_device_state *d = &r->dev[dev];

	d->seen = true;
	d->current += (uint64_t)bytes;
	if (d->current > d->peak) {
		d->peak = d->current;
		d->peak_time = e->time;
		d->peak_event = r->index;
		d->reserved_at_peak = d->reserved;
		if (r->kept)
			keep_afresh(r, dev);
	}
}

static void account(struct mt_replay *r, const struct mt_live *l, int sign, const struct mt_event *e)
{
	int64_t bytes = sign * (int64_t)l->size;

	switch (l->kind) {
	case MT_LIVE_DEVICE:
	case MT_LIVE_VMM:
		if (l->device != MT_NO_DEVICE) {
			charge(r, l->device, bytes, e);
			r->dev[l->device].blocks += l->block ? (uint64_t)bytes : 0;
		}
		break;
	case MT_LIVE_MANAGED:
		r->managed += (uint64_t)bytes;
		break;
	case MT_LIVE_HOST:
		r->host += (uint64_t)bytes;
		if (r->host > r->host_peak)
			r->host_peak = r->host;
		break;
	}
}

static void made(struct mt_replay *r, const struct mt_event *e, uint8_t kind)
{
	size_t i;
	bool had;
	uint64_t old = 0, *at = mt_map_at(&r->by_addr, e->addr, &had);
	struct mt_live *l;

	if (at)
		old = *at;
	else /* out of memory: the allocation is counted all the same, only not found again */
		had = mt_map_del(&r->by_addr, e->addr, &old);
	/* an address handed out again without a free we saw: the old one is gone */
	if (had) {
		account(r, &r->live[old - 1], -1, e);
		drop_live(r, old - 1);
	}
	l = new_live(r, &i);
	if (!l) {
		if (at)
			mt_map_del(&r->by_addr, e->addr, NULL);
		return;
	}
	*l = (struct mt_live){.addr = e->addr,
			      .size = e->size,
			      .time = e->time,
			      .event = r->index,
			      .stack = e->stack,
			      .phase = e->phase,
			      .device = e->device,
			      .kind = kind,
			      .tag = e->tag,
			      .flags = e->flags,
			      .in_use = true,
			      .block = mt_api(e) == MT_API_BLOCK,
			      .aux = e->aux,
			      .aux2 = e->aux2};
	if (at)
		*at = i + 1;
	r->allocs++;
	account(r, l, 1, e);
}

static void gone(struct mt_replay *r, const struct mt_event *e)
{
	uint64_t i;

	if (!mt_map_del(&r->by_addr, e->addr, &i)) {
		r->unmatched_frees++;
		return;
	}
	r->frees++;
	account(r, &r->live[i - 1], -1, e);
	drop_live(r, i - 1);
}

/* A VMM handle loses a reference; the physical memory goes with the last one. */
static void unref(struct mt_replay *r, uint64_t handle, const struct mt_event *e)
{
	uint64_t i;
	struct mt_live *l;

	if (!mt_map_get(&r->by_handle, handle, &i))
		return;
	l = &r->live[i - 1];
	keep(r, i - 1);
	if (l->refs && --l->refs == 0) {
		mt_map_del(&r->by_handle, handle, NULL);
		r->frees++;
		account(r, l, -1, e);
		drop_live(r, i - 1);
	}
}

/* Mappings inside [addr, addr+size), found in order: walking every mapping for each
 * unmap was quadratic in a trace of many mappings. */
static void unmap(struct mt_replay *r, const struct mt_event *e)
{
	uint64_t key = e->addr, end = e->addr + e->size < e->addr ? UINT64_MAX : e->addr + e->size;

	while (mt_ordered_next(&r->mapped, key, &key) && key < end) {
		uint64_t handle;
		if (mt_map_del(&r->map_handle, key, &handle))
			unref(r, handle, e);
		mt_map_del(&r->mappings, key, NULL);
		mt_ordered_del(&r->mapped, key);
	}
}

void mt_replay_apply(struct mt_replay *r, const struct mt_event *e)
{
	uint64_t i;

	r->ntouched = 0;
	if (e->kind == MT_EV_DEVICE && e->device != MT_NO_DEVICE) {
		r->dev[e->device].device_bytes = e->size;
		r->dev[e->device].capacity = e->aux2 && e->aux2 < e->size ? e->aux2 : e->size;
		r->dev[e->device].name = (uint32_t)e->aux;
		r->dev[e->device].seen = true;
	}
	if (e->error) {
		if (e->kind == MT_EV_ALLOC_FAILED)
			r->failed++;
		r->index++;
		return;
	}
	switch (e->kind) {
	case MT_EV_ALLOC:
		made(r, e, MT_LIVE_DEVICE);
		break;
	case MT_EV_MANAGED_ALLOC:
		made(r, e, MT_LIVE_MANAGED);
		break;
	case MT_EV_HOST_ALLOC:
		made(r, e, MT_LIVE_HOST);
		break;
	case MT_EV_FREE:
	case MT_EV_HOST_FREE:
		gone(r, e);
		break;
	case MT_EV_VMM_CREATE: {
		size_t k;
		struct mt_live *l = new_live(r, &k);
		if (!l)
			break;
		*l = (struct mt_live){.size = e->size,
				      .time = e->time,
				      .event = r->index,
				      .stack = e->stack,
				      .phase = e->phase,
				      .device = e->device,
				      .kind = MT_LIVE_VMM,
				      .tag = e->tag,
				      .flags = e->flags,
				      .aux2 = e->aux2,
				      .in_use = true,
				      .handle = e->aux,
				      .refs = 1};
		mt_map_put(&r->by_handle, e->aux, k + 1);
		r->allocs++;
		account(r, l, 1, e);
		break;
	}
	case MT_EV_VMM_MAP:
		if (mt_map_get(&r->by_handle, e->aux, &i)) {
			struct mt_live *l = &r->live[i - 1];
			keep(r, i - 1);
			l->refs++;
			if (!l->addr) { /* the memory is the mapper's: attribute it to cuMemMap's caller */
				l->addr = e->addr;
				if (e->stack)
					l->stack = e->stack;
				touch(r, i - 1);
			}
			mt_map_put(&r->mappings, e->addr, e->size);
			mt_map_put(&r->map_handle, e->addr, e->aux);
			mt_ordered_add(&r->mapped, e->addr);
		}
		break;
	case MT_EV_VMM_UNMAP:
		unmap(r, e);
		break;
	case MT_EV_VMM_RELEASE:
		if (mt_map_get(&r->by_handle, e->aux, &i) && !r->live[i - 1].released) {
			keep(r, i - 1);
			r->live[i - 1].released = true;
			unref(r, e->aux, e);
		}
		break;
	case MT_EV_SEGMENT_ALLOC:
	case MT_EV_SEGMENT_FREE:
		if (e->device != MT_NO_DEVICE) {
			r->dev[e->device].seen = true;
			struct mt_device_state *d = &r->dev[e->device];
			d->reserved += e->kind == MT_EV_SEGMENT_ALLOC ? e->size : -e->size;
			if (d->reserved > d->peak_reserved && e->kind == MT_EV_SEGMENT_ALLOC)
				d->peak_reserved = d->reserved;
		}
		break;
	case MT_EV_TAG_RANGE:
		if (mt_map_get(&r->by_addr, e->addr, &i)) {
			keep(r, i - 1);
			r->live[i - 1].tag = e->tag;
		}
		break;
	default:
		break;
	}
	r->index++;
}
