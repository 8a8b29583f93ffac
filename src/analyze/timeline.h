/* Device memory over time by category, for charts: the trace's span cut into equal
 * buckets, each holding the moment its device's allocated bytes were highest (so no
 * peak is smoothed away), with what the caching allocator had reserved then. With an
 * index of every event's step (memtap report --serve), any part of the run likewise. */
#ifndef MT_TIMELINE_H
#define MT_TIMELINE_H

#include "analyze/report.h"
#include "core/array.h"

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

/* Every event's step, found once: an allocation's free (MT_TIMELINE_LIVE: none), a free's
 * allocation, MT_TIMELINE_NO_STEP for the rest; and every MT_TIMELINE_MARK events what each
 * device held before it, so that a part of the run starts from the mark before it. */
#define MT_TIMELINE_LIVE SIZE_MAX
#define MT_TIMELINE_NO_STEP (SIZE_MAX - 1)
#define MT_TIMELINE_MARK 65536

struct mt_timeline_held {
	uint8_t device;
	struct mt_timeline_point now; /* bytes by category and reserved; time unused */
};

struct mt_timeline_mark {
	struct mt_timeline_held *held; /* the devices holding some */
	size_t n, cap;
};

struct mt_timeline_index {
	const struct mt_report *r;
	size_t *link; /* per event */
	struct mt_timeline_mark *marks;
	size_t nmarks;
};

int mt_timeline_index_build(struct mt_timeline_index *ix, const struct mt_report *r);
void mt_timeline_index_free(struct mt_timeline_index *ix);
/* [from, to] (ns since the trace's start) in `parts` buckets as mt_timeline_build's, after
 * a point at `from` with what each device held then. 0 or ENOMEM. */
int mt_timeline_range(struct mt_timeline *tl, const struct mt_timeline_index *ix, uint64_t from, uint64_t to,
		      size_t parts);

/* An allocation as its making event said. */
struct mt_timeline_made {
	size_t event; /* its index */
	uint64_t size, time;
	uint32_t stack;
	uint8_t device, category; /* category: an enum mt_tag, MT_TAG_OTHER where the composition has none */
};

/* What an event does to device memory: `delta` bytes (signed) to the allocation it makes
 * or frees. */
struct mt_timeline_change {
	int64_t delta;
	struct mt_timeline_made made;
};

/* What is live, as mt_timeline_step goes: {0} before the first event. */
struct mt_timeline_live {
	struct mt_map at; /* address, or VMM handle | 1 << 63 -> slot in made + 1 */
	struct mt_timeline_made *made;
	struct mt_slots slots;
};
void mt_timeline_live_free(struct mt_timeline_live *live);

/* What event e, the i-th in time order, does to device memory: true with *c set when it
 * changes some. Events are given in order, each once. */
bool mt_timeline_step(const struct mt_report *r, struct mt_timeline_live *live, const struct mt_event *e, size_t i,
		      struct mt_timeline_change *c);
/* The same from the index, for any event of a trace in memory in any order. */
bool mt_timeline_index_step(const struct mt_timeline_index *ix, size_t i, struct mt_timeline_change *c);

#endif
