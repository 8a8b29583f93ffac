/* The timeline: one pass over the events, counting bytes per device and category. */
#include "analyze/timeline.h"
#include "core/array.h"
#include "reader/progress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
		*delta = (int64_t)e->size;
		break;
	case MT_EV_FREE:
	case MT_EV_VMM_RELEASE:
		if (!mt_map_del(live, e->kind == MT_EV_FREE ? e->addr : e->aux | 1ull << 63, &k))
			return false;
		*delta = -(int64_t)t->events[k - 1].size;
		break;
	default:
		return false;
	}
	*device = t->events[k - 1].device;
	if (made)
		*made = k - 1;
	*category = r->comp.category[k - 1] ? r->comp.category[k - 1] : MT_TAG_OTHER;
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

int mt_timeline_build(struct mt_timeline *tl, const struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	struct device *dev = calloc(MT_MAX_DEVICES, sizeof *dev);
	struct mt_map live = {0};
	uint64_t span = mt_report_span(r), bucket = 0;
	int err = dev ? 0 : ENOMEM;

	memset(tl, 0, sizeof *tl);
	for (size_t i = 0; i < t->nevents && !err; i++) {
		const struct mt_event *e = &t->events[i];
		uint64_t b = mt_timeline_part(mt_report_since(r, e->time), span, MT_TIMELINE_BUCKETS);
		mt_progress("timeline", i, t->nevents);
		int64_t delta;
		uint8_t cat;
		int d;

		if (b != bucket) /* a new bucket: write the last one's highest moments */
			for (int k = 0; k < MT_MAX_DEVICES && !err; k++)
				err = flush(tl, k, &dev[k]);
		bucket = b;
		if (e->kind == MT_EV_SEGMENT_ALLOC || e->kind == MT_EV_SEGMENT_FREE) {
			if (e->device == MT_NO_DEVICE)
				continue;
			d = e->device;
			dev[d].now.reserved += e->kind == MT_EV_SEGMENT_ALLOC ? e->size : -e->size;
		} else if (mt_timeline_step(r, &live, i, &d, &cat, &delta, NULL)) {
			dev[d].now.bytes[cat] += (uint64_t)delta;
			dev[d].total += (uint64_t)delta;
		} else {
			continue;
		}
		dev[d].now.time = e->time;
		if (!dev[d].pending || dev[d].total >= dev[d].best_total) {
			dev[d].best = dev[d].now;
			dev[d].best_total = dev[d].total;
			dev[d].pending = true;
		}
	}
	for (int k = 0; k < MT_MAX_DEVICES && !err; k++)
		err = flush(tl, k, &dev[k]);
	mt_map_free(&live);
	free(dev);
	if (err)
		mt_timeline_free(tl);
	return err;
}

void mt_timeline_free(struct mt_timeline *tl)
{
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		free(tl->points[d]);
	memset(tl, 0, sizeof *tl);
}
