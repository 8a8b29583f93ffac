/* The index pass's second thread (reader.c): while the pass reads a large opened trace
 * from its start, a thread checks and sums up the EVENTS chunks of its second half, so
 * that the pass only takes each one's sum when it gets there. */
#ifndef MT_AHEAD_H
#define MT_AHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/format.h"

#define MT_AHEAD_THREADS 16

/* An EVENTS chunk as the pass would find it when every event is good. */
struct mt_chunk_sum {
	size_t off;	     /* of the chunk's header */
	uint64_t dropped;    /* the payload's first varint */
	uint64_t min, last;  /* the lowest and highest time */
	uint64_t max_string; /* the highest string an event's aux names (mt_aux_is_string's kinds) */
	uint32_t n, max_stack, max_phase, last_thread;
	uint32_t threads[MT_AHEAD_THREADS]; /* the distinct thread indices, in order seen */
	uint8_t nthreads;
	uint8_t crc; /* which checksum the payload matches: 1 CRC-32C, 2 IEEE, 0 neither */
	bool whole;  /* each event decoded and valid by itself, the payload's end reached, and
			at most MT_AHEAD_THREADS threads: else the pass reads the chunk itself */
};

/* The thread, over data[0, size) (which starts at a chunk): NULL when none can be had. */
struct mt_ahead *mt_ahead_start(const uint8_t *data, size_t size);
/* The sum of the chunk whose header is at off, or NULL (not summed, or not yet): the
 * caller reads the chunks in order, and says by this where it is. */
const struct mt_chunk_sum *mt_ahead_take(struct mt_ahead *a, size_t off);
void mt_ahead_stop(struct mt_ahead *a); /* NULL: nothing */

/* A read-only mapping's pages in [*dropped, to) go back to the kernel, 16 MiB at a time
 * (they come back from the file if read again); *dropped moves to what was dropped. */
void mt_drop_read(const uint8_t *data, size_t to, size_t *dropped);

#endif
