/* The seam between the injected library and its Lua policy engine (libmemtap-policy.so).
 * The engine is loaded with dlopen, RTLD_LOCAL, only when a policy is given, so Lua never
 * becomes visible to the application. It calls back into memtap only through `struct
 * mt_policy_host`, and memtap calls it only through `struct mt_policy_engine`. Events
 * reach it from the writer thread as the rings are drained; an out-of-memory failure
 * reaches it synchronously on the failing thread. */
#ifndef MT_POLICY_H
#define MT_POLICY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "core/format.h"

#define MT_POLICY_ABI 6

struct mt_policy_host {
	int abi;
	/* settings */
	const char *files;    /* policy files, separated by ':' */
	const char *dir;      /* where scripts may write (snapshots, memtap.append) */
	uint64_t budget;      /* Lua instructions per handler call */
	uint64_t memory;      /* bytes the Lua state and the engine's tables may hold */
	uint64_t deadline_ns; /* the longest a job's thread waits for the policy thread */
	uint64_t output;      /* bytes scripts may write into files, in all; 0: no limit */
	bool quiet;
	uint64_t start_ns; /* the process's start on the monotonic clock */
	/* the whole job: the run directory the ranks coordinate through (NULL: none), this
	 * process's rank and the job's size (-1 and 0: not a launched job), and how often
	 * the policy thread looks at the directory */
	const char *run_dir;
	int rank, world_size;
	uint64_t poll_ns;
	/* the policy thread, made by memtap's writer so that it shares its own descriptor
	 * table (nothing the job does to its descriptors reaches the policies' files), with
	 * every signal blocked and `stack` bytes of stack (0: the default); 0 or an errno */
	int (*spawn)(pthread_t *thread, size_t stack, void *(*fn)(void *), void *arg);
	/* memtap's own pages, counted against its cap */
	void *(*map)(size_t bytes);
	void (*unmap)(void *p, size_t bytes);
	/* interned strings and stacks (frames: uint64_t return addresses, innermost first);
	 * NULL for an id the host does not have (a script may have written it) */
	const void *(*string)(uint32_t id, size_t *len);
	const void *(*stack)(uint32_t id, size_t *len);
	void (*say)(const char *line);	/* one line on stderr unless quiet */
	void (*mark)(const char *name); /* a MARK event */
	/* the trace so far into fd, opened for path, unless it would be more than `limit`
	 * bytes (EFBIG, nothing written); 0 or an errno */
	int (*snapshot)(int fd, const char *path, uint64_t limit);
	int (*capture)(bool on, uint8_t device); /* cuProfilerStart/Stop; 0 or a CUresult */
	/* a cap in bytes, or as a fraction of the device (resolved when the device is known);
	 * device -1: every device; 0 and 0: no cap */
	void (*set_cap)(int device, uint64_t bytes, double fraction);
	uint64_t (*cap)(uint8_t device); /* in bytes; 0: none, or not known yet */
	/* memtap's caching allocator: knobs for a device (-1: every device) as a preset name
	 * (NULL: keep) then mt_cache_configure's syntax, 0 or an errno with the reason in
	 * `why`; a device's counters and knobs, false while it has no allocator. NULL in the
	 * CUPTI backend, which serves no allocations. */
	int (*allocator)(int device, const char *policy, const char *conf, char *why, size_t n);
	bool (*allocator_stats)(int device, struct mt_cache_stats *s, uint64_t *largest_free, char *conf, size_t n);
};

struct mt_policy_engine {
	/* events as the writer drains them, in ring order; `now` is when the drain began */
	void (*feed)(const struct mt_event *e, size_t n, uint64_t now);
	/* an out-of-memory failure on this thread, already recorded and fed with everything
	 * before it (the host drains the rings first): true to retry once */
	bool (*oom)(const struct mt_event *e);
	/* the process is exiting (the rings drained): on_exit handlers, then the engine stops */
	void (*stop)(void);
};

/* libmemtap-policy.so's one export. Loads and runs the policy files; 0, or an errno
 * with a line already said. */
typedef int mt_policy_start_fn(const struct mt_policy_host *host, const struct mt_policy_engine **engine);
#define MT_POLICY_START "memtap_policy_start"

#endif
