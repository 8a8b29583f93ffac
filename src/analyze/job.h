/* A whole job's run directory (memtap run --dir): the out-of-memory failures its ranks
 * wrote into .memtap/events, and for each, every rank's state at that moment, read from
 * the snapshot the rank took for it (snapshots/ID/rank-R.trace), else from the rank's
 * own trace, with why a rank has no snapshot (it had exited, it died, it did not answer). */
#ifndef MT_JOB_H
#define MT_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define MT_JOB_COLUMNS 400 /* a rank's memory over time, for the page: this many equal spans */
#define MT_JOB_OOMS 8	   /* ... and its first out-of-memory failures on that device */

/* A rank of the job as its trace says (filled by the caller). */
struct mt_job_rank {
	int rank;
	const char *path, *host;
	int device; /* the device of its peak, -1: none */
	uint64_t peak;
	/* allocated on `device` over its run, the highest in each of MT_JOB_COLUMNS equal
	 * spans; the run's start (CLOCK_REALTIME ns, 0: not known) and length (ns); its
	 * failures, ns from its start */
	const uint64_t *line;
	uint64_t start_realtime, span;
	const uint64_t *ooms;
	size_t nooms;
};

/* One rank at the moment of one OOM. */
struct mt_job_at {
	int rank;
	bool known;	     /* `allocated` holds what was live then */
	uint64_t allocated;  /* on the rank's peak device */
	uint64_t peak;	     /* the rank's own peak over the whole run */
	char snapshot[4200]; /* the rank's snapshot of that moment; "" when none */
	int64_t after_ns;    /* when the snapshot was taken, after the OOM */
	/* "out of memory" (the rank that failed), "snapshot", "exited before", "died before",
	 * "no trace", "no snapshot" */
	const char *state;
	char why[256];
};

struct mt_job_oom {
	char id[64], host[128];
	int rank, pid;
	uint64_t realtime;    /* CLOCK_REALTIME ns */
	struct mt_job_at *at; /* one per rank, by rank */
	size_t n;
};

struct mt_job {
	struct mt_job_oom *ooms;
	size_t n;
};

/* 0 (no events file: no OOMs) or an errno. Ranks of `world_size` that left no trace are
 * listed too. */
int mt_job_read(struct mt_job *j, const char *dir, const struct mt_job_rank *ranks, size_t n, int world_size);
void mt_job_free(struct mt_job *j);
void mt_job_text(FILE *out, const struct mt_job *j);
/* The members of a JSON object (no braces): "ooms": [...] */
void mt_job_json(FILE *out, const struct mt_job *j);
/* A self-contained page: the ranks' peaks, and every rank at each OOM. 0 or an errno. */
int mt_job_html(FILE *out, const struct mt_job *j, const struct mt_job_rank *ranks, size_t n, const char *dir);

#endif
