/* simgpu's libcudart.so.13. Like the real runtime it does not link the driver: it
 * dlopen()s libcuda.so.1, looks up only cuGetProcAddress_v2 with dlsym, and fetches
 * every driver function through it by base name and version (twice, with the
 * per-thread-stream flag, for stream-ordered calls). Per thread it keeps the current
 * device and the last error; contexts are the devices' primary contexts. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
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

static const struct {
	cudaError_t code;
	const char *name, *text;
} errors[] = {
#define RT_ERR(code, text) {code, #code, text},
#include "runtime_errors.def"
#undef RT_ERR
};

/* The runtime's codes for the driver's: the same numbers where runtime_errors.def names
 * the code (cuda.h and driver_types.h agree on every one), unknown otherwise. */
static cudaError_t from_driver(CUresult r)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if ((int)errors[i].code == (int)r)
			return errors[i].code;
	return cudaErrorUnknown;
}

cudaError_t rt_note(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

cudaError_t rt_result(CUresult r)
{
	return rt_note(from_driver(r));
}

int rt_device(void)
{
	return cur_dev;
}

int rt_device_count(void)
{
	return ndev;
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

/* Where cudaGetDriverEntryPoint* asks: the cuGetProcAddress the driver handed out for
 * itself, as NVIDIA's runtime does at least for cuGetProcAddress's own lookups, or with
 * SIMGPU_ENTRY_POINTS=private the driver's private lookup (procaddr.c), which a tool
 * that wraps cuGetProcAddress never sees. */
static PFN_cuGetProcAddress_v12000 private_gpa;

static void load_driver(void)
{
	PFN_cuGetProcAddress_v12000 gpa;
	const char *entry = getenv("SIMGPU_ENTRY_POINTS");
	CUdriverProcAddressQueryResult st;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	init_error = cudaErrorInsufficientDriver;
	if (!h)
		return;
	gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
	if (!gpa)
		return;
	if (entry && !strcmp(entry, "private"))
		private_gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "simgpu_private_proc_address");
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
cudaError_t rt_ready(void)
{
	pthread_once(&init_once, load_driver);
	if (init_error != cudaSuccess)
		return rt_note(init_error);
	if (ctx_dev == cur_dev)
		return cudaSuccess;
	CUcontext c;
	cudaError_t e = rt_primary(cur_dev, &c);
	if (e == cudaSuccess && (e = rt_result(DRV(cuCtxSetCurrent, 4000)(c))) == cudaSuccess)
		ctx_dev = cur_dev;
	return e;
}

cudaError_t rt_primary(int dev, CUcontext *out)
{
	CUresult r;

	if (dev < 0 || dev >= ndev)
		return rt_note(cudaErrorInvalidDevice);
	pthread_mutex_lock(&ctx_lock);
	r = primary[dev] ? CUDA_SUCCESS : DRV(cuDevicePrimaryCtxRetain, 7000)(&primary[dev], dev);
	*out = primary[dev];
	pthread_mutex_unlock(&ctx_lock);
	return rt_result(r);
}

/* ---- devices ------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	if (!count)
		return rt_note(cudaErrorInvalidValue);
	pthread_once(&init_once, load_driver);
	*count = init_error == cudaSuccess ? ndev : 0;
	return rt_note(init_error);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	pthread_once(&init_once, load_driver);
	if (init_error != cudaSuccess)
		return rt_note(init_error);
	if (device < 0 || device >= ndev)
		return rt_note(cudaErrorInvalidDevice);
	cur_dev = device;
	return rt_ready();
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
	if (!device)
		return rt_note(cudaErrorInvalidValue);
	READY();
	*device = cur_dev;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	READY();
	return rt_result(DRV(cuDeviceGetAttribute, 2000)(value, (CUdevice_attribute)attr, device));
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	READY();
	return rt_result(DRV(cuCtxSynchronize, 2000)());
}

cudaError_t CUDARTAPI cudaDeviceReset(void)
{
	READY();
	/* the primary context goes, and with it everything allocated in it */
	ctx_dev = -1;
	return rt_result(DRV_AS(cuDevicePrimaryCtxReset, 7000, 11000)(cur_dev));
}

cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags)
{
	pthread_once(&init_once, load_driver);
	if (init_error != cudaSuccess)
		return rt_note(init_error);
	/* cudaDeviceMapHost is always on, as on every 64-bit system; the rest are the driver's */
	return rt_result(DRV(cuDevicePrimaryCtxSetFlags, 11000)(cur_dev, flags & ~(unsigned)cudaDeviceMapHost));
}

cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int *flags)
{
	READY();
	return rt_result(DRV(cuCtxGetFlags, 7000)(flags));
}

cudaError_t CUDARTAPI cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
	READY();
	return rt_result(DRV(cuCtxGetLimit, 3010)(pValue, (CUlimit)limit));
}

cudaError_t CUDARTAPI cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
	READY();
	return rt_result(DRV(cuCtxSetLimit, 3010)((CUlimit)limit, value));
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
	READY();
	return rt_result(DRV(cuDeviceCanAccessPeer, 4000)(canAccessPeer, device, peerDevice));
}

cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	CUcontext peer;
	cudaError_t e;

	READY();
	if ((e = rt_primary(peerDevice, &peer)) != cudaSuccess)
		return e;
	return rt_result(DRV(cuCtxEnablePeerAccess, 4000)(peer, flags));
}

cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice)
{
	CUcontext peer;
	cudaError_t e;

	READY();
	if ((e = rt_primary(peerDevice, &peer)) != cudaSuccess)
		return e;
	return rt_result(DRV(cuCtxDisablePeerAccess, 4000)(peer));
}

/* cudaDeviceProp from the driver's name, UUID, memory and attributes (attributes.def). */
cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	PFN_cuDeviceGetAttribute_v2000 get = DRV(cuDeviceGetAttribute, 2000);
	CUresult r;
	int v;

	READY();
	if (!prop)
		return rt_note(cudaErrorInvalidValue);
	if (device < 0 || device >= ndev)
		return rt_note(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof *prop);
	r = DRV(cuDeviceGetName, 2000)(prop->name, sizeof prop->name, device);
	if (r == CUDA_SUCCESS)
		r = DRV(cuDeviceGetUuid, 9020)((CUuuid *)&prop->uuid, device);
	if (r == CUDA_SUCCESS)
		r = DRV(cuDeviceTotalMem, 3020)(&prop->totalGlobalMem, device);
	if (r != CUDA_SUCCESS)
		return rt_result(r);
#define A(field, attr)                                                                                                 \
	if (get(&v, CU_DEVICE_ATTRIBUTE_##attr, device) == CUDA_SUCCESS)                                               \
		prop->field = v;
	A(sharedMemPerBlock, MAX_SHARED_MEMORY_PER_BLOCK)
	A(regsPerBlock, MAX_REGISTERS_PER_BLOCK)
	A(warpSize, WARP_SIZE)
	A(memPitch, MAX_PITCH)
	A(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK)
	A(maxThreadsDim[0], MAX_BLOCK_DIM_X)
	A(maxThreadsDim[1], MAX_BLOCK_DIM_Y)
	A(maxThreadsDim[2], MAX_BLOCK_DIM_Z)
	A(maxGridSize[0], MAX_GRID_DIM_X)
	A(maxGridSize[1], MAX_GRID_DIM_Y)
	A(maxGridSize[2], MAX_GRID_DIM_Z)
	A(totalConstMem, TOTAL_CONSTANT_MEMORY)
	A(major, COMPUTE_CAPABILITY_MAJOR)
	A(minor, COMPUTE_CAPABILITY_MINOR)
	A(textureAlignment, TEXTURE_ALIGNMENT)
	A(texturePitchAlignment, TEXTURE_PITCH_ALIGNMENT)
	A(multiProcessorCount, MULTIPROCESSOR_COUNT)
	A(integrated, INTEGRATED)
	A(canMapHostMemory, CAN_MAP_HOST_MEMORY)
	A(maxTexture1D, MAXIMUM_TEXTURE1D_WIDTH)
	A(maxTexture2D[0], MAXIMUM_TEXTURE2D_WIDTH)
	A(maxTexture2D[1], MAXIMUM_TEXTURE2D_HEIGHT)
	A(maxTexture3D[0], MAXIMUM_TEXTURE3D_WIDTH)
	A(maxTexture3D[1], MAXIMUM_TEXTURE3D_HEIGHT)
	A(maxTexture3D[2], MAXIMUM_TEXTURE3D_DEPTH)
	A(surfaceAlignment, SURFACE_ALIGNMENT)
	A(concurrentKernels, CONCURRENT_KERNELS)
	A(ECCEnabled, ECC_ENABLED)
	A(pciBusID, PCI_BUS_ID)
	A(pciDeviceID, PCI_DEVICE_ID)
	A(pciDomainID, PCI_DOMAIN_ID)
	A(tccDriver, TCC_DRIVER)
	A(asyncEngineCount, ASYNC_ENGINE_COUNT)
	A(unifiedAddressing, UNIFIED_ADDRESSING)
	A(memoryBusWidth, GLOBAL_MEMORY_BUS_WIDTH)
	A(l2CacheSize, L2_CACHE_SIZE)
	A(persistingL2CacheMaxSize, MAX_PERSISTING_L2_CACHE_SIZE)
	A(maxThreadsPerMultiProcessor, MAX_THREADS_PER_MULTIPROCESSOR)
	A(streamPrioritiesSupported, STREAM_PRIORITIES_SUPPORTED)
	A(globalL1CacheSupported, GLOBAL_L1_CACHE_SUPPORTED)
	A(localL1CacheSupported, LOCAL_L1_CACHE_SUPPORTED)
	A(sharedMemPerMultiprocessor, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
	A(regsPerMultiprocessor, MAX_REGISTERS_PER_MULTIPROCESSOR)
	A(managedMemory, MANAGED_MEMORY)
	A(isMultiGpuBoard, MULTI_GPU_BOARD)
	A(multiGpuBoardGroupID, MULTI_GPU_BOARD_GROUP_ID)
	A(hostNativeAtomicSupported, HOST_NATIVE_ATOMIC_SUPPORTED)
	A(pageableMemoryAccess, PAGEABLE_MEMORY_ACCESS)
	A(concurrentManagedAccess, CONCURRENT_MANAGED_ACCESS)
	A(computePreemptionSupported, COMPUTE_PREEMPTION_SUPPORTED)
	A(canUseHostPointerForRegisteredMem, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)
	A(cooperativeLaunch, COOPERATIVE_LAUNCH)
	A(sharedMemPerBlockOptin, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
	A(pageableMemoryAccessUsesHostPageTables, PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES)
	A(directManagedMemAccessFromHost, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST)
	A(maxBlocksPerMultiProcessor, MAX_BLOCKS_PER_MULTIPROCESSOR)
	A(accessPolicyMaxWindowSize, MAX_ACCESS_POLICY_WINDOW_SIZE)
	A(reservedSharedMemPerBlock, RESERVED_SHARED_MEMORY_PER_BLOCK)
	A(hostRegisterSupported, HOST_REGISTER_SUPPORTED)
	A(sparseCudaArraySupported, SPARSE_CUDA_ARRAY_SUPPORTED)
	A(hostRegisterReadOnlySupported, READ_ONLY_HOST_REGISTER_SUPPORTED)
	A(timelineSemaphoreInteropSupported, TIMELINE_SEMAPHORE_INTEROP_SUPPORTED)
	A(memoryPoolsSupported, MEMORY_POOLS_SUPPORTED)
	A(gpuDirectRDMASupported, GPU_DIRECT_RDMA_SUPPORTED)
	A(gpuDirectRDMAFlushWritesOptions, GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS)
	A(gpuDirectRDMAWritesOrdering, GPU_DIRECT_RDMA_WRITES_ORDERING)
	A(memoryPoolSupportedHandleTypes, MEMPOOL_SUPPORTED_HANDLE_TYPES)
	A(deferredMappingCudaArraySupported, DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED)
	A(ipcEventSupported, IPC_EVENT_SUPPORTED)
	A(clusterLaunch, CLUSTER_LAUNCH)
	A(unifiedFunctionPointers, UNIFIED_FUNCTION_POINTERS)
	A(deviceNumaConfig, NUMA_CONFIG)
	A(deviceNumaId, NUMA_ID)
	A(mpsEnabled, MPS_ENABLED)
	A(hostNumaId, HOST_NUMA_ID)
	A(gpuPciDeviceID, GPU_PCI_DEVICE_ID)
	A(gpuPciSubsystemID, GPU_PCI_SUBSYSTEM_ID)
#undef A
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *version)
{
	if (!version)
		return rt_note(cudaErrorInvalidValue);
	pthread_once(&init_once, load_driver);
	*version = 0;
	return rt_result(DRV(cuDriverGetVersion, 2020)(version));
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *version)
{
	if (!version)
		return rt_note(cudaErrorInvalidValue);
	*version = CUDART_VERSION;
	return cudaSuccess;
}

/* ---- memory ------------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	READY();
	if (!devPtr)
		return rt_note(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (size == 0) /* the runtime answers a zero-byte request with NULL and success */
		return cudaSuccess;
	return rt_result(DRV(cuMemAlloc, 3020)((CUdeviceptr *)devPtr, size));
}

cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	READY();
	if (!devPtr)
		return cudaSuccess;
	return rt_result(DRV(cuMemFree, 3020)((CUdeviceptr)devPtr));
}

cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	READY();
	if (!devPtr || !pitch)
		return rt_note(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (width == 0 || height == 0) {
		*pitch = 0;
		return cudaSuccess;
	}
	return rt_result(DRV(cuMemAllocPitch, 3020)((CUdeviceptr *)devPtr, pitch, width, height, 4));
}

cudaError_t CUDARTAPI cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
	size_t pitch = 0;
	void *p = NULL;
	cudaError_t e;

	if (!pitchedDevPtr)
		return rt_note(cudaErrorInvalidValue);
	if (extent.height && extent.depth > SIZE_MAX / extent.height)
		return rt_note(cudaErrorMemoryAllocation);
	e = cudaMallocPitch(&p, &pitch, extent.width, extent.height * extent.depth);
	if (e == cudaSuccess)
		*pitchedDevPtr = (struct cudaPitchedPtr){p, pitch, extent.width, extent.height};
	return e;
}

cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	READY();
	if (!devPtr)
		return rt_note(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (size == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemAllocManaged, 6000)((CUdeviceptr *)devPtr, size, flags));
}

cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	READY();
	if (!pHost)
		return rt_note(cudaErrorInvalidValue);
	*pHost = NULL;
	if (size == 0)
		return cudaSuccess;
	/* cudaHostAllocMapped and friends have the driver's CU_MEMHOSTALLOC_* values */
	return rt_result(DRV(cuMemHostAlloc, 2020)(pHost, size, flags));
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
	return rt_result(DRV(cuMemFreeHost, 2000)(ptr));
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	READY();
	return rt_result(DRV(cuMemGetInfo, 3020)(free_bytes, total));
}

/* ---- stream-ordered allocation ------------------------------------------------------------ */

static cudaError_t malloc_async(PFN_cuMemAllocAsync_v11020 fn, void **devPtr, size_t size, cudaStream_t s)
{
	READY();
	if (!devPtr)
		return rt_note(cudaErrorInvalidValue);
	return rt_result(fn((CUdeviceptr *)devPtr, size, (CUstream)s));
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
	return rt_result(fn((CUdeviceptr)devPtr, (CUstream)s));
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
		return rt_note(cudaErrorInvalidValue);
	return rt_result(fn((CUdeviceptr *)ptr, size, (CUmemoryPool)pool, (CUstream)s));
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
	return rt_result(DRV(cuDeviceGetDefaultMemPool, 11020)((CUmemoryPool *)memPool, device));
}

cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
	READY();
	return rt_result(DRV(cuDeviceGetMemPool, 11020)((CUmemoryPool *)memPool, device));
}

cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
	READY();
	return rt_result(DRV(cuDeviceSetMemPool, 11020)(device, (CUmemoryPool)memPool));
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *p)
{
	CUmemPoolProps props;

	READY();
	if (!p)
		return rt_note(cudaErrorInvalidValue);
	memset(&props, 0, sizeof props);
	props.allocType = (CUmemAllocationType)p->allocType;
	props.handleTypes = (CUmemAllocationHandleType)p->handleTypes;
	props.location.type = (CUmemLocationType)p->location.type;
	props.location.id = p->location.id;
	props.maxSize = p->maxSize;
	props.usage = p->usage;
	return rt_result(DRV(cuMemPoolCreate, 11020)((CUmemoryPool *)memPool, &props));
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	READY();
	return rt_result(DRV(cuMemPoolDestroy, 11020)((CUmemoryPool)memPool));
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	READY();
	return rt_result(DRV(cuMemPoolTrimTo, 11020)((CUmemoryPool)memPool, minBytesToKeep));
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	READY();
	return rt_result(DRV(cuMemPoolSetAttribute, 11020)((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	READY();
	return rt_result(DRV(cuMemPoolGetAttribute, 11020)((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

/* ---- streams ------------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	READY();
	return rt_result(DRV(cuStreamCreate, 2000)((CUstream *)pStream, flags));
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
	READY();
	return rt_result(DRV(cuStreamDestroy, 4000)((CUstream)stream));
}

cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags)
{
	READY();
	return rt_result(DRV(cuStreamGetFlags, 5050)((CUstream)stream, flags));
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
	READY();
	return rt_result(DRV(cuStreamSynchronize, 2000)((CUstream)stream));
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	READY();
	return rt_result(DRV_PT(cuStreamSynchronize, 7000, 2000)((CUstream)stream));
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
		return rt_note(cudaErrorInvalidValue);
	r = (private_gpa ? private_gpa : DRV(cuGetProcAddress, 12000))(symbol, funcPtr, (int)cudaVersion, flags, &st);
	if (driverStatus)
		*driverStatus = (enum cudaDriverEntryPointQueryResult)st;
	/* a missing symbol is reported through driverStatus, not as an error */
	return r == CUDA_ERROR_NOT_FOUND ? cudaSuccess : rt_result(r);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
					      enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

/* the twins a per-thread-default-stream build calls: its default is the per-thread stream */
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
							    unsigned int cudaVersion, unsigned long long flags,
							    enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion,
						flags == cudaEnableDefault ? cudaEnablePerThreadDefaultStream : flags,
						driverStatus);
}

cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
						   enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return cudaGetDriverEntryPointByVersion_ptsz(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

cudaError_t CUDARTAPI cudaProfilerStart(void)
{
	READY();
	return rt_result(DRV(cuProfilerStart, 4000)());
}

cudaError_t CUDARTAPI cudaProfilerStop(void)
{
	READY();
	return rt_result(DRV(cuProfilerStop, 4000)());
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
