/* Runtime API hooks, for applications that link libcudart dynamically (PyTorch does).
 * They record with the application's own call site and the stream, then call the
 * next definition of the same name; the driver hooks the runtime reaches inside see
 * the guard and do not record again. Static-runtime users (NCCL, cuBLAS) are seen at
 * the driver level only. The driver entry points the runtime hands out come back as
 * memtap's wrappers, however the runtime found them. */
#define CUDA_ENABLE_DEPRECATED /* cudaGetDriverEntryPoint: applications still call it */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "recorder/allocator.h"
#include "recorder/prim.h"
#include "recorder/hooks.h"

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *, cudaStream_t);
cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *, void **, unsigned long long,
						   enum cudaDriverEntryPointQueryResult *);
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(const char *, void **, unsigned int, unsigned long long,
							    enum cudaDriverEntryPointQueryResult *);

#define RT(name) static __typeof__(name) *real_##name;
#include "recorder/runtime_hooks.def"
RT(cudaGetDevice)
RT(cudaGetLastError)
RT(cudaStreamGetFlags)
RT(cudaRuntimeGetVersion)
#undef RT

static int find_runtime(struct dl_phdr_info *info, size_t size, void *out)
{
	const char *base = strrchr(info->dlpi_name, '/');

	(void)size;
	base = base ? base + 1 : info->dlpi_name;
	if (strncmp(base, "libcudart.so", 12) != 0)
		return 0;
	snprintf(out, PATH_MAX, "%s", info->dlpi_name);
	return 1;
}

/* The runtime after memtap: RTLD_NEXT asked from this library's code, else a libcudart
 * loaded where RTLD_NEXT does not look (dlopen'd RTLD_LOCAL, as Python's ctypes and
 * extension modules load theirs). */
static void *lookup(void *name);

/* Looked up on memtap's stack: the loader needs kilobytes a small fiber does not have. */
static void *runtime_symbol(const char *name)
{
	return mtp_slow_stack(lookup, (void *)name);
}

static void *lookup(void *arg)
{
	const char *name = arg;
	char path[PATH_MAX] = "";
	void *p = mt_dlsym_resolve()(RTLD_NEXT, name), *h;
	uintptr_t lo, hi;

	if (!p && dl_iterate_phdr(find_runtime, path) && (h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD))) {
		p = mt_dlsym_resolve()(h, name);
		mtp_dlclose(h);
	}
	/* where the runtime's code is: its calls into the driver hooks are part of its own call */
	if (p && !__atomic_load_n(&mtp_rt_span, __ATOMIC_RELAXED) && mtp_module_of(p, &lo, &hi)) {
		__atomic_store_n(&mtp_rt_lo, lo, __ATOMIC_RELAXED);
		__atomic_store_n(&mtp_rt_span, hi - lo, __ATOMIC_RELAXED);
	}
	return p;
}

/* A library was unloaded: if it was the runtime, every pointer into it is forgotten and
 * looked up again at the next call (which finds a runtime loaded since, or none). */
bool mtp_rt_forget(void)
{
	uintptr_t lo = __atomic_load_n(&mtp_rt_lo, __ATOMIC_RELAXED);
	uintptr_t span = __atomic_load_n(&mtp_rt_span, __ATOMIC_RELAXED);

	if (!span || mtp_module_loaded(lo, lo + span))
		return false;
#define RT(name) __atomic_store_n(&real_##name, NULL, __ATOMIC_RELAXED);
#include "recorder/runtime_hooks.def"
	RT(cudaGetDevice)
	RT(cudaGetLastError)
	RT(cudaStreamGetFlags)
	RT(cudaRuntimeGetVersion)
#undef RT
	__atomic_store_n(&mtp_rt_span, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mtp_rt_lo, 0, __ATOMIC_RELAXED);
	return true;
}

/* Whether memtap exports a runtime function of this name. */
bool mtp_rt_hooked(const char *name)
{
	static const char *const names[] = {
#define RT(name) #name,
#include "recorder/runtime_hooks.def"
#undef RT
	};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* Racing threads resolve the same value: relaxed atomics keep that well-defined. */
#define REAL_OR_RETURN(var, name)                                                                                      \
	__typeof__(name) *var = __atomic_load_n(&real_##name, __ATOMIC_RELAXED);                                       \
	if (unlikely(!var)) {                                                                                          \
		var = (__typeof__(name) *)runtime_symbol(#name);                                                       \
		__atomic_store_n(&real_##name, var, __ATOMIC_RELAXED);                                                 \
	}                                                                                                              \
	if (unlikely(!var)) {                                                                                          \
		return cudaErrorInsufficientDriver;                                                                    \
	}                                                                                                              \
	(void)0

static uint8_t runtime_device(void)
{
	__typeof__(cudaGetDevice) *get = __atomic_load_n(&real_cudaGetDevice, __ATOMIC_RELAXED);
	int d = -1;

	if (!get) {
		get = (__typeof__(cudaGetDevice) *)runtime_symbol("cudaGetDevice");
		__atomic_store_n(&real_cudaGetDevice, get, __ATOMIC_RELAXED);
	}
	if (get && get(&d) == cudaSuccess && d >= 0 && d < MT_NO_DEVICE)
		return (uint8_t)d;
	return MT_NO_DEVICE;
}

/* Before a retry: the failed call left its error as the runtime's last error, and the
 * application will not see that call fail. */
static void forget_error(void)
{
	__typeof__(cudaGetLastError) *get = __atomic_load_n(&real_cudaGetLastError, __ATOMIC_RELAXED);

	if (!get) {
		get = (__typeof__(cudaGetLastError) *)runtime_symbol("cudaGetLastError");
		__atomic_store_n(&real_cudaGetLastError, get, __ATOMIC_RELAXED);
	}
	if (get)
		get();
}

/* ---- --allocator=caching: blocks from memtap's cache, which records them ---- */

/* The runtime's own answer for a stream: one it has not refused before is asked about,
 * which also leaves its error as the last one when it is bad. */
static __thread cudaStream_t stream_known MTP_TLS;

static cudaError_t check_stream(cudaStream_t s)
{
	__typeof__(cudaStreamGetFlags) *flags = __atomic_load_n(&real_cudaStreamGetFlags, __ATOMIC_RELAXED);
	unsigned f;
	cudaError_t e;

	if (!s || s == stream_known)
		return cudaSuccess;
	if (!flags) {
		flags = (__typeof__(cudaStreamGetFlags) *)runtime_symbol("cudaStreamGetFlags");
		__atomic_store_n(&real_cudaStreamGetFlags, flags, __ATOMIC_RELAXED);
	}
	if (flags && (e = flags(s, &f)) != cudaSuccess)
		return e;
	stream_known = s;
	return cudaSuccess;
}

/* The cache ran out of memory (after releasing what it held and one retry): the runtime's
 * last error is set as its own failing call would set it, by a request no device can
 * serve, which nothing records. */
static void note_out_of_memory(void)
{
	__typeof__(cudaMalloc) *m = __atomic_load_n(&real_cudaMalloc, __ATOMIC_RELAXED);
	void *p;

	mtp_self.depth++;
	if (m)
		m(&p, SIZE_MAX);
	mtp_self.depth--;
}

/* True when the cache answered (*e); false when the runtime serves the call as without
 * the cache: a missing pointer is its to refuse, and so is anything the cache cannot do
 * but run out of memory (no context yet, memtap's own memory spent). */
static bool cached_malloc(void **devPtr, size_t size, cudaStream_t s, cudaError_t *e)
{
	int err;

	if (!devPtr)
		return false;
	if ((*e = check_stream(s)) != cudaSuccess)
		return true;
	mtp_self.depth++;
	err = mtp_allocator_malloc(devPtr, size, runtime_device(), (uintptr_t)s);
	mtp_self.depth--;
	if (err == MT_CACHE_OOM)
		note_out_of_memory();
	*e = err == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
	return err == 0 || err == MT_CACHE_OOM;
}

/* True when the block was the cache's and is freed (*e); a bad stream is refused first. */
static bool cached_free(void *ptr, cudaStream_t s, cudaError_t *e)
{
	bool mine;

	if ((*e = check_stream(s)) != cudaSuccess)
		return true;
	mtp_self.depth++;
	mine = mtp_allocator_free(ptr, (uintptr_t)s);
	mtp_self.depth--;
	return mine;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	REAL_OR_RETURN(real, cudaMalloc);
	cudaError_t e;
	if (unlikely(mtp_allocator_on()) && cached_malloc(devPtr, size, 0, &e))
		return e;
	bool rec = mtp_enter_memory(__builtin_return_address(0));
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(devPtr, size);
		if (!(rec && devPtr) || !mtp_hook_outcome(try_, e, MT_EV_ALLOC, MT_API_RUNTIME, runtime_device(),
							  e ? 0 : (uintptr_t)*devPtr, size, 0, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	REAL_OR_RETURN(real, cudaMallocPitch);
	bool rec = mtp_enter();
	cudaError_t e;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(devPtr, pitch, width, height);
		if (!(rec && devPtr && pitch) ||
		    !mtp_hook_outcome(try_, e, MT_EV_ALLOC, MT_API_PITCH, runtime_device(), e ? 0 : (uintptr_t)*devPtr,
				      e ? width * height : *pitch * height, 0, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMalloc3D(struct cudaPitchedPtr *p, struct cudaExtent extent)
{
	REAL_OR_RETURN(real, cudaMalloc3D);
	bool rec = mtp_enter();
	cudaError_t e;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(p, extent);
		if (!(rec && p) ||
		    !mtp_hook_outcome(try_, e, MT_EV_ALLOC, MT_API_PITCH, runtime_device(), e ? 0 : (uintptr_t)p->ptr,
				      (e ? extent.width : p->pitch) * extent.height * extent.depth, 0, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	REAL_OR_RETURN(real, cudaMallocManaged);
	bool rec = mtp_enter();
	cudaError_t e;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(devPtr, size, flags);
		if (!(rec && devPtr) || !mtp_hook_outcome(try_, e, MT_EV_MANAGED_ALLOC, MT_API_MANAGED,
							  runtime_device(), e ? 0 : (uintptr_t)*devPtr, size, flags, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	cudaError_t e;
	if (unlikely(mtp_allocator_on()) && cached_free(devPtr, 0, &e))
		return e;
	REAL_OR_RETURN(real, cudaFree);
	bool rec = mtp_enter_memory(__builtin_return_address(0)) && devPtr &&
		   !mtp_graph_freed((uintptr_t)devPtr); /* graph memory: graph.c */
	if (rec)
		mtp_hook_gone(MT_EV_FREE, (uintptr_t)devPtr, 0, 0);
	e = real(devPtr);
	if (rec)
		mtp_hook_release_failed(e, MT_EV_FREE, (uintptr_t)devPtr);
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	REAL_OR_RETURN(real, cudaHostAlloc);
	bool rec = mtp_enter();
	cudaError_t e;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(pHost, size, flags);
		if (!(rec && pHost) || !mtp_hook_outcome(try_, e, MT_EV_HOST_ALLOC, MT_API_HOST, MT_NO_DEVICE,
							 e ? 0 : (uintptr_t)*pHost, size, flags, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
	REAL_OR_RETURN(real, cudaMallocHost);
	bool rec = mtp_enter();
	cudaError_t e;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(ptr, size);
		if (!(rec && ptr) || !mtp_hook_outcome(try_, e, MT_EV_HOST_ALLOC, MT_API_HOST, MT_NO_DEVICE,
						       e ? 0 : (uintptr_t)*ptr, size, 0, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
	REAL_OR_RETURN(real, cudaFreeHost);
	bool rec = mtp_enter();
	if (rec && ptr)
		mtp_hook_gone(MT_EV_HOST_FREE, (uintptr_t)ptr, 0, 0);
	cudaError_t e = real(ptr);
	if (rec && ptr)
		mtp_hook_release_failed(e, MT_EV_HOST_FREE, (uintptr_t)ptr);
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	REAL_OR_RETURN(real, cudaMemGetInfo);
	bool rec = mtp_enter();
	cudaError_t e = real(free_bytes, total);
	if (rec && e == cudaSuccess) {
		struct mt_event ev = {.kind = MT_EV_MEMINFO,
				      .device = runtime_device(),
				      .aux = free_bytes ? *free_bytes : 0,
				      .aux2 = total ? *total : 0};
		mtp_record(&ev, false);
	}
	mtp_leave();
	return e;
}

/* ---- stream-ordered ---- */

/* On a capturing stream, stream-ordered calls add a graph's memory nodes (graph.c). */
static cudaError_t malloc_async(const void *caller, bool ptsz, __typeof__(cudaMallocAsync) *real, void **devPtr,
				size_t size, cudaStream_t s)
{
	cudaError_t e;
	if (unlikely(mtp_allocator_on()) && cached_malloc(devPtr, size, s, &e))
		return e;
	bool rec = mtp_enter_at(caller);
	CUgraph g = rec ? mtp_graph_capturing(s, ptsz) : NULL;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(devPtr, size, s);
		if (g && e == cudaSuccess && devPtr) {
			mtp_graph_alloc_node(g, (uintptr_t)*devPtr, size, runtime_device());
			break;
		}
		if (!(rec && devPtr) || !mtp_hook_outcome(try_, e, MT_EV_ALLOC, MT_API_ASYNC, runtime_device(),
							  e ? 0 : (uintptr_t)*devPtr, size, (uintptr_t)s, 0))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
{
	REAL_OR_RETURN(real, cudaMallocAsync);
	return malloc_async(__builtin_return_address(0), false, real, devPtr, size, s);
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t s)
{
	REAL_OR_RETURN(real, cudaMallocAsync_ptsz);
	return malloc_async(__builtin_return_address(0), true, real, devPtr, size, s);
}

static cudaError_t free_async(const void *caller, bool ptsz, __typeof__(cudaFreeAsync) *real, void *devPtr,
			      cudaStream_t s)
{
	cudaError_t e;
	if (unlikely(mtp_allocator_on()) && cached_free(devPtr, s, &e))
		return e;
	bool rec = mtp_enter_at(caller) && devPtr;
	CUgraph g = rec ? mtp_graph_capturing(s, ptsz) : NULL;
	bool node = g && mtp_graph_owns((uintptr_t)devPtr);
	if (rec && !node && !mtp_graph_freed((uintptr_t)devPtr))
		mtp_hook_gone(MT_EV_FREE, (uintptr_t)devPtr, 0, (uintptr_t)s);
	else
		rec = false; /* graph memory: recorded when it goes back (graph.c) */
	e = real(devPtr, s);
	if (node && e == cudaSuccess)
		mtp_graph_free_node(g, (uintptr_t)devPtr);
	if (rec)
		mtp_hook_release_failed(e, MT_EV_FREE, (uintptr_t)devPtr);
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t s)
{
	REAL_OR_RETURN(real, cudaFreeAsync);
	return free_async(__builtin_return_address(0), false, real, devPtr, s);
}

MTP_EXPORT cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t s)
{
	REAL_OR_RETURN(real, cudaFreeAsync_ptsz);
	return free_async(__builtin_return_address(0), true, real, devPtr, s);
}

static cudaError_t malloc_from_pool(const void *caller, bool ptsz, __typeof__(cudaMallocFromPoolAsync) *real,
				    void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
	bool rec = mtp_enter_at(caller);
	CUgraph g = rec ? mtp_graph_capturing(s, ptsz) : NULL;
	cudaError_t e;
	for (int try_ = 0;; try_++) { /* once more only if out of memory and a policy's on_oom asks */
		e = real(ptr, size, pool, s);
		if (g && e == cudaSuccess && ptr) {
			mtp_graph_alloc_node(g, (uintptr_t)*ptr, size, runtime_device());
			break;
		}
		if (!(rec && ptr) || !mtp_hook_outcome(try_, e, MT_EV_ALLOC, MT_API_POOL, runtime_device(),
						       e ? 0 : (uintptr_t)*ptr, size, (uintptr_t)s, (uintptr_t)pool))
			break;
		forget_error(); /* the failed call's error is not the application's */
	}
	mtp_leave();
	return e;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
	REAL_OR_RETURN(real, cudaMallocFromPoolAsync);
	return malloc_from_pool(__builtin_return_address(0), false, real, ptr, size, pool, s);
}

MTP_EXPORT cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
							      cudaStream_t s)
{
	REAL_OR_RETURN(real, cudaMallocFromPoolAsync_ptsz);
	return malloc_from_pool(__builtin_return_address(0), true, real, ptr, size, pool, s);
}

/* ---- driver entry points: PyTorch's expandable segments and NCCL get cuMemCreate,
 * cuMemMap, cuMemUnmap and cuMemRelease this way. The runtime may serve them through the
 * cuGetProcAddress it looked up (memtap's wrapper already) or by a way of its own (the
 * driver's private export table): either way the caller gets memtap's wrapper of the
 * ABI the version names. ---- */

static cudaError_t entry_point(const char *symbol, void **fn, unsigned version, unsigned long long flags, bool ptsz,
			       cudaError_t e)
{
	/* the runtime's default is the default stream it was built for: the _ptsz entries' per-thread one */
	bool per_thread = flags == cudaEnablePerThreadDefaultStream || (flags == cudaEnableDefault && ptsz);

	if (e == cudaSuccess && fn && *fn)
		mtp_procaddr_substitute(symbol, fn, (int)version,
					per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0);
	return e;
}

/* the version the entries without one use: the runtime's own */
static unsigned runtime_version(void)
{
	__typeof__(cudaRuntimeGetVersion) *get = __atomic_load_n(&real_cudaRuntimeGetVersion, __ATOMIC_RELAXED);
	int v = 0;

	if (!get) {
		get = (__typeof__(cudaRuntimeGetVersion) *)runtime_symbol("cudaRuntimeGetVersion");
		__atomic_store_n(&real_cudaRuntimeGetVersion, get, __ATOMIC_RELAXED);
	}
	return get && get(&v) == cudaSuccess && v > 0 ? (unsigned)v : CUDART_VERSION;
}

MTP_EXPORT cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
								  unsigned long long flags,
								  enum cudaDriverEntryPointQueryResult *status)
{
	REAL_OR_RETURN(real, cudaGetDriverEntryPointByVersion);
	return entry_point(symbol, fn, version, flags, false, real(symbol, fn, version, flags, status));
}

MTP_EXPORT cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn, unsigned version,
								       unsigned long long flags,
								       enum cudaDriverEntryPointQueryResult *status)
{
	REAL_OR_RETURN(real, cudaGetDriverEntryPointByVersion_ptsz);
	return entry_point(symbol, fn, version, flags, true, real(symbol, fn, version, flags, status));
}

MTP_EXPORT cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
							 enum cudaDriverEntryPointQueryResult *status)
{
	REAL_OR_RETURN(real, cudaGetDriverEntryPoint);
	return entry_point(symbol, fn, runtime_version(), flags, false, real(symbol, fn, flags, status));
}

MTP_EXPORT cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
							      enum cudaDriverEntryPointQueryResult *status)
{
	REAL_OR_RETURN(real, cudaGetDriverEntryPoint_ptsz);
	return entry_point(symbol, fn, runtime_version(), flags, true, real(symbol, fn, flags, status));
}
