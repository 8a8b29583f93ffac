/* The timeline: one pass over the events, counting bytes per device and category; with
 * an index of the events' steps, any part of the run again, as finely. */
#include "analyze/timeline.h"
#include "core/array.h"
#include "reader/progress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What event i does as an allocation `made` (made and freed by it or by its pair). */
static void step_of(const struct mt_report *r, size_t i, size_t made, int *device, uint8_t *category, int64_t *delta)
{
	const struct mt_event *m = &r->trace->events[made];

	*delta = made == i ? (int64_t)m->size : -(int64_t)m->size;
	*device = m->device;
	*category = r->comp.category[made] ? r->comp.category[made] : MT_TAG_OTHER;
}

bool mt_timeline_step(const struct mt_report *r, struct mt_map *live, size_t i, int *device, uint8_t *category,
		      int64_t *delta, size_t *made)
{
	const struct mt_trace *t = r->trace;
	const struct mt_event *e = &t->events[i];
	uint64_t k;

	if (e->error)
		return false;
	switch (e->kind) {
	case MT_EV_ALLOC:
	case MT_EV_VMM_CREATE:
		if (e->device == MT_NO_DEVICE ||
		    mt_map_put(live, e->kind == MT_EV_ALLOC ? e->addr : e->aux | 1ull << 63, i + 1))
			return false;
		k = i + 1;
		break;
	case MT_EV_FREE:
	case MT_EV_VMM_RELEASE:
		if (!mt_map_del(live, e->kind == MT_EV_FREE ? e->addr : e->aux | 1ull << 63, &k))
			return false;
		break;
	default:
		return false;
	}
	if (made)
		*made = k - 1;
	step_of(r, i, k - 1, device, category, delta);
	return true;
}

bool mt_timeline_index_step(const struct mt_timeline_index *ix, size_t i, int *device, uint8_t *category,
			    int64_t *delta, size_t *made)
{
	size_t k = ix->link[i];
	const uint8_t kind = ix->r->trace->events[i].kind;

	if (k == MT_TIMELINE_NO_STEP)
		return false;
	k = kind == MT_EV_ALLOC || kind == MT_EV_VMM_CREATE ? i : k;
	if (made)
		*made = k;
	step_of(ix->r, i, k, device, category, delta);
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

/* Event i into its device's running state, without bucketing: the device it changed, or -1. */
static int apply(const struct mt_report *r, const struct mt_timeline_index *ix, struct mt_map *live, size_t i,
		 struct device *dev)
{
	const struct mt_event *e = &r->trace->events[i];
	int64_t delta;
	uint8_t cat;
	int d;

	if (e->kind == MT_EV_SEGMENT_ALLOC || e->kind == MT_EV_SEGMENT_FREE) {
		if (e->device == MT_NO_DEVICE)
			return -1;
		d = e->device;
		dev[d].now.reserved += e->kind == MT_EV_SEGMENT_ALLOC ? e->size : -e->size;
	} else if (ix ? mt_timeline_index_step(ix, i, &d, &cat, &delta, NULL)
		      : mt_timeline_step(r, live, i, &d, &cat, &delta, NULL)) {
		dev[d].now.bytes[cat] += (uint64_t)delta;
		dev[d].total += (uint64_t)delta;
	} else {
		return -1;
	}
	dev[d].now.time = e->time;
	return d;
}

/* The events from `first` on, dev[] the state before it, cut into `parts` equal buckets of
 * [from, to] (moments since the trace's start) until the first event past `to`. */
static int bucket(struct mt_timeline *tl, const struct mt_report *r, const struct mt_timeline_index *ix,
		  struct mt_map *live, size_t first, struct device *dev, uint64_t from, uint64_t to, size_t parts)
{
	const struct mt_trace *t = r->trace;
	size_t bucket = 0;
	int err = 0;

	for (size_t i = first; i < t->nevents && !err; i++) {
		const uint64_t at = mt_report_since(r, t->events[i].time);
		const size_t b = mt_timeline_part(at - from, to - from, parts);
		int d;

		if (at > to)
			break;
		if (!ix)
			mt_progress("timeline", i, t->nevents);
		if (b != bucket) /* a new bucket: write the last one's highest moments */
			for (int k = 0; k < MT_MAX_DEVICES && !err; k++)
				err = flush(tl, k, &dev[k]);
		bucket = b;
		if ((d = apply(r, ix, live, i, dev)) < 0)
			continue;
		if (!dev[d].pending || dev[d].total >= dev[d].best_total) {
			dev[d].best = dev[d].now;
			dev[d].best_total = dev[d].total;
			dev[d].pending = true;
		}
	}
	for (int k = 0; k < MT_MAX_DEVICES && !err; k++)
		err = flush(tl, k, &dev[k]);
	return err;
}

int mt_timeline_build(struct mt_timeline *tl, const struct mt_report *r)
{
	struct device *dev = calloc(MT_MAX_DEVICES, sizeof *dev);
	struct mt_map live = {0};
	int err = dev ? 0 : ENOMEM;

	memset(tl, 0, sizeof *tl);
	err = err ? err : bucket(tl, r, NULL, &live, 0, dev, 0, mt_report_span(r), MT_TIMELINE_BUCKETS);
	mt_map_free(&live);
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
	struct mt_map live = {0};
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
		int64_t delta;
		size_t made;
		uint8_t cat;
		int d;

		mt_progress("index", i, t->nevents);
		if (i % MT_TIMELINE_MARK == 0 && (err = mark(ix, i / MT_TIMELINE_MARK, dev)))
			break;
		ix->link[i] = MT_TIMELINE_NO_STEP;
		if (e->kind != MT_EV_SEGMENT_ALLOC && e->kind != MT_EV_SEGMENT_FREE &&
		    mt_timeline_step(r, &live, i, &d, &cat, &delta, &made)) {
			ix->link[i] = made == i ? MT_TIMELINE_LIVE : made;
			if (made != i)
				ix->link[made] = i;
		}
		(void)apply(r, ix, NULL, i, dev); /* the index's own step, now known */
	}
	if (!err && t->nevents && t->nevents % MT_TIMELINE_MARK == 0) /* past the last event: the end */
		err = mark(ix, t->nevents / MT_TIMELINE_MARK, dev);
	mt_map_free(&live);
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
		(void)apply(r, ix, NULL, i, dev);
	for (int d = 0; d < MT_MAX_DEVICES && !err; d++) /* what each device held as the range begins */
		if (dev[d].total || dev[d].now.reserved) {
			dev[d].now.time = r->start + from;
			dev[d].best = dev[d].now;
			dev[d].pending = true;
			err = flush(tl, d, &dev[d]);
		}
	err = err ? err : bucket(tl, r, ix, NULL, lo, dev, from, to, parts);
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
