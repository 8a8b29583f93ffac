/* Device memory over time by category, for charts: the trace's span cut into equal
 * buckets, each holding the moment its device's allocated bytes were highest (so no
 * peak is smoothed away), with what the caching allocator had reserved then. */
#ifndef MT_TIMELINE_H
#define MT_TIMELINE_H

#include "analyze/report.h"

#define MT_TIMELINE_BUCKETS 8000 /* a page zoomed ten times still has a point a pixel */

struct mt_timeline_point {
	uint64_t time;
	uint64_t bytes[MT_TAG_COUNT]; /* by category; [0] unused */
	uint64_t reserved;
};

struct mt_timeline {
	struct mt_timeline_point
	    *points[MT_MAX_DEVICES]; /* in time order; a device's bytes hold until its next point */
	size_t n[MT_MAX_DEVICES], cap[MT_MAX_DEVICES];
};

/* Which of `parts` equal parts of [0, span] `at` falls in, the last for any later: no
 * product that overflows, no division by zero, whatever the trace's times. */
static inline size_t mt_timeline_part(uint64_t at, uint64_t span, size_t parts)
{
	uint64_t k = at / (span / parts + 1);

	return k < parts ? (size_t)k : parts - 1;
}

int mt_timeline_build(struct mt_timeline *tl, const struct mt_report *r);
void mt_timeline_free(struct mt_timeline *tl);

/* What event i does to device memory, by category: true with *device, *category and
 * *delta (bytes, signed) set when it changes some, and *made (when not NULL) the index of
 * the allocation it makes or frees. live: the caller's scratch map, empty at the first
 * event (address, or VMM handle | 1 << 63 -> event index + 1). */
bool mt_timeline_step(const struct mt_report *r, struct mt_map *live, size_t i, int *device, uint8_t *category,
		      int64_t *delta, size_t *made);

#endif
