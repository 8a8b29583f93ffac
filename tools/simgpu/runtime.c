/* simgpu's libcudart.so.13. Like the real runtime it does not link the driver: it
 * dlopen()s libcuda.so.1, looks up only cuGetProcAddress_v2 with dlsym, and fetches
 * every driver function through it by base name and version (twice, with the
 * per-thread-stream flag, for stream-ordered calls). Per thread it keeps the current
 * device and the last error; contexts are the devices' primary contexts. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "runtime.h"

#define MAX_DEVICES 64

void *rt_drv[RT_NDRV];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_error;
static int ndev;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[MAX_DEVICES];

static __thread int cur_dev;
static __thread int ctx_dev = -1; /* device whose primary context is current on this thread */
static __thread cudaError_t last_error;

static cudaError_t from_driver(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_OUT_OF_MEMORY:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_INVALID_CONTEXT:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_ILLEGAL_STATE:
	case CUDA_ERROR_NOT_FOUND:
	case CUDA_ERROR_NOT_READY:
	case CUDA_ERROR_NOT_PERMITTED:
	case CUDA_ERROR_NOT_SUPPORTED:
		return (cudaError_t)r; /* same numbers on both sides */
	default:
		return cudaErrorUnknown;
	}
}

static cudaError_t note(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

static cudaError_t drv_result(CUresult r)
{
	return note(from_driver(r));
}

/* What a driver function the driver did not give answers (its arguments are ignored,
 * which the x86-64 calling convention makes safe). */
static CUresult missing(void)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}

static const struct {
	const char *name;
	int version;
	cuuint64_t flags;
} rt_drv_rows[] = {
#define RT_DRV(name, version, flags) {#name, version, flags},
#include "runtime_driver.def"
#undef RT_DRV
};

static void load_driver(void)
{
	PFN_cuGetProcAddress_v12000 gpa;
	CUdriverProcAddressQueryResult st;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	init_error = cudaErrorInsufficientDriver;
	if (!h)
		return;
	gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
	if (!gpa)
		return;
	{
		void *probe = NULL;
		gpa("", &probe, 0, 0, &st); /* the real runtime's opening probe */
	}
	/* the first three through the dlsym'd cuGetProcAddress_v2, the rest through the driver's own */
	for (size_t i = 0; i < RT_NDRV; i++) {
		PFN_cuGetProcAddress_v12000 via = i < 3 ? gpa : DRV(cuGetProcAddress, 12000);
		if (!via || via(rt_drv_rows[i].name, &rt_drv[i], rt_drv_rows[i].version, rt_drv_rows[i].flags, &st) ||
		    !rt_drv[i])
			rt_drv[i] = (void *)missing; /* a driver without it: the call fails, never crashes */
	}
	init_error = from_driver(DRV(cuInit, 2000)(0));
	if (init_error == cudaSuccess)
		init_error = from_driver(DRV(cuDeviceGetCount, 2000)(&ndev));
	if (init_error == cudaSuccess && ndev == 0)
		init_error = cudaErrorNoDevice;
	if (ndev > MAX_DEVICES)
		ndev = MAX_DEVICES;
}

/* Loads the driver once, then makes the current device's primary context current. */
static cudaError_t ready(void)
{
	pthread_once(&init_once, load_driver);
	if (init_error != cudaSuccess)
		return note(init_error);
	if (ctx_dev == cur_dev)
		return cudaSuccess;
	pthread_mutex_lock(&ctx_lock);
	CUresult r = primary[cur_dev] ? CUDA_SUCCESS : DRV(cuDevicePrimaryCtxRetain, 7000)(&primary[cur_dev], cur_dev);
	pthread_mutex_unlock(&ctx_lock);
	if (r == CUDA_SUCCESS)
		r = DRV(cuCtxSetCurrent, 4000)(primary[cur_dev]);
	if (r == CUDA_SUCCESS)
		ctx_dev = cur_dev;
	return drv_result(r);
}

#define READY()                                                                                                        \
	do {                                                                                                           \
		cudaError_t e_ = ready();                                                                              \
		if (e_ != cudaSuccess)                                                                                 \
			return e_;                                                                                     \
	} while (0)

/* ---- devices ------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	if (!count)
		return note(cudaErrorInvalidValue);
	pthread_once(&init_once, load_driver);
	*count = init_error == cudaSuccess ? ndev : 0;
	return note(init_error);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	pthread_once(&init_once, load_driver);
	if (init_error != cudaSuccess)
		return note(init_error);
	if (device < 0 || device >= ndev)
		return note(cudaErrorInvalidDevice);
	cur_dev = device;
	return ready();
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
	if (!device)
		return note(cudaErrorInvalidValue);
	READY();
	*device = cur_dev;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	READY();
	return drv_result(DRV(cuDeviceGetAttribute, 2000)(value, (CUdevice_attribute)attr, device));
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	READY();
	return drv_result(DRV(cuCtxSynchronize, 2000)());
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *version)
{
	if (!version)
		return note(cudaErrorInvalidValue);
	pthread_once(&init_once, load_driver);
	*version = 0;
	return drv_result(DRV(cuDriverGetVersion, 2020)(version));
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *version)
{
	if (!version)
		return note(cudaErrorInvalidValue);
	*version = CUDART_VERSION;
	return cudaSuccess;
}

/* ---- memory ------------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	READY();
	if (!devPtr)
		return note(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (size == 0) /* the runtime answers a zero-byte request with NULL and success */
		return cudaSuccess;
	return drv_result(DRV(cuMemAlloc, 3020)((CUdeviceptr *)devPtr, size));
}

cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	READY();
	if (!devPtr)
		return cudaSuccess;
	return drv_result(DRV(cuMemFree, 3020)((CUdeviceptr)devPtr));
}

cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	READY();
	if (!devPtr || !pitch)
		return note(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (width == 0 || height == 0) {
		*pitch = 0;
		return cudaSuccess;
	}
	return drv_result(DRV(cuMemAllocPitch, 3020)((CUdeviceptr *)devPtr, pitch, width, height, 4));
}

cudaError_t CUDARTAPI cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
	size_t pitch = 0;
	void *p = NULL;
	cudaError_t e;

	if (!pitchedDevPtr)
		return note(cudaErrorInvalidValue);
	if (extent.height && extent.depth > SIZE_MAX / extent.height)
		return note(cudaErrorMemoryAllocation);
	e = cudaMallocPitch(&p, &pitch, extent.width, extent.height * extent.depth);
	if (e == cudaSuccess)
		*pitchedDevPtr = (struct cudaPitchedPtr){p, pitch, extent.width, extent.height};
	return e;
}

cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	READY();
	if (!devPtr)
		return note(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (size == 0)
		return cudaSuccess;
	return drv_result(DRV(cuMemAllocManaged, 6000)((CUdeviceptr *)devPtr, size, flags));
}

cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	READY();
	if (!pHost)
		return note(cudaErrorInvalidValue);
	*pHost = NULL;
	if (size == 0)
		return cudaSuccess;
	/* cudaHostAllocMapped and friends have the driver's CU_MEMHOSTALLOC_* values */
	return drv_result(DRV(cuMemHostAlloc, 2020)(pHost, size, flags));
}

cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
	return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
	READY();
	if (!ptr)
		return cudaSuccess;
	return drv_result(DRV(cuMemFreeHost, 2000)(ptr));
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	READY();
	return drv_result(DRV(cuMemGetInfo, 3020)(free_bytes, total));
}

/* ---- stream-ordered allocation ------------------------------------------------------------ */

static cudaError_t malloc_async(PFN_cuMemAllocAsync_v11020 fn, void **devPtr, size_t size, cudaStream_t s)
{
	READY();
	if (!devPtr)
		return note(cudaErrorInvalidValue);
	return drv_result(fn((CUdeviceptr *)devPtr, size, (CUstream)s));
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(DRV(cuMemAllocAsync, 11020), devPtr, size, hStream);
}

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(DRV_PT(cuMemAllocAsync, 11020, 11020), devPtr, size, hStream);
}

static cudaError_t free_async(PFN_cuMemFreeAsync_v11020 fn, void *devPtr, cudaStream_t s)
{
	READY();
	return drv_result(fn((CUdeviceptr)devPtr, (CUstream)s));
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return free_async(DRV(cuMemFreeAsync, 11020), devPtr, hStream);
}

cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return free_async(DRV_PT(cuMemFreeAsync, 11020, 11020), devPtr, hStream);
}

static cudaError_t malloc_from_pool(PFN_cuMemAllocFromPoolAsync_v11020 fn, void **ptr, size_t size, cudaMemPool_t pool,
				    cudaStream_t s)
{
	READY();
	if (!ptr)
		return note(cudaErrorInvalidValue);
	return drv_result(fn((CUdeviceptr *)ptr, size, (CUmemoryPool)pool, (CUstream)s));
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	return malloc_from_pool(DRV(cuMemAllocFromPoolAsync, 11020), ptr, size, memPool, stream);
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	return malloc_from_pool(DRV_PT(cuMemAllocFromPoolAsync, 11020, 11020), ptr, size, memPool, stream);
}

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	READY();
	return drv_result(DRV(cuDeviceGetDefaultMemPool, 11020)((CUmemoryPool *)memPool, device));
}

cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
	READY();
	return drv_result(DRV(cuDeviceGetMemPool, 11020)((CUmemoryPool *)memPool, device));
}

cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
	READY();
	return drv_result(DRV(cuDeviceSetMemPool, 11020)(device, (CUmemoryPool)memPool));
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *p)
{
	CUmemPoolProps props;

	READY();
	if (!p)
		return note(cudaErrorInvalidValue);
	memset(&props, 0, sizeof props);
	props.allocType = (CUmemAllocationType)p->allocType;
	props.handleTypes = (CUmemAllocationHandleType)p->handleTypes;
	props.location.type = (CUmemLocationType)p->location.type;
	props.location.id = p->location.id;
	props.maxSize = p->maxSize;
	props.usage = p->usage;
	return drv_result(DRV(cuMemPoolCreate, 11020)((CUmemoryPool *)memPool, &props));
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	READY();
	return drv_result(DRV(cuMemPoolDestroy, 11020)((CUmemoryPool)memPool));
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	READY();
	return drv_result(DRV(cuMemPoolTrimTo, 11020)((CUmemoryPool)memPool, minBytesToKeep));
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	READY();
	return drv_result(DRV(cuMemPoolSetAttribute, 11020)((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	READY();
	return drv_result(DRV(cuMemPoolGetAttribute, 11020)((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

/* ---- streams ------------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	READY();
	return drv_result(DRV(cuStreamCreate, 2000)((CUstream *)pStream, flags));
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
	READY();
	return drv_result(DRV(cuStreamDestroy, 4000)((CUstream)stream));
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags)
{
	READY();
	return drv_result(DRV(cuStreamGetFlags, 5050)((CUstream)stream, flags));
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
	READY();
	return drv_result(DRV(cuStreamSynchronize, 2000)((CUstream)stream));
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	READY();
	return drv_result(DRV_PT(cuStreamSynchronize, 7000, 2000)((CUstream)stream));
}

/* ---- driver entry points, profiler, errors ---------------------------------------------- */

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						       unsigned long long flags,
						       enum cudaDriverEntryPointQueryResult *driverStatus)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r;

	READY();
	if (!symbol || !funcPtr)
		return note(cudaErrorInvalidValue);
	/* through the cuGetProcAddress the driver handed out for itself, as the real runtime does */
	r = DRV(cuGetProcAddress, 12000)(symbol, funcPtr, (int)cudaVersion, flags, &st);
	if (driverStatus)
		*driverStatus = (enum cudaDriverEntryPointQueryResult)st;
	/* a missing symbol is reported through driverStatus, not as an error */
	return r == CUDA_ERROR_NOT_FOUND ? cudaSuccess : drv_result(r);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
					      enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

cudaError_t CUDARTAPI cudaProfilerStart(void)
{
	READY();
	return drv_result(DRV(cuProfilerStart, 4000)());
}

cudaError_t CUDARTAPI cudaProfilerStop(void)
{
	READY();
	return drv_result(DRV(cuProfilerStop, 4000)());
}

cudaError_t CUDARTAPI cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
	return last_error;
}

static const struct {
	cudaError_t code;
	const char *name, *text;
} errors[] = {
#define RT_ERR(code, text) {code, #code, text},
#include "runtime_errors.def"
#undef RT_ERR
};

const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == error)
			return errors[i].name;
	return "cudaErrorUnknown";
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == error)
			return errors[i].text;
	return "unrecognized error code";
}
