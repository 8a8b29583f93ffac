/* The state of a running job, event by event as its trace grows (memtap top): the
 * report's replay applied incrementally, what is live by stack, tag and phase, what grew
 * over the last iteration, and the last OOM and policy events. Iteration boundaries are
 * as the leak scan chooses them, decided as events come: memtap_mark events once one is
 * seen, else each push of the first NVTX range that repeats at the top of a thread (so
 * the first boundary is its second push). */
#ifndef MT_NOW_H
#define MT_NOW_H

#include "core/map.h"
#include "core/replay.h"
#include "reader/reader.h"

/* Live device bytes of one stack on one device now, and its growth over the last
 * iteration (between the last two boundaries; negative: it shrank). */
struct mt_now_stack {
	uint32_t stack;
	uint8_t device;
	uint64_t bytes, count;
	int64_t grew;
};

/* An event worth a line: an OOM, a memtap_mark (a policy's too), a snapshot, one of
 * memtap's own notes (caps, captures, allocator changes). */
struct mt_now_note {
	uint64_t time;
	uint8_t kind, device;
	uint64_t size;
	uint32_t stack, text; /* text: a string id */
};

#define MT_NOW_NOTES 8

struct mt_now {
	const struct mt_trace *t;
	struct mt_replay rp;
	size_t applied; /* events of t applied: t->events[0 .. applied); a caller that drops
			 * them from t (mt_follow_drop) sets it back to 0. rp.index counts all */
	uint64_t last_time;
	/* iterations */
	size_t iterations;	  /* boundaries passed */
	uint32_t boundary;	  /* the repeating range's string id; 0: not known yet */
	bool marks;		  /* memtap_mark events are the boundaries */
	struct mt_map depth;	  /* thread -> NVTX ranges open */
	struct mt_map tops;	  /* string id -> pushes at the top of a thread */
	struct mt_map last, prev; /* stack << 8 | device -> live bytes at the last two boundaries */
	/* events */
	struct mt_now_note notes[MT_NOW_NOTES]; /* the last ones, oldest first */
	size_t nnotes;
	struct mt_now_note oom; /* the last OOM */
	uint64_t ooms;
};

int mt_now_init(struct mt_now *n, const struct mt_trace *t);
/* Applies t's events up to index `end`; 0 or ENOMEM. */
int mt_now_apply(struct mt_now *n, size_t end);
/* Live device memory by stack and device, biggest first (malloc'd, *count items), with
 * each one's growth; stacks that only shrank over the last iteration are included with
 * no bytes. 0 or ENOMEM. */
int mt_now_stacks(const struct mt_now *n, struct mt_now_stack **out, size_t *count);
/* Live device bytes on device d by tag, and by phase (string id of the innermost NVTX
 * range at allocation, 0 for none) into phases (a map the caller frees). 0 or ENOMEM. */
int mt_now_composition(const struct mt_now *n, int d, uint64_t tags[MT_TAG_COUNT], struct mt_map *phases);
void mt_now_free(struct mt_now *n);

#endif
