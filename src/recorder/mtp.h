/* Internals of the injected library (libmemtap.so), shared by its files and hidden
 * from the application. Hot-path rules: no malloc, no stdio, no syscall, no lock except
 * on first sight of a new stack or string; thread-local state is initial-exec TLS. */
#ifndef MTP_H
#define MTP_H

#include <pthread.h>
#include <sys/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/assert.h"
#include "core/format.h"
#include "recorder/options.h"
#include "recorder/prim.h"

#define MTP_HIDDEN __attribute__((visibility("hidden")))
#define MTP_EXPORT __attribute__((visibility("default")))
/* initial-exec TLS where the library is preloaded; the CUPTI backend is loaded with
 * dlopen, where only the general model is safe */
#ifdef MTP_DLOPENED
#define MTP_TLS
#else
#define MTP_TLS __attribute__((tls_model("initial-exec")))
#endif
#define MTP_NOINLINE __attribute__((noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* The next definition of a function memtap exports in the C library's name (exec*,
 * _exit): `fn`, found once, NULL when there is none. */
#define MTP_NEXT(name)                                                                                                 \
	static __typeof__(name) *next;                                                                                 \
	__typeof__(name) *fn = __atomic_load_n(&next, __ATOMIC_RELAXED);                                               \
	if (!fn) {                                                                                                     \
		fn = (__typeof__(name) *)mtp_dlsym(RTLD_NEXT, #name);                                                  \
		__atomic_store_n(&next, fn, __ATOMIC_RELAXED);                                                         \
	}

/* ---- own memory (arena.c): mmap-backed, capped, never the application's heap ---- */
MTP_HIDDEN void *mtp_map(size_t bytes); /* zeroed pages, or NULL past the cap */
MTP_HIDDEN void mtp_unmap(void *p, size_t bytes);
MTP_HIDDEN void *mtp_grow(void *old, size_t old_cap, size_t new_cap); /* for struct mt_buf */
MTP_HIDDEN size_t mtp_mapped_bytes(void);

/* ---- recording state (record.c) ---- */
enum mtp_state { MTP_UNSTARTED, MTP_OFF, MTP_STARTING, MTP_ON, MTP_CLOSED };
extern MTP_HIDDEN int mtp_state; /* written by the writer thread too (MTP_CLOSED) */
static inline int mtp_state_now(void)
{
	return __atomic_load_n(&mtp_state, __ATOMIC_RELAXED);
}
/* memtap started now if it has not (init.c): the loader runs memtap's constructor after
 * those of the libraries loaded after it, and one of them may allocate; true when
 * recording is on. Until memtap's own constructor has run (mtp_constructed), what is
 * made is marked MT_ALLOC_EARLY. */
MTP_HIDDEN bool mtp_start(void);
extern MTP_HIDDEN bool mtp_constructed;
/* Policies given and not started yet (policy.c): they start at the process's first call
 * into CUDA, NVTX or memtap's API, so that a shell or a launcher that only execs the next
 * program runs none. True once this thread may record: a thread that finds another
 * starting them passes through, as at mtp_start. */
extern MTP_HIDDEN bool mtp_policy_pending;
MTP_HIDDEN bool mtp_policy_begin(void);
static inline bool mtp_policy_ready(void)
{
	return likely(!__atomic_load_n(&mtp_policy_pending, __ATOMIC_RELAXED)) || mtp_policy_begin();
}

/* What memtap reserves for itself, so that options can be checked against max_memory
 * before anything runs (options.c) with the same figures the code maps (intern.c,
 * writer.c, record.c). */
#define MTP_STACK_IDS (1u << 18)
#define MTP_STACK_BLOB (64u << 20)
#define MTP_STRING_IDS (1u << 16)
#define MTP_STRING_BLOB (4u << 20)
#define MTP_TABLE_BYTES(ids, blob) (32 * (size_t)(ids) + 8 + (size_t)(blob)) /* keys, ids, entries, blob */
/* the writer's event and table buffers */
#define MTP_WRITER_BYTES (2 * (size_t)MT_CHUNK_MAX)
#define MTP_PAGE 4096
#define MTP_OWN_STACK (64u << 10)      /* each thread's own stack for memtap's slow paths */
#define MTP_STACK_CACHE_BYTES 8192     /* room for struct mtp_stack_cache (stack.c checks it fits) */
#define MTP_PY_CACHE_BYTES (10u << 10) /* struct mtp_py_cache, made in threads that run Python */
#define MTP_FIRST_RING 512	       /* a thread's first ring; it doubles while full, up to `ring` */
#define MTP_RING_HEADER 64
#define MTP_RING_BYTES(n) (MTP_RING_HEADER + (size_t)(n) * sizeof(struct mt_event))
#define MTP_LOG_HEADER 128
/* A thread's block: guard page, own stack, stack cache, its log (the ring lives apart). */
#define MTP_BLOCK_BYTES ((size_t)MTP_PAGE + MTP_OWN_STACK + MTP_STACK_CACHE_BYTES + MTP_LOG_HEADER)

/* A single-producer ring of one thread's events. */
struct mtp_ring {
	uint64_t head;		/* written by the owning thread */
	uint64_t tail;		/* written by the writer thread */
	struct mtp_ring *newer; /* the ring that replaced it (set by the owner): its head is final */
	uint32_t mask;
	size_t bytes;
	struct mt_event slot[] __attribute__((aligned(64)));
};

/* A thread's log, in its block, in the registry the writer drains. Its rings form a
 * chain, oldest first: while its ring is smaller than `ring` events, a thread whose ring
 * is half full goes on in a new one twice the size, and the writer drains each ring to
 * its end before the newer one, so the thread's events stay in order. */
struct mtp_log {
	struct mtp_log *next;	/* registry of all logs, newest first */
	struct mtp_ring *first; /* the oldest ring not yet freed (the writer's) */
	uint64_t dropped;	/* events the owner could not push: the ring stayed full */
	uint64_t stunted;	/* of those, while max_memory kept the ring from growing */
	uint64_t waits;		/* times the owner waited for the writer to make room */
	uint64_t waited_ns;	/* and how long in all */
	void *block;		/* the thread's mapping, MTP_BLOCK_BYTES */
	bool orphan;		/* its thread ended: free once drained */
};

struct mtp_stack_cache;
struct mtp_py_cache;

#define MTP_NESTED 32 /* events a signal handler may make while this thread is inside mtp_record */
/* NVTX push stacks of any depth keep the innermost MTP_PHASE_SLOTS names: each slot says
 * which level it holds, so a level whose name a deeper push overwrote is known as such
 * (the phase is then mtp_phase_cut's string, never another range's name) */
#define MTP_PHASE_SLOTS 64

struct mtp_thread {
	struct mtp_ring *ring; /* the newest ring of its log: where events go */
	struct mtp_log *log;
	struct mtp_stack_cache *stack_cache; /* this thread's last stack (stack.c), in the ring's block */
	char *own_stack;		     /* the top of its own stack, in the same block */
	struct mtp_py_cache *py_cache;	     /* its Python frames seen (python.c) */
	uint32_t py_looks;		     /* stacks since it last looked for an interpreter */
	uint32_t index;			     /* 0 = not yet registered */
	int depth;			     /* hook nesting: only the outermost records, or a re-entry from outside */
	bool interning;			     /* holds an interning table's lock (intern.c) */
	bool sizing;			     /* holds the frame sizes' lock (stack.c) */
	bool on_own_stack;		     /* running on own_stack now */
	/* Inside mtp_record (busy), an event made by a signal handler on this thread waits
	 * in `nested` (head written by the handler, tail by mtp_record) until the
	 * interrupted record is done; `nesting`: a handler is storing one. */
	bool busy, nesting;
	bool waiting; /* in push_full between two tries: a handler may push too */
	uint32_t nested_head, nested_tail;
	int tag_depth;
	uint64_t phase_depth;		 /* NVTX ranges pushed and not popped: any number */
	uint64_t phase[MTP_PHASE_SLOTS]; /* level << 32 | string id, at level % MTP_PHASE_SLOTS */
	uint8_t tag[32];		 /* memtap_tag_push stack */
	struct mt_event nested[MTP_NESTED];
};
extern MTP_HIDDEN __thread struct mtp_thread mtp_self MTP_TLS;

extern MTP_HIDDEN struct mtp_log *mtp_logs;
/* Events dropped, by reason (enum mt_drop), except those still held in a live log's
 * `dropped`. Every event made is either pushed into a ring or counted here. */
extern MTP_HIDDEN uint64_t mtp_drops[MT_DROP_COUNT];
MTP_HIDDEN void mtp_drop(enum mt_drop why, uint64_t n);
MTP_HIDDEN void mtp_rings_reset_child(void);

/* The code range of the CUDA runtime the runtime hooks call (runtime.c): a hook reached
 * from there, or from memtap, while another hook runs on the thread is part of that
 * hook's call and is not recorded again. */
extern MTP_HIDDEN uintptr_t mtp_rt_lo, mtp_rt_span;
MTP_HIDDEN bool mtp_reentered(const void *caller); /* true: a re-entry from elsewhere (a signal handler) */
/* The caller is a driver layer's code, or the driver's (layers.c): a layer calls the
 * driver's wrapper while memtap's wrapper of the layer runs, part of that one call. */
MTP_HIDDEN bool mtp_layer_caller(uintptr_t caller);

/* The hook guard: true when this call is to be recorded: recording is on, and this is
 * the outermost hook on the thread or a hook a signal handler called while another ran
 * (the runtime calling the driver, the usual nesting, is told at once). */
static inline __attribute__((always_inline)) bool mtp_enter_at(const void *caller)
{
	if (likely(mtp_self.depth++ == 0))
		return (likely(mtp_state_now() >= MTP_ON) || mtp_start()) && mtp_policy_ready();
	if (likely((uintptr_t)caller - __atomic_load_n(&mtp_rt_lo, __ATOMIC_RELAXED) <
		   __atomic_load_n(&mtp_rt_span, __ATOMIC_RELAXED)))
		return false;
	return mtp_state_now() >= MTP_ON && mtp_reentered(caller);
}
#define mtp_enter() mtp_enter_at(__builtin_return_address(0))

/* The runtime's own call inside a hooked runtime call (cudaMalloc calling cuMemAlloc):
 * mtp_enter_at would say false; a hook that tests this first passes it straight through. */
static inline __attribute__((always_inline)) bool mtp_inside_runtime(const void *caller)
{
	return likely(mtp_self.depth != 0) && (uintptr_t)caller - __atomic_load_n(&mtp_rt_lo, __ATOMIC_RELAXED) <
						  __atomic_load_n(&mtp_rt_span, __ATOMIC_RELAXED);
}

/* The outermost only (the CUPTI callback, which sees memtap's own driver calls nested). */
static inline bool mtp_enter_outer(void)
{
	return mtp_self.depth++ == 0 && mtp_state_now() >= MTP_ON && mtp_policy_ready();
}

static inline void mtp_leave(void)
{
	mtp_self.depth--;
}

/* Runs fn(arg) on this thread's own memtap stack (mtp_on_stack) when it has one and is
 * not on it already: the slow paths (unwinding, first sight of a thread or device, Python
 * frames, late writes) then cost the application's stack almost nothing. */
static inline void *mtp_own_stack(void *(*fn)(void *), void *arg)
{
	struct mtp_thread *t = &mtp_self;
	void *r;

	if (!t->own_stack || t->on_own_stack)
		return fn(arg);
	t->on_own_stack = true;
	r = mtp_on_stack(fn, arg, t->own_stack);
	t->on_own_stack = false;
	return r;
}

/* The same where the thread may have no block yet (first lookups): a shared stack. */
MTP_HIDDEN void *mtp_slow_stack(void *(*fn)(void *), void *arg);

/* Fill time, thread, phase and tag, then push; `with_stack` unwinds from the caller. */
MTP_HIDDEN void mtp_record(struct mt_event *e, bool with_stack);
MTP_HIDDEN uint8_t mtp_current_tag(void);
MTP_HIDDEN void mtp_set_open_range(uint32_t string_id);
extern MTP_HIDDEN uint32_t mtp_phase_cut; /* the name of a phase not kept (nvtx.c) */
MTP_HIDDEN uint64_t mtp_now(void);
extern MTP_HIDDEN uint64_t mtp_start_ns; /* when the process loaded memtap */
extern MTP_HIDDEN pid_t mtp_pid;	 /* this process's (a vfork child's differs) */

/* ---- interning (intern.c): byte strings to ids 1, 2, ... Lookups take no lock;
 * the first sight of a new key takes one. Stacks and strings are two tables. ---- */
struct mtp_table {
	pthread_mutex_t lock;
	uint64_t *keys;	   /* hash per slot, 0 = empty */
	uint32_t *ids;	   /* id per slot */
	uint64_t *entries; /* per id: offset << 16 | length */
	uint8_t *blob;
	uint32_t slots, max_ids, count;
	size_t blob_size, blob_used;
	uint64_t full; /* keys that got no id: the table was full, or re-entered */
};
extern MTP_HIDDEN struct mtp_table mtp_stacks, mtp_strings;
MTP_HIDDEN int mtp_table_init(struct mtp_table *t, uint32_t max_ids, size_t blob_size);
MTP_HIDDEN uint32_t mtp_table_intern(struct mtp_table *t, const void *key, size_t len); /* 0 when full */
MTP_HIDDEN const void *mtp_table_get(struct mtp_table *t, uint32_t id, size_t *len);
MTP_HIDDEN uint32_t mtp_table_count(struct mtp_table *t); /* ids 1..count are complete */
MTP_HIDDEN uint32_t mtp_intern(const char *s);		  /* a string's id; 0 for NULL */

/* ---- stacks (stack.c) ---- */
MTP_HIDDEN uint32_t mtp_stack_capture(void);
/* The caller's stack interned now, for an event made later (0: none, or not wanted). */
MTP_HIDDEN uint32_t mtp_stack_now(void);
extern MTP_HIDDEN uint64_t mtp_stack_checks, mtp_stack_mismatches; /* check_stacks=1 */
MTP_HIDDEN void mtp_stack_atfork_prepare(void);
MTP_HIDDEN void mtp_stack_atfork_parent(void);
MTP_HIDDEN void mtp_stack_atfork_child(void);

/* ---- Python frames (python.c) ---- */
MTP_HIDDEN uint32_t mtp_python_stack(uint32_t native); /* the stack with this thread's Python frames merged in */
/* Whether mtp_python_stack has work to do (it needs kilobytes of stack): an interpreter
 * was found (state > 0), or it is time to look again (0); -1: never. */
extern MTP_HIDDEN int mtp_py_state;
static inline bool mtp_python_maybe(void)
{
	int s;

	if (!mtp_opt.python_frames)
		return false;
	s = __atomic_load_n(&mtp_py_state, __ATOMIC_ACQUIRE);
	/* not found yet: each thread looks again now and then (a program may load the
	   interpreter late) */
	return likely(s != 0) ? s > 0 : mtp_self.py_looks++ % 4096 == 0;
}
MTP_HIDDEN void mtp_python_thread_gone(void);
MTP_HIDDEN void mtp_python_forget(void); /* after an unload: stop if the interpreter went */

/* ---- writer (writer.c): the only code that touches memtap's files, on a thread with a
 * descriptor table of its own; other threads ask it, and none of them takes a lock it holds ---- */
/* Its buffers now, its thread now or at the first event of a thread (mtp_writer_start_pending):
 * a process that never touches the GPU (a shell, a launcher) gets no thread of memtap's, and
 * stays single-threaded (unshare(CLONE_NEWUSER), Python's fork). A forked child that goes on
 * recording starts its writer on its first event too, not inside fork(): a thread made in
 * fork's child handlers may wait on a lock another thread held at the fork (AddressSanitizer's
 * allocator did). */
MTP_HIDDEN int mtp_writer_start(bool now);
MTP_HIDDEN void mtp_writer_start_pending(void);
MTP_HIDDEN void mtp_writer_stop(void);			       /* every ring drained, then the END chunk */
MTP_HIDDEN void mtp_writer_wake(void);			       /* a ring is half full */
MTP_HIDDEN bool mtp_writer_await_room(void);		       /* a ring is full: until the writer drained it */
MTP_HIDDEN void mtp_writer_crash_flush(void);		       /* from a fatal signal's handler */
MTP_HIDDEN int mtp_writer_snapshot(const char *path);	       /* the trace so far, closed, into the job's path */
MTP_HIDDEN int mtp_writer_snapshot_fd(int fd, uint64_t limit); /* into a file of memtap's; EFBIG past limit */
MTP_HIDDEN void mtp_writer_sync(void);	      /* every ring drained now (and, after the END, a new END) */
MTP_HIDDEN bool mtp_writer_has_events(void);  /* something was recorded (or dropped) */
MTP_HIDDEN void mtp_writer_exec_begin(void);  /* before exec: all written, END; holds the writer */
MTP_HIDDEN void mtp_writer_exec_failed(void); /* exec returned: the END goes, recording goes on */
/* A thread of memtap's (the policy thread): made by the writer, it shares its descriptor
 * table; every signal blocked; stack bytes (0: the default). 0 or an errno. */
MTP_HIDDEN int mtp_writer_spawn(pthread_t *thread, size_t stack, void *(*fn)(void *), void *arg);
/* The main thread calls pthread_exit: the process ends once only memtap's threads are left. */
MTP_HIDDEN void mtp_writer_main_gone(void);
MTP_HIDDEN void mtp_writer_atfork_prepare(void);
MTP_HIDDEN void mtp_writer_atfork_parent(void);
MTP_HIDDEN void mtp_writer_atfork_child(bool keep);

/* ---- CUDA (driver.c, runtime.c, procaddr.c) ---- */
MTP_HIDDEN uint8_t mtp_driver_device(void);  /* current context's device */
extern MTP_HIDDEN uint64_t mtp_devices_seen; /* bit d: device d's DEVICE event was made */
static inline bool mtp_device_seen(uint8_t dev)
{
	return dev >= 64 || (__atomic_load_n(&mtp_devices_seen, __ATOMIC_RELAXED) >> dev & 1);
}
MTP_HIDDEN void mtp_device_event(uint8_t dev, struct mt_event *e); /* first sight: fills a DEVICE event */
MTP_HIDDEN void mtp_graph_reset_child(void);			   /* graph.c, in a forked child */
/* memtap's own reading of the driver's count (MT_MEMINFO_*): fills a MEMINFO event when
 * dev is the current context's device and the driver answers; leaves e alone otherwise */
MTP_HIDDEN void mtp_device_reading(uint8_t dev, uint8_t why, struct mt_event *e);
MTP_HIDDEN uint64_t mtp_device_total(uint8_t dev);	    /* its capacity, once seen; else 0 */
MTP_HIDDEN void *mtp_driver_symbol(const char *name);	    /* the real driver's export */
MTP_HIDDEN void *mtp_dlsym(void *handle, const char *name); /* glibc's dlsym, not memtap's */
MTP_HIDDEN int mtp_dlclose(void *handle);		    /* the next dlclose, not memtap's */
MTP_HIDDEN bool mtp_driver_forget(void); /* after an unload: forget pointers into a driver that went */
MTP_HIDDEN bool mtp_module_of(const void *p, uintptr_t *lo, uintptr_t *hi); /* the loaded object holding p */
/* an object with these bounds is loaded */
MTP_HIDDEN bool mtp_module_loaded(uintptr_t lo, uintptr_t hi);

/* ---- Lua policies (policy.c; the engine is policy/engine.c in libmemtap-policy.so) ---- */
struct mt_policy_engine;
extern MTP_HIDDEN const struct mt_policy_engine *mtp_policy;	/* NULL: no policy */
extern MTP_HIDDEN bool mtp_capping;				/* some device has a cap */
extern MTP_HIDDEN bool mtp_capturing;				/* inside memtap.capture_start/stop */
MTP_HIDDEN bool mtp_policy_oom(const struct mt_event *e);	/* true: retry the call once */
MTP_HIDDEN void mtp_policy_stop(void);				/* on_exit handlers */
MTP_HIDDEN void mtp_policy_forget(void);			/* in a forked child */
MTP_HIDDEN uint64_t mtp_cap_of(uint8_t device, uint64_t total); /* bytes; 0: none */
MTP_HIDDEN bool mtp_cap_check(uint64_t size);			/* past the current device's cap */
MTP_HIDDEN void mtp_note(const char *text);			/* memtap's own note, an NVTX mark */

/* ---- the module that holds memtap's own code, to skip its frames ---- */
struct dl_phdr_info;
/* The lowest and highest address a loaded object maps; false when it maps nothing. */
MTP_HIDDEN bool mtp_load_bounds(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi);
extern MTP_HIDDEN uintptr_t mtp_self_start, mtp_self_end;
/* memtap's tracker of PyTorch's allocator (torch.c), loaded later: its frames are memtap's */
extern MTP_HIDDEN uintptr_t mtp_tracker_lo, mtp_tracker_span;
static inline bool mtp_own_code(uintptr_t ip)
{
	/* plain reads (set once, before the tracker's first call): the walk keeps them in registers */
	return (ip >= mtp_self_start && ip < mtp_self_end) || unlikely(ip - mtp_tracker_lo < mtp_tracker_span);
}

#endif
