/* Reading a memtap trace into memory. A trace cut short (a killed job) or corrupted
 * reads back up to the last good chunk; `complete` says whether the file was closed
 * cleanly and `problem` says in one line what was wrong. Events come sorted by time. */
#ifndef MT_READER_H
#define MT_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

struct mt_stack {
	uint32_t depth;
	const uint64_t *frames; /* innermost first; return addresses as recorded */
};

struct mt_module {
	const char *path, *build_id;
	uint64_t base, start, end; /* load bias; lowest and highest mapped address */
};

struct mt_trace {
	const char *path;
	char *info;                 /* "key=value\n" lines of the INFO chunk */
	struct mt_event *events;
	size_t nevents;
	const char **strings;       /* by id; [0] is "" */
	size_t nstrings;
	struct mt_stack *stacks;    /* by id; [0] is empty */
	size_t nstacks;
	struct mt_module *modules;
	size_t nmodules;
	uint64_t dropped;           /* events the recorder could not keep */
	bool complete;              /* an END chunk closed the file */
	char problem[256];          /* empty, or what was wrong with the file */
	void *mem;                  /* owned allocations */
};

/* 0 on success (possibly with a problem noted), else an errno code; `problem` says why. */
int mt_trace_read(const char *path, struct mt_trace *t);
/* The same for a trace already in memory; name is only for messages. */
int mt_trace_parse(const void *data, size_t size, const char *name, struct mt_trace *t);
void mt_trace_free(struct mt_trace *t);
/* The value of an INFO key, copied into buf; NULL when absent. */
const char *mt_trace_info(const struct mt_trace *t, const char *key, char *buf, size_t len);
const char *mt_trace_string(const struct mt_trace *t, uint64_t id);

#endif
