/* Following a trace while its process writes it (memtap top): the file is append-only,
 * so each poll reads only the bytes past the last whole chunk read, and a chunk still
 * being written is read again, whole, next time. Events come in the order the writer
 * drained the threads' rings, so the ones not yet handed out wait until they are older
 * than the writer's longest pause (an event of another thread may still sit in its
 * ring); then they are handed out in time order. */
#ifndef MT_FOLLOW_H
#define MT_FOLLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reader/reader.h"

struct mt_follow {
	struct mt_trace t; /* what was read so far: t.events[0 .. ready) in time order */
	int fd;
	size_t offset; /* of the first byte not yet read as part of a whole chunk */
	size_t ready;  /* events handed out */
	uint8_t *buf;  /* a window of the file */
	bool damaged;  /* a damaged chunk: nothing after it is read */
	bool more;     /* the last poll read a whole window: the file has more already */
};

/* 0, or an errno code with t.problem saying in one line what is wrong (not a trace,
 * cannot be opened). */
int mt_follow_open(struct mt_follow *f, const char *path);
/* Reads what the file gained, up to a window of 16 MiB (f->more: there is more to read
 * now); 0 or an errno code (ENOMEM, a read error). */
int mt_follow_poll(struct mt_follow *f);
/* Events ready to be handed out, in time order: those at least `hold_ns` older than
 * now_ns (CLOCK_MONOTONIC, which the recorder's times use), all of them when the trace
 * was closed or `all`; while the file has more to read, those at least `hold_ns` older
 * than the newest read. Returns the new end of t.events' ready part. */
size_t mt_follow_ready(struct mt_follow *f, uint64_t now_ns, uint64_t hold_ns, bool all);
/* Forgets the first n events handed out (applied elsewhere already), so a long job's
 * events do not pile up in memory; the rest move to the front. */
void mt_follow_drop(struct mt_follow *f, size_t n);
void mt_follow_close(struct mt_follow *f);

#endif
