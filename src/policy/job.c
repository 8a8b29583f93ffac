/* The whole job: the ranks' policy threads coordinate through files in the run
 * directory, never through the job's threads or its network. One append-only log,
 * .memtap/events, carries one line per event (an OOM, a snapshot request, a snapshot
 * taken); each rank's policy thread reads what is new at every poll (the flush
 * interval) and acts on what other ranks wrote: on_peer_oom handlers, its own snapshot.
 * Each rank keeps .memtap/rank-R current (its pid and host, touched every second, and
 * "exited" at the end), so readers can tell a rank that is gone. Nobody waits for
 * anybody: a rank that is gone simply writes nothing. A line is one write() of less
 * than PIPE_BUF bytes with O_APPEND, so lines never interleave on a local file system.
 * A policy may write lines there too (memtap.append, when the policy folder is the run
 * directory): what a line asks is checked, and files are opened as files.c opens them. */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "policy/engine.h"
#include "core/path.h"

#define BEAT_NS 1000000000ull	   /* how often the rank's file is touched */
#define OOM_EVERY_NS 1000000000ull /* an OOM is told to the others at most this often */
#define LINE_MAX_BYTES 480	   /* below PIPE_BUF: one atomic append */

static struct {
	bool on;
	int events, beat;   /* descriptors, -1: none */
	off_t offset;	    /* events read so far */
	char partial[1024]; /* the start of a line not yet complete */
	size_t npartial;
	uint64_t next_poll, next_beat, last_oom;
	unsigned sequence;
	char oom_id[64]; /* the OOM being handled: a snapshot_all in its handlers bears its id */
	int rank;
	char host[128];
} job = {.events = -1, .beat = -1};

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One line into the log: KIND ID RANK PID REALTIME_NS HOST [PATH in the run directory]. */
static void append(const char *kind, const char *id, const char *path)
{
	char line[LINE_MAX_BYTES + 1];
	int n = snprintf(line, sizeof line, "%s %s %d %d %llu %s%s%s\n", kind, id, job.rank, (int)getpid(),
			 (unsigned long long)realtime_ns(), job.host, path ? " " : "", path ? path : "");

	if (n > 0 && n <= LINE_MAX_BYTES && write(job.events, line, (size_t)n) != n) {
		char events[4200];
		int err = errno;
		mt_path_join(events, sizeof events, mt_pol.host->run_dir, ".memtap/events");
		mt_pol_say("cannot write to %s: %s", events, strerror(err));
	}
}

static void beat(const char *state)
{
	char line[256];
	int n = snprintf(line, sizeof line, "%d %s %s %llu\n", (int)getpid(), job.host, state,
			 (unsigned long long)realtime_ns());

	if (job.beat >= 0 && n > 0 && (size_t)n < sizeof line && ftruncate(job.beat, 0) == 0)
		(void)!pwrite(job.beat, line, (size_t)n, 0);
}

void mt_job_start(void)
{
	const struct mt_policy_host *host = mt_pol.host;
	struct stat st;

	if (!host->run_dir)
		return;
	job.rank = host->rank >= 0 ? host->rank : 0;
	gethostname(job.host, sizeof job.host - 1);
	for (char *p = job.host; *p; p++)
		if (*p == ' ')
			*p = '_';
	mkdir(host->run_dir, 0755); /* the first rank makes it */
	job.events = mt_pol_open_in(host->run_dir, ".memtap/events", O_RDWR | O_CREAT | O_APPEND, 0644, true);
	if (job.events < 0) {
		char path[4200];
		mt_path_join(path, sizeof path, host->run_dir, ".memtap/events");
		mt_pol_say("cannot open %s: %s; this rank does not coordinate with the others", path,
			   mt_pol_why(job.events));
		return;
	}
	/* what was written before this rank started is not its business (an earlier attempt) */
	job.offset = fstat(job.events, &st) == 0 ? st.st_size : 0;
	job.on = true;
}

/* The process that allocates is the rank: a launcher's shell or wrapper that loads the
 * same policies has no trace, takes no snapshot and keeps no rank file. */
static bool is_the_rank(void)
{
	char rel[64];

	if (job.beat >= 0)
		return true;
	if (!mt_pol.rp.allocs && !mt_pol.rp.failed) /* a first allocation that failed counts */
		return false;
	snprintf(rel, sizeof rel, ".memtap/rank-%d", job.rank);
	job.beat = mt_pol_open_in(mt_pol.host->run_dir, rel, O_RDWR | O_CREAT, 0644, false);
	beat("running");
	return job.beat >= 0;
}

void mt_job_stop(void)
{
	if (!job.on)
		return;
	if (job.beat >= 0)
		beat("exited");
	job.on = false;
}

bool mt_job_active(void)
{
	return job.on;
}

int mt_job_rank(void)
{
	return job.rank;
}

/* A request's id as ranks make them (RANK-PID-SEQUENCE): any line of the log may have
 * been written by a policy, and an id names a folder of the run directory. */
static bool is_id(const char *id)
{
	return *id && strspn(id, "0123456789-") == strlen(id);
}

/* This rank's snapshot for request `id`: snapshots/ID/rank-R.trace in the run directory.
 * 0, or a code for mt_pol_why. */
static int take(const char *id, char *path, size_t len)
{
	char rel[128]; /* the path in the run directory: a short line however deep the directory */
	uint64_t bytes;
	int r;

	snprintf(rel, sizeof rel, "snapshots/%s/rank-%d.trace", id, job.rank);
	mt_path_join(path, len, mt_pol.host->run_dir, "%s", rel);
	if (!is_id(id))
		return -EINVAL;
	if (!(r = mt_pol_snapshot_in(mt_pol.host->run_dir, rel, path, 0644, true, &bytes)))
		append("took", id, rel);
	return r;
}

int mt_job_snapshot_all(char *id, size_t idlen, char *path, size_t len)
{
	if (!job.on)
		return ENOTCONN;
	is_the_rank();
	if (job.oom_id[0]) { /* once per OOM: a second call asks for a new moment */
		snprintf(id, idlen, "%s", job.oom_id);
		job.oom_id[0] = '\0';
	} else {
		snprintf(id, idlen, "%d-%d-%u", job.rank, (int)getpid(), ++job.sequence);
	}
	append("snapshot", id, NULL); /* first, so that the others start at once */
	return take(id, path, len);
}

void mt_job_oom(bool begin)
{
	uint64_t now = monotonic_ns();

	job.oom_id[0] = '\0';
	if (!begin || !job.on || !is_the_rank() || (job.last_oom && now - job.last_oom < OOM_EVERY_NS))
		return;
	job.last_oom = now;
	snprintf(job.oom_id, sizeof job.oom_id, "%d-%d-%u", job.rank, (int)getpid(), ++job.sequence);
	append("oom", job.oom_id, NULL);
}

/* One line of the log, written by another rank: act on it. */
static void act(char *line)
{
	char kind[16], id[64], host[128] = "";
	int rank, pid;
	unsigned long long when;

	if (sscanf(line, "%15s %63s %d %d %llu %127s", kind, id, &rank, &pid, &when, host) < 5)
		return;
	if (pid == (int)getpid())
		return;
	if (strcmp(kind, "oom") == 0) {
		struct mt_pol_event ev = {.kind = "peer_oom",
					  .device = -1,
					  .time = monotonic_ns(),
					  .peer_rank = rank,
					  .peer_pid = pid,
					  .peer_host = host,
					  .peer_id = id,
					  .peer_realtime = when};
		for (size_t i = 0; i < mt_pol.nh; i++)
			if (mt_pol.h[i].kind == MT_ON_PEER_OOM)
				mt_pol_fire(&mt_pol.h[i], &ev, NULL);
	} else if (strcmp(kind, "snapshot") == 0) {
		char path[4200];
		int r = take(id, path, sizeof path);
		if (r)
			mt_pol_say("no snapshot for rank %d's request %s: %s", rank, id,
				   r == -EINVAL ? "not a request's id" : mt_pol_why(r));
	}
}

/* Reads what is new in the log. On the policy thread, at most every poll interval. */
void mt_job_poll(uint64_t now)
{
	char buf[4096];
	ssize_t n;

	if (!job.on || now < job.next_poll)
		return;
	job.next_poll = now + mt_pol.host->poll_ns;
	if (!is_the_rank()) { /* not yet: what was written so far is not for this process */
		struct stat st;
		if (fstat(job.events, &st) == 0)
			job.offset = st.st_size;
		return;
	}
	if (now >= job.next_beat) {
		job.next_beat = now + BEAT_NS;
		if (job.beat >= 0)
			futimens(job.beat, NULL);
	}
	while ((n = pread(job.events, buf, sizeof buf, job.offset)) > 0) {
		job.offset += n;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (job.npartial + 1 < sizeof job.partial)
					job.partial[job.npartial++] = buf[i];
				continue;
			}
			job.partial[job.npartial] = '\0';
			job.npartial = 0;
			act(job.partial);
		}
	}
}

uint64_t mt_job_next_poll(void)
{
	return job.on ? job.next_poll : UINT64_MAX;
}
