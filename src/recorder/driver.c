/* Driver API hooks: hook_<symbol> records a call around the real function it is given.
 * Each is exported under the real versioned name (for programs linked with -lcuda; the
 * real function is libcuda.so.1's), and handed out by cuGetProcAddress and dlsym
 * interception (for everyone else, the runtime included) as one of MTP_LAYERS wrappers,
 * one per real function a caller's own handle gave (procaddr.c, layers.c): a driver
 * layer in front of the driver is called by memtap's wrapper, and calls memtap's wrapper
 * of the driver in turn. Frees are recorded before the real call: the address may be
 * reused by another thread at once. Results are returned as the driver gave them. */
#include "recorder/hooks.h"

#define DRV(base, sym, ver, ptsz, ...) PFN_##base##_v##ver mtp_real_##sym;
#include "recorder/driver_hooks.def"
#undef DRV

/* The driver was unloaded: the real entry points are found again at their next use. */
void mtp_driver_hooks_forget(void)
{
#define DRV(base, sym, ver, ptsz, ...) __atomic_store_n(&mtp_real_##sym, NULL, __ATOMIC_RELAXED);
#include "recorder/driver_hooks.def"
#undef DRV
	mtp_procaddr_forget();
}

/* A policy's cap (recorder/policy.c) judged by the driver's own count of what the device
 * has handed out, so every allocation path agrees on it. */
bool mtp_cap_check(uint64_t size)
{
	size_t free_bytes, total;
	uint64_t cap;

	if (MTP_REAL(cuMemGetInfo_v2)(&free_bytes, &total) != CUDA_SUCCESS)
		return false;
	cap = mtp_cap_of(mtp_driver_device(), total);
	return cap && total - free_bytes + size > cap;
}

/* ---- plain, pitched, managed and pinned host memory ---- */

static MTP_NOINLINE CUresult alloc_recorded(const void *caller, __typeof__(mtp_real_cuMemAlloc_v2) real,
					    CUdeviceptr *dptr, size_t bytesize)
{
	bool rec = mtp_enter_memory(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = MTP_CAPPED(bytesize, real(dptr, bytesize));
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_ALLOC, MT_API_DRIVER, mtp_driver_device(), r ? 0 : *dptr,
					      bytesize, 0, 0))
			break;
	}
	mtp_leave();
	return r;
}

/* The runtime's cudaMalloc calls it: that call passes straight through, in each wrapper. */
static inline CUresult hook_cuMemAlloc_v2(const void *caller, __typeof__(mtp_real_cuMemAlloc_v2) real,
					  CUdeviceptr *dptr, size_t bytesize)
{
	if (mtp_inside_runtime(caller))
		return MTP_CAPPED(bytesize, real(dptr, bytesize));
	return alloc_recorded(caller, real, dptr, bytesize);
}

static CUresult hook_cuMemAllocPitch_v2(const void *caller, __typeof__(mtp_real_cuMemAllocPitch_v2) real,
					CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
					unsigned int elem)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = MTP_CAPPED(width * height, real(dptr, pitch, width, height, elem));
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_ALLOC, MT_API_PITCH, mtp_driver_device(), r ? 0 : *dptr,
					      r ? width * height : *pitch * height, 0, 0))
			break;
	}
	mtp_leave();
	return r;
}

static MTP_NOINLINE CUresult free_recorded(const void *caller, __typeof__(mtp_real_cuMemFree_v2) real, CUdeviceptr dptr)
{
	bool rec = mtp_enter_memory(caller) && dptr; /* freeing 0 frees nothing, whatever the driver answers */
	if (rec && mtp_graph_freed(dptr))
		rec = false; /* graph memory: recorded when it goes back (graph.c) */
	if (rec)
		mtp_hook_gone(MT_EV_FREE, dptr, 0, 0);
	CUresult r = real(dptr);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_FREE, dptr);
	mtp_leave();
	return r;
}

/* The runtime's cudaFree calls it: that call passes straight through, in each wrapper. */
static inline CUresult hook_cuMemFree_v2(const void *caller, __typeof__(mtp_real_cuMemFree_v2) real, CUdeviceptr dptr)
{
	return mtp_inside_runtime(caller) ? real(dptr) : free_recorded(caller, real, dptr);
}

static CUresult hook_cuMemGetInfo_v2(const void *caller, __typeof__(mtp_real_cuMemGetInfo_v2) real, size_t *free_bytes,
				     size_t *total)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(free_bytes, total);
	if (rec && r == CUDA_SUCCESS) {
		struct mt_event e = {.kind = MT_EV_MEMINFO,
				     .device = mtp_driver_device(),
				     .aux = free_bytes ? *free_bytes : 0,
				     .aux2 = total ? *total : 0};
		mtp_record(&e, false);
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemAllocManaged(const void *caller, __typeof__(mtp_real_cuMemAllocManaged) real,
				       CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = real(dptr, bytesize, flags);
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_MANAGED_ALLOC, MT_API_MANAGED, mtp_driver_device(),
					      r ? 0 : *dptr, bytesize, flags, 0))
			break;
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemHostAlloc(const void *caller, __typeof__(mtp_real_cuMemHostAlloc) real, void **pp,
				    size_t bytesize, unsigned int flags)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = real(pp, bytesize, flags);
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_HOST_ALLOC, MT_API_HOST, MT_NO_DEVICE,
					      r ? 0 : (uintptr_t)*pp, bytesize, flags, 0))
			break;
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemAllocHost_v2(const void *caller, __typeof__(mtp_real_cuMemAllocHost_v2) real, void **pp,
				       size_t bytesize)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = real(pp, bytesize);
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_HOST_ALLOC, MT_API_HOST, MT_NO_DEVICE,
					      r ? 0 : (uintptr_t)*pp, bytesize, 0, 0))
			break;
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemFreeHost(const void *caller, __typeof__(mtp_real_cuMemFreeHost) real, void *p)
{
	bool rec = mtp_enter_at(caller) && p; /* freeing NULL frees nothing */
	if (rec)
		mtp_hook_gone(MT_EV_HOST_FREE, (uintptr_t)p, 0, 0);
	CUresult r = real(p);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_HOST_FREE, (uintptr_t)p);
	mtp_leave();
	return r;
}

/* ---- stream-ordered allocation ---- */

/* On a capturing stream an allocation is a graph's allocation node, which reserves only
 * addresses (recorded when the graph's launch backs it: graph.c), and a free of graph
 * memory a free node; no cap applies to either. */
static CUresult alloc_async(const void *caller, bool ptsz, CUresult (*call)(void *, CUdeviceptr *, size_t, CUstream),
			    void *real, CUdeviceptr *dptr, size_t n, CUstream s, uint8_t api, uint64_t pool)
{
	bool rec = mtp_enter_at(caller);
	CUgraph g = rec ? mtp_graph_capturing(s, ptsz) : NULL;
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = g ? call(real, dptr, n, s) : MTP_CAPPED(n, call(real, dptr, n, s));
		if (g && r == CUDA_SUCCESS) {
			mtp_graph_alloc_node(g, *dptr, n, mtp_driver_device());
			break;
		}
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_ALLOC, api, mtp_driver_device(), r ? 0 : *dptr, n,
					      (uintptr_t)s, pool))
			break;
	}
	mtp_leave();
	return r;
}

static CUresult call_async(void *real, CUdeviceptr *dptr, size_t n, CUstream s)
{
	return ((PFN_cuMemAllocAsync_v11020)real)(dptr, n, s);
}

static CUresult hook_cuMemAllocAsync(const void *caller, PFN_cuMemAllocAsync_v11020 real, CUdeviceptr *dptr, size_t n,
				     CUstream s)
{
	return alloc_async(caller, false, call_async, (void *)real, dptr, n, s, MT_API_ASYNC, 0);
}

static CUresult hook_cuMemAllocAsync_ptsz(const void *caller, PFN_cuMemAllocAsync_v11020 real, CUdeviceptr *dptr,
					  size_t n, CUstream s)
{
	return alloc_async(caller, true, call_async, (void *)real, dptr, n, s, MT_API_ASYNC, 0);
}

static CUresult free_async(const void *caller, bool ptsz, PFN_cuMemFreeAsync_v11020 real, CUdeviceptr dptr, CUstream s)
{
	bool rec = mtp_enter_at(caller) && dptr; /* freeing 0 frees nothing */
	CUgraph g = rec ? mtp_graph_capturing(s, ptsz) : NULL;
	bool node = g && mtp_graph_owns(dptr);
	if (rec && !node && !mtp_graph_freed(dptr))
		mtp_hook_gone(MT_EV_FREE, dptr, 0, (uintptr_t)s);
	else
		rec = false; /* graph memory: recorded when it goes back (graph.c) */
	CUresult r = real(dptr, s);
	if (node && r == CUDA_SUCCESS)
		mtp_graph_free_node(g, dptr);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_FREE, dptr);
	mtp_leave();
	return r;
}

static CUresult hook_cuMemFreeAsync(const void *caller, PFN_cuMemFreeAsync_v11020 real, CUdeviceptr dptr, CUstream s)
{
	return free_async(caller, false, real, dptr, s);
}

static CUresult hook_cuMemFreeAsync_ptsz(const void *caller, PFN_cuMemFreeAsync_v11020 real, CUdeviceptr dptr,
					 CUstream s)
{
	return free_async(caller, true, real, dptr, s);
}

/* the pool goes through the call's own argument list: one thread at a time per call */
struct pool_call {
	PFN_cuMemAllocFromPoolAsync_v11020 real;
	CUmemoryPool pool;
};

static CUresult call_pool(void *arg, CUdeviceptr *dptr, size_t n, CUstream s)
{
	struct pool_call *c = arg;
	return c->real(dptr, n, c->pool, s);
}

static CUresult hook_cuMemAllocFromPoolAsync(const void *caller, PFN_cuMemAllocFromPoolAsync_v11020 real,
					     CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
	struct pool_call c = {real, pool};
	return alloc_async(caller, false, call_pool, &c, dptr, n, s, MT_API_POOL, (uintptr_t)pool);
}

static CUresult hook_cuMemAllocFromPoolAsync_ptsz(const void *caller, PFN_cuMemAllocFromPoolAsync_v11020 real,
						  CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
	struct pool_call c = {real, pool};
	return alloc_async(caller, true, call_pool, &c, dptr, n, s, MT_API_POOL, (uintptr_t)pool);
}

static CUresult hook_cuMemPoolCreate(const void *caller, __typeof__(mtp_real_cuMemPoolCreate) real, CUmemoryPool *pool,
				     const CUmemPoolProps *props)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(pool, props);
	if (rec && r == CUDA_SUCCESS) {
		struct mt_event e = {.kind = MT_EV_POOL_CREATE,
				     .aux = (uintptr_t)*pool,
				     .device = mtp_location_device(&props->location)};
		mtp_record(&e, true);
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemPoolDestroy(const void *caller, __typeof__(mtp_real_cuMemPoolDestroy) real, CUmemoryPool pool)
{
	bool rec = mtp_enter_at(caller);
	if (rec)
		mtp_hook_gone(MT_EV_POOL_DESTROY, 0, 0, (uintptr_t)pool);
	CUresult r = real(pool);
	mtp_leave();
	return r;
}

static CUresult hook_cuMemPoolTrimTo(const void *caller, __typeof__(mtp_real_cuMemPoolTrimTo) real, CUmemoryPool pool,
				     size_t keep)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(pool, keep);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_gone(MT_EV_POOL_TRIM, 0, keep, (uintptr_t)pool);
	mtp_leave();
	return r;
}

/* ---- virtual memory management ---- */

static CUresult hook_cuMemCreate(const void *caller, __typeof__(mtp_real_cuMemCreate) real,
				 CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				 unsigned long long flags)
{
	bool rec = mtp_enter_memory(caller);
	uint8_t dev = mtp_location_device(prop ? &prop->location : NULL);
	uint8_t loc = prop ? (uint8_t)prop->location.type : 0;
	CUresult r;
	for (int try_ = 0;; try_++) {
		r = MTP_CAPPED(size, real(handle, size, prop, flags));
		if (rec && r == CUDA_SUCCESS) {
			struct mt_event e = {
			    .kind = MT_EV_VMM_CREATE, .flags = loc, .device = dev, .size = size, .aux = *handle};
			mtp_record(&e, true);
		}
		if (!rec || r == CUDA_SUCCESS || !mtp_hook_failed(MT_EV_ALLOC_FAILED, MT_API_VMM, dev, size, r, try_))
			break;
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemRelease(const void *caller, __typeof__(mtp_real_cuMemRelease) real,
				  CUmemGenericAllocationHandle handle)
{
	bool rec = mtp_enter_memory(caller);
	if (rec)
		mtp_hook_gone(MT_EV_VMM_RELEASE, 0, 0, handle);
	CUresult r = real(handle);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_VMM_RELEASE, 0);
	mtp_leave();
	return r;
}

static CUresult hook_cuMemAddressReserve(const void *caller, __typeof__(mtp_real_cuMemAddressReserve) real,
					 CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
					 unsigned long long flags)
{
	bool rec = mtp_enter_memory(caller);
	CUresult r = real(ptr, size, alignment, addr, flags);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_gone(MT_EV_VMM_RESERVE, *ptr, size, 0);
	mtp_leave();
	return r;
}

static CUresult hook_cuMemAddressFree(const void *caller, __typeof__(mtp_real_cuMemAddressFree) real, CUdeviceptr ptr,
				      size_t size)
{
	bool rec = mtp_enter_memory(caller);
	if (rec)
		mtp_hook_gone(MT_EV_VMM_ADDR_FREE, ptr, size, 0);
	CUresult r = real(ptr, size);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_VMM_ADDR_FREE, ptr);
	mtp_leave();
	return r;
}

static CUresult hook_cuMemSetAccess(const void *caller, __typeof__(mtp_real_cuMemSetAccess) real, CUdeviceptr ptr,
				    size_t size, const CUmemAccessDesc *desc, size_t count)
{
	bool rec = mtp_enter_memory(caller);
	CUresult r = real(ptr, size, desc, count);
	if (rec && r == CUDA_SUCCESS && desc && count) {
		struct mt_event e = {.kind = MT_EV_VMM_ACCESS,
				     .device = mtp_location_device(&desc[0].location),
				     .addr = ptr,
				     .size = size,
				     .aux = desc[0].flags};
		mtp_record(&e, false);
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemMap(const void *caller, __typeof__(mtp_real_cuMemMap) real, CUdeviceptr ptr, size_t size,
			      size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	bool rec = mtp_enter_memory(caller);
	CUresult r = real(ptr, size, offset, handle, flags);
	if (rec) {
		struct mt_event e = {.kind = MT_EV_VMM_MAP,
				     .device = MT_NO_DEVICE,
				     .addr = ptr,
				     .size = size,
				     .aux = handle,
				     .aux2 = offset,
				     .error = r};
		mtp_record(&e, r == CUDA_SUCCESS);
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemUnmap(const void *caller, __typeof__(mtp_real_cuMemUnmap) real, CUdeviceptr ptr, size_t size)
{
	bool rec = mtp_enter_memory(caller);
	if (rec)
		mtp_hook_gone(MT_EV_VMM_UNMAP, ptr, size, 0);
	CUresult r = real(ptr, size);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_VMM_UNMAP, ptr);
	mtp_leave();
	return r;
}

/* ---- pool attributes ---- */

static CUresult hook_cuMemPoolSetAttribute(const void *caller, PFN_cuMemPoolSetAttribute_v11020 real, CUmemoryPool pool,
					   CUmemPool_attribute attr, void *value)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(pool, attr, value);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_pool_attr(pool, attr, value);
	mtp_leave();
	return r;
}

/* ---- arrays: device memory behind a handle, recorded as allocations at the handle ---- */

#define ARRAY_CREATE(caller, out, bytes, call)                                                                         \
	bool rec = mtp_enter_at(caller);                                                                               \
	CUresult r;                                                                                                    \
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */                 \
		r = MTP_CAPPED(bytes, call);                                                                           \
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_ALLOC, MT_API_ARRAY, mtp_driver_device(),                 \
					      r ? 0 : (uintptr_t) * (out), bytes, 0, 0))                               \
			break;                                                                                         \
	}                                                                                                              \
	mtp_leave();                                                                                                   \
	return r

static CUresult hook_cuArrayCreate_v2(const void *caller, PFN_cuArrayCreate_v3020 real, CUarray *array,
				      const CUDA_ARRAY_DESCRIPTOR *d)
{
	uint64_t bytes = d ? mtp_array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels, 1) : 0;
	ARRAY_CREATE(caller, array, bytes, real(array, d));
}

static CUresult hook_cuArray3DCreate_v2(const void *caller, PFN_cuArray3DCreate_v3020 real, CUarray *array,
					const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	uint64_t bytes = d ? mtp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1) : 0;
	ARRAY_CREATE(caller, array, bytes, real(array, d));
}

static CUresult hook_cuMipmappedArrayCreate(const void *caller, PFN_cuMipmappedArrayCreate_v5000 real,
					    CUmipmappedArray *array, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
	uint64_t bytes = d ? mtp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, levels) : 0;
	ARRAY_CREATE(caller, array, bytes, real(array, d, levels));
}

/* A release of `addr` recorded before the call (NULL frees nothing), and said if it failed. */
#define RELEASE(caller, kind, addr, call)                                                                              \
	bool rec = mtp_enter_at(caller) && (addr);                                                                     \
	if (rec)                                                                                                       \
		mtp_hook_gone(kind, (uintptr_t)(addr), 0, 0);                                                          \
	CUresult r = call;                                                                                             \
	if (rec)                                                                                                       \
		mtp_hook_release_failed(r, kind, (uintptr_t)(addr));                                                   \
	mtp_leave();                                                                                                   \
	return r

static CUresult hook_cuArrayDestroy(const void *caller, PFN_cuArrayDestroy_v2000 real, CUarray array)
{
	RELEASE(caller, MT_EV_FREE, array, real(array));
}

static CUresult hook_cuMipmappedArrayDestroy(const void *caller, PFN_cuMipmappedArrayDestroy_v5000 real,
					     CUmipmappedArray array)
{
	RELEASE(caller, MT_EV_FREE, array, real(array));
}

/* ---- host registration: the caller's pages pinned, a kind of pinned host memory ---- */

static CUresult hook_cuMemHostRegister_v2(const void *caller, PFN_cuMemHostRegister_v6050 real, void *p, size_t n,
					  unsigned flags)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = real(p, n, flags);
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_HOST_ALLOC, MT_API_REGISTER, MT_NO_DEVICE,
					      r ? 0 : (uintptr_t)p, n, flags, 0))
			break;
	}
	mtp_leave();
	return r;
}

static CUresult hook_cuMemHostUnregister(const void *caller, PFN_cuMemHostUnregister_v4000 real, void *p)
{
	RELEASE(caller, MT_EV_HOST_FREE, p, real(p));
}

/* ---- imports: memory another process owns, on no device of this process's ---- */

static CUresult hook_cuIpcOpenMemHandle_v2(const void *caller, PFN_cuIpcOpenMemHandle_v11000 real, CUdeviceptr *dptr,
					   CUipcMemHandle handle, unsigned flags)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(dptr, handle, flags);
	if (rec)
		mtp_hook_ipc_opened(r, r ? 0 : *dptr, flags);
	mtp_leave();
	return r;
}

/* the v1 ABI (CUDA 4.1) takes the same arguments */
#define hook_cuIpcOpenMemHandle hook_cuIpcOpenMemHandle_v2

/* an allocation of another process's pool, exported to this one: freed with cuMemFree or
 * cuMemFreeAsync, as an IPC import is closed */
static CUresult hook_cuMemPoolImportPointer(const void *caller, PFN_cuMemPoolImportPointer_v11020 real,
					    CUdeviceptr *dptr, CUmemoryPool pool, CUmemPoolPtrExportData *data)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(dptr, pool, data);
	if (rec)
		mtp_hook_ipc_opened(r, r ? 0 : *dptr, 0);
	mtp_leave();
	return r;
}

static CUresult hook_cuIpcCloseMemHandle(const void *caller, PFN_cuIpcCloseMemHandle_v4010 real, CUdeviceptr dptr)
{
	RELEASE(caller, MT_EV_FREE, dptr, real(dptr));
}

static CUresult hook_cuMemImportFromShareableHandle(const void *caller, PFN_cuMemImportFromShareableHandle_v10020 real,
						    CUmemGenericAllocationHandle *handle, void *os_handle,
						    CUmemAllocationHandleType type)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(handle, os_handle, type);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_imported(*handle);
	mtp_leave();
	return r;
}

/* ---- graph memory nodes: the shadow in graph.c, recorded as the driver holds memory ---- */

static CUresult hook_cuGraphAddMemAllocNode(const void *caller, PFN_cuGraphAddMemAllocNode_v11040 real,
					    CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
					    CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(node, g, deps, ndeps, p);
	if (rec && r == CUDA_SUCCESS && p)
		mtp_graph_alloc_node(g, p->dptr, p->bytesize, mtp_location_device(&p->poolProps.location));
	mtp_leave();
	return r;
}

static CUresult hook_cuGraphAddMemFreeNode(const void *caller, PFN_cuGraphAddMemFreeNode_v11040 real, CUgraphNode *node,
					   CUgraph g, const CUgraphNode *deps, size_t ndeps, CUdeviceptr dptr)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(node, g, deps, ndeps, dptr);
	if (rec && r == CUDA_SUCCESS)
		mtp_graph_free_node(g, dptr);
	mtp_leave();
	return r;
}

/* CUDA 12.2's generic node: its memory nodes are cuGraphAddMemAllocNode's and cuGraphAddMemFreeNode's */
static CUresult hook_cuGraphAddNode(const void *caller, PFN_cuGraphAddNode_v12020 real, CUgraphNode *node, CUgraph g,
				    const CUgraphNode *deps, size_t ndeps, CUgraphNodeParams *p)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(node, g, deps, ndeps, p);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_graph_node(g, p);
	mtp_leave();
	return r;
}

static CUresult hook_cuGraphAddNode_v2(const void *caller, PFN_cuGraphAddNode_v12030 real, CUgraphNode *node, CUgraph g,
				       const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
				       CUgraphNodeParams *p)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(node, g, deps, edges, ndeps, p);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_graph_node(g, p);
	mtp_leave();
	return r;
}

/* the CUDA 10 and 11 ABIs (an error node and a log), which the runtime still looks up */
static CUresult hook_cuGraphInstantiate(const void *caller, PFN_cuGraphInstantiate_v10000 real, CUgraphExec *x,
					CUgraph g, CUgraphNode *error_node, char *log, size_t log_size)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(x, g, error_node, log, log_size);
	if (rec && r == CUDA_SUCCESS)
		mtp_graph_instantiated(g, *x, false);
	mtp_leave();
	return r;
}
#define hook_cuGraphInstantiate_v2 hook_cuGraphInstantiate

static CUresult hook_cuGraphInstantiateWithFlags(const void *caller, PFN_cuGraphInstantiateWithFlags_v11040 real,
						 CUgraphExec *x, CUgraph g, unsigned long long flags)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(x, g, flags);
	if (rec && r == CUDA_SUCCESS)
		mtp_graph_instantiated(g, *x, false);
	mtp_leave();
	return r;
}

static CUresult hook_cuGraphInstantiateWithParams(const void *caller, PFN_cuGraphInstantiateWithParams_v12000 real,
						  CUgraphExec *x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(x, g, p);
	if (rec && r == CUDA_SUCCESS)
		mtp_graph_instantiated(g, *x, p && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
	mtp_leave();
	return r;
}
#define hook_cuGraphInstantiateWithParams_ptsz hook_cuGraphInstantiateWithParams

static CUresult hook_cuGraphLaunch(const void *caller, PFN_cuGraphLaunch_v10000 real, CUgraphExec x, CUstream s)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(x, s);
	if (rec)
		mtp_graph_ran(x, r, false);
	mtp_leave();
	return r;
}
#define hook_cuGraphLaunch_ptsz hook_cuGraphLaunch

static CUresult hook_cuGraphUpload(const void *caller, PFN_cuGraphUpload_v11010 real, CUgraphExec x, CUstream s)
{
	bool rec = mtp_enter_at(caller);
	CUresult r = real(x, s);
	if (rec)
		mtp_graph_ran(x, r, true);
	mtp_leave();
	return r;
}
#define hook_cuGraphUpload_ptsz hook_cuGraphUpload

/* memory goes back with the executable graph: recorded before it does */
static CUresult hook_cuGraphExecDestroy(const void *caller, PFN_cuGraphExecDestroy_v10000 real, CUgraphExec x)
{
	bool rec = mtp_enter_at(caller);
	if (rec)
		mtp_graph_exec_destroyed(x);
	CUresult r = real(x);
	mtp_leave();
	return r;
}

static CUresult hook_cuGraphDestroy(const void *caller, PFN_cuGraphDestroy_v10000 real, CUgraph g)
{
	bool rec = mtp_enter_at(caller);
	if (rec)
		mtp_graph_destroyed(g);
	CUresult r = real(g);
	mtp_leave();
	return r;
}

static CUresult hook_cuDeviceGraphMemTrim(const void *caller, PFN_cuDeviceGraphMemTrim_v11040 real, CUdevice device)
{
	bool rec = mtp_enter_at(caller);
	if (rec)
		mtp_graph_trimmed(device);
	CUresult r = real(device);
	mtp_leave();
	return r;
}

/* ---- the exported names, and one wrapper per driver layer ---- */

#define UNPAREN(...) __VA_ARGS__

/* The names are pasted and quoted, never passed on to another macro: cuda.h renames the
 * oldest ABIs' names (cuGraphInstantiate is cuGraphInstantiateWithFlags to it). A slot
 * still empty is filled with the function libcuda.so.1 exports under that name. */
#define REAL_BY_NAME(slot, name) ((__typeof__(slot))mtp_lookup_once((void **)&(slot), name))

/* For programs linked with -lcuda: the real function is libcuda.so.1's. */
#define DRV(base, sym, ver, ptsz, params, args)                                                                        \
	MTP_EXPORT CUresult CUDAAPI mtp_export_##sym params __asm__(#sym);                                             \
	CUresult CUDAAPI mtp_export_##sym params                                                                       \
	{                                                                                                              \
		__typeof__(mtp_real_##sym) real = REAL_BY_NAME(mtp_real_##sym, #sym);                                  \
		if (unlikely(!real))                                                                                   \
			return CUDA_ERROR_NOT_INITIALIZED;                                                             \
		return hook_##sym(__builtin_return_address(0), real, UNPAREN args);                                    \
	}
#include "recorder/driver_hooks.def"
#undef DRV

/* Wrapper k calls the real function in layer slot k; one whose library was unloaded
 * (an empty slot) is found again by name. */
#define LAYER(wrapper, slots, slot, hook, name, params, args, k)                                                       \
	static CUresult CUDAAPI wrapper##k params                                                                      \
	{                                                                                                              \
		__typeof__(slot) real = __atomic_load_n(&slots[k], __ATOMIC_RELAXED);                                  \
		if (unlikely(!real) && unlikely(!(real = REAL_BY_NAME(slot, name))))                                   \
			return CUDA_ERROR_NOT_INITIALIZED;                                                             \
		return hook(__builtin_return_address(0), real, UNPAREN args);                                          \
	}
#define DRV(base, sym, ver, ptsz, params, args)                                                                        \
	static __typeof__(mtp_real_##sym) layer_##sym[MTP_LAYERS];                                                     \
	LAYER(sym##_at, layer_##sym, mtp_real_##sym, hook_##sym, #sym, params, args, 0)                                \
	LAYER(sym##_at, layer_##sym, mtp_real_##sym, hook_##sym, #sym, params, args, 1)                                \
	LAYER(sym##_at, layer_##sym, mtp_real_##sym, hook_##sym, #sym, params, args, 2)                                \
	LAYER(sym##_at, layer_##sym, mtp_real_##sym, hook_##sym, #sym, params, args, 3)                                \
	static void *const wrappers_##sym[MTP_LAYERS] = {(void *)sym##_at0, (void *)sym##_at1, (void *)sym##_at2,      \
							 (void *)sym##_at3};
#include "recorder/driver_hooks.def"
#undef DRV
_Static_assert(MTP_LAYERS == 4, "one LAYER line per slot");

static const struct {
	void **real;
	void *const *wrappers;
} rows[] = {
#define DRV(base, sym, ...) {(void **)layer_##sym, wrappers_##sym},
#include "recorder/driver_hooks.def"
#undef DRV
};

void *mtp_drv_wrap(unsigned row, void *real)
{
	return row < sizeof rows / sizeof rows[0] ? mtp_layer_wrap(rows[row].real, rows[row].wrappers, real) : real;
}
