/* Internals of the injected library (libmemtap.so), shared by its files and hidden
 * from the application. Hot-path rules: no malloc, no stdio, no syscall, no lock except
 * on first sight of a new stack or string; thread-local state is initial-exec TLS. */
#ifndef MTP_H
#define MTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

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

/* ---- options (options.c) ---- */
struct mtp_options {
#define OPT(key, type, dflt, help) OPT_##type key;
#define OPT_STR const char *
#define OPT_SIZE uint64_t
#define OPT_BOOL bool
#include "preload/options.def"
#undef OPT
#undef OPT_STR
#undef OPT_SIZE
#undef OPT_BOOL
};
extern MTP_HIDDEN struct mtp_options mtp_opt;
MTP_HIDDEN void mtp_options_load(void);
MTP_HIDDEN void mtp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- own memory (arena.c): mmap-backed, capped, never the application's heap ---- */
MTP_HIDDEN void *mtp_map(size_t bytes);              /* zeroed pages, or NULL past the cap */
MTP_HIDDEN void mtp_unmap(void *p, size_t bytes);
MTP_HIDDEN void *mtp_grow(void *old, size_t old_cap, size_t new_cap); /* for struct mt_buf */
MTP_HIDDEN size_t mtp_mapped_bytes(void);

/* ---- recording state (record.c) ---- */
enum mtp_state { MTP_OFF, MTP_STARTING, MTP_ON, MTP_CLOSED };
extern MTP_HIDDEN int mtp_state;

struct mtp_ring {
	struct mtp_ring *next;     /* registry of all rings, newest first */
	uint64_t head;             /* written by the owning thread */
	uint64_t tail;             /* written by the writer thread */
	uint64_t dropped;          /* events the owner could not push */
	uint32_t mask;
	bool orphan;               /* its thread ended: free once drained */
	struct mt_event slot[];
};

struct mtp_stack_cache;
struct mtp_py_cache;

struct mtp_thread {
	struct mtp_ring *ring;
	struct mtp_stack_cache *stack_cache; /* this thread's last stack (stack.c) */
	struct mtp_py_cache *py_cache;       /* its Python frames seen (python.c) */
	uint32_t py_looks;                   /* stacks since it last looked for an interpreter */
	uint32_t index;            /* 0 = not yet registered */
	int depth;                 /* hook nesting: only the outermost records */
	bool interning;            /* holds an interning table's lock (intern.c) */
	int phase_depth, tag_depth;
	uint32_t phase[64];        /* NVTX push stack of string ids */
	uint8_t tag[32];           /* memtap_tag_push stack */
};
extern MTP_HIDDEN __thread struct mtp_thread mtp_self MTP_TLS;

extern MTP_HIDDEN struct mtp_ring *mtp_rings;
extern MTP_HIDDEN uint64_t mtp_dropped_total; /* drops from rings already freed */
MTP_HIDDEN void mtp_rings_reset_child(void);

/* The hook guard: true when this call is the outermost hook and recording is on. */
static inline bool mtp_enter(void)
{
	return mtp_self.depth++ == 0 && mtp_state >= MTP_ON;
}

static inline void mtp_leave(void)
{
	mtp_self.depth--;
}

/* Fill time, thread, phase and tag, then push; `with_stack` unwinds from the caller. */
MTP_HIDDEN void mtp_record(struct mt_event *e, bool with_stack);
MTP_HIDDEN uint8_t mtp_current_tag(void);
MTP_HIDDEN void mtp_set_open_range(uint32_t string_id);
MTP_HIDDEN uint64_t mtp_now(void);
extern MTP_HIDDEN uint64_t mtp_start_ns; /* when the process loaded memtap */

/* ---- interning (intern.c): byte strings to ids 1, 2, ... Lookups take no lock;
 * the first sight of a new key takes one. Stacks and strings are two tables. ---- */
struct mtp_table {
	pthread_mutex_t lock;
	uint64_t *keys;    /* hash per slot, 0 = empty */
	uint32_t *ids;     /* id per slot */
	uint64_t *entries; /* per id: offset << 16 | length */
	uint8_t *blob;
	uint32_t slots, max_ids, count;
	size_t blob_size, blob_used;
	uint64_t full;     /* keys that got no id: the table was full, or re-entered */
};
extern MTP_HIDDEN struct mtp_table mtp_stacks, mtp_strings;
MTP_HIDDEN int mtp_table_init(struct mtp_table *t, uint32_t max_ids, size_t blob_size);
MTP_HIDDEN uint32_t mtp_table_intern(struct mtp_table *t, const void *key, size_t len); /* 0 when full */
MTP_HIDDEN const void *mtp_table_get(struct mtp_table *t, uint32_t id, size_t *len);
MTP_HIDDEN uint32_t mtp_table_count(struct mtp_table *t); /* ids 1..count are complete */
MTP_HIDDEN uint32_t mtp_intern(const char *s);       /* a string's id; 0 for NULL */

/* ---- stacks (stack.c) ---- */
MTP_HIDDEN uint32_t mtp_stack_capture(void);
MTP_HIDDEN struct mtp_stack_cache *mtp_stack_cache_new(void);
extern MTP_HIDDEN uint64_t mtp_stack_checks, mtp_stack_mismatches; /* check_stacks=1 */

/* ---- Python frames (python.c) ---- */
MTP_HIDDEN uint32_t mtp_python_stack(uint32_t native); /* the stack with this thread's Python frames merged in */
MTP_HIDDEN void mtp_python_thread_gone(void);

/* ---- writer (writer.c) ---- */
MTP_HIDDEN int mtp_writer_start(void);
MTP_HIDDEN void mtp_writer_stop(void);               /* final flush, END chunk */
MTP_HIDDEN void mtp_write_late(const struct mt_event *e); /* after stop: synchronous */
MTP_HIDDEN void mtp_writer_wake(void);
MTP_HIDDEN void mtp_writer_crash_flush(void);       /* from a fatal signal's handler */
MTP_HIDDEN int mtp_writer_snapshot(const char *path); /* the trace so far, closed, into path */
MTP_HIDDEN int mtp_writer_snapshot_fd(int fd);        /* the same into a file already open */
MTP_HIDDEN void mtp_writer_sync(void);               /* drain every ring now */
MTP_HIDDEN void mtp_writer_atfork_prepare(void);
MTP_HIDDEN void mtp_writer_atfork_parent(void);
MTP_HIDDEN void mtp_writer_atfork_child(bool keep);

/* ---- CUDA (driver.c, runtime.c, procaddr.c) ---- */
MTP_HIDDEN uint8_t mtp_driver_device(void);           /* current context's device */
MTP_HIDDEN void mtp_note_device(uint8_t dev);          /* first sight: DEVICE event */
MTP_HIDDEN uint64_t mtp_device_total(uint8_t dev);     /* its capacity, once seen; else 0 */
MTP_HIDDEN void *mtp_driver_symbol(const char *name); /* the real driver's export */
MTP_HIDDEN void *mtp_dlsym(void *handle, const char *name); /* glibc's dlsym, not memtap's */

/* ---- Lua policies (policy.c; the engine is lua/engine.c in libmemtap-policy.so) ---- */
struct mt_policy_engine;
extern MTP_HIDDEN const struct mt_policy_engine *mtp_policy; /* NULL: no policy */
extern MTP_HIDDEN bool mtp_capping;   /* some device has a cap */
extern MTP_HIDDEN bool mtp_capturing; /* inside memtap.capture_start/stop */
MTP_HIDDEN void mtp_policy_load(void);
MTP_HIDDEN bool mtp_policy_oom(const struct mt_event *e); /* true: retry the call once */
MTP_HIDDEN void mtp_policy_stop(void);                    /* on_exit handlers */
MTP_HIDDEN void mtp_policy_forget(void);                  /* in a forked child */
MTP_HIDDEN uint64_t mtp_cap_of(uint8_t device, uint64_t total); /* bytes; 0: none */
MTP_HIDDEN bool mtp_cap_check(uint64_t size);             /* past the current device's cap */
MTP_HIDDEN void mtp_note(const char *text);               /* memtap's own note, an NVTX mark */

/* ---- the module that holds memtap's own code, to skip its frames ---- */
struct dl_phdr_info;
/* The lowest and highest address a loaded object maps; false when it maps nothing. */
MTP_HIDDEN bool mtp_load_bounds(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi);
extern MTP_HIDDEN uintptr_t mtp_self_start, mtp_self_end;

#endif
