/* simgpu's driver API against the real cuda.h: devices, contexts, memory, OOM at the
 * configured capacity, pinned and managed memory, streams, pools, the VMM lifecycle,
 * cuGetProcAddress and the error cases, from one thread and from many. */
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
void simgpu_stream_busy(CUstream);

static size_t free_mem(void)
{
	size_t f = 0, t = 0;
	cuMemGetInfo(&f, &t);
	return f;
}

static void before_init(void)
{
	CUdeviceptr p;
	int n;
	void *fn = NULL;

	is(cuMemAlloc(&p, 1024), CUDA_ERROR_NOT_INITIALIZED, "cuMemAlloc before cuInit");
	is(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit");
	is(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, NULL), CUDA_SUCCESS, "cuGetProcAddress works before cuInit");
	is(cuInit(1), CUDA_ERROR_INVALID_VALUE, "cuInit with flags");
	is(cuInit(0), CUDA_SUCCESS, "cuInit");
	is(cuInit(0), CUDA_SUCCESS, "cuInit twice");
}

static void devices(void)
{
	int n = 0, v = 0, attr = 0;
	char name[64];
	size_t total = 0;
	CUdevice d;

	cuDriverGetVersion(&v);
	is(v, 13000, "driver version");
	cuDeviceGetCount(&n);
	is(n, 2, "SIMGPU_DEVICES=2");
	is(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE, "device ordinal out of range");
	cuDeviceTotalMem(&total, 0);
	is(total, 1 * GiB, "device 0 capacity from SIMGPU_MEM");
	cuDeviceTotalMem(&total, 1);
	is(total, 2 * GiB, "device 1 capacity from SIMGPU_MEM");
	cuDeviceGetName(name, sizeof name, 1);
	ok(strcmp(name, "second") == 0, "device 1 name from SIMGPU_NAME: %s", name);
	cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
	is(attr, 1, "VMM supported");
	cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0);
	is(attr, 1, "memory pools supported");
	is(cuDeviceGetAttribute(&attr, (CUdevice_attribute)100000, 0), CUDA_ERROR_INVALID_VALUE, "unknown attribute");
	/* the H100-like table (attributes.def), with SIMGPU_ATTRS overrides (set in main) */
	is(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0), CUDA_SUCCESS, "COMPUTE_MODE answered");
	is(attr, CU_COMPUTEMODE_DEFAULT, "compute mode: default");
	cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
	is(attr, 9, "compute capability 9.x, as an H100's");
	cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
	is(attr, 132, "132 multiprocessors, as an H100 SXM5's");
	cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0);
	is(attr, 1410000, "SIMGPU_ATTRS overrides CLOCK_RATE");
	cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1);
	is(attr, 0x19, "the PCI bus id follows the ordinal");
	{
		CUuuid u0, u1;
		is(cuDeviceGetUuid(&u0, 0), CUDA_SUCCESS, "cuDeviceGetUuid");
		cuDeviceGetUuid(&u1, 1);
		ok(memcmp(&u0, &u1, sizeof u0) != 0, "each device has its own UUID");
		is(cuDeviceGetUuid(NULL, 0), CUDA_ERROR_INVALID_VALUE, "cuDeviceGetUuid(NULL)");
	}
}

static void contexts(void)
{
	CUcontext c0, c1, cur;
	CUdeviceptr p;
	CUdevice d;

	is(cuMemAlloc(&p, 1024), CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc without a context");
	is(cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS, "retain primary context 0");
	is(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS, "retain primary context 1");
	is(cuCtxSetCurrent((CUcontext)&d), CUDA_ERROR_INVALID_CONTEXT, "a bogus context is refused");
	is(cuCtxSetCurrent(c1), CUDA_SUCCESS, "make context 1 current");
	cuCtxGetDevice(&d);
	is(d, 1, "current device follows the context");
	is(cuCtxPushCurrent(c0), CUDA_SUCCESS, "push context 0");
	cuCtxGetCurrent(&cur);
	ok(cur == c0, "pushed context is current");
	cuCtxPopCurrent(&cur);
	cuCtxGetDevice(&d);
	is(d, 1, "pop restores context 1");
	cuCtxSetCurrent(c0);
}

static void device_memory(void)
{
	CUdeviceptr p, q;
	size_t base = free_mem(), pitch = 0;

	is(base, 1 * GiB, "all of device 0 free at start");
	is(cuMemAlloc(&p, 1000), CUDA_SUCCESS, "cuMemAlloc");
	is(p % 512, 0, "device pointers are 512-byte aligned");
	is(free_mem(), base - 1024, "cuMemGetInfo charges the rounded size");
	is(cuMemAlloc(&q, 0), CUDA_ERROR_INVALID_VALUE, "zero bytes");
	is(cuMemAlloc(NULL, 64), CUDA_ERROR_INVALID_VALUE, "null out-pointer");
	is(cuMemFree(p + 512), CUDA_ERROR_INVALID_VALUE, "freeing an inner pointer");
	is(cuMemFree(p), CUDA_SUCCESS, "cuMemFree");
	is(cuMemFree(0), CUDA_SUCCESS, "cuMemFree(0) succeeds, as the runtime's cudaFree(0) needs");
	is(cuMemFree(p), CUDA_ERROR_INVALID_VALUE, "double free");
	is(cuMemFree(0x1234), CUDA_ERROR_INVALID_VALUE, "unknown pointer");
	is(free_mem(), base, "memory back after free");

	is(cuMemAlloc(&p, base + 1), CUDA_ERROR_OUT_OF_MEMORY, "more than capacity: out of memory");
	is(free_mem(), base, "a failed allocation changes nothing");
	is(cuMemAlloc(&p, base - 4096), CUDA_SUCCESS, "nearly all of the device");
	is(cuMemAlloc(&q, 8192), CUDA_ERROR_OUT_OF_MEMORY, "past capacity");
	is(cuMemAlloc(&q, 4096), CUDA_SUCCESS, "exactly up to capacity");
	is(free_mem(), 0, "nothing free");
	cuMemFree(q);
	cuMemFree(p);
	is(free_mem(), base, "all free again");

	is(cuMemAllocPitch(&p, &pitch, 1000, 10, 4), CUDA_SUCCESS, "cuMemAllocPitch");
	ok(pitch >= 1000 && pitch % 512 == 0, "pitch %zu covers the width, aligned", pitch);
	is(free_mem(), base - pitch * 10, "pitched allocation charged pitch x height");
	is(cuMemAllocPitch(&q, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE, "element size 3");
	cuMemFree(p);
}

static void host_and_managed(void)
{
	void *h = NULL, *h2 = NULL;
	CUdeviceptr m;
	size_t base = free_mem();

	is(cuMemHostAlloc(&h, 1 * MiB, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS, "cuMemHostAlloc");
	memset(h, 0xab, 1 * MiB);
	ok(((unsigned char *)h)[MiB - 1] == 0xab, "pinned host memory is writable");
	is(cuMemAllocHost(&h2, 4096), CUDA_SUCCESS, "cuMemAllocHost");
	is(free_mem(), base, "pinned host memory is not charged to the device");
	is(cuMemHostAlloc(&h2, 4096, 0x80), CUDA_ERROR_INVALID_VALUE, "unknown host-alloc flag");
	is(cuMemFree((CUdeviceptr)h), CUDA_ERROR_INVALID_VALUE, "cuMemFree of pinned host memory");
	is(cuMemFreeHost(h), CUDA_SUCCESS, "cuMemFreeHost");
	is(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost twice");
	cuMemFreeHost(h2);

	is(cuMemAllocManaged(&m, 3 * GiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS, "managed memory oversubscribes");
	((char *)m)[0] = 1;
	ok(((char *)m)[0] == 1, "managed memory is host-accessible");
	is(free_mem(), base, "managed memory is not charged to the device");
	is(cuMemAllocManaged(&m, 4096, 7), CUDA_ERROR_INVALID_VALUE, "bad managed flags");
	is(cuMemFree(m), CUDA_SUCCESS, "cuMemFree frees managed memory");
}

static size_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a)
{
	cuuint64_t v = 0;
	cuMemPoolGetAttribute(pool, a, &v);
	return (size_t)v;
}

static void pools(void)
{
	CUmemoryPool pool, mine;
	CUstream s;
	CUdeviceptr p, q, r;
	size_t base = free_mem();
	cuuint64_t threshold = 64 * MiB;
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};

	is(cuStreamCreate(&s, 0), CUDA_SUCCESS, "cuStreamCreate");
	is(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS, "default pool");
	is(cuMemAllocAsync(&p, 10 * MiB, s), CUDA_SUCCESS, "cuMemAllocAsync");
	is(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 10 * MiB, "pool used");
	is(cuMemFreeAsync(p, s), CUDA_SUCCESS, "cuMemFreeAsync");
	is(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0, "pool used after free");
	is(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 10 * MiB, "freed memory stays reserved");
	is(free_mem(), base - 10 * MiB, "reserved pool memory is charged to the device");
	is(cuMemAllocAsync(&q, 9 * MiB, s), CUDA_SUCCESS, "allocate again");
	ok(q == p, "the pool reuses the freed block");
	cuMemFreeAsync(q, s);
	is(cuStreamSynchronize(s), CUDA_SUCCESS, "cuStreamSynchronize");
	is(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0, "sync releases memory above threshold 0");
	is(free_mem(), base, "device memory back after sync");
	is(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 10 * MiB, "used high-water mark");

	cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
	cuMemAllocAsync_ptsz(&p, 32 * MiB, NULL);
	cuMemFreeAsync_ptsz(p, NULL);
	cuStreamSynchronize(s);
	is(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 32 * MiB, "a release threshold keeps memory");
	is(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS, "cuMemPoolTrimTo");
	is(free_mem(), base, "trimmed");

	/* a request that fits only if cached memory is released first */
	cuMemAllocAsync(&p, 600 * MiB, s);
	cuMemFreeAsync(p, s);
	is(cuMemAllocAsync(&q, 700 * MiB, s), CUDA_SUCCESS, "cached memory is released to avoid an OOM");
	cuMemFreeAsync(q, s);
	cuMemPoolTrimTo(pool, 0);

	is(cuMemAllocAsync(&p, 64, (CUstream)0x99), CUDA_ERROR_INVALID_HANDLE, "unknown stream");
	is(cuMemPoolCreate(&mine, &props), CUDA_SUCCESS, "cuMemPoolCreate");
	is(cuMemAllocFromPoolAsync(&r, 4 * MiB, mine, s), CUDA_SUCCESS, "cuMemAllocFromPoolAsync");
	is(cuMemPoolDestroy(mine), CUDA_SUCCESS, "destroy a pool with an allocation outstanding");
	is(free_mem(), base - 4 * MiB, "its allocation is still charged");
	is(cuMemFreeAsync(r, s), CUDA_SUCCESS, "free the outstanding allocation");
	is(free_mem(), base, "memory returns once the destroyed pool is empty");
	is(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE, "the default pool cannot be destroyed");
	is(cuStreamDestroy(s), CUDA_SUCCESS, "cuStreamDestroy");
	is(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy twice");
}

/* Events complete at once unless recorded on a stream marked busy, then when that stream
 * is synchronized or destroyed. */
static void events(void)
{
	CUstream s;
	CUevent e;

	cuStreamCreate(&s, 0);
	is(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS, "cuEventCreate");
	cuEventRecord(e, s);
	is(cuEventQuery(e), CUDA_SUCCESS, "an event on an idle stream has completed");
	simgpu_stream_busy(s);
	cuEventRecord(e, s);
	is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "on a busy stream it has not");
	cuStreamSynchronize(s);
	is(cuEventQuery(e), CUDA_SUCCESS, "until the stream is synchronized");
	simgpu_stream_busy(s);
	cuEventRecord(e, s);
	cuStreamDestroy(s);
	is(cuEventQuery(e), CUDA_SUCCESS, "or destroyed");
	is(cuEventDestroy(e), CUDA_SUCCESS, "cuEventDestroy");
}

static void vmm(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h, hh;
	CUdeviceptr va, va2;
	size_t gran = 0, base = free_mem();

	is(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS, "granularity");
	is(gran, 2 * MiB, "2 MiB granularity");
	is(cuMemCreate(&h, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE, "size not a granularity multiple");
	is(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS, "cuMemCreate");
	is(free_mem(), base - 4 * MiB, "physical memory charged at creation");
	is(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS, "cuMemAddressReserve");
	is(va % (2 * MiB), 0, "reservation aligned to the granularity");
	is(free_mem(), base - 4 * MiB, "reserving addresses costs no memory");
	is(cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_SUCCESS, "cuMemMap");
	is(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "overlapping map");
	is(cuMemMap(va + 4 * MiB, 2 * MiB, 2 * MiB, h, 0), CUDA_ERROR_INVALID_VALUE, "non-zero offset");
	is(cuMemSetAccess(va, 4 * MiB, &access, 1), CUDA_SUCCESS, "cuMemSetAccess on the mapped range");
	is(cuMemSetAccess(va, 8 * MiB, &access, 1), CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess past the mapping");
	is(cuMemRelease(h), CUDA_SUCCESS, "cuMemRelease while mapped");
	is(free_mem(), base - 4 * MiB, "still charged: the mapping holds it");
	is(cuMemMap(va + 4 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_HANDLE, "mapping a released handle");
	is(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE, "freeing addresses still mapped");
	is(cuMemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE, "unmapping part of a mapping");
	is(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS, "cuMemUnmap");
	is(free_mem(), base, "released with the last mapping");
	is(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "release twice");
	is(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS, "cuMemAddressFree");
	is(cuMemAddressReserve(&va2, 8 * MiB, 0, va, 0), CUDA_SUCCESS, "reserve at a hint");
	ok(va2 == va, "the free hint is honoured");
	cuMemAddressFree(va2, 8 * MiB);

	prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	is(cuMemCreate(&hh, 2 * MiB, &prop, 0), CUDA_SUCCESS, "cuMemCreate on a host NUMA node");
	is(free_mem(), base, "host-located physical memory is not charged to the device");
	cuMemRelease(hh);
	prop.location = (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
	is(cuMemCreate(&hh, 2 * GiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate beyond capacity");
}

static void proc_address(void)
{
	void *fn = NULL, *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	CUdriverProcAddressQueryResult st;
	CUresult (*v1)(const char *, void **, int, cuuint64_t);

	ok(self != NULL, "libcuda.so.1 is loaded by soname");
	{
		/* what simgpu does not simulate is exported by name and refuses, never crashes */
		CUresult (*stub)(void *, size_t, size_t) =
		    (CUresult(*)(void *, size_t, size_t))dlsym(self, "cuTexObjectCreate");
		CUresult (*table)(const void **, const CUuuid *) =
		    (CUresult(*)(const void **, const CUuuid *))dlsym(self, "cuGetExportTable");
		CUuuid id = {{0}};
		const void *t = NULL;
		CUmoduleLoadingMode mode;
		CUdevice d = -1;

		ok(stub && stub(NULL, 0, 0) == CUDA_ERROR_NOT_SUPPORTED, "an unsimulated function: NOT_SUPPORTED");
		ok(table && table(&t, &id) == CUDA_ERROR_NOT_SUPPORTED && !t, "cuGetExportTable is refused");
		ok(dlsym(self, "cuModuleLoadData") && dlsym(self, "cuLaunchKernel") && dlsym(self, "cuMemcpy3D_v2"),
		   "driver functions are exported by name");
		is(cuModuleGetLoadingMode(&mode), CUDA_SUCCESS, "cuModuleGetLoadingMode");
		is(cuCtxGetDevice_v2(&d, NULL), CUDA_SUCCESS, "cuCtxGetDevice_v2 of the current context");
		is(cuCtxGetDevice_v2(&d, (CUcontext)&id), CUDA_ERROR_INVALID_CONTEXT,
		   "cuCtxGetDevice_v2 checks its context");
	}
	is(cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, &st), CUDA_SUCCESS, "cuMemAlloc at 3020");
	ok(fn == dlsym(self, "cuMemAlloc_v2") && st == CU_GET_PROC_ADDRESS_SUCCESS, "is cuMemAlloc_v2");
	is(cuGetProcAddress("cuMemAlloc", &fn, 2000, 0, &st), CUDA_SUCCESS, "cuMemAlloc at 2000");
	ok(fn == dlsym(self, "cuMemAlloc"), "is the 32-bit ABI's cuMemAlloc");
	is(cuGetProcAddress("cuMemAllocAsync", &fn, 11010, 0, &st), CUDA_ERROR_NOT_FOUND, "cuMemAllocAsync at 11010");
	is(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "version not sufficient");
	is(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND, "unknown name");
	is(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "symbol not found");
	ok(fn == NULL, "unknown name gives NULL");
	is(cuGetProcAddress("", &fn, 0, 0, &st), CUDA_ERROR_NOT_FOUND, "the runtime's empty probe");
	is(cuGetProcAddress("cuMemAllocAsync", &fn, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
	   CUDA_SUCCESS, "cuMemAllocAsync, per-thread stream");
	ok(fn == dlsym(self, "cuMemAllocAsync_ptsz"), "is the _ptsz variant");
	cuGetProcAddress("cuMemAllocAsync", &fn, 12000, 0, &st);
	ok(fn == dlsym(self, "cuMemAllocAsync"), "flags 0 gives the legacy-stream variant");
	cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0, &st);
	ok(fn == dlsym(self, "cuGetProcAddress"), "cuGetProcAddress at 11030 is the 4-argument v1");
	cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0, &st);
	ok(fn == dlsym(self, "cuGetProcAddress_v2"), "cuGetProcAddress at 12000 is v2");
	v1 = (CUresult(*)(const char *, void **, int, cuuint64_t))dlsym(self, "cuGetProcAddress");
	is(v1("cuMemFree", &fn, 12000, 0), CUDA_SUCCESS, "lookup through the v1 entry");
	ok(fn == dlsym(self, "cuMemFree_v2"), "v1 finds cuMemFree_v2");
	is(cuGetProcAddress("cuMemAlloc", &fn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE,
	   "version newer than the driver");
	is(cuGetProcAddress("cuMemAlloc", &fn, 12000, 8, &st), CUDA_ERROR_INVALID_VALUE, "unknown flags");
	dlclose(self);
}

static void errors(void)
{
	const char *s = NULL;

	cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s);
	ok(s && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "cuGetErrorName");
	cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s);
	ok(s && strcmp(s, "out of memory") == 0, "cuGetErrorString");
	is(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE, "unknown code");
	is(cuProfilerStart(), CUDA_SUCCESS, "cuProfilerStart");
	is(cuProfilerStop(), CUDA_SUCCESS, "cuProfilerStop");
}

static CUcontext ctx0;
static int thread_errors;

static void *churn(void *arg)
{
	CUdeviceptr p[16];
	(void)arg;
	if (cuCtxSetCurrent(ctx0) != CUDA_SUCCESS)
		__atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
	for (int round = 0; round < 200; round++) {
		for (int i = 0; i < 16; i++)
			if (cuMemAlloc(&p[i], 512 * (size_t)(i + 1)) != CUDA_SUCCESS)
				__atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
		for (int i = 0; i < 16; i++)
			if (cuMemFree(p[i]) != CUDA_SUCCESS)
				__atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void threads(void)
{
	pthread_t t[8];
	size_t base = free_mem();

	cuCtxGetCurrent(&ctx0);
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	is(thread_errors, 0, "8 threads allocate and free without errors");
	is(free_mem(), base, "accounting is exact after concurrent use");
}

int main(void)
{
	setenv("SIMGPU_DEVICES", "2", 1);
	setenv("SIMGPU_MEM", "1GiB,2GiB", 1);
	setenv("SIMGPU_NAME", "first,second", 1);
	setenv("SIMGPU_ATTRS", "clock_rate=1410000", 1);
	before_init();
	devices();
	contexts();
	device_memory();
	host_and_managed();
	pools();
	events();
	vmm();
	proc_address();
	errors();
	threads();
	return done();
}
