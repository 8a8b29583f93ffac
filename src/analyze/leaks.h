/* Growth across iterations: at the same point of every iteration (its boundary), the
 * bytes each stack holds live; a stack whose bytes grew at each of the last k boundaries
 * (default 3) is a leak, reported with its growth per iteration. Boundaries are, in
 * order of preference: memtap_mark events (optionally of one name), pushes of a named
 * NVTX range, or the range that repeats most at the top of a thread's range stack. */
#ifndef MT_LEAKS_H
#define MT_LEAKS_H

#include "format/reader.h"

struct mt_leak {
	uint32_t stack;
	uint8_t device;
	uint64_t bytes;         /* live at the last boundary */
	uint64_t growth;        /* bytes per iteration, averaged over the growing run */
	uint32_t iterations;    /* boundaries over which it grew */
};

struct mt_leaks {
	char boundary[128];     /* what the boundaries were, for people */
	size_t boundaries;
	struct mt_leak *items;  /* biggest growth first */
	size_t n;
};

/* name: a mark or range name to use as the boundary, or NULL to choose; k: growths needed. */
int mt_leaks_find(struct mt_leaks *out, const struct mt_trace *t, const char *name, unsigned k);
void mt_leaks_free(struct mt_leaks *l);

#endif
