/* Growth across iterations: at the same point of every iteration (its boundary), the
 * bytes each stack holds live; a stack whose bytes grew at each of the last k boundaries
 * (default 3) is a leak, reported with its growth per iteration. Boundaries are, in
 * order of preference: memtap_mark events (optionally of one name), pushes of a named
 * NVTX range, or the range that repeats most at the top of a thread's range stack. */
#ifndef MT_LEAKS_H
#define MT_LEAKS_H

#include "core/replay.h"
#include "reader/reader.h"

struct mt_leak {
	uint32_t stack;
	uint8_t device;
	uint64_t bytes;	     /* live at the last boundary */
	uint64_t growth;     /* bytes per iteration, averaged over the growing run */
	uint32_t iterations; /* boundaries over which it grew */
};

struct mt_leaks {
	char boundary[128]; /* what the boundaries were, for people */
	size_t boundaries;
	struct mt_leak *items; /* biggest growth first */
	size_t n, cap;
};

/* The scan rides along a replay of the trace (the report's): start chooses the
 * boundaries (name: a mark or range name, or NULL to choose), step follows what the
 * replay's last event touched and, before event i is applied, samples the rows that
 * changed since the last boundary; finish finds the stacks that grew at the last k
 * boundaries. Each row keeps only its growing run, so time is linear in the events and
 * boundaries and memory in the rows, however many boundaries a trace has. */
struct mt_leak_row {
	uint32_t stack;
	uint8_t device;
	bool dirty;	   /* changed since the last boundary */
	uint64_t now;	   /* live bytes after the events so far */
	uint64_t last;	   /* at its last sample (it has not changed since) */
	uint64_t run_from; /* at the boundary before its growing run */
	size_t sampled;	   /* the boundary of its last sample + 1; 0: never */
	size_t run;	   /* boundaries it grew at, up to its last sample */
};

struct mt_leak_slot { /* what a live slot of the replay counts for: row + 1 and bytes */
	size_t row;
	uint64_t bytes;
};

struct mt_leak_scan {
	size_t *at; /* event indices of the boundaries */
	size_t samples, next;
	struct mt_map index; /* stack << 8 | device -> row + 1 */
	struct mt_leak_row *rows;
	size_t nrows, cap;
	size_t *dirty; /* rows changed since the last boundary */
	size_t ndirty, cap_dirty;
	struct mt_leak_slot *slots;
	size_t nslots;
};

/* Chooses the boundaries in a walk over t; `look`, when not NULL, is called with each event
 * of that walk too (another analysis's look ahead: see report.c). */
int mt_leaks_start(struct mt_leak_scan *s, struct mt_leaks *out, const struct mt_trace *t, const char *name,
		   void (*look)(void *, const struct mt_event *), void *arg);
int mt_leaks_step(struct mt_leak_scan *s, const struct mt_replay *rp, size_t i);
int mt_leaks_finish(struct mt_leak_scan *s, struct mt_leaks *out, unsigned k);
void mt_leaks_free(struct mt_leaks *l);

#endif
