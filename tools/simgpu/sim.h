/* simgpu: the simulated CUDA driver's internal state, shared by its files.
 * Device memory is address space reserved with PROT_NONE and never touched, so an
 * 80 GiB device costs no RAM. One global lock guards all state: simgpu is a test
 * double that must be correct and thread-safe, not fast. Every exported function
 * returns the CUresult the real driver documents for the same misuse. */
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

/* Pointer-keyed table (open addressing) used for allocations, streams, pools. */
struct sim_map {
	uintptr_t *keys;
	void **vals;
	size_t cap, count, used;
};

void *sim_map_get(const struct sim_map *m, uintptr_t key);
int sim_map_put(struct sim_map *m, uintptr_t key, void *val);
void *sim_map_del(struct sim_map *m, uintptr_t key);
void *sim_map_at(const struct sim_map *m, size_t slot); /* NULL for an empty slot */

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
};

struct CUctx_st {
	int device;
	bool primary;
};

struct CUstream_st {
	int device;
	unsigned flags;
	bool busy; /* simgpu_stream_busy: simulated work queued, until a synchronize */
	uint64_t syncs;
};

struct CUevent_st {
	uintptr_t stream; /* recorded while it was busy (looked up again: it may be gone); 0: complete */
	uint64_t syncs;	  /* the stream's synchronizations when recorded */
};

struct sim_device {
	char name[256];
	size_t capacity, used;
	struct sim_space space;
	struct CUctx_st primary;
	int primary_refs;
	struct CUmemPoolHandle_st default_pool;
	CUmemoryPool current_pool;
};

struct sim_state {
	pthread_mutex_t lock;
	bool initialized;
	int ndev;
	struct sim_device dev[SIM_MAX_DEVICES];
	struct sim_space va;	/* cuMemAddressReserve ranges */
	struct sim_map blocks;	/* address -> struct sim_block */
	struct sim_map streams; /* CUstream -> itself */
	struct sim_map pools;	/* CUmemoryPool -> itself (created pools) */
	uint64_t alloc_calls;	/* for fault injection */
	uint64_t fail_nth;	/* SIMGPU_FAIL_NTH: 0 = off */
	uint64_t fail_above;	/* SIMGPU_FAIL_ABOVE: 0 = off */
	uint64_t context_mem;	/* SIMGPU_CONTEXT_MEM: charged while a primary context is retained */
	uint64_t host_bytes;	/* pinned host memory in use */
	int profiler_depth;	/* cuProfilerStart minus cuProfilerStop */
};

extern struct sim_state sim;

void sim_lock(void);
void sim_unlock(void);

/* Common checks; each returns CUDA_SUCCESS or the error the real driver gives. */
CUresult sim_check_init(void);
CUresult sim_current_device(int *dev); /* needs a current context */
bool sim_valid_stream(CUstream s);

/* Fault injection: true when this allocation request must fail with OUT_OF_MEMORY. */
bool sim_inject_failure(size_t size);

/* Device memory accounting under the lock. */
CUresult sim_device_alloc(int dev, size_t size, size_t align, enum sim_kind kind, struct sim_block **out);
void sim_device_release(struct sim_block *b);

/* IPC imports (ipc.c), under the lock: the opened range holding dptr. */
CUresult sim_ipc_range(CUdeviceptr dptr, CUdeviceptr *base, size_t *size);

/* Pools (pool.c). */
void sim_pool_init(struct CUmemPoolHandle_st *p, int device, bool is_default);
void sim_pool_return(struct sim_block *b); /* a free: the block stays reserved, cached */
void sim_pool_trim(struct CUmemPoolHandle_st *p, size_t keep);
void sim_pools_sync(int dev); /* release what each pool holds above its threshold */

#endif
