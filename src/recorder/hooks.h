/* What memtap's CUDA hook files share: the real driver entry points (filled by
 * cuGetProcAddress and dlsym interception, or looked up in libcuda.so.1 for callers
 * that linked it; device.c), and the recording helpers common to driver and runtime
 * hooks (hooks.c). */
#ifndef MTP_HOOKS_H
#define MTP_HOOKS_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "recorder/mtp.h"

#define MTP_NEWEST_KNOWN 13999 /* wrappers apply to lookups up to CUDA 13.x */

/* ABIs the runtime still asks cuGetProcAddress for, which cudaTypedefs.h declares only
 * for the driver's own build (__CUDA_API_VERSION_INTERNAL) */
#ifndef __CUDA_API_VERSION_INTERNAL
typedef CUresult(CUDAAPI *PFN_cuIpcOpenMemHandle_v4010)(CUdeviceptr_v2 *pdptr, CUipcMemHandle_v1 handle,
							unsigned int Flags);
typedef CUresult(CUDAAPI *PFN_cuGraphInstantiate_v10000)(CUgraphExec *phGraphExec, CUgraph hGraph,
							 CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);
typedef PFN_cuGraphInstantiate_v10000 PFN_cuGraphInstantiate_v11000;
#endif

#define DRV(base, sym, ver, ptsz, ...) extern MTP_HIDDEN PFN_##base##_v##ver mtp_real_##sym;
#include "recorder/driver_hooks.def"
#undef DRV

/* Exported, but not declared by cuda.h without CUDA_API_PER_THREAD_DEFAULT_STREAM. */
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec, CUstream);

/* A driver function looked up once in libcuda.so.1 and kept in *slot; racing threads
 * find the same pointer, and relaxed atomics keep that well-defined. The slot is
 * remembered, to be emptied if the driver is unloaded (mtp_driver_forget). */
MTP_HIDDEN void *mtp_driver_lookup(void **slot, const char *name);
static inline void *mtp_lookup_once(void **slot, const char *name)
{
	void *p = __atomic_load_n(slot, __ATOMIC_RELAXED);

	return likely(p) ? p : mtp_driver_lookup(slot, name);
}

/* The real function for a wrapper: filled by interception, else from libcuda.so.1. */
#define MTP_REAL(sym) ((__typeof__(mtp_real_##sym))mtp_lookup_once((void **)&mtp_real_##sym, #sym))

/* Driver layers (layers.c): a real function a caller's own handle gave, wrapped. Each
 * wrapped function has MTP_LAYERS wrappers, one per real function: `real` holds theirs,
 * `wrappers` the wrappers. Returns p itself when every slot holds another, or p is
 * memtap's own. mtp_drv_wrap does it for row `row` of driver_hooks.def (driver.c). */
#define MTP_LAYERS 4
MTP_HIDDEN void *mtp_layer_wrap(void **real, void *const *wrappers, void *p);
MTP_HIDDEN void *mtp_drv_wrap(unsigned row, void *real);
MTP_HIDDEN void mtp_layers_forget(void); /* after an unload: empty slots into a library that went */
/* libcuda.so.1, which the exported names call: a layer when it is one (device.c) */
MTP_HIDDEN void mtp_layer_library(uintptr_t lo, uintptr_t hi);

/* Recording helpers; `api` is an enum mt_api, `error` a CUresult or cudaError_t. Those of
 * every allocation and free are inline: they are most of what a hook does. */
static inline void mtp_hook_made(uint8_t kind, uint8_t api, uint8_t device, uint64_t addr, uint64_t size, uint64_t aux,
				 uint64_t aux2)
{
	bool early = unlikely(!__atomic_load_n(&mtp_constructed, __ATOMIC_RELAXED));
	struct mt_event e = {.kind = kind,
			     .flags = (uint8_t)(api | (early ? MT_ALLOC_EARLY : 0)),
			     .device = device,
			     .addr = addr,
			     .size = size,
			     .aux = aux,
			     .aux2 = aux2};
	mtp_record(&e, true);
}

static inline void mtp_hook_gone(uint8_t kind, uint64_t addr, uint64_t size, uint64_t aux)
{
	struct mt_event e = {.kind = kind, .device = MT_NO_DEVICE, .addr = addr, .size = size, .aux = aux};
	mtp_record(&e, false);
}

/* A failed allocation, recorded. Out of memory on a first try (`try_` 0) runs the policies'
 * on_oom handlers here, on the failing thread; true when one asks for the call again. */
MTP_HIDDEN bool mtp_hook_failed(uint8_t kind, uint8_t api, uint8_t device, uint64_t size, int error, int try_);

/* An allocation call's outcome, recorded (error 0: made, when addr is not NULL; else
 * failed). True when the call should be made once more: it ran out of memory on its
 * first try (`try_` 0) and a policy's on_oom asked for a retry. Each hook's loop shows it. */
static inline bool mtp_hook_outcome(int try_, int error, uint8_t kind, uint8_t api, uint8_t device, uint64_t addr,
				    uint64_t size, uint64_t aux, uint64_t aux2)
{
	if (unlikely(error))
		return mtp_hook_failed(MT_EV_ALLOC_FAILED, api, device, size, error, try_);
	if (addr) /* the runtime answers a zero-byte request with NULL: nothing was made */
		mtp_hook_made(kind, api, device, addr, size, aux, aux2);
	return false;
}

/* A device allocation of `size` past a policy's cap fails as the driver would fail it. */
#define MTP_CAPPED(size, call)                                                                                         \
	(unlikely(__atomic_load_n(&mtp_capping, __ATOMIC_RELAXED)) && mtp_cap_check(size) ? CUDA_ERROR_OUT_OF_MEMORY   \
											  : (call))
/* A release recorded before the call failed: say so. */
static inline void mtp_hook_release_failed(int error, uint8_t kind, uint64_t addr)
{
	if (unlikely(error)) {
		struct mt_event e = {.kind = kind, .device = MT_NO_DEVICE, .addr = addr, .error = error};
		mtp_record(&e, false);
	}
}

/* PyTorch's caching allocator, tracked (torch.c): its blocks and segments come from its
 * tracker, so the driver calls its code makes are not recorded again. mtp_torch_span is
 * the span of its library's code once tracked, MTP_TORCH_LOOKING until then (each memory
 * hook looks, cheaply: only after a library was loaded), 0 when it never will be: one
 * load for every other program. */
#define MTP_TORCH_LOOKING UINTPTR_MAX
extern MTP_HIDDEN uintptr_t mtp_torch_lo, mtp_torch_span;
MTP_HIDDEN bool mtp_torch_owns(const void *caller);
static inline bool mtp_torch_claims(const void *caller)
{
	return unlikely(__atomic_load_n(&mtp_torch_span, __ATOMIC_RELAXED)) && mtp_torch_owns(caller);
}
/* The guard of a hook that makes or frees device memory (mtp_enter_at, and not torch's). */
#define mtp_enter_memory(caller) (mtp_enter_at(caller) && !mtp_torch_claims(caller))
MTP_HIDDEN uint8_t mtp_location_device(const CUmemLocation *loc); /* MT_NO_DEVICE unless a device */
/* Recorded the same way by both backends: an array's bytes (its elements over `levels`
 * mipmap levels, each halving the extents; the driver's own footprint is not known), a
 * pool attribute set, an IPC import opened (its size asked of the driver; `error` not 0:
 * a failure) and a shareable handle imported: memory another process owns. */
MTP_HIDDEN uint64_t mtp_array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels, unsigned levels);
MTP_HIDDEN void mtp_hook_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, const void *value);
MTP_HIDDEN void mtp_hook_ipc_opened(int error, CUdeviceptr dptr, unsigned flags);
MTP_HIDDEN void mtp_hook_imported(CUmemGenericAllocationHandle handle);
/* cuGraphAddNode's node added to g: its memory nodes join graph.c's shadow */
MTP_HIDDEN void mtp_hook_graph_node(CUgraph g, const CUgraphNodeParams *p);

/* Graph memory nodes (graph.c): the shadow of allocation and free nodes, recorded as the
 * driver holds and releases their memory. `mtp_graph_capturing`: the graph a capture on
 * s builds (NULL: none); `mtp_graph_freed`: a free outside a graph, true when addr is
 * graph memory (recorded there, when the memory goes back). Both backends call them. */
MTP_HIDDEN CUgraph mtp_graph_capturing(CUstream s, bool ptsz);
MTP_HIDDEN void mtp_graph_alloc_node(CUgraph g, uint64_t addr, uint64_t size, uint8_t device);
MTP_HIDDEN void mtp_graph_free_node(CUgraph g, uint64_t addr);
MTP_HIDDEN bool mtp_graph_owns(uint64_t addr);
extern MTP_HIDDEN size_t mtp_graph_allocs; /* allocation nodes in the shadow (read without its lock) */
MTP_HIDDEN bool mtp_graph_held(uint64_t addr);
static inline bool mtp_graph_freed(uint64_t addr)
{
	return unlikely(__atomic_load_n(&mtp_graph_allocs, __ATOMIC_RELAXED)) && mtp_graph_held(addr);
}
MTP_HIDDEN void mtp_graph_instantiated(CUgraph g, CUgraphExec x, bool upload);
/* a launch or an upload (upload_only) returned `error`; out of memory: what it needed, failed */
MTP_HIDDEN void mtp_graph_ran(CUgraphExec x, int error, bool upload_only);
MTP_HIDDEN void mtp_graph_exec_destroyed(CUgraphExec x);
MTP_HIDDEN void mtp_graph_destroyed(CUgraph g);
MTP_HIDDEN void mtp_graph_trimmed(int device);

/* After a library was unloaded (loader.c): forget pointers into it. */
MTP_HIDDEN bool mtp_rt_forget(void);		 /* the runtime went: true */
MTP_HIDDEN bool mtp_rt_hooked(const char *name); /* memtap exports this runtime function */
MTP_HIDDEN void mtp_driver_hooks_forget(void);
MTP_HIDDEN void mtp_procaddr_forget(void);
/* A driver function found for `symbol` at `version` (cuGetProcAddress's flags): *pfn
 * becomes memtap's wrapper of it where memtap wraps that ABI (procaddr.c). */
MTP_HIDDEN void mtp_procaddr_substitute(const char *symbol, void **pfn, int version, cuuint64_t flags);

#endif
