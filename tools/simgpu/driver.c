/* simgpu driver core: initialisation from SIMGPU_* variables, devices, contexts,
 * streams, profiler control, error strings and the version- and flag-aware
 * cuGetProcAddress. Memory lives in memory.c, pool.c and vmm.c. */
#include "sim.h"

#include <cudaProfiler.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/units.h"

struct sim_state sim = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define CTX_STACK 32
static __thread CUcontext ctx_stack[CTX_STACK];
static __thread int ctx_depth; /* ctx_stack[ctx_depth] is the current context */

/* Device i's memory is placed at a fixed address when possible: same run, same pointers. */
#define DEVICE_SPACE_BASE 0x200000000000ull
#define DEVICE_SPACE_SLOT 0x40000000000ull /* 4 TiB apart */
#define VA_SPACE_BASE 0x180000000000ull
#define VA_SPACE_MAX 0x40000000000ull

/* ThreadSanitizer kills a process that maps outside its application ranges, so under
 * it the spaces go wherever the kernel puts them (and addresses vary between runs). */
#ifdef __SANITIZE_THREAD__
#define FIXED(addr) ((uintptr_t)0)
#define SPAN_FACTOR 1 /* its application ranges are 1.5 TiB: reserve no more than needed */
#define VA_FACTOR 1
#else
#define FIXED(addr) ((uintptr_t)(addr))
#define SPAN_FACTOR 2
#define VA_FACTOR 4
#endif

void sim_lock(void)
{
	pthread_mutex_lock(&sim.lock);
}

void sim_unlock(void)
{
	pthread_mutex_unlock(&sim.lock);
}

CUresult sim_check_init(void)
{
	return sim.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sim_current_device(int *dev)
{
	CUcontext c = ctx_stack[ctx_depth];

	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = c->device;
	return CUDA_SUCCESS;
}

bool sim_inject_failure(size_t size)
{
	sim.alloc_calls++;
	if (sim.fail_nth && sim.alloc_calls == sim.fail_nth)
		return true;
	return sim.fail_above && size > sim.fail_above;
}

/* ---- initialisation -------------------------------------------------------------- */

static void warn(const char *var, const char *value, const char *why)
{
	fprintf(stderr, "simgpu: ignoring %s=%s: %s\n", var, value, why);
}

static uint64_t env_size(const char *var, uint64_t dflt)
{
	const char *v = getenv(var);
	uint64_t n;

	if (!v || !*v)
		return dflt;
	if (mt_parse_size(v, &n) != 0) {
		warn(var, v, "not a size (examples: 80GiB, 512M, 4096)");
		return dflt;
	}
	return n;
}

/* Item i of a comma-separated list, or the last item when the list is shorter. */
static void list_item(const char *list, int i, char *out, size_t len)
{
	const char *p = list;

	for (int k = 0; k < i; k++) {
		const char *c = strchr(p, ',');
		if (!c)
			break;
		p = c + 1;
	}
	size_t n = strcspn(p, ",");
	if (n >= len)
		n = len - 1;
	memcpy(out, p, n);
	out[n] = '\0';
}

static uint64_t device_capacity(int i)
{
	const char *v = getenv("SIMGPU_MEM");
	char item[64];
	uint64_t n;

	if (!v || !*v)
		return 80ull << 30;
	list_item(v, i, item, sizeof item);
	if (mt_parse_size(item, &n) != 0 || n < SIM_GRANULE) {
		warn("SIMGPU_MEM", v, "each entry must be a size of at least 2MiB (examples: 80GiB, 16GiB,40GiB)");
		return 80ull << 30;
	}
	return n;
}

static int device_count(void)
{
	const char *v = getenv("SIMGPU_DEVICES");
	char *end;
	long n;

	if (!v || !*v)
		return 1;
	n = strtol(v, &end, 10);
	if (*end || n < 0 || n > SIM_MAX_DEVICES) {
		warn("SIMGPU_DEVICES", v, "must be a whole number from 0 to 16");
		return 1;
	}
	return (int)n;
}

static CUresult init_locked(void)
{
	const char *names = getenv("SIMGPU_NAME");
	size_t va_size = 64ull << 30;

	sim.ndev = device_count();
	sim.fail_nth = env_size("SIMGPU_FAIL_NTH", 0);
	sim.fail_above = env_size("SIMGPU_FAIL_ABOVE", 0);
	sim.context_mem = env_size("SIMGPU_CONTEXT_MEM", 0);
	for (int i = 0; i < sim.ndev; i++) {
		struct sim_device *d = &sim.dev[i];
		size_t cap = device_capacity(i);
		/* twice the capacity, so address-space fragmentation never causes an OOM that capacity would not */
		size_t span = SPAN_FACTOR * cap + (1ull << 30);

		if (span > DEVICE_SPACE_SLOT)
			span = DEVICE_SPACE_SLOT;
		if (sim_space_init(&d->space, FIXED(DEVICE_SPACE_BASE + (uintptr_t)i * DEVICE_SPACE_SLOT), span))
			return CUDA_ERROR_OUT_OF_MEMORY;
		d->capacity = cap;
		va_size += VA_FACTOR * cap;
		if (names && *names) {
			list_item(names, i, d->name, sizeof d->name);
		} else {
			char sz[32];
			snprintf(d->name, sizeof d->name, "simgpu %s", mt_format_size(cap, sz, sizeof sz));
		}
		d->primary = (struct CUctx_st){.device = i, .primary = true};
		sim_pool_init(&d->default_pool, i, true);
		d->current_pool = &d->default_pool;
	}
	/* room for reservations of four times the memory there is (once, under TSan) */
	if (sim_space_init(&sim.va, FIXED(VA_SPACE_BASE), va_size < VA_SPACE_MAX ? va_size : VA_SPACE_MAX))
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim.initialized = true;
	return CUDA_SUCCESS;
}

/* As the real driver does at the first cuInit: load the tool named by
 * CUDA_INJECTION64_PATH and call its InitializeInjection (CUPTI-based tools). */
static void load_injection(void)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");
	void *lib;
	int (*init)(void);

	if (!path || !*path)
		return;
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	init = lib ? (int (*)(void))dlsym(lib, "InitializeInjection") : NULL;
	if (!init) {
		fprintf(stderr, "simgpu: CUDA_INJECTION64_PATH=%s: %s\n", path,
			lib ? "no InitializeInjection" : dlerror());
		return;
	}
	init();
}

CUresult CUDAAPI cuInit(unsigned int flags)
{
	static pthread_once_t injection = PTHREAD_ONCE_INIT;
	CUresult r = CUDA_SUCCESS;

	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim.initialized)
		r = init_locked();
	sim_unlock();
	if (r == CUDA_SUCCESS)
		pthread_once(&injection, load_injection);
	return r;
}

CUresult CUDAAPI cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = SIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

/* ---- devices ---------------------------------------------------------------------- */

static CUresult check_device(CUdevice dev)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	return dev >= 0 && dev < sim.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult r = check_device(ordinal);

	if (r == CUDA_SUCCESS && !device)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*device = ordinal;
	return r;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = sim.ndev;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", sim.dev[dev].name);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = sim.dev[dev].capacity;
	return CUDA_SUCCESS;
}

/* The attributes a memory tool or training framework asks for; an H100-like device. */
static const struct {
	CUdevice_attribute attr;
	int value;
} attributes[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 << 20},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
};

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	if (attrib == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID) {
		*pi = dev;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < sizeof attributes / sizeof attributes[0]; i++) {
		if (attributes[i].attr == attrib) {
			*pi = attributes[i].value;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* ---- contexts ----------------------------------------------------------------------- */

static bool is_context(CUcontext c)
{
	for (int i = 0; i < sim.ndev; i++)
		if (c == &sim.dev[i].primary)
			return true;
	return false;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	/* a context takes memory no allocation call shows, as a real one does */
	if (sim.dev[dev].primary_refs++ == 0)
		sim.dev[dev].used += sim.context_mem < sim.dev[dev].capacity ? sim.context_mem : 0;
	sim_unlock();
	*pctx = &sim.dev[dev].primary;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (sim.dev[dev].primary_refs > 0) {
		if (--sim.dev[dev].primary_refs == 0)
			sim.dev[dev].used -= sim.context_mem < sim.dev[dev].capacity ? sim.context_mem : 0;
	} else
		r = CUDA_ERROR_INVALID_CONTEXT;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx && !is_context(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_stack[ctx_depth] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx || !is_context(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth + 1 >= CTX_STACK)
		return CUDA_ERROR_INVALID_VALUE;
	ctx_stack[++ctx_depth] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx_stack[ctx_depth])
		return CUDA_ERROR_INVALID_CONTEXT;
	if (pctx)
		*pctx = ctx_stack[ctx_depth];
	if (ctx_depth > 0)
		ctx_depth--;
	else
		ctx_stack[0] = NULL;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r == CUDA_SUCCESS && !device)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*device = dev;
	return r;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r == CUDA_SUCCESS) {
		sim_lock();
		sim_pools_sync(dev);
		sim_unlock();
	}
	return r;
}

/* ---- streams ------------------------------------------------------------------------ */

bool sim_valid_stream(CUstream s)
{
	return !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
	       sim_map_get(&sim.streams, (uintptr_t)s) != NULL;
}

CUresult CUDAAPI cuStreamCreate(CUstream *ph, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	s = malloc(sizeof *s);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*s = (struct CUstream_st){.device = dev, .flags = flags};
	sim_lock();
	if (sim_map_put(&sim.streams, (uintptr_t)s, s)) {
		free(s);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*ph = s;
	return r;
}

CUresult CUDAAPI cuStreamDestroy(CUstream h)
{
	struct CUstream_st *s;

	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	sim_lock();
	s = sim_map_del(&sim.streams, (uintptr_t)h);
	sim_unlock();
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	free(s);
	return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream h)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		struct CUstream_st *s = sim_map_get(&sim.streams, (uintptr_t)h);
		if (s) {
			s->busy = false;
			s->syncs++;
		}
		sim_pools_sync(s ? s->device : dev);
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h)
{
	return stream_sync(h);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h)
{
	return stream_sync(h ? h : CU_STREAM_PER_THREAD);
}

static CUresult stream_flags(CUstream h, unsigned int *flags)
{
	CUresult r = CUDA_SUCCESS;

	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		struct CUstream_st *s = sim_map_get(&sim.streams, (uintptr_t)h);
		*flags = s ? s->flags : CU_STREAM_DEFAULT;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream h, unsigned int *flags)
{
	return stream_flags(h, flags);
}

CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int *flags)
{
	return stream_flags(h ? h : CU_STREAM_PER_THREAD, flags);
}

/* ---- events: complete at once, unless recorded on a stream a test marked busy ------- */

/* For tests: `stream` has work queued until it is synchronized. */
SIM_EXPORT void simgpu_stream_busy(CUstream h)
{
	struct CUstream_st *s;

	sim_lock();
	if ((s = sim_map_get(&sim.streams, (uintptr_t)h)) != NULL)
		s->busy = true;
	sim_unlock();
}

CUresult CUDAAPI cuEventCreate(CUevent *ph, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	(void)flags;
	if (r != CUDA_SUCCESS)
		return r;
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(*ph = calloc(1, sizeof **ph)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent ev, CUstream h)
{
	struct CUstream_st *s;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_lock();
	s = h ? sim_map_get(&sim.streams, (uintptr_t)h) : NULL;
	ev->stream = s && s->busy ? (uintptr_t)h : 0;
	ev->syncs = s ? s->syncs : 0;
	sim_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent ev)
{
	struct CUstream_st *s;
	CUresult r;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_lock();
	s = ev->stream ? sim_map_get(&sim.streams, ev->stream) : NULL; /* a destroyed stream finished its work */
	r = s && s->syncs == ev->syncs ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuEventDestroy(CUevent ev)
{
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	free(ev);
	return CUDA_SUCCESS;
}

/* ---- profiler control: counted so tests can see capture ranges ---------------------- */

CUresult CUDAAPI cuProfilerStart(void)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	__atomic_add_fetch(&sim.profiler_depth, 1, __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuProfilerStop(void)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	__atomic_sub_fetch(&sim.profiler_depth, 1, __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

/* ---- error strings ------------------------------------------------------------------ */

static const struct {
	CUresult code;
	const char *name, *text;
} errors[] = {
#define SIM_ERR(code, text) {code, #code, text},
#include "errors.def"
#undef SIM_ERR
};

static CUresult error_lookup(CUresult e, const char **pstr, bool want_name)
{
	if (!pstr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
		if (errors[i].code == e) {
			*pstr = want_name ? errors[i].name : errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*pstr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult e, const char **pstr)
{
	return error_lookup(e, pstr, false);
}

CUresult CUDAAPI cuGetErrorName(CUresult e, const char **pstr)
{
	return error_lookup(e, pstr, true);
}

/* ---- cuGetProcAddress ----------------------------------------------------------------- */

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult CUDAAPI sim_get_proc_address_v1(const char *, void **, int, cuuint64_t) __asm__("cuGetProcAddress");

static const struct proc {
	const char *name;
	int version;
	void *fn, *fn_ptsz;
} procs[] = {
#define SIM_PROC(name, version) {#name, version, (void *)name, NULL},
#define SIM_PROC_PTSZ(name, version) {#name, version, (void *)name, (void *)name##_ptsz},
#define SIM_PROC_AS(name, version, fn) {#name, version, (void *)fn, NULL},
#include "procs.def"
#undef SIM_PROC
#undef SIM_PROC_PTSZ
#undef SIM_PROC_AS
};

/* The newest variant introduced at or before `version`, as the real driver chooses. */
static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status)
{
	const struct proc *best = NULL;
	bool known = false;
	CUdriverProcAddressQueryResult st;
	const cuuint64_t all = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

	if (!symbol || !pfn || (flags & ~all))
		return CUDA_ERROR_INVALID_VALUE;
	if (version > SIM_DRIVER_VERSION)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
		if (strcmp(procs[i].name, symbol) != 0)
			continue;
		known = true;
		if (procs[i].version <= version && (!best || procs[i].version > best->version))
			best = &procs[i];
	}
	if (best) {
		bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->fn_ptsz;
		*pfn = ptsz ? best->fn_ptsz : best->fn;
		st = CU_GET_PROC_ADDRESS_SUCCESS;
	} else {
		st = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	}
	if (status)
		*status = st;
	return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
				  CUdriverProcAddressQueryResult *status)
{
	return lookup(symbol, pfn, version, flags, status);
}

CUresult CUDAAPI sim_get_proc_address_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return lookup(symbol, pfn, version, flags, NULL);
}
