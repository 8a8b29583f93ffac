/* Inside libmemtap-policy.so: the Lua state and its handlers (engine.c), what a script
 * may reach and what its calls into C cost (sandbox.c), the live view of memory that
 * decides when handlers fire (watch.c), what scripts can do (actions.c) and where they
 * may write (files.c). Lua and the
 * live view belong to the policy thread alone: the job's threads hand it requests. */
#ifndef MT_ENGINE_H
#define MT_ENGINE_H

#include <lua.h>
#include <pthread.h>
#include <sys/types.h>

#include "core/replay.h"
#include "policy/policy.h"

enum mt_hook_kind {
	MT_ON_OOM,
	MT_ON_THRESHOLD,
	MT_ON_PEAK,
	MT_ON_PHASE,
	MT_ON_ITERATION,
	MT_ON_LEAK,
	MT_ON_EXIT,
	MT_EVERY,
	MT_ON_PEER_OOM,
	MT_ON_KINDS
};
extern const char *const mt_on_names[MT_ON_KINDS];

#define MT_DEVICE_WORDS (MT_MAX_DEVICES / 64)
#define MT_POL_MAX_BYTES 4e18 /* the most bytes a script may name: below 2^63, a uint64_t however converted */

struct mt_handler {
	enum mt_hook_kind kind;
	int fn;		/* registry reference */
	char where[96]; /* the script line that registered it */
	unsigned errors;
	bool off;
	int device; /* -1: every device */
	/* on_threshold: levels as fractions of capacity (<= 1) or bytes */
	double up, down;
	bool report_down;
	uint64_t above[MT_DEVICE_WORDS]; /* devices above `up`, not yet back below `down` */
	/* on_peak: growth over the last one reported, and the shortest time between calls */
	double growth;
	uint64_t interval_ns;
	uint64_t *reported; /* per device: the peak reported, then when */
	/* on_phase and on_iteration: the name pattern or name, and names already judged */
	char *name;
	struct mt_map matches; /* string id -> 1 matches, 2 does not */
	uint64_t seen;	       /* on_iteration by name: boundaries so far */
	/* on_leak: iterations of growth in a row, and the least growth that counts */
	unsigned window;
	uint64_t min_bytes;
	struct mt_leak_watch {
		uint64_t last, least; /* bytes at the last boundary; least growth in this run */
		unsigned run;	      /* boundaries in a row with growth */
		bool seen, fired;
	} * leak; /* per device */
	/* every */
	uint64_t period_ns, next_ns;
};

/* What a handler is told; watch.c and the OOM path fill it, actions.c turns it into a table. */
struct mt_pol_event {
	const char *kind;	     /* "oom", "threshold", ... */
	int device;		     /* -1: none */
	uint64_t size;		     /* the request (oom), the allocation that crossed (threshold) */
	uint64_t time;		     /* monotonic ns */
	uint32_t stack, phase, name; /* string and stack ids */
	const char *direction;	     /* threshold: up or down; phase: enter or leave */
	uint64_t level;		     /* threshold: the level crossed, in bytes */
	uint64_t growth;	     /* leak: bytes per iteration; peak: over the last peak reported */
	uint64_t iteration;	     /* 0: the current one */
	uint64_t free, total;	     /* as the driver said, when it did (oom) */
	int error;
	/* peer_oom: the rank that failed, as its line in the run directory says */
	int peer_rank, peer_pid;
	const char *peer_host, *peer_id;
	uint64_t peer_realtime; /* CLOCK_REALTIME ns: the clock ranks on other hosts share */
};

struct mt_policy {
	const struct mt_policy_host *host;
	lua_State *L;
	struct mt_handler *h;
	size_t nh, cap;
	unsigned count[MT_ON_KINDS];
	int64_t budget_left;
	/* the live view (watch.c) */
	struct mt_replay rp;
	uint64_t iteration;
	uint64_t dropped; /* events that did not fit the queue: the view is approximate */
};
extern struct mt_policy mt_pol;

/* engine.c */
void mt_pol_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Calls the handler with ev, protected; true when it returned the string `want`. */
bool mt_pol_fire(struct mt_handler *h, const struct mt_pol_event *ev, const char *want);
bool mt_pol_match(const char *name, const char *pattern); /* string.find, protected */
const char *mt_pol_string(uint32_t id);			  /* "" for 0 or unknown */
/* Takes work in C from the running call's budget; raises when it is spent. `what` names
 * work not yet done, which a budget that cannot pay it refuses by that name; NULL: done. */
void mt_pol_charge(lua_State *L, double instructions, const char *what);
bool mt_pol_abandoned(void); /* a deadline was missed: policies are off */

/* sandbox.c */
void mt_pol_open_sandbox(lua_State *L); /* Lua's libraries as a policy gets them */

/* watch.c */
void mt_watch_init(void);
void mt_watch_apply(const struct mt_event *e); /* one event, in time order; fires handlers */
void mt_watch_batch_end(uint64_t now);	       /* peaks, timers */
uint64_t mt_watch_next_timer(uint64_t now);    /* when `every` next needs the thread */
uint64_t mt_watch_capacity(int device);
void mt_watch_forget_capacity(void); /* a cap or a device's size may have changed */
uint64_t mt_watch_reserved(int device);
int mt_watch_device(int device); /* a device given or implied: the first seen */
/* Live device allocations grouped by stack, most bytes first, made at or after `since`. */
struct mt_stack_bytes {
	uint32_t stack;
	uint64_t bytes, count;
};
size_t mt_watch_top(struct mt_stack_bytes *out, size_t n, uint64_t since, int device);

/* job.c: the ranks of a job, through the run directory (policy thread only) */
void mt_job_start(void);
void mt_job_stop(void);
bool mt_job_active(void);
int mt_job_rank(void);
void mt_job_poll(uint64_t now);	 /* what other ranks wrote since the last poll */
uint64_t mt_job_next_poll(void); /* when the thread must poll next (monotonic ns) */
/* This rank's on_oom handlers begin (tell the others) or end. */
void mt_job_oom(bool begin);
/* Asks every rank for a snapshot (snapshots/ID/rank-R.trace) and takes this rank's;
 * 0, ENOTCONN (no run directory) or a code for mt_pol_why. */
int mt_job_snapshot_all(char *id, size_t idlen, char *path, size_t len);

/* files.c: where policies write */
#define MT_POL_NOT_REGULAR (-1000) /* the path names something other than a regular file */
#define MT_POL_LINKED (-1001)	   /* a regular file with another name */
#define MT_POL_OVER_QUOTA (-1002)  /* past policy_output */
#define MT_POL_CLIMBS (-1003)	   /* a ".." on the way */
/* Opens `rel` under `dir` (making its folders when asked) if it is a regular file with
 * one name, reached without following a symbolic link or a "..": a descriptor, or
 * -errno, or one of the codes above. */
int mt_pol_open_in(const char *dir, const char *rel, int flags, mode_t mode, bool make_folders);
const char *mt_pol_why(int code); /* a code above, -errno or errno, in words */
/* Whether `bytes` more fit policy_output: 0, or MT_POL_OVER_QUOTA (counted as refused). */
int mt_pol_output_fits(uint64_t bytes);
uint64_t mt_pol_output_left(void); /* bytes the quota still allows (UINT64_MAX: no quota) */
void mt_pol_output_wrote(uint64_t bytes);
/* The trace so far (the host's snapshot) into a new file `rel` under `dir`, `path` in the
 * trace; counted against policy_output, and removed when it does not fit or fails. 0 or
 * a code for mt_pol_why; `bytes` its size. */
int mt_pol_snapshot_in(const char *dir, const char *rel, const char *path, mode_t mode, bool make_folders,
		       uint64_t *bytes);
uint64_t mt_pol_output_written(void);
void mt_pol_output_said(void); /* at exit: what was written and refused, if any was refused */

/* actions.c */
int mt_pol_open_module(lua_State *L); /* the memtap module in a job */
void mt_pol_push_event(lua_State *L, const struct mt_pol_event *ev);
/* Closes the module files a handler's call read to name its stacks' frames (actions.c). */
void mt_pol_symbols_close(void);
/* A level argument: a fraction of a device (0.9, "90%") or bytes (32e9, "30GiB"). */
double mt_pol_level(lua_State *L, int i);
/* A device argument: nil (or -1) for none given, -1; else a device number; raises. */
int mt_pol_device(lua_State *L, int i);

#endif
