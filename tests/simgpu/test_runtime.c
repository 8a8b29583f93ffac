/* simgpu's runtime API against the real cuda_runtime_api.h, linked against simgpu's
 * libcudart only: it reaches the driver by itself. With --print-addresses it prints
 * the pointers it gets, for the determinism test. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"

#define MiB (1ull << 20)

/* exported by the runtime, declared only for CUDA_API_PER_THREAD_DEFAULT_STREAM builds */
cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *, cudaStream_t);

/* what nvcc's generated code calls (crt/host_runtime.h), for the registration tests */
void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void **handle);
void CUDARTAPI __cudaUnregisterFatBinary(void **handle);
void CUDARTAPI __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
				      int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
void CUDARTAPI __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
				 size_t size, int constant, int global);
unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *s);
cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream);

static size_t free_mem(void)
{
	size_t f = 0, t = 0;
	cudaMemGetInfo(&f, &t);
	return f;
}

static int print_addresses(void)
{
	void *p[8];
	for (int i = 0; i < 8; i++) {
		cudaMalloc(&p[i], (size_t)(i + 1) * 1000);
		printf("%p\n", p[i]);
	}
	for (int i = 0; i < 8; i += 2)
		cudaFree(p[i]);
	for (int i = 0; i < 4; i++) {
		cudaMalloc(&p[i], 512);
		printf("%p\n", p[i]);
	}
	return 0;
}

static void basics(void)
{
	int n = 0, d = -1, v = 0;
	void *p = (void *)1;
	size_t base;

	is(cudaGetDeviceCount(&n), cudaSuccess, "cudaGetDeviceCount");
	is(n, 2, "two devices");
	cudaGetDevice(&d);
	is(d, 0, "device 0 is current by default");
	cudaRuntimeGetVersion(&v);
	is(v, 13000, "runtime version");
	cudaDriverGetVersion(&v);
	is(v, 13000, "driver version");
	base = free_mem();
	is(base, 1ull << 30, "cudaMemGetInfo: device 0 capacity");
	is(cudaMalloc(&p, 0), cudaSuccess, "cudaMalloc of zero bytes");
	ok(p == NULL, "gives NULL");
	is(cudaMalloc(&p, 1 * MiB), cudaSuccess, "cudaMalloc");
	is(free_mem(), base - MiB, "charged");
	is(cudaFree(p), cudaSuccess, "cudaFree");
	is(cudaFree(NULL), cudaSuccess, "cudaFree(NULL)");
	is(cudaFree(p), cudaErrorInvalidValue, "double free");
	is(cudaGetLastError(), cudaErrorInvalidValue, "cudaGetLastError reports it");
	is(cudaGetLastError(), cudaSuccess, "and resets");
	is(cudaMalloc(NULL, 16), cudaErrorInvalidValue, "null out-pointer");
	is(cudaPeekAtLastError(), cudaErrorInvalidValue, "cudaPeekAtLastError");
	is(cudaPeekAtLastError(), cudaErrorInvalidValue, "does not reset");
	cudaGetLastError();
	is(cudaMalloc(&p, 2ull << 30), cudaErrorMemoryAllocation, "out of memory");
	ok(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0, "cudaGetErrorName");
	ok(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0, "cudaGetErrorString");
	is(free_mem(), base, "nothing leaked");
	cudaGetLastError();
}

static void devices(void)
{
	void *p;
	size_t f = 0, t = 0;
	int attr = 0;

	is(cudaSetDevice(5), cudaErrorInvalidDevice, "cudaSetDevice out of range");
	is(cudaSetDevice(1), cudaSuccess, "cudaSetDevice(1)");
	cudaMalloc(&p, 4 * MiB);
	cudaMemGetInfo(&f, &t);
	is(t - f, 4 * MiB, "device 1 charged");
	cudaFree(p);
	cudaSetDevice(0);
	is(free_mem(), 1ull << 30, "device 0 untouched");
	is(cudaDeviceGetAttribute(&attr, cudaDevAttrMemoryPoolsSupported, 0), cudaSuccess, "cudaDeviceGetAttribute");
	is(attr, 1, "pools supported");
	is(cudaDeviceSynchronize(), cudaSuccess, "cudaDeviceSynchronize");
	is(cudaProfilerStart(), cudaSuccess, "cudaProfilerStart");
	is(cudaProfilerStop(), cudaSuccess, "cudaProfilerStop");
}

static void other_kinds(void)
{
	void *p, *h;
	size_t pitch = 0, base = free_mem();
	struct cudaPitchedPtr pp;

	is(cudaMallocPitch(&p, &pitch, 1000, 8), cudaSuccess, "cudaMallocPitch");
	is(free_mem(), base - pitch * 8, "pitch x height charged");
	cudaFree(p);
	is(cudaMalloc3D(&pp, (struct cudaExtent){100, 4, 3}), cudaSuccess, "cudaMalloc3D");
	ok(pp.pitch >= 100 && pp.xsize == 100 && pp.ysize == 4, "pitched pointer filled in");
	is(free_mem(), base - pp.pitch * 12, "pitch x height x depth charged");
	cudaFree(pp.ptr);
	is(cudaMallocManaged(&p, 4 * MiB, cudaMemAttachGlobal), cudaSuccess, "cudaMallocManaged");
	memset(p, 1, 4096);
	cudaFree(p);
	is(cudaMallocHost(&h, 1 * MiB), cudaSuccess, "cudaMallocHost");
	memset(h, 2, MiB);
	is(cudaFreeHost(h), cudaSuccess, "cudaFreeHost");
	is(cudaHostAlloc(&h, 4096, cudaHostAllocPortable | cudaHostAllocMapped), cudaSuccess, "cudaHostAlloc");
	is(cudaFree(h), cudaErrorInvalidValue, "cudaFree of pinned host memory");
	cudaGetLastError();
	cudaFreeHost(h);
	is(free_mem(), base, "all returned");
}

static void async(void)
{
	cudaStream_t s;
	cudaMemPool_t pool, mine;
	void *p, *q;
	cuuint64_t used = 1;
	size_t base = free_mem();
	struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
					 .location = {.type = cudaMemLocationTypeDevice, .id = 0}};

	is(cudaStreamCreate(&s), cudaSuccess, "cudaStreamCreate");
	is(cudaMallocAsync(&p, 8 * MiB, s), cudaSuccess, "cudaMallocAsync");
	is(cudaMallocAsync_ptsz(&q, 8 * MiB, NULL), cudaSuccess, "cudaMallocAsync_ptsz");
	cudaFreeAsync(p, s);
	cudaFreeAsync_ptsz(q, NULL);
	cudaDeviceGetDefaultMemPool(&pool, 0);
	cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
	is(used, 0, "pool empty after frees");
	is(cudaStreamSynchronize(s), cudaSuccess, "cudaStreamSynchronize");
	is(free_mem(), base, "pool released at sync");
	is(cudaMemPoolCreate(&mine, &props), cudaSuccess, "cudaMemPoolCreate");
	is(cudaMallocFromPoolAsync(&p, MiB, mine, s), cudaSuccess, "cudaMallocFromPoolAsync");
	cudaFreeAsync(p, s);
	is(cudaMemPoolTrimTo(mine, 0), cudaSuccess, "cudaMemPoolTrimTo");
	is(cudaMemPoolDestroy(mine), cudaSuccess, "cudaMemPoolDestroy");
	is(cudaStreamDestroy(s), cudaSuccess, "cudaStreamDestroy");
	is(free_mem(), base, "all returned");
}

static void entry_points(void)
{
	enum cudaDriverEntryPointQueryResult st;
	PFN_cuMemCreate_v10020 create = NULL;
	PFN_cuMemRelease_v10020 release = NULL;
	void *fn = NULL;
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	size_t base = free_mem();

	is(cudaGetDriverEntryPointByVersion("cuMemCreate", (void **)&create, 12000, cudaEnableDefault, &st),
	   cudaSuccess, "cudaGetDriverEntryPointByVersion(cuMemCreate)");
	ok(create && st == cudaDriverEntryPointSuccess, "found");
	cudaGetDriverEntryPointByVersion("cuMemRelease", (void **)&release, 12000, cudaEnableDefault, &st);
	is(create(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS, "cuMemCreate through the entry point");
	is(free_mem(), base - 2 * MiB, "VMM memory shows in cudaMemGetInfo");
	release(h);
	is(cudaGetDriverEntryPointByVersion("cuNope", &fn, 12000, cudaEnableDefault, &st), cudaSuccess,
	   "an unknown symbol is not an error");
	is(st, cudaDriverEntryPointSymbolNotFound, "but its status says so");
}

/* Registration as nvcc's host code does it, with no nvcc: a kernel stub and a variable
 * shadow stand for what nvcc would generate. */
static void kernel_stub(void)
{
}

static float shadow[8];
static int host_calls;

static void CUDART_CB on_host(void *data)
{
	(void)data;
	host_calls++;
}

static void registration(void)
{
	static char fatbin[16];
	void **h = __cudaRegisterFatBinary(fatbin);
	float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
	void *addr = NULL, *args[1];
	size_t size = 0, smem = 1;
	cudaKernel_t k = NULL;
	dim3 g, b;
	cudaStream_t s = (cudaStream_t)1;

	ok(h != NULL, "__cudaRegisterFatBinary gives a handle");
	__cudaRegisterFunction(h, (const char *)kernel_stub, (char *)"_Z4stubv", "_Z4stubv", -1, NULL, NULL, NULL, NULL,
			       NULL);
	__cudaRegisterVar(h, (char *)shadow, (char *)"table", "table", 0, sizeof shadow, 0, 0);
	__cudaRegisterFatBinaryEnd(h);
	is(cudaGetSymbolAddress(&addr, shadow), cudaSuccess, "a registered variable has device memory");
	cudaGetSymbolSize(&size, shadow);
	is(size, sizeof shadow, "of its registered size");
	is(cudaMemcpyToSymbol(shadow, in, sizeof in, 0, cudaMemcpyHostToDevice), cudaSuccess, "cudaMemcpyToSymbol");
	is(cudaMemcpyToSymbol(shadow, in, sizeof in, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
	   "past the variable's end");
	cudaGetLastError();
	is(cudaMemcpyFromSymbol(out, shadow, sizeof out, 0, cudaMemcpyDeviceToHost), cudaSuccess,
	   "cudaMemcpyFromSymbol (device memory reads as zeros)");
	is(cudaGetSymbolAddress(&addr, in), cudaErrorInvalidSymbol, "an unregistered symbol");
	cudaGetLastError();
	is(__cudaPushCallConfiguration((dim3){4, 1, 1}, (dim3){128, 1, 1}, 64, NULL), 0, "<<<4, 128, 64>>> pushed");
	is(__cudaPopCallConfiguration(&g, &b, &smem, &s), cudaSuccess, "and popped");
	ok(g.x == 4 && b.x == 128 && smem == 64 && s == NULL, "with its grid, block, shared memory and stream");
	is(__cudaPopCallConfiguration(&g, &b, &smem, &s), cudaErrorMissingConfiguration, "nothing left to pop");
	cudaGetLastError();
	is(__cudaGetKernel(&k, (const void *)kernel_stub), cudaSuccess, "__cudaGetKernel");
	args[0] = &addr;
	is(__cudaLaunchKernel(k, g, b, args, smem, NULL), cudaSuccess, "__cudaLaunchKernel");
	is(cudaLaunchKernel((const void *)kernel_stub, (dim3){1, 1, 1}, (dim3){2048, 1, 1}, args, 0, NULL),
	   cudaErrorInvalidValue, "2048 threads a block: an invalid value, as CUDA 13's runtime says");
	is(cudaGetLastError(), cudaErrorInvalidValue, "kept as the last error");
	is(cudaLaunchKernel((const void *)registration, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
	   cudaErrorInvalidDeviceFunction, "an unregistered function");
	cudaGetLastError();

	/* events time the host; capture and a graph with an allocation node */
	{
		cudaEvent_t e0, e1;
		cudaGraph_t graph;
		cudaGraphExec_t exec;
		cudaStream_t st;
		float ms = -1;
		void *p = NULL;
		size_t used = 1;

		cudaStreamCreate(&st);
		cudaEventCreate(&e0);
		cudaEventCreate(&e1);
		cudaEventRecord(e0, st);
		cudaEventRecord(e1, st);
		is(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess, "cudaEventElapsedTime");
		ok(ms >= 0, "a non-negative interval");
		is(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess, "capture begins");
		is(cudaMallocAsync(&p, 4 * MiB, st), cudaSuccess, "cudaMallocAsync in a capture");
		is(__cudaLaunchKernel(k, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, st), cudaSuccess,
		   "a captured launch");
		is(cudaLaunchHostFunc(st, on_host, NULL), cudaSuccess, "a captured host function");
		is(cudaFreeAsync(p, st), cudaSuccess, "cudaFreeAsync in a capture");
		is(cudaStreamEndCapture(st, &graph), cudaSuccess, "capture ends");
		is(host_calls, 0, "the host function was captured, not called");
		is(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess, "cudaGraphInstantiate");
		is(cudaGraphLaunch(exec, st), cudaSuccess, "cudaGraphLaunch");
		cudaStreamSynchronize(st);
		is(host_calls, 1, "the launch called the host function");
		cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &used);
		ok(used >= 4 * MiB, "the graph keeps its freed allocation's memory");
		is(cudaDeviceGraphMemTrim(0), cudaSuccess, "cudaDeviceGraphMemTrim");
		cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &used);
		is(used, 0, "and gives it back");
		cudaGraphExecDestroy(exec);
		cudaGraphDestroy(graph);
		cudaEventDestroy(e0);
		cudaEventDestroy(e1);
		cudaStreamDestroy(st);
	}
	{
		struct cudaDeviceProp prop;
		is(cudaGetDeviceProperties(&prop, 0), cudaSuccess, "cudaGetDeviceProperties");
		ok(prop.major == 9 && prop.multiProcessorCount == 132 && prop.totalGlobalMem == 1024 * MiB,
		   "from the attribute table and the device's memory");
	}
	__cudaUnregisterFatBinary(h);
}

int main(int argc, char **argv)
{
	setenv("SIMGPU_DEVICES", "2", 0);
	setenv("SIMGPU_MEM", "1GiB", 0);
	if (argc > 1 && strcmp(argv[1], "--print-addresses") == 0)
		return print_addresses();
	basics();
	devices();
	other_kinds();
	async();
	entry_points();
	registration();
	return done();
}
