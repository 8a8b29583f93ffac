/* Following a growing trace: read from the last whole chunk's end, decode through the
 * reader's own chunk code, sort what is pending and hand out what is old enough. */
#include "reader/follow.h"
#include "reader/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mt_follow_open(struct mt_follow *f, const char *path)
{
	int r;

	memset(f, 0, sizeof *f);
	f->t.path = path;
	if ((r = mt_file_open(path, &f->fd, NULL, f->t.problem, sizeof f->t.problem)) != 0)
		return r;
	if ((r = mt_follow_poll(f)))
		return r;
	/* a header not yet written is a trace that is starting; a wrong one is not a trace */
	if (f->offset == 0 && f->damaged) {
		char why[128]; /* what the reader said: "not a memtap trace ...", one line */
		memcpy(why, f->t.problem, sizeof why - 1);
		why[sizeof why - 1] = '\0';
		snprintf(f->t.problem, sizeof f->t.problem, "%s: %s", path, why);
		return EINVAL;
	}
	return 0;
}

/* Read in windows: a window always holds a whole chunk (at most 4 MiB and its header),
 * and a long trace opened late is read a window at a time. */
#define WINDOW (16u << 20)

int mt_follow_poll(struct mt_follow *f)
{
	if (!f->buf && !(f->buf = malloc(WINDOW)))
		return ENOMEM;
	f->more = false;
	if (!f->damaged) {
		size_t have = 0, used;
		int r;
		while (have < WINDOW) {
			ssize_t n = pread(f->fd, f->buf + have, WINDOW - have, (off_t)(f->offset + have));
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
		f->more = have == WINDOW && used && !f->damaged; /* else the end of the file, or of what is whole */
	}
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
	/* more of the file to read: what is newer than its newest events by the writer's
	 * longest pause waits for the next window, which may hold events older than it */
	if (f->more) {
		all = false;
		now_ns = t->events[end - 1].time;
	}
	/* a trace from another machine has another monotonic clock: its newest events may be
	 * ahead of this one's; then nothing is held back */
	if (!all && (f->more || (!t->complete && !f->damaged)) && t->events[end - 1].time <= now_ns) {
		uint64_t cut = now_ns > hold_ns ? now_ns - hold_ns : 0;
		while (end > f->ready && t->events[end - 1].time > cut)
			end--;
	}
	f->ready = end;
	return end;
}

void mt_follow_drop(struct mt_follow *f, size_t n)
{
	struct mt_trace *t = &f->t;

	if (n > f->ready)
		n = f->ready;
	if (!n)
		return;
	memmove(t->events, t->events + n, (t->nevents - n) * sizeof *t->events);
	t->nevents -= n;
	f->ready -= n;
}

void mt_follow_close(struct mt_follow *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->buf);
	mt_trace_free(&f->t);
	f->fd = -1;
}
