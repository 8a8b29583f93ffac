/* A driver layer, as GPU-sharing and virtualisation tools are (HAMi-core and the like):
 * found first as libcuda.so.1, it loads the real driver by path (LAYER_DRIVER) and wraps
 * what cuGetProcAddress returns for cuMemAlloc, counting allocations; it prints the count
 * at exit ("layer: N allocations"); its own cuMemAlloc_v2, for programs linked with
 * -lcuda, counts too. LAYER_EAGER=1 loads the driver when the layer is loaded, else at
 * its first lookup. A few driver functions a tool or such a program asks for by name are
 * passed on as they are. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *driver;
static PFN_cuGetProcAddress_v12000 next_gpa;
static PFN_cuMemAlloc_v3020 next_alloc;
static unsigned long allocs;

static void load(void)
{
	const char *path = getenv("LAYER_DRIVER");

	driver = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
	next_gpa = driver ? (PFN_cuGetProcAddress_v12000)dlsym(driver, "cuGetProcAddress_v2") : NULL;
	if (!next_gpa)
		fprintf(stderr, "layer: no driver at LAYER_DRIVER=%s\n", path ? path : "");
}

static void *next(const char *name)
{
	pthread_once(&once, load);
	return driver ? dlsym(driver, name) : NULL;
}

static CUresult CUDAAPI counted_alloc(CUdeviceptr *dptr, size_t size)
{
	CUresult r;

	__atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
	r = next_alloc(dptr, size);
	__asm__ volatile("" ::: "memory"); /* not a tail call: the driver is called from the layer's code */
	return r;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
				  CUdriverProcAddressQueryResult *status)
{
	CUresult r;

	pthread_once(&once, load);
	if (!next_gpa)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = next_gpa(symbol, pfn, version, flags, status);
	if (r != CUDA_SUCCESS || !symbol)
		return r;
	if (strcmp(symbol, "cuMemAlloc") == 0 && version >= 3020) {
		next_alloc = (PFN_cuMemAlloc_v3020)*pfn;
		*pfn = (void *)counted_alloc;
	} else if (strcmp(symbol, "cuGetProcAddress") == 0 && version >= 12000) {
		*pfn = (void *)cuGetProcAddress;
	}
	return r;
}

#define PASS(name, params, args)                                                                                       \
	CUresult CUDAAPI name params                                                                                   \
	{                                                                                                              \
		CUresult(CUDAAPI *f) params = (CUresult(CUDAAPI *) params)next(#name);                                 \
		return f ? f args : CUDA_ERROR_NOT_INITIALIZED;                                                        \
	}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
	PFN_cuMemAlloc_v3020 f = (PFN_cuMemAlloc_v3020)next("cuMemAlloc_v2");

	CUresult r;

	__atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
	r = f ? f(dptr, size) : CUDA_ERROR_NOT_INITIALIZED;
	__asm__ volatile("" ::: "memory"); /* not a tail call: the driver is called from the layer's code */
	return r;
}

PASS(cuInit, (unsigned flags), (flags))
PASS(cuDevicePrimaryCtxRetain, (CUcontext * c, CUdevice d), (c, d))
PASS(cuCtxSetCurrent, (CUcontext c), (c))
PASS(cuMemFree_v2, (CUdeviceptr d), (d))
PASS(cuDriverGetVersion, (int *v), (v))
PASS(cuCtxGetDevice, (CUdevice * d), (d))
PASS(cuDeviceGetName, (char *name, int len, CUdevice d), (name, len, d))
PASS(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice d), (bytes, d))
PASS(cuMemGetInfo_v2, (size_t * free_bytes, size_t *total), (free_bytes, total))

__attribute__((constructor)) static void layer_start(void)
{
	const char *eager = getenv("LAYER_EAGER");

	if (eager && *eager == '1')
		pthread_once(&once, load);
}

__attribute__((destructor)) static void layer_end(void)
{
	fprintf(stderr, "layer: %lu allocations\n", __atomic_load_n(&allocs, __ATOMIC_RELAXED));
}
