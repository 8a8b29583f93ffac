/* `stream_check TRACE...`: each trace read into memory (mt_trace_read) and opened
 * (mt_trace_open, its events walked from the file) must give the same trace: the same
 * events in the same order, field by field, in batches and an event at a time, the same
 * tables, threads, counts and problem.
 * One TAP line a trace; a difference names the first event or field that differs.
 * `stream_check --changed TRACE`: a byte three quarters into the file is flipped after it
 * was opened (TRACE is changed); the walk must say so and give nothing after it. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../same_event.h"
#include "../tap.h"
#include "reader/reader.h"

/* What differs when t is walked an event at a time (mt_walk_one) from want's events, in
 * why; NULL when nothing does. */
static const char *one_at_a_time(const struct mt_trace *t, const struct mt_trace *want, char *why, size_t n)
{
	struct mt_walk *w = mt_walk_start(t);
	const struct mt_event *e;
	const char *r = w ? NULL : "out of memory";
	size_t at = 0;

	for (; w && !r && (e = mt_walk_one(w)); at++)
		if (at >= want->nevents || !same_event(&want->events[at], e))
			snprintf(why, n, "%s an event at a time: event %zu", t->index ? "opened" : "read", at), r = why;
	if (w && !r && at != want->nevents)
		snprintf(why, n, "%s an event at a time: %zu of %zu events", t->index ? "opened" : "read", at,
			 want->nevents),
		    r = why;
	mt_walk_end(w);
	return r;
}

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
	if (w && !r && !(r = one_at_a_time(&b, &a, why, n)))
		r = one_at_a_time(&a, &a, why, n);
	mt_walk_end(w);
	mt_trace_free(&a);
	mt_trace_free(&b);
	return r;
}

static void changed(const char *path)
{
	struct mt_trace t;
	struct mt_walk *w = NULL;
	const struct mt_event *batch;
	struct stat st;
	size_t n, given = 0, after = 0;
	unsigned char byte;
	int fd = open(path, O_RDWR);

	if (fd < 0 || fstat(fd, &st) || mt_trace_open(path, &t) || !(w = mt_walk_start(&t)) ||
	    pread(fd, &byte, 1, st.st_size * 3 / 4) != 1 ||
	    (byte ^= 0x55, pwrite(fd, &byte, 1, st.st_size * 3 / 4)) != 1) {
		ok(0, "%s: opened and changed", path);
		return;
	}
	for (bool said = false; (n = mt_walk_next(w, &batch)) != 0; said = t.problem[0] != 0) {
		given += n;
		after += said ? n : 0;
	}
	ok(strstr(t.problem, "changed while the trace was read") && given < t.nevents,
	   "%s changed under the walk: said (\"%s\"), %zu of %zu events given", path, t.problem, given, t.nevents);
	ok(after == 0 && mt_walk_next(w, &batch) == 0, "...and nothing given after it (%zu)", after);
	mt_walk_end(w);
	mt_trace_free(&t);
	close(fd);
}

int main(int argc, char **argv)
{
	char why[1024];

	if (argc == 3 && !strcmp(argv[1], "--changed")) {
		changed(argv[2]);
		return done();
	}
	for (int i = 1; i < argc; i++) {
		const char *d = differs(argv[i], why, sizeof why);
		ok(!d, "%s: the same opened as read%s%s", argv[i], d ? ": " : "", d ? d : "");
	}
	return done();
}
