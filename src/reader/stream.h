/* Between the reader's index pass (reader.c) and the walk over an opened trace's file
 * (stream.c): what the index notes of each chunk and thread as every event is checked. */
#ifndef MT_STREAM_H
#define MT_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/format.h"
#include "core/map.h"
#include "reader/ahead.h"
#include "reader/reader.h"

/* Takes the descriptor; a walk says what went wrong in `problem` (the trace's). NULL when
 * out of memory. */
struct mt_index *mt_index_new(int fd, char *problem);
void mt_index_free(struct mt_index *x);
/* An event of the chunk being indexed, checked: 0 or ENOMEM. */
int mt_index_event(struct mt_index *x, const struct mt_event *e);
/* A chunk's events at once, from the index pass's second thread: 0 or ENOMEM. */
int mt_index_sum(struct mt_index *x, const struct mt_chunk_sum *s);
/* The end of that chunk, whose payload is `length` bytes at `off` in the file: 0 or ENOMEM. */
int mt_index_chunk(struct mt_index *x, uint64_t off, uint32_t length, uint32_t crc, bool ieee);
/* Once every chunk is indexed: the recorded thread indices in order, [0] 0, as
 * mt_trace.threads (malloc'd); events are given the reader's. 0 or ENOMEM. */
int mt_index_threads(struct mt_index *x, uint32_t **ids, size_t *n);
uint64_t mt_index_first_time(const struct mt_index *x); /* 0 when there are no events */
uint64_t mt_index_last_time(const struct mt_index *x);

#endif
