/* Driver API hooks: each wrapper is exported under the real versioned name (for
 * programs linked with -lcuda) and handed out by cuGetProcAddress interception (for
 * everyone else, the runtime included). Frees are recorded before the real call:
 * the address may be reused by another thread at once. Results are returned as the
 * driver gave them. */
#include "recorder/hooks.h"

#define DRV(base, sym, ver, ptsz) PFN_##base##_v##ver mtp_real_##sym;
#include "recorder/driver_hooks.def"
#undef DRV

/* The driver was unloaded: the real entry points are found again at their next use. */
void mtp_driver_hooks_forget(void)
{
#define DRV(base, sym, ver, ptsz) __atomic_store_n(&mtp_real_##sym, NULL, __ATOMIC_RELAXED);
#include "recorder/driver_hooks.def"
#undef DRV
	mtp_procaddr_forget();
}

#define REAL_OR_RETURN(var, sym)                                                                                       \
	__typeof__(mtp_real_##sym) var = MTP_REAL(sym);                                                                \
	if (unlikely(!var)) {                                                                                          \
		return CUDA_ERROR_NOT_INITIALIZED;                                                                     \
	}                                                                                                              \
	(void)0

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

MTP_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	REAL_OR_RETURN(real, cuMemAlloc_v2);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
					    unsigned int elem)
{
	REAL_OR_RETURN(real, cuMemAllocPitch_v2);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
	REAL_OR_RETURN(real, cuMemFree_v2);
	bool rec = mtp_enter() && dptr; /* freeing 0 frees nothing, whatever the driver answers */
	if (rec)
		mtp_hook_gone(MT_EV_FREE, dptr, 0, 0);
	CUresult r = real(dptr);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_FREE, dptr);
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	REAL_OR_RETURN(real, cuMemGetInfo_v2);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	REAL_OR_RETURN(real, cuMemAllocManaged);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	REAL_OR_RETURN(real, cuMemHostAlloc);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize)
{
	REAL_OR_RETURN(real, cuMemAllocHost_v2);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	REAL_OR_RETURN(real, cuMemFreeHost);
	bool rec = mtp_enter() && p; /* freeing NULL frees nothing */
	if (rec)
		mtp_hook_gone(MT_EV_HOST_FREE, (uintptr_t)p, 0, 0);
	CUresult r = real(p);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_HOST_FREE, (uintptr_t)p);
	mtp_leave();
	return r;
}

/* ---- stream-ordered allocation ---- */

static CUresult alloc_async(const void *caller, PFN_cuMemAllocAsync_v11020 real, CUdeviceptr *dptr, size_t n,
			    CUstream s)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = MTP_CAPPED(n, real(dptr, n, s));
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_ALLOC, MT_API_ASYNC, mtp_driver_device(), r ? 0 : *dptr, n,
					      (uintptr_t)s, 0))
			break;
	}
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	REAL_OR_RETURN(real, cuMemAllocAsync);
	return alloc_async(__builtin_return_address(0), real, dptr, bytesize, s);
}

MTP_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	REAL_OR_RETURN(real, cuMemAllocAsync_ptsz);
	return alloc_async(__builtin_return_address(0), real, dptr, bytesize, s);
}

static CUresult free_async(const void *caller, PFN_cuMemFreeAsync_v11020 real, CUdeviceptr dptr, CUstream s)
{
	bool rec = mtp_enter_at(caller) && dptr; /* freeing 0 frees nothing */
	if (rec)
		mtp_hook_gone(MT_EV_FREE, dptr, 0, (uintptr_t)s);
	CUresult r = real(dptr, s);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_FREE, dptr);
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	REAL_OR_RETURN(real, cuMemFreeAsync);
	return free_async(__builtin_return_address(0), real, dptr, s);
}

MTP_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	REAL_OR_RETURN(real, cuMemFreeAsync_ptsz);
	return free_async(__builtin_return_address(0), real, dptr, s);
}

static CUresult alloc_from_pool(const void *caller, PFN_cuMemAllocFromPoolAsync_v11020 real, CUdeviceptr *dptr,
				size_t n, CUmemoryPool pool, CUstream s)
{
	bool rec = mtp_enter_at(caller);
	CUresult r;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		r = MTP_CAPPED(n, real(dptr, n, pool, s));
		if (!rec || !mtp_hook_outcome(try_, r, MT_EV_ALLOC, MT_API_POOL, mtp_driver_device(), r ? 0 : *dptr, n,
					      (uintptr_t)s, (uintptr_t)pool))
			break;
	}
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
	REAL_OR_RETURN(real, cuMemAllocFromPoolAsync);
	return alloc_from_pool(__builtin_return_address(0), real, dptr, bytesize, pool, s);
}

MTP_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
							 CUstream s)
{
	REAL_OR_RETURN(real, cuMemAllocFromPoolAsync_ptsz);
	return alloc_from_pool(__builtin_return_address(0), real, dptr, bytesize, pool, s);
}

MTP_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	REAL_OR_RETURN(real, cuMemPoolCreate);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
	REAL_OR_RETURN(real, cuMemPoolDestroy);
	bool rec = mtp_enter();
	if (rec)
		mtp_hook_gone(MT_EV_POOL_DESTROY, 0, 0, (uintptr_t)pool);
	CUresult r = real(pool);
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	REAL_OR_RETURN(real, cuMemPoolTrimTo);
	bool rec = mtp_enter();
	CUresult r = real(pool, keep);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_gone(MT_EV_POOL_TRIM, 0, keep, (uintptr_t)pool);
	mtp_leave();
	return r;
}

/* ---- virtual memory management ---- */

MTP_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
					const CUmemAllocationProp *prop, unsigned long long flags)
{
	REAL_OR_RETURN(real, cuMemCreate);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	REAL_OR_RETURN(real, cuMemRelease);
	bool rec = mtp_enter();
	if (rec)
		mtp_hook_gone(MT_EV_VMM_RELEASE, 0, 0, handle);
	CUresult r = real(handle);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_VMM_RELEASE, 0);
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
						unsigned long long flags)
{
	REAL_OR_RETURN(real, cuMemAddressReserve);
	bool rec = mtp_enter();
	CUresult r = real(ptr, size, alignment, addr, flags);
	if (rec && r == CUDA_SUCCESS)
		mtp_hook_gone(MT_EV_VMM_RESERVE, *ptr, size, 0);
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	REAL_OR_RETURN(real, cuMemAddressFree);
	bool rec = mtp_enter();
	if (rec)
		mtp_hook_gone(MT_EV_VMM_ADDR_FREE, ptr, size, 0);
	CUresult r = real(ptr, size);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_VMM_ADDR_FREE, ptr);
	mtp_leave();
	return r;
}

MTP_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	REAL_OR_RETURN(real, cuMemSetAccess);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
				     unsigned long long flags)
{
	REAL_OR_RETURN(real, cuMemMap);
	bool rec = mtp_enter();
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

MTP_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	REAL_OR_RETURN(real, cuMemUnmap);
	bool rec = mtp_enter();
	if (rec)
		mtp_hook_gone(MT_EV_VMM_UNMAP, ptr, size, 0);
	CUresult r = real(ptr, size);
	if (rec)
		mtp_hook_release_failed(r, MT_EV_VMM_UNMAP, ptr);
	mtp_leave();
	return r;
}
