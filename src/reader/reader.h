/* Reading a memtap trace, into memory or as it goes (mt_trace_open). A trace cut short (a killed job) or corrupted
 * reads back up to the last good chunk; `complete` says whether the file was closed
 * cleanly and `problem` says in one line what was wrong. Events come sorted by time.
 * Every index an event holds (thread, stack, string) is checked against the trace's own
 * tables here, once, and every size against the address space, so analyses index their
 * tables without checking again. */
#ifndef MT_READER_H
#define MT_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/format.h"

struct mt_stack {
	uint32_t depth;
	const uint64_t *frames; /* innermost first; return addresses as recorded */
};

struct mt_module {
	const char *path, *build_id;
	uint64_t base, start, end; /* load bias; lowest and highest mapped address */
};

/* A frame of an imported trace, which comes with names instead of addresses: such a
 * trace's stacks hold indices into `named` (from 1). */
struct mt_named_frame {
	const char *function, *file;
	int line;
};

struct mt_trace {
	const char *path;
	char *info;		 /* "key=value\n" lines of the INFO chunk */
	struct mt_event *events; /* NULL for a trace opened with mt_trace_open: mt_walk gives them */
	size_t nevents;
	struct mt_index *index; /* an opened trace: where its events are in the file (reader/stream.c) */
	const char **strings;	/* by id; [0] is "" */
	size_t nstrings;
	struct mt_stack *stacks; /* by id; [0] is empty */
	size_t nstacks;
	struct mt_module *modules;
	size_t nmodules;
	struct mt_named_frame *named;
	size_t nnamed;
	uint32_t *threads;	       /* by an event's thread: the index the recorder gave it; [0] is 0 */
	size_t nthreads;	       /* events' thread indices are below this, at most events + 1 */
	uint64_t dropped;	       /* events the recorder could not keep */
	uint64_t drops[MT_DROP_COUNT]; /* of those, by reason, where the trace says (END, DROPS chunks) */
	uint64_t waits, waited_ns;     /* the job's waits for room in a full ring, and their time (END) */
	uint64_t written;	       /* events the last END chunk says are in the file */
	bool complete;		       /* an END chunk closed the file */
	bool ieee;		       /* the chunks' checksums are IEEE CRC-32 (before 2026-11-21) */
	size_t chunks;		       /* whole chunks read */
	bool mapped;		       /* reading: the input is a file's private mapping, whose pages
					* a reader may give back once past them */
	size_t held_peak;	       /* a pickle's import: the most bytes its reader held at once */
	char problem[256];	       /* empty, or what was wrong with the file */
	void *mem;		       /* owned allocations */
	size_t cap_events, cap_strings, cap_stacks, cap_modules, cap_named;
};

/* 0 on success (possibly with a problem noted), else an errno code; `problem` says why. */
int mt_trace_read(const char *path, struct mt_trace *t);
/* The same, but a memtap trace's events stay in its file: every chunk is read and checked
 * once, t->nevents counts the events, and mt_walk gives them in the same order holding only
 * the chunks whose times overlap (a drain or two of the job's). A snapshot or an RMM log is
 * read into memory as mt_trace_read does. */
int mt_trace_open(const char *path, struct mt_trace *t);
/* Either, by size: reading whole is up to a third faster than walking from the file, and
 * takes 80 bytes an event, so a trace of 64 MiB (about 4M events) or more is opened.
 * MEMTAP_READ=memory or =file chooses whatever the size. */
int mt_trace_load(const char *path, struct mt_trace *t);
/* t's events in time order (its first t->nevents: a copy may cut it), in batches of up to
 * a few thousand, from memory or from an opened trace's file. mt_walk_start: NULL when out
 * of memory. mt_walk_next: the next events in *batch, valid until the next call; 0 at the
 * end, or when the walk could go no further (out of memory, or the file changed under it:
 * the opened trace's problem then says why). */
struct mt_walk *mt_walk_start(const struct mt_trace *t);
size_t mt_walk_next(struct mt_walk *w, const struct mt_event **batch);
/* The same an event at a time: NULL at the end; valid until the next call. Not to be mixed
 * with mt_walk_next on one walk. */
const struct mt_event *mt_walk_one(struct mt_walk *w);
void mt_walk_end(struct mt_walk *w);
/* The same for a trace already in memory; name is only for messages. A PyTorch memory
 * snapshot (a pickle from torch.cuda.memory._dump_snapshot) and a RAPIDS RMM log (CSV from
 * logging_resource_adaptor) are read into the same form. */
int mt_trace_parse(const void *data, size_t size, const char *name, struct mt_trace *t);
void mt_trace_free(struct mt_trace *t);
/* Following a trace that is still being written (memtap top): the next bytes of the file,
 * from byte `base` (0 for its start; then each time where the last call's *used ended),
 * appended to a zeroed t. Only whole chunks are read: *used stops before a chunk still
 * being written, which the next call reads from its start. Events are appended as decoded
 * (not sorted, threads not renumbered; call mt_trace_finish to have them as
 * mt_trace_read gives them). 0; EINVAL: not a memtap trace; EILSEQ: a damaged chunk
 * (problem says where; nothing after it is read); ENOMEM. */
int mt_trace_feed(struct mt_trace *t, const uint8_t *data, size_t size, size_t base, size_t *used);
/* The value of an INFO key, copied into buf; NULL when absent. */
const char *mt_trace_info(const struct mt_trace *t, const char *key, char *buf, size_t len);
/* Start of the trace on the monotonic clock (INFO start_monotonic_ns, else the first event). */
uint64_t mt_trace_start(const struct mt_trace *t);
uint64_t mt_trace_end(const struct mt_trace *t); /* the last event's time; 0 without events */
const char *mt_trace_string(const struct mt_trace *t, uint64_t id);
/* The thread index the recorder gave the thread of an event (events carry the reader's own). */
uint32_t mt_trace_thread(const struct mt_trace *t, uint32_t thread);
/* The words for an event that fails mt_trace_check_event's test, in buf. */
const char *mt_trace_event_problem(const struct mt_trace *t, const struct mt_event *e, char *buf, size_t len);

/* What is wrong with an event against t's tables so far (a stack, string or size out of
 * range), in a few words written to buf; NULL when nothing is. The test is inline (every
 * event of every walk takes it); the words are only for an event that fails it. */
static inline const char *mt_trace_check_event(const struct mt_trace *t, const struct mt_event *e, char *buf,
					       size_t len)
{
	if (mt_event_valid(e) && (!e->stack || e->stack < t->nstacks) && (!e->phase || e->phase < t->nstrings) &&
	    (!e->aux || e->aux < t->nstrings || !mt_aux_is_string(e->kind)))
		return NULL;
	return mt_trace_event_problem(t, e, buf, len);
}

/* For importers (reader/torch.c): building a trace in memory. 0 or ENOMEM. */
int mt_trace_add_event(struct mt_trace *t, const struct mt_event *e);
uint32_t mt_trace_add_string(struct mt_trace *t, const char *s); /* 0 when out of memory */
uint32_t mt_trace_add_stack(struct mt_trace *t, const uint64_t *frames, uint32_t depth);
/* function and file are not copied: strings the trace owns (mt_trace_own), or that outlive it */
uint32_t mt_trace_add_named(struct mt_trace *t, const char *function, const char *file, int line);
void *mt_trace_own(struct mt_trace *t, size_t n); /* freed with the trace */
int mt_trace_finish(struct mt_trace *t);	  /* numbers threads, sorts events by time; 0 or ENOMEM */
int mt_trace_from_torch(const uint8_t *data, size_t size, struct mt_trace *t);
bool mt_is_rmm_log(const uint8_t *data, size_t size);
int mt_trace_from_rmm(const uint8_t *data, size_t size, struct mt_trace *t);

#endif
