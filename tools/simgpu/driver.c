/* simgpu driver core: initialisation from SIMGPU_* variables, devices and their
 * attribute table (attributes.def), primary and created contexts, profiler control and
 * error strings. cuGetProcAddress lives in procaddr.c, streams and events in stream.c,
 * memory in memory.c, copy.c, pool.c and vmm.c, kernels in module.c, graphs in graph.c. */
#include "sim.h"

#include <cudaProfiler.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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
	if (c->destroyed)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*dev = c->device;
	return CUDA_SUCCESS;
}

uint64_t sim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

static void context_defaults(struct CUctx_st *c, int dev, bool primary);
static void load_attributes(void);

static CUresult init_locked(void)
{
	const char *names = getenv("SIMGPU_NAME");
	size_t va_size = 64ull << 30;

	sim.ndev = device_count();
	load_attributes();
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
		context_defaults(&d->primary, i, true);
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

CUresult sim_check_device(CUdevice dev)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	return dev >= 0 && dev < sim.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult r = sim_check_device(ordinal);

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
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", sim.dev[dev].name);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = sim.dev[dev].capacity;
	return CUDA_SUCCESS;
}

/* A fixed UUID per ordinal, so runs agree: "simgpu" and the ordinal. */
static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	memset(uuid->bytes, 0, sizeof uuid->bytes);
	memcpy(uuid->bytes, "simgpu", 6);
	uuid->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_device_get_uuid_v1(CUuuid *, CUdevice) __asm__("cuDeviceGetUuid");
CUresult CUDAAPI sim_device_get_uuid_v1(CUuuid *uuid, CUdevice dev)
{
	return device_uuid(uuid, dev);
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return device_uuid(uuid, dev);
}

/* Linux has no LUID: the real driver refuses it there too. */
CUresult CUDAAPI cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
	(void)luid;
	(void)mask;
	(void)dev;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- attributes: attributes.def, with SIMGPU_ATTRS overrides ------------------------------ */

static const struct {
	const char *name;
	int value;
	bool per_device; /* plus the ordinal */
} attr_rows[] = {
#define SIM_ATTR(name, value) [CU_DEVICE_ATTRIBUTE_##name] = {#name, value, false},
#define SIM_ATTR_DEV(name, value) [CU_DEVICE_ATTRIBUTE_##name] = {#name, value, true},
#include "attributes.def"
#undef SIM_ATTR
#undef SIM_ATTR_DEV
};

#define NATTR (sizeof attr_rows / sizeof attr_rows[0])
static int attr_value[NATTR];

/* SIMGPU_ATTRS="NAME=value,...", NAME without CU_DEVICE_ATTRIBUTE_, any case. */
static void load_attributes(void)
{
	const char *v = getenv("SIMGPU_ATTRS");

	for (size_t i = 0; i < NATTR; i++)
		attr_value[i] = attr_rows[i].value;
	while (v && *v) {
		char item[128], *eq, *end;
		size_t n = strcspn(v, ","), a;
		long val;

		if (n < sizeof item) {
			memcpy(item, v, n);
			item[n] = '\0';
			eq = strchr(item, '=');
			if (eq) {
				*eq = '\0';
				val = strtol(eq + 1, &end, 0);
				for (a = 1; a < NATTR; a++)
					if (attr_rows[a].name && strcasecmp(attr_rows[a].name, item) == 0)
						break;
				if (a < NATTR && *end == '\0' && eq[1] && val >= INT32_MIN && val <= INT32_MAX) {
					attr_value[a] = (int)val;
				} else {
					*eq = '=';
					warn("SIMGPU_ATTRS", item,
					     "not NAME=integer with NAME a CU_DEVICE_ATTRIBUTE_ suffix");
				}
			} else {
				warn("SIMGPU_ATTRS", item, "not NAME=integer");
			}
		}
		v += n;
		if (*v == ',')
			v++;
	}
}

int sim_attribute(CUdevice_attribute attrib, int dev)
{
	return attr_value[attrib] + (attr_rows[attrib].per_device ? dev : 0);
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pi || attrib <= 0 || (size_t)attrib >= NATTR || !attr_rows[attrib].name)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = sim_attribute(attrib, dev);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r == CUDA_SUCCESS && (!major || !minor))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS) {
		*major = sim_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
		*minor = sim_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	}
	return r;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", sim_attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev),
		 sim_attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev),
		 sim_attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev));
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dev || !pciBusId)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < sim.ndev; i++) {
		char id[32];
		cuDeviceGetPCIBusId(id, sizeof id, i);
		if (strcasecmp(id, pciBusId) == 0 || strcasecmp(id + 5, pciBusId) == 0) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/* Every pair of simulated devices can reach each other. */
CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	CUresult r = sim_check_device(dev);

	if (r == CUDA_SUCCESS)
		r = sim_check_device(peerDev);
	if (r == CUDA_SUCCESS && !canAccessPeer)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*canAccessPeer = dev != peerDev;
	return r;
}

CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst)
{
	CUresult r = sim_check_device(src);

	if (r == CUDA_SUCCESS)
		r = sim_check_device(dst);
	if (r == CUDA_SUCCESS && (!value || src == dst))
		r = CUDA_ERROR_INVALID_DEVICE;
	if (r != CUDA_SUCCESS)
		return r;
	switch (attrib) {
	case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
		*value = 0;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
		*value = 1;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* ---- contexts ----------------------------------------------------------------------- */

bool sim_is_context(CUcontext c)
{
	if (!c)
		return false;
	for (int i = 0; i < sim.ndev; i++)
		if (c == &sim.dev[i].primary)
			return true;
	return sim_obj_is(c, SIM_OBJ_CONTEXT);
}

CUcontext sim_current_context(void)
{
	return ctx_stack[ctx_depth];
}

static void context_defaults(struct CUctx_st *c, int dev, bool primary)
{
	*c = (struct CUctx_st){.device = dev, .primary = primary};
	c->limits[CU_LIMIT_STACK_SIZE] = 1024;
	c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
	c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
	c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
	c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
	c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
	c->limits[CU_LIMIT_SHMEM_SIZE] = 232448;
	c->limits[CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = 1;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

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

static CUresult primary_release(CUdevice dev)
{
	CUresult r = sim_check_device(dev);

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

/* The v1 ABIs (CUDA 7.0) take the same arguments as the v2 ones (11.0). */
CUresult CUDAAPI sim_primary_ctx_release_v1(CUdevice) __asm__("cuDevicePrimaryCtxRelease");
CUresult CUDAAPI sim_primary_ctx_release_v1(CUdevice dev)
{
	return primary_release(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return primary_release(dev);
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	sim.dev[dev].primary.flags = flags;
	sim_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_primary_ctx_set_flags_v1(CUdevice, unsigned int) __asm__("cuDevicePrimaryCtxSetFlags");
CUresult CUDAAPI sim_primary_ctx_set_flags_v1(CUdevice dev, unsigned int flags)
{
	return primary_set_flags(dev, flags);
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return primary_set_flags(dev, flags);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	*flags = sim.dev[dev].primary.flags;
	*active = sim.dev[dev].primary_refs > 0;
	sim_unlock();
	return CUDA_SUCCESS;
}

/* Resetting a device's primary context keeps the simulated memory: only its settings go. */
static CUresult primary_reset(CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	context_defaults(&sim.dev[dev].primary, dev, true);
	sim_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_primary_ctx_reset_v1(CUdevice) __asm__("cuDevicePrimaryCtxReset");
CUresult CUDAAPI sim_primary_ctx_reset_v1(CUdevice dev)
{
	return primary_reset(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
	return primary_reset(dev);
}

static CUresult context_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CUresult r = sim_check_device(dev);
	struct CUctx_st *c;

	if (r != CUDA_SUCCESS)
		return r;
	if (!pctx || (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_depth + 1 >= CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_lock();
	c = sim.ctx_free;
	if (c)
		sim.ctx_free = c->next_free;
	else
		c = malloc(sizeof *c);
	if (!c || sim_obj_add(c, SIM_OBJ_CONTEXT)) {
		free(c);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		context_defaults(c, dev, false);
		c->flags = flags;
	}
	sim_unlock();
	if (r != CUDA_SUCCESS)
		return r;
	/* the new context is pushed onto the thread's stack, as cuCtxCreate documents */
	if (ctx_stack[ctx_depth])
		ctx_depth++;
	ctx_stack[ctx_depth] = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_ctx_create_v2(CUcontext *, unsigned int, CUdevice) __asm__("cuCtxCreate_v2");
CUresult CUDAAPI sim_ctx_create_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return context_create(pctx, flags, dev);
}

CUresult CUDAAPI sim_ctx_create_v3(CUcontext *, CUexecAffinityParam *, int, unsigned int,
				   CUdevice) __asm__("cuCtxCreate_v3");
CUresult CUDAAPI sim_ctx_create_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags,
				   CUdevice dev)
{
	if (n > 0 || params)
		return sim_refuse("cuCtxCreate_v3 with execution affinity");
	return context_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
	if (params && (params->numExecAffinityParams > 0 || params->cigParams))
		return sim_refuse("cuCtxCreate_v4 with execution affinity or CIG");
	return context_create(pctx, flags, dev);
}

/* A destroyed context is kept for reuse: a thread that still has it current reads it,
 * sees it destroyed, and gets CUDA_ERROR_CONTEXT_IS_DESTROYED. */
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!ctx || !sim_obj_is(ctx, SIM_OBJ_CONTEXT)) {
		r = CUDA_ERROR_INVALID_CONTEXT;
	} else {
		sim_obj_del(ctx);
		ctx->destroyed = true;
		ctx->next_free = sim.ctx_free;
		sim.ctx_free = ctx;
	}
	sim_unlock();
	if (r == CUDA_SUCCESS && ctx_stack[ctx_depth] == ctx)
		(void)cuCtxPopCurrent(NULL);
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

static bool usable(CUcontext ctx)
{
	bool ok;

	sim_lock();
	ok = sim_is_context(ctx);
	sim_unlock();
	return ok;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx && !usable(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_stack[ctx_depth] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx || !usable(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth + 1 >= CTX_STACK)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_stack[ctx_depth])
		ctx_depth++;
	ctx_stack[ctx_depth] = ctx;
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

/* The context a call names: ctx, or the current one when ctx is NULL (the v2 ABIs). */
static CUresult named_context(CUcontext ctx, CUcontext *out)
{
	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx)
		ctx = ctx_stack[ctx_depth];
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx->destroyed)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	if (!usable(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

static CUresult context_device(CUcontext ctx, CUdevice *device)
{
	CUresult r = named_context(ctx, &ctx);

	if (r == CUDA_SUCCESS && !device)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*device = ctx->device;
	return r;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	return context_device(NULL, device);
}

/* CUDA 13.0's ABI: the context is an argument; NULL means the current one. */
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	return context_device(ctx, device);
}

static CUresult context_sync(CUcontext ctx)
{
	CUresult r = named_context(ctx, &ctx);

	if (r == CUDA_SUCCESS) {
		sim_lock();
		for (size_t i = 0; i < sim.streams.cap; i++) {
			struct CUstream_st *s = sim_map_at(&sim.streams, i);
			if (s && s->device == ctx->device && !s->capture) {
				s->busy = false;
				s->syncs++;
			}
		}
		sim_pools_sync(ctx->device);
		sim_unlock();
	}
	return r;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
	return context_sync(NULL);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
	return context_sync(ctx);
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	CUresult r = named_context(ctx, &ctx);

	if (r == CUDA_SUCCESS && !version)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*version = 3020; /* every context since CUDA 3.2 */
	return r;
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r == CUDA_SUCCESS && !flags)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*flags = ctx->flags;
	return r;
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r == CUDA_SUCCESS && (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		ctx->flags = flags;
	return r;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
	CUresult r = named_context(ctx, &ctx);

	if (r == CUDA_SUCCESS && !ctxId)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*ctxId = (unsigned long long)(uintptr_t)ctx;
	return r;
}

CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r == CUDA_SUCCESS && (!pvalue || (unsigned)limit >= CU_LIMIT_MAX))
		r = CUDA_ERROR_UNSUPPORTED_LIMIT;
	if (r == CUDA_SUCCESS)
		*pvalue = ctx->limits[limit];
	return r;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r != CUDA_SUCCESS)
		return r;
	if ((unsigned)limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128)
		return CUDA_ERROR_INVALID_VALUE;
	ctx->limits[limit] = value;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r != CUDA_SUCCESS)
		return r;
	if (leastPriority)
		*leastPriority = 0;
	if (greatestPriority)
		*greatestPriority = -5;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache *config)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r == CUDA_SUCCESS && !config)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*config = CU_FUNC_CACHE_PREFER_NONE;
	return r;
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);

	if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		r = CUDA_ERROR_INVALID_VALUE;
	return r;
}

static CUresult peer_access(CUcontext peer, unsigned int flags, bool enable)
{
	CUcontext ctx;
	CUresult r = named_context(NULL, &ctx);
	bool *on;

	if (r != CUDA_SUCCESS)
		return r;
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!peer || !usable(peer))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (peer->device == ctx->device)
		return CUDA_ERROR_INVALID_DEVICE;
	sim_lock();
	on = &sim.dev[ctx->device].peer[peer->device];
	if (enable && *on)
		r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	else if (!enable && !*on)
		r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	else
		*on = enable;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	return peer_access(peerContext, Flags, true);
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
	return peer_access(peerContext, 0, false);
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
