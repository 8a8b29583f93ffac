/* Following a growing trace: read from the last whole chunk's end, decode through the
 * reader's own chunk code, sort what is pending and hand out what is old enough. */
#include "reader/follow.h"
#include "core/array.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mt_follow_open(struct mt_follow *f, const char *path)
{
	struct stat st;
	int r;

	memset(f, 0, sizeof *f);
	f->t.path = path;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0 || fstat(f->fd, &st) != 0) {
		r = errno;
		snprintf(f->t.problem, sizeof f->t.problem, "cannot read %s: %s", path, strerror(r));
		return r;
	}
	if (S_ISDIR(st.st_mode)) {
		snprintf(f->t.problem, sizeof f->t.problem, "%s is a directory", path);
		return EISDIR;
	}
	if ((r = mt_follow_poll(f)))
		return r;
	/* a header not yet written is a trace that is starting; a wrong one is not a trace */
	if (f->offset == 0 && f->damaged) {
		char why[sizeof f->t.problem];
		memcpy(why, f->t.problem, sizeof why);
		snprintf(f->t.problem, sizeof f->t.problem, "%s: %s", path, why);
		return EINVAL;
	}
	return 0;
}

int mt_follow_poll(struct mt_follow *f)
{
	size_t have = 0, used;
	int r;

	if (f->damaged)
		return 0;
	/* everything new, then its whole chunks */
	for (;;) {
		ssize_t n;
		if (have == f->cap && mt_grow((void **)&f->buf, &f->cap, have + 65536, 1))
			return ENOMEM;
		n = pread(f->fd, f->buf + have, f->cap - have, (off_t)(f->offset + have));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			break;
		have += (size_t)n;
	}
	r = mt_trace_feed(&f->t, f->buf, have, f->offset, &used);
	f->offset += used;
	if (r == ENOMEM)
		return ENOMEM;
	if (r)
		f->damaged = true;
	return 0;
}

size_t mt_follow_ready(struct mt_follow *f, uint64_t now_ns, uint64_t hold_ns, bool all)
{
	struct mt_trace *t = &f->t;
	size_t end = t->nevents;

	if (f->ready >= end)
		return f->ready;
	if (mt_sort_events(t->events + f->ready, end - f->ready))
		return f->ready; /* out of memory: try again next time */
	/* a trace from another machine has another monotonic clock: its newest events may be
	 * ahead of this one's; then nothing is held back */
	if (!all && !t->complete && !f->damaged && t->events[end - 1].time <= now_ns) {
		uint64_t cut = now_ns > hold_ns ? now_ns - hold_ns : 0;
		while (end > f->ready && t->events[end - 1].time > cut)
			end--;
	}
	f->ready = end;
	return end;
}

void mt_follow_close(struct mt_follow *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->buf);
	mt_trace_free(&f->t);
	f->fd = -1;
}
