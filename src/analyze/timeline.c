/* The timeline: one pass over the events, counting bytes per device and category; with
 * an index of the events' steps, any part of the run again, as finely. */
#include "analyze/timeline.h"
#include "core/array.h"
#include "reader/progress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Allocation event m, the i-th, as the timeline counts it. */
static struct mt_timeline_made made_by(const struct mt_report *r, const struct mt_event *m, size_t i)
{
	return (struct mt_timeline_made){i, m->size, m->time, m->stack, m->device, mt_composition_counted(&r->comp, i)};
}

bool mt_timeline_step(const struct mt_report *r, struct mt_timeline_live *live, const struct mt_event *e, size_t i,
		      struct mt_timeline_change *c)
{
	uint64_t key = e->kind == MT_EV_ALLOC || e->kind == MT_EV_FREE ? e->addr : e->aux | 1ull << 63, k;
	size_t slot;

	if (e->error)
		return false;
	switch (e->kind) {
	case MT_EV_ALLOC:
	case MT_EV_VMM_CREATE: /* made again without a free seen: the first one is forgotten */
		if (e->device == MT_NO_DEVICE)
			return false;
		if (mt_map_get(&live->at, key, &k))
			slot = k - 1;
		else if ((slot = mt_slot_take(&live->slots, (void **)&live->made, sizeof *live->made)) == SIZE_MAX ||
			 mt_map_put(&live->at, key, slot + 1))
			return false;
		live->made[slot] = made_by(r, e, i);
		*c = (struct mt_timeline_change){(int64_t)e->size, live->made[slot]};
		return true;
	case MT_EV_FREE:
	case MT_EV_VMM_RELEASE:
		if (!mt_map_del(&live->at, key, &k))
			return false;
		*c = (struct mt_timeline_change){-(int64_t)live->made[k - 1].size, live->made[k - 1]};
		mt_slot_give(&live->slots, k - 1);
		return true;
	default:
		return false;
	}
}

void mt_timeline_live_free(struct mt_timeline_live *live)
{
	mt_map_free(&live->at);
	free(live->made);
	mt_slots_free(&live->slots);
	memset(live, 0, sizeof *live);
}

bool mt_timeline_index_step(const struct mt_timeline_index *ix, size_t i, struct mt_timeline_change *c)
{
	const struct mt_event *events = ix->r->trace->events;
	size_t k = ix->link[i];

	if (k == MT_TIMELINE_NO_STEP)
		return false;
	k = events[i].kind == MT_EV_ALLOC || events[i].kind == MT_EV_VMM_CREATE ? i : k;
	c->made = made_by(ix->r, &events[k], k);
	c->delta = k == i ? (int64_t)c->made.size : -(int64_t)c->made.size;
	return true;
}

struct device {
	struct mt_timeline_point now, best; /* now; the highest moment of the current bucket */
	uint64_t total, best_total;
	bool pending; /* best holds a moment not yet written */
};

/* Writes the bucket's highest moment and, when later, its last. */
static int flush(struct mt_timeline *tl, int d, struct device *s)
{
	struct mt_timeline_point *v;
	bool last = s->now.time != s->best.time;

	if (!s->pending)
		return 0;
	if (mt_grow((void **)&tl->points[d], &tl->cap[d], tl->n[d] + 1, sizeof *v))
		return ENOMEM;
	v = tl->points[d];
	v[tl->n[d]++] = s->best;
	if (last)
		v[tl->n[d]++] = s->now;
	s->pending = false;
	return 0;
}

/* Event e, the i-th, into its device's running state, without bucketing: the device it
 * changed, or -1. */
static int apply(const struct mt_report *r, const struct mt_timeline_index *ix, struct mt_timeline_live *live,
		 const struct mt_event *e, size_t i, struct device *dev)
{
	struct mt_timeline_change c;
	int d;

	if (e->kind == MT_EV_SEGMENT_ALLOC || e->kind == MT_EV_SEGMENT_FREE) {
		if (e->device == MT_NO_DEVICE)
			return -1;
		d = e->device;
		dev[d].now.reserved += e->kind == MT_EV_SEGMENT_ALLOC ? e->size : -e->size;
	} else if (ix ? mt_timeline_index_step(ix, i, &c) : mt_timeline_step(r, live, e, i, &c)) {
		d = c.made.device;
		dev[d].now.bytes[c.made.category] += (uint64_t)c.delta;
		dev[d].total += (uint64_t)c.delta;
	} else {
		return -1;
	}
	dev[d].now.time = e->time;
	return d;
}

/* Events cut into `parts` equal buckets of [from, to] (moments since the trace's start),
 * dev[] the state before the first, with the index or with `live`. */
struct buckets {
	struct mt_timeline *tl;
	const struct mt_report *r;
	const struct mt_timeline_index *ix;
	struct mt_timeline_live *live;
	struct device *dev;
	uint64_t from, to;
	size_t parts, at; /* at: the bucket of the last event */
	bool past;	  /* an event past `to` came: the rest are not wanted */
};

/* Event e, the i-th, into its bucket: 0 or ENOMEM. */
static int bucket(struct buckets *b, const struct mt_event *e, size_t i)
{
	const uint64_t at = mt_report_since(b->r, e->time);
	const size_t k = mt_timeline_part(at - b->from, b->to - b->from, b->parts);
	struct device *dev = b->dev;
	int d, err = 0;

	if ((b->past = at > b->to))
		return 0;
	if (k != b->at) /* a new bucket: write the last one's highest moments */
		for (int x = 0; x < MT_MAX_DEVICES && !err; x++)
			err = flush(b->tl, x, &dev[x]);
	b->at = k;
	if (err || (d = apply(b->r, b->ix, b->live, e, i, dev)) < 0)
		return err;
	if (!dev[d].pending || dev[d].total >= dev[d].best_total) {
		dev[d].best = dev[d].now;
		dev[d].best_total = dev[d].total;
		dev[d].pending = true;
	}
	return 0;
}

/* The last bucket's highest moments, after the last event. */
static int bucket_end(struct buckets *b, int err)
{
	for (int k = 0; k < MT_MAX_DEVICES && !err; k++)
		err = flush(b->tl, k, &b->dev[k]);
	return err;
}

int mt_timeline_build(struct mt_timeline *tl, const struct mt_report *r)
{
	struct device *dev = calloc(MT_MAX_DEVICES, sizeof *dev);
	struct mt_timeline_live live = {0};
	struct buckets b = {
	    .tl = tl, .r = r, .live = &live, .dev = dev, .to = mt_report_span(r), .parts = MT_TIMELINE_BUCKETS};
	struct mt_walk *w = mt_walk_start(r->trace);
	const struct mt_event *e;
	int err = dev && w ? 0 : ENOMEM;

	memset(tl, 0, sizeof *tl);
	for (size_t i = 0; !err && !b.past && (e = mt_walk_one(w)); i++) {
		mt_progress("timeline", i, r->trace->nevents);
		err = bucket(&b, e, i);
	}
	err = dev ? bucket_end(&b, err) : err;
	mt_walk_end(w);
	mt_timeline_live_free(&live);
	free(dev);
	if (err)
		mt_timeline_free(tl);
	return err;
}

/* Mark k: what each device holds now. 0 or ENOMEM. */
static int mark(struct mt_timeline_index *ix, size_t k, const struct device *dev)
{
	struct mt_timeline_mark *m = &ix->marks[k];

	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (dev[d].total || dev[d].now.reserved) {
			if (mt_grow((void **)&m->held, &m->cap, m->n, sizeof *m->held))
				return ENOMEM;
			m->held[m->n++] = (struct mt_timeline_held){(uint8_t)d, dev[d].now};
		}
	return 0;
}

int mt_timeline_index_build(struct mt_timeline_index *ix, const struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	struct device *dev = calloc(MT_MAX_DEVICES, sizeof *dev);
	struct mt_timeline_live live = {0};
	int err = 0;

	memset(ix, 0, sizeof *ix);
	ix->r = r;
	ix->nmarks = t->nevents / MT_TIMELINE_MARK + 1;
	ix->link = malloc((t->nevents + 1) * sizeof *ix->link);
	ix->marks = calloc(ix->nmarks, sizeof *ix->marks);
	if (!dev || !ix->link || !ix->marks)
		err = ENOMEM;
	for (size_t i = 0; i < t->nevents && !err; i++) {
		const struct mt_event *e = &t->events[i];
		struct mt_timeline_change c;

		mt_progress("index", i, t->nevents);
		if (i % MT_TIMELINE_MARK == 0 && (err = mark(ix, i / MT_TIMELINE_MARK, dev)))
			break;
		ix->link[i] = MT_TIMELINE_NO_STEP;
		if (e->kind != MT_EV_SEGMENT_ALLOC && e->kind != MT_EV_SEGMENT_FREE &&
		    mt_timeline_step(r, &live, e, i, &c)) {
			ix->link[i] = c.made.event == i ? MT_TIMELINE_LIVE : c.made.event;
			if (c.made.event != i)
				ix->link[c.made.event] = i;
		}
		(void)apply(r, ix, NULL, e, i, dev); /* the index's own step, now known */
	}
	if (!err && t->nevents && t->nevents % MT_TIMELINE_MARK == 0) /* past the last event: the end */
		err = mark(ix, t->nevents / MT_TIMELINE_MARK, dev);
	mt_timeline_live_free(&live);
	free(dev);
	if (err)
		mt_timeline_index_free(ix);
	return err;
}

int mt_timeline_range(struct mt_timeline *tl, const struct mt_timeline_index *ix, uint64_t from, uint64_t to,
		      size_t parts)
{
	const struct mt_report *r = ix->r;
	const struct mt_trace *t = r->trace;
	struct device *dev = calloc(MT_MAX_DEVICES, sizeof *dev);
	size_t lo = 0, hi = t->nevents;
	int err = dev ? 0 : ENOMEM;

	memset(tl, 0, sizeof *tl);
	if (err || from > to)
		goto out;
	while (lo < hi) { /* the first event at or after `from` */
		size_t mid = lo + (hi - lo) / 2;
		if (mt_report_since(r, t->events[mid].time) < from)
			lo = mid + 1;
		else
			hi = mid;
	}
	const struct mt_timeline_mark *m = &ix->marks[lo / MT_TIMELINE_MARK];
	for (size_t k = 0; k < m->n; k++) {
		struct device *s = &dev[m->held[k].device];
		s->now = m->held[k].now;
		for (int c = 1; c < MT_TAG_COUNT; c++)
			s->total += s->now.bytes[c];
	}
	for (size_t i = lo / MT_TIMELINE_MARK * MT_TIMELINE_MARK; i < lo; i++)
		(void)apply(r, ix, NULL, &t->events[i], i, dev);
	for (int d = 0; d < MT_MAX_DEVICES && !err; d++) /* what each device held as the range begins */
		if (dev[d].total || dev[d].now.reserved) {
			dev[d].now.time = r->start + from;
			dev[d].best = dev[d].now;
			dev[d].pending = true;
			err = flush(tl, d, &dev[d]);
		}
	struct buckets b = {.tl = tl, .r = r, .ix = ix, .dev = dev, .from = from, .to = to, .parts = parts};
	for (size_t i = lo; i < t->nevents && !err && !b.past; i++)
		err = bucket(&b, &t->events[i], i);
	err = bucket_end(&b, err);
out:
	free(dev);
	if (err)
		mt_timeline_free(tl);
	return err;
}

void mt_timeline_index_free(struct mt_timeline_index *ix)
{
	for (size_t k = 0; ix->marks && k < ix->nmarks; k++)
		free(ix->marks[k].held);
	free(ix->marks);
	free(ix->link);
	memset(ix, 0, sizeof *ix);
}

void mt_timeline_free(struct mt_timeline *tl)
{
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		free(tl->points[d]);
	memset(tl, 0, sizeof *tl);
}
