/* simgpu: the simulated CUDA driver's internal state, shared by its files.
 * Device memory is address space reserved with PROT_NONE and never touched, so an
 * 80 GiB device costs no RAM; kernels are checked and counted, never run. One global
 * lock guards all state: simgpu is a test double that must be correct and
 * thread-safe, not fast. Every exported function returns the CUresult the real
 * driver documents for the same misuse; handles are looked up before use, so a bad
 * one gives an error, never a crash. */
#ifndef SIM_H
#define SIM_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_DRIVER_VERSION 13000
#define SIM_MAX_DEVICES 16
#define SIM_ALIGN 512u	       /* cuMemAlloc alignment */
#define SIM_GRANULE (2u << 20) /* VMM granularity */

/* ---- the proc table (stubs.c, procs.def) and the log (procaddr.c) ---------------------- */

struct sim_proc {
	const char *base, *symbol;
	int version;
	bool per_thread; /* the _ptds/_ptsz twin */
	void *fn;
};

extern const struct sim_proc sim_procs[];
extern const size_t sim_nprocs;

/* Appends a line to $SIMGPU_LOG, when set (docs/SIMGPU.md lists the lines). */
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What every function simgpu does not simulate returns: logs "refused SYMBOL". */
CUresult sim_refuse(const char *symbol);

/* ---- address space -------------------------------------------------------------------- */

/* A range allocator over reserved address space: first fit, coalescing frees. */
struct sim_range {
	uintptr_t start, size;
};

struct sim_space {
	uintptr_t base, size;
	struct sim_range *free;
	size_t nfree, cap;
};

int sim_space_init(struct sim_space *sp, uintptr_t want_base, size_t size);
int sim_space_alloc(struct sim_space *sp, size_t size, size_t align, uintptr_t want, uintptr_t *out);
void sim_space_free(struct sim_space *sp, uintptr_t start, size_t size);

/* Pointer-keyed table (open addressing) used for allocations, streams, pools, handles. */
struct sim_map {
	uintptr_t *keys;
	void **vals;
	size_t cap, count, used;
};

void *sim_map_get(const struct sim_map *m, uintptr_t key);
int sim_map_put(struct sim_map *m, uintptr_t key, void *val);
void *sim_map_del(struct sim_map *m, uintptr_t key);
void *sim_map_at(const struct sim_map *m, size_t slot); /* NULL for an empty slot */

/* Every live range a pointer may fall in, sorted, for copies, memsets, pointer queries. */
enum sim_ext {
	SIM_EXT_BLOCK,	     /* struct sim_block: cuMemAlloc, pools, managed, pinned */
	SIM_EXT_REGISTERED,  /* cuMemHostRegister: host memory */
	SIM_EXT_MAPPING,     /* cuMemMap */
	SIM_EXT_GRAPH,	     /* a graph memory node's address range (struct sim_graph_alloc) */
	SIM_EXT_GLOBAL,	     /* a module's global variable */
	SIM_EXT_IPC,	     /* memory opened with cuIpcOpenMemHandle */
	SIM_EXT_POOL_IMPORT, /* another process's pool allocation, cuMemPoolImportPointer */
};

struct sim_extent {
	uintptr_t start;
	size_t size;
	enum sim_ext kind;
	int device; /* -1: host memory */
	void *owner;
};

int sim_extent_add(uintptr_t start, size_t size, enum sim_ext kind, int device, void *owner);
void sim_extent_del(uintptr_t start);
const struct sim_extent *sim_extent_find(uintptr_t addr); /* the range holding addr, or NULL */

/* Where [p, p+n) is: host memory a copy really reads and writes (pageable, pinned,
 * registered, managed), device memory (never touched), or neither (an error). */
enum sim_where { SIM_HOST, SIM_DEVICE };
CUresult sim_locate(uintptr_t p, size_t n, enum sim_where *where, int *device);

/* ---- memory ---------------------------------------------------------------------------- */

enum sim_kind {
	SIM_KIND_DEVICE,
	SIM_KIND_POOLED,
	SIM_KIND_MANAGED,
	SIM_KIND_HOST,
	SIM_KIND_ARRAY /* cuArrayDestroy's */
};

struct sim_block {
	uintptr_t addr;
	size_t size;	  /* bytes asked for */
	size_t footprint; /* bytes charged against the device (rounded) */
	int device;
	enum sim_kind kind;
	unsigned flags;			 /* cuMemHostAlloc's */
	struct CUmemPoolHandle_st *pool; /* pooled blocks only */
	bool cached;			 /* pooled block freed back into its pool */
};

struct CUmemPoolHandle_st {
	int device;
	bool is_default;
	bool destroyed; /* destroyed with allocations outstanding: freed with the last */
	uint64_t release_threshold;
	size_t reserved, used, reserved_high, used_high;
	int reuse_flags[3];
	struct sim_block **cache; /* freed blocks kept for reuse */
	size_t ncache, capcache;
	bool shareable;	     /* made for POSIX file descriptors: it can be exported */
	uint64_t from_pid;   /* imported: the exporting process (0: made here) */
	uintptr_t from_pool; /* and its pool there */
};

/* A graph memory node's allocation (graph.c): its address is reserved when the node is
 * made, its memory backed (charged) when a launch reaches the node, and released by
 * cuDeviceGraphMemTrim or the executable graph's destruction once freed. */
struct sim_graph_alloc {
	uintptr_t addr;
	size_t size, footprint;
	int device;
	bool live;   /* reached by a launch and not freed since */
	bool backed; /* physical memory charged to the device */
	int refs;    /* the graph, its executable graph, and liveness */
	struct CUgraphExec_st *exec;
};

/* ---- objects --------------------------------------------------------------------------- */

enum sim_obj {
	SIM_OBJ_EVENT = 1,
	SIM_OBJ_MODULE,
	SIM_OBJ_LIBRARY,
	SIM_OBJ_FUNCTION,
	SIM_OBJ_KERNEL,
	SIM_OBJ_GRAPH,
	SIM_OBJ_NODE,
	SIM_OBJ_EXEC,
	SIM_OBJ_CONTEXT
};

/* Registers, forgets and checks handles of every kind but streams and pools. */
int sim_obj_add(const void *h, enum sim_obj kind);
void sim_obj_del(const void *h);
bool sim_obj_is(const void *h, enum sim_obj kind);

struct CUctx_st {
	int device;
	bool primary;
	bool destroyed; /* created contexts are kept for reuse, never freed: a stale one stays readable */
	unsigned flags;
	size_t limits[CU_LIMIT_MAX];
	struct CUctx_st *next_free;
};

struct sim_capture; /* stream.c */

struct CUstream_st {
	int device;
	unsigned flags;
	int priority;
	bool busy; /* simgpu_stream_busy: simulated work queued, until a synchronize */
	uint64_t syncs;
	struct sim_capture *capture; /* capturing into a graph */
	CUgraphNode *deps;	     /* while capturing: what the next node depends on */
	size_t ndeps, capdeps;
};

struct CUevent_st {
	unsigned flags;
	bool recorded;
	uintptr_t stream;	     /* recorded while it was busy (looked up again: it may be gone); 0: complete */
	uint64_t syncs;		     /* the stream's synchronizations when recorded */
	uint64_t ns;		     /* host time of the record (elapsed times come from it) */
	struct sim_capture *capture; /* recorded into a capture: its nodes, for joins */
	CUgraphNode *deps;
	size_t ndeps;
};

struct sim_device {
	char name[256];
	size_t capacity, used;
	struct sim_space space;
	struct CUctx_st primary;
	int primary_refs;
	struct CUmemPoolHandle_st default_pool;
	CUmemoryPool current_pool;
	size_t graph_reserved, graph_used_high, graph_reserved_high; /* graph memory backed; used is reserved */
	bool peer[SIM_MAX_DEVICES]; /* cuCtxEnablePeerAccess from this device's contexts */
};

struct sim_state {
	pthread_mutex_t lock;
	bool initialized;
	int ndev;
	struct sim_device dev[SIM_MAX_DEVICES];
	struct sim_space va;	    /* cuMemAddressReserve ranges */
	struct sim_map blocks;	    /* address -> struct sim_block */
	struct sim_map streams;	    /* CUstream -> itself */
	struct sim_map pools;	    /* CUmemoryPool -> itself (created pools) */
	struct sim_map objects;	    /* handle -> enum sim_obj */
	struct sim_map graph_mem;   /* address -> struct sim_graph_alloc */
	struct sim_extent *extents; /* sorted by start */
	size_t nextents, capextents;
	uint64_t alloc_calls;	   /* for fault injection */
	uint64_t fail_nth;	   /* SIMGPU_FAIL_NTH: 0 = off */
	uint64_t fail_above;	   /* SIMGPU_FAIL_ABOVE: 0 = off */
	uint64_t context_mem;	   /* SIMGPU_CONTEXT_MEM: charged while a primary context is retained */
	uint64_t host_bytes;	   /* pinned host memory in use */
	uint64_t launches;	   /* kernels launched (directly or by graphs) */
	int profiler_depth;	   /* cuProfilerStart minus cuProfilerStop */
	struct CUctx_st *ctx_free; /* destroyed contexts, for reuse */
};

extern struct sim_state sim;

void sim_lock(void);
void sim_unlock(void);

/* Common checks; each returns CUDA_SUCCESS or the error the real driver gives. */
CUresult sim_check_init(void);
CUresult sim_check_device(CUdevice dev);
/* An exported descriptor handed out as a CUDA call's result: closed if the call failed */
CUresult sim_hand_fd(CUresult r, int fd, void *out);
CUresult sim_current_device(int *dev); /* needs a current context */
CUcontext sim_current_context(void);
bool sim_is_context(CUcontext c);
bool sim_valid_stream(CUstream s);
int sim_stream_device(CUstream s, int current); /* under the lock; built-in streams: current */
uint64_t sim_now_ns(void);
int sim_attribute(CUdevice_attribute attrib, int dev); /* the table's answer, overrides applied */

/* Fault injection: true when this allocation request must fail with OUT_OF_MEMORY. */
bool sim_inject_failure(size_t size);

/* Device memory accounting under the lock. */
CUresult sim_device_alloc(int dev, size_t size, size_t align, enum sim_kind kind, struct sim_block **out);
void sim_device_release(struct sim_block *b);

/* Pools (pool.c). */
void sim_pool_init(struct CUmemPoolHandle_st *p, int device, bool is_default);
void sim_pool_return(struct sim_block *b); /* a free: the block stays reserved, cached */
void sim_pool_trim(struct CUmemPoolHandle_st *p, size_t keep);
void sim_pools_sync(int dev); /* release what each pool holds above its threshold */
/* A free of an allocation imported from another process's pool: its mapping goes (the
 * exporter's memory stays). False when ptr is none. Under the lock. */
bool sim_pool_import_free(uintptr_t ptr);

/* Copies and memsets (copy.c), also run by graph launches: checked, then done when run
 * is true. Under the lock. */
CUresult sim_copy3d(const CUDA_MEMCPY3D *c, bool run);
CUresult sim_memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
		    bool run);

/* Kernels (module.c): resolves a CUfunction or CUkernel for the current device and
 * checks a launch's shape; sim_launched counts and logs one. Under the lock. */
CUresult sim_launch_check(CUfunction f, int dev, const unsigned grid[3], const unsigned block[3], unsigned smem,
			  CUfunction *resolved);
void sim_launched(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem);

/* Stream capture (stream.c): whether a stream is recording into a graph (and which), and
 * a node added behind what the stream did last, which the caller fills in. Under the lock. */
bool sim_capturing(CUstream s);
CUgraph sim_capture_graph(CUstream s);
CUresult sim_capture_add(CUstream s, CUgraphNodeType type, CUgraphNode *out);
CUresult sim_capture_fail(CUstream s); /* an operation capture does not allow: invalidates it */

/* Graphs (graph.c), under the lock: capture's nodes and graph memory's frees. */
CUgraph sim_graph_new(void);
void sim_graph_free(CUgraph g);
CUresult sim_graph_add(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out);
void sim_node_kernel(CUgraphNode n, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem);
void sim_node_copy(CUgraphNode n, const CUDA_MEMCPY3D *c);
void sim_node_memset(CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p);
void sim_node_host(CUgraphNode n, CUhostFn fn, void *data);
void sim_node_event(CUgraphNode n, CUevent ev);
CUresult sim_capture_alloc(CUstream s, int dev, size_t size, CUdeviceptr *dptr);
CUresult sim_capture_free(CUstream s, CUgraph g, CUdeviceptr dptr);
struct sim_graph_alloc *sim_graph_alloc_at(uintptr_t addr);
CUresult sim_graph_alloc_free(struct sim_graph_alloc *a); /* cuMemFree/cuMemFreeAsync of one */

#endif
