/* `stream_check TRACE...`: each trace read into memory (mt_trace_read) and opened
 * (mt_trace_open, its events walked from the file) must give the same trace: the same
 * events in the same order, field by field, the same tables, threads, counts and problem.
 * One TAP line a trace; a difference names the first event or field that differs. */
#include <stdio.h>
#include <string.h>

#include "../same_event.h"
#include "../tap.h"
#include "reader/reader.h"

/* What differs, in why; NULL when nothing does. */
static const char *differs(const char *path, char *why, size_t n)
{
	struct mt_trace a, b;
	int ra = mt_trace_read(path, &a), rb = mt_trace_open(path, &b);
	const char *r = NULL;
	struct mt_walk *w = NULL;
	const struct mt_event *batch;
	size_t at = 0, k;

	if (ra != rb || strcmp(a.problem, b.problem))
		snprintf(why, n, "read: %d \"%s\"; open: %d \"%s\"", ra, a.problem, rb, b.problem), r = why;
	else if (ra)
		r = NULL; /* refused both ways, in the same words */
	else if (a.nevents != b.nevents || a.nthreads != b.nthreads || a.nstrings != b.nstrings ||
		 a.nstacks != b.nstacks || a.dropped != b.dropped || a.complete != b.complete ||
		 a.written != b.written || mt_trace_start(&a) != mt_trace_start(&b) ||
		 memcmp(a.threads, b.threads, a.nthreads * sizeof *a.threads))
		snprintf(why, n, "counts, threads or start: %zu/%zu events, %zu/%zu threads", a.nevents, b.nevents,
			 a.nthreads, b.nthreads),
		    r = why;
	else if (!(w = mt_walk_start(&b)))
		snprintf(why, n, "out of memory"), r = why;
	while (w && !r && (k = mt_walk_next(w, &batch)) != 0)
		for (size_t i = 0; i < k && !r; i++, at++)
			if (at >= a.nevents || !same_event(&a.events[at], &batch[i]))
				snprintf(why, n, "event %zu of %zu", at, a.nevents), r = why;
	if (w && !r && (at != a.nevents || strcmp(a.problem, b.problem)))
		snprintf(why, n, "walked %zu of %zu events: %s", at, a.nevents, b.problem), r = why;
	mt_walk_end(w);
	mt_trace_free(&a);
	mt_trace_free(&b);
	return r;
}

int main(int argc, char **argv)
{
	char why[1024];

	for (int i = 1; i < argc; i++) {
		const char *d = differs(argv[i], why, sizeof why);
		ok(!d, "%s: the same opened as read%s%s", argv[i], d ? ": " : "", d ? d : "");
	}
	return done();
}
