/* memtap's caching allocator inside the job: the CUDA driver as the engine's backend,
 * PyTorch's pluggable-allocator entry points (CUDAPluggableAllocator), and the cache
 * behind cudaMalloc/cudaFree/cudaMallocAsync for `memtap run --allocator=caching`.
 * Every block and segment change is recorded (blocks as ALLOC/FREE with api BLOCK and
 * their rounded size, segments as SEGMENT_ALLOC/FREE), so reports see exact
 * fragmentation. The driver is called through the real entry points: nothing the
 * allocator does is recorded twice. */
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "recorder/allocator.h"
#include "recorder/hooks.h"

static struct mt_cache *engines[MT_NO_DEVICE];
static int nengines; /* one past the highest device with an engine */
static pthread_mutex_t engines_lock = PTHREAD_MUTEX_INITIALIZER;
static bool warned;

/* Driver functions memtap does not hook, looked up once. */
enum { EV_CREATE, EV_RECORD, EV_QUERY, EV_DESTROY, STREAM_SYNC, CTX_SYNC, TOTAL_MEM, INIT, PRIMARY, SET_CURRENT, NFN };
static const char *const fn_names[NFN] = {
    "cuEventCreate",	"cuEventRecord",       "cuEventQuery", "cuEventDestroy_v2",	   "cuStreamSynchronize",
    "cuCtxSynchronize", "cuDeviceTotalMem_v2", "cuInit",       "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"};
static void *fn[NFN];

static void *driver(int which)
{
	return mtp_lookup_once(&fn[which], fn_names[which]);
}

/* A thread that never made the runtime set its context (cudaMalloc as its first CUDA
 * call): the device's primary context, as the runtime would. */
static bool ensure_context(int device)
{
	CUresult (*init)(unsigned) = driver(INIT);
	CUresult (*retain)(CUcontext *, CUdevice) = driver(PRIMARY);
	CUresult (*set)(CUcontext) = driver(SET_CURRENT);
	CUcontext ctx;

	return init && retain && set && init(0) == CUDA_SUCCESS && retain(&ctx, device) == CUDA_SUCCESS &&
	       set(ctx) == CUDA_SUCCESS;
}

#define IN_CONTEXT(r, device, call)                                                                                    \
	do {                                                                                                           \
		(r) = (call);                                                                                          \
		if (((r) == CUDA_ERROR_INVALID_CONTEXT || (r) == CUDA_ERROR_NOT_INITIALIZED) &&                        \
		    ensure_context(device))                                                                            \
			(r) = (call);                                                                                  \
	} while (0)

static int result(CUresult r)
{
	return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OUT_OF_MEMORY ? MT_CACHE_OOM : EIO;
}

static int drv_seg_alloc(void *ctx, int device, uint64_t size, uint64_t *addr)
{
	CUdeviceptr p = 0;
	CUresult r;

	(void)ctx;
	IN_CONTEXT(r, device, MTP_CAPPED(size, MTP_REAL(cuMemAlloc_v2)(&p, size)));
	*addr = p;
	return result(r);
}

static void drv_seg_free(void *ctx, int device, uint64_t addr, uint64_t size)
{
	(void)ctx, (void)device, (void)size;
	MTP_REAL(cuMemFree_v2)(addr);
}

static int drv_va_reserve(void *ctx, int device, uint64_t size, uint64_t *addr)
{
	CUdeviceptr p = 0;
	CUresult r;

	(void)ctx;
	IN_CONTEXT(r, device, MTP_REAL(cuMemAddressReserve)(&p, size, 0, 0, 0));
	*addr = p;
	return result(r);
}

static void drv_va_free(void *ctx, int device, uint64_t addr, uint64_t size)
{
	(void)ctx, (void)device;
	MTP_REAL(cuMemAddressFree)(addr, size);
}

static int drv_phys_create(void *ctx, int device, uint64_t size, uint64_t *handle)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
	CUmemGenericAllocationHandle h = 0;
	CUresult r;

	(void)ctx;
	IN_CONTEXT(r, device, MTP_CAPPED(size, MTP_REAL(cuMemCreate)(&h, size, &prop, 0)));
	*handle = h;
	return result(r);
}

static void drv_phys_release(void *ctx, int device, uint64_t handle)
{
	(void)ctx, (void)device;
	MTP_REAL(cuMemRelease)(handle);
}

/* A run of pages: one cuMemMap per page (a mapping is one handle) and one cuMemSetAccess
 * for the whole run, as PyTorch's expandable segments do. */
static int drv_map(void *ctx, int device, uint64_t addr, uint64_t page, const uint64_t *handles, uint64_t n)
{
	CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
				  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUresult r = CUDA_SUCCESS;
	uint64_t i = 0;

	(void)ctx;
	while (i < n && (r = MTP_REAL(cuMemMap)(addr + i * page, page, 0, handles[i], 0)) == CUDA_SUCCESS)
		i++;
	if (r == CUDA_SUCCESS)
		r = MTP_REAL(cuMemSetAccess)(addr, n * page, &access, 1);
	if (r != CUDA_SUCCESS)
		while (i-- > 0)
			MTP_REAL(cuMemUnmap)(addr + i * page, page);
	return result(r);
}

static void drv_unmap(void *ctx, int device, uint64_t addr, uint64_t page, uint64_t n)
{
	(void)ctx, (void)device;
	for (uint64_t i = 0; i < n; i++)
		MTP_REAL(cuMemUnmap)(addr + i * page, page);
}

static void drv_stream_sync(void *ctx, int device, uint64_t stream)
{
	CUresult (*stream_sync)(CUstream) = driver(STREAM_SYNC);
	CUresult (*ctx_sync)(void) = driver(CTX_SYNC);

	(void)ctx, (void)device;
	if (stream && stream_sync)
		stream_sync((CUstream)stream);
	else if (ctx_sync)
		ctx_sync();
}

static uint64_t drv_event_record(void *ctx, int device, uint64_t stream)
{
	CUresult (*create)(CUevent *, unsigned) = driver(EV_CREATE);
	CUresult (*record)(CUevent, CUstream) = driver(EV_RECORD);
	CUresult (*destroy)(CUevent) = driver(EV_DESTROY);
	CUevent ev = NULL;

	(void)ctx, (void)device;
	if (!create || !record || !destroy || create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		return 0;
	if (record(ev, (CUstream)stream) != CUDA_SUCCESS) {
		destroy(ev);
		return 0;
	}
	return (uintptr_t)ev;
}

static bool drv_event_done(void *ctx, uint64_t event)
{
	CUresult (*query)(CUevent) = driver(EV_QUERY);
	CUresult (*destroy)(CUevent) = driver(EV_DESTROY);

	(void)ctx;
	if (query && query((CUevent)event) == CUDA_ERROR_NOT_READY)
		return false;
	if (destroy)
		destroy((CUevent)event);
	return true;
}

/* Recorded where the change happened; the stack skips memtap's own frames. */
static void drv_change(void *ctx, int device, enum mt_cache_change what, uint64_t addr, uint64_t size,
		       uint64_t requested, uint64_t stream, bool mapped)
{
	(void)ctx;
	if (mtp_state_now() < MTP_ON)
		return;
	switch (what) {
	case MT_CACHE_BLOCK_ALLOC:
		mtp_hook_made(MT_EV_ALLOC, MT_API_BLOCK, (uint8_t)device, addr, requested, stream, size);
		break;
	case MT_CACHE_BLOCK_FREE:
		mtp_hook_gone(MT_EV_FREE, addr, size, stream);
		break;
	case MT_CACHE_SEGMENT_ALLOC:
		mtp_hook_made(MT_EV_SEGMENT_ALLOC, mapped ? MT_SEG_MAPPED : 0, (uint8_t)device, addr, size, stream, 0);
		break;
	case MT_CACHE_SEGMENT_FREE: {
		struct mt_event e = {.kind = MT_EV_SEGMENT_FREE,
				     .flags = mapped ? MT_SEG_MAPPED : 0,
				     .device = (uint8_t)device,
				     .addr = addr,
				     .size = size};

		mtp_record(&e, false);
		break;
	}
	}
}

static void *drv_mem_alloc(void *ctx, size_t bytes)
{
	(void)ctx;
	return mtp_map(bytes);
}

static void drv_mem_free(void *ctx, void *p, size_t bytes)
{
	(void)ctx;
	mtp_unmap(p, bytes);
}

static const struct mt_cache_backend driver_backend = {
    .seg_alloc = drv_seg_alloc,
    .seg_free = drv_seg_free,
    .va_reserve = drv_va_reserve,
    .va_free = drv_va_free,
    .phys_create = drv_phys_create,
    .phys_release = drv_phys_release,
    .map = drv_map,
    .unmap = drv_unmap,
    .event_record = drv_event_record,
    .event_done = drv_event_done,
    .stream_sync = drv_stream_sync,
    .change = drv_change,
    .mem_alloc = drv_mem_alloc,
    .mem_free = drv_mem_free,
};

/* Each device's config: the job's options (alloc_policy, alloc_conf), then what policies
 * set (memtap.allocator). An engine starts with its device's. Under engines_lock. */
static struct mt_cache_config configs[MT_NO_DEVICE];
static bool configs_ready;
#define POLICIES "native, memtap, memtap-vmm or bump"

static void ready_configs(void)
{
	const char *bad;

	if (configs_ready)
		return;
	if (mt_cache_preset(&configs[0],
			    mtp_opt.alloc_policy && mtp_opt.alloc_policy[0] ? mtp_opt.alloc_policy : "memtap-vmm"))
		mtp_warn("alloc_policy '%s' is not " POLICIES ": using memtap-vmm", mtp_opt.alloc_policy),
		    mt_cache_preset(&configs[0], "memtap-vmm");
	if (mt_cache_configure(&configs[0], mtp_opt.alloc_conf, &bad))
		mtp_warn("alloc_conf: cannot use '%s'; the rest is ignored", bad);
	for (int d = 1; d < MT_NO_DEVICE; d++)
		configs[d] = configs[0];
	configs_ready = true;
}

/* The device's engine, made on first use. */
static MTP_NOINLINE struct mt_cache *make_engine(int device)
{
	struct mt_cache *m;

	char text[400];
	bool made = false;

	pthread_mutex_lock(&engines_lock);
	ready_configs();
	if (!(m = engines[device])) {
		if (mt_cache_new(&m, &configs[device], &driver_backend, device) == 0) {
			__atomic_store_n(&engines[device], m, __ATOMIC_RELEASE);
			if (device >= nengines)
				__atomic_store_n(&nengines, device + 1, __ATOMIC_RELEASE);
			made = true;
			int k = snprintf(text, sizeof text, "memtap.allocator %d start ", device);
			mt_cache_describe(&configs[device], text + k, sizeof text - (size_t)k);
		} else {
			m = NULL;
		}
	}
	pthread_mutex_unlock(&engines_lock);
	if (made) /* outside the lock: recording may wait for the writer, whose policies take it */
		mtp_note(text);
	return m;
}

int mtp_allocator_set(int device, const char *policy, const char *conf, char *why, size_t n)
{
	static struct mt_cache_config c[MT_NO_DEVICE]; /* under engines_lock, off the stack */
	const char *bad = NULL;
	int err = 0;

	pthread_mutex_lock(&engines_lock);
	ready_configs();
	/* every device's new config first, so a refusal changes none */
	for (int d = 0; d < MT_NO_DEVICE && !err; d++) {
		if (device >= 0 && d != device)
			continue;
		if (engines[d])
			mt_cache_current(engines[d], &c[d]);
		else
			c[d] = configs[d];
		if (policy) {
			uint64_t limit = c[d].limit; /* a memory fraction or an earlier limit_mb stays */

			if (mt_cache_preset(&c[d], policy)) {
				snprintf(why, n, "policy '%s' is not " POLICIES, policy);
				err = EINVAL;
				break;
			}
			c[d].limit = limit;
		}
		if (mt_cache_configure(&c[d], conf, &bad)) {
			snprintf(why, n, "cannot use '%.*s'", (int)strcspn(bad, ","), bad);
			err = EINVAL;
		} else if (engines[d] && c[d].cache != configs[d].cache) {
			snprintf(why, n, "device %d's allocator is running: caching cannot be turned %s", d,
				 c[d].cache ? "on" : "off");
			err = EINVAL;
		}
	}
	for (int d = 0; d < MT_NO_DEVICE && !err; d++) {
		if (device >= 0 && d != device)
			continue;
		if (engines[d] && (err = mt_cache_reconfigure(engines[d], &c[d])) != 0)
			snprintf(why, n, "device %d: no memory for its new config", d);
		else
			configs[d] = c[d];
	}
	pthread_mutex_unlock(&engines_lock);
	return err;
}

bool mtp_allocator_stats(int device, struct mt_cache_stats *s, uint64_t *largest_free, char *conf, size_t n)
{
	struct mt_cache *m =
	    device >= 0 && device < MT_NO_DEVICE ? __atomic_load_n(&engines[device], __ATOMIC_ACQUIRE) : NULL;
	struct mt_cache_config c;

	if (!m)
		return false;
	mt_cache_stats(m, s);
	*largest_free = mt_cache_largest_free(m);
	mt_cache_current(m, &c);
	mt_cache_describe(&c, conf, n);
	return true;
}

static struct mt_cache *engine(int device)
{
	struct mt_cache *m;

	if (device < 0 || device >= MT_NO_DEVICE)
		return NULL;
	m = __atomic_load_n(&engines[device], __ATOMIC_ACQUIRE);
	return m ? m : make_engine(device);
}

int mtp_allocator_malloc(void **ptr, size_t size, int device, uint64_t stream)
{
	struct mt_cache *m = engine(device);
	uint64_t addr = 0;
	int err = ENOMEM;

	for (int try_ = 0; m; try_++) {
		if ((err = mt_cache_alloc(m, size, stream, mtp_current_tag(), &addr)) == 0 || size == 0)
			break;
		if (mtp_state_now() < MTP_ON || !mtp_hook_failed(MT_EV_ALLOC_FAILED, MT_API_BLOCK, (uint8_t)device,
								 size, CUDA_ERROR_OUT_OF_MEMORY, try_))
			break;
	}
	*ptr = (void *)(uintptr_t)addr;
	return err;
}

/* ptr back to the engine that handed it out, trying `device`'s first, after the work
 * `stream` queued when not 0. false when none did. */
static bool free_in_owner(void *ptr, int device, uint64_t stream)
{
	int n = __atomic_load_n(&nengines, __ATOMIC_ACQUIRE);

	for (int d = device >= 0 && device < n ? device : 0, tried = 0; tried < n; tried++, d = (d + 1) % n) {
		struct mt_cache *m = __atomic_load_n(&engines[d], __ATOMIC_ACQUIRE);

		if (m && (!stream || mt_cache_record_stream(m, (uintptr_t)ptr, stream) == 0) &&
		    mt_cache_free(m, (uintptr_t)ptr) == 0)
			return true;
	}
	return false;
}

bool mtp_allocator_free(void *ptr, uint64_t stream)
{
	return ptr && free_in_owner(ptr, -1, stream);
}

/* ---- PyTorch's CUDAPluggableAllocator entry points ---- */

MTP_EXPORT void *memtap_alloc(size_t size, int device, CUstream stream)
{
	void *p = NULL;

	mtp_self.depth++;
	mtp_allocator_malloc(&p, size, device, (uintptr_t)stream);
	mtp_self.depth--;
	return p;
}

MTP_EXPORT void memtap_free(void *ptr, size_t size, int device, CUstream stream)
{
	(void)size, (void)stream; /* the block knows both */
	if (!ptr)
		return;
	mtp_self.depth++;
	if (!free_in_owner(ptr, device, 0) && !__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		mtp_warn("memtap_free: %p is not memtap's (reported once)", ptr);
	mtp_self.depth--;
}

MTP_EXPORT void memtap_init(int device_count)
{
	for (int d = 0; d < device_count && d < MT_NO_DEVICE; d++)
		engine(d);
}

/* torch.cuda.empty_cache() */
MTP_EXPORT void memtap_reset(void)
{
	for (int d = 0, n = __atomic_load_n(&nengines, __ATOMIC_ACQUIRE); d < n; d++) {
		struct mt_cache *m = __atomic_load_n(&engines[d], __ATOMIC_ACQUIRE);

		if (m)
			mt_cache_release(m);
	}
}

/* torch.cuda.set_per_process_memory_fraction */
MTP_EXPORT void memtap_memory_fraction(double fraction, int device)
{
	CUresult (*total_mem)(size_t *, CUdevice) = driver(TOTAL_MEM);
	struct mt_cache *m = engine(device);
	size_t total = 0;

	if (!m || fraction <= 0 || fraction > 1 || !total_mem || total_mem(&total, (CUdevice)device) != CUDA_SUCCESS)
		return;
	mt_cache_set_limit(m, (uint64_t)(fraction * (double)total));
}

/* Tensor.record_stream: the block is not reused before that stream's queued work ends. */
MTP_EXPORT void memtap_record_stream(void *ptr, CUstream stream)
{
	int n = __atomic_load_n(&nengines, __ATOMIC_ACQUIRE);

	for (int d = 0; d < n; d++) {
		struct mt_cache *m = __atomic_load_n(&engines[d], __ATOMIC_ACQUIRE);

		if (m && mt_cache_record_stream(m, (uintptr_t)ptr, (uintptr_t)stream) == 0)
			return;
	}
}
