/* The allocation paths of issue 22, each with sizes that say which path made it, run on
 * simgpu under memtap: `paths MODE`.
 *   freenull    cuMemFree(0), cudaFree(NULL), cuMemFreeHost(NULL), cuMemFreeAsync(0):
 *               none is a free; cudaMalloc of 0 bytes: nothing made; one allocation of
 *               22000001 bytes, freed
 *   arrays      cuArrayCreate 1600000 bytes, cuArray3DCreate 100000, cuMipmappedArrayCreate
 *               21504 (three levels), each destroyed
 *   register    cuMemHostRegister of 22000003 bytes, unregistered
 *   poolattr    the default pool's release threshold set to 64 MiB, opportunistic reuse off
 *   ipc         exports a 22000004-byte allocation (cuIpcGetMemHandle) and a 2 MiB VMM handle
 *               (a file descriptor), then runs `paths import HANDLE FD` by exec in a child,
 *               which opens, maps and closes both
 *   libraries DIR  loads DIR/libnccl.so.2 and DIR/libcublasLt.so.13 (built from memtap's
 *               own code) and allocates 10 MiB through the first, 20 MiB through the
 *               second, 5 MiB itself and 7 MiB through the runtime's own cudaMalloc
 *               (found with dlsym, so the runtime calls the driver); prints cuMemGetInfo's
 *               used memory ("used N") while all of it is live, then frees it
 *   graph       graph memory nodes through the driver API, each size once: 22000010 (an
 *               allocation node freed inside its graph, launched twice, then trimmed),
 *               22000011 (instantiated with an upload, launched, cuMemFree'd while its
 *               executable graph lives, then that is destroyed), 22000012 (outlives its
 *               executable graph, freed by another graph's free node), 22000013 (captured
 *               cuMemAllocAsync and cuMemFreeAsync, the executable graph destroyed) and
 *               22000014 (captured cudaMallocAsync, freed with cudaFreeAsync after
 *               the launch, then trimmed), 22000015 (captured, freed in the capture,
 *               then 11000016 captured: "reused 1" when the driver gave it the same
 *               address, as it did to PyTorch's captures on an H200; 11000016 freed
 *               with cudaFreeAsync after the launch); a graph needing more than the
 *               device has fails its launch with CUDA_ERROR_OUT_OF_MEMORY
 *   lookups     the entries at the versions NVIDIA's runtime asks cuGetProcAddress for,
 *               fetched as it does: graph memory nodes added with cuGraphAddNode (12020:
 *               22000020, freed by its own free node, trimmed; 12030: 22000021, freed
 *               with cuMemFree after its executable graph went), instantiated with
 *               cuGraphInstantiate (10000, 11000); then exports 22000022 (cuIpcGetMemHandle)
 *               and 22000023 from a shareable pool (cuMemPoolExportPointer) to `paths
 *               lookups-import IPC POOLFD PTR` by exec, which opens the first with
 *               cuIpcOpenMemHandle (4010) and imports the second (cuMemPoolImportPointer,
 *               11020), then closes and frees both
 *   entrypoints the driver functions PyTorch's expandable segments and NCCL take from the
 *               runtime (cudaGetDriverEntryPointByVersion at 12000: cuMemCreate of 12 MiB,
 *               reserved, mapped, unmapped, released; cudaGetDriverEntryPoint: cuMemAlloc
 *               of 22000030 bytes and cuMemFree) */
#define CUDA_ENABLE_DEPRECATED /* cudaGetDriverEntryPoint: applications still call it */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hex.h"

#define NOINLINE __attribute__((noinline))

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "paths: %s failed\n", what);
		failures++;
	}
}
#define CHECK_RT(call) check((call) == cudaSuccess, #call)
#define CHECK_DRV(call) check((call) == CUDA_SUCCESS, #call)

static void driver_context(void)
{
	CUcontext c;

	CHECK_DRV(cuInit(0));
	CHECK_DRV(cuDevicePrimaryCtxRetain(&c, 0));
	CHECK_DRV(cuCtxSetCurrent(c));
}

static void free_null(void)
{
	CUdeviceptr d;

	driver_context();
	CHECK_DRV(cuMemAlloc(&d, 22000001));
	{
		void *none = &d;
		CHECK_RT(cudaMalloc(&none, 0)); /* the runtime answers NULL: nothing is made */
	}
	cuMemFree(0); /* whatever the driver answers, nothing is freed */
	CHECK_RT(cudaFree(NULL));
	cuMemFreeHost(NULL);
	cuMemFreeAsync(0, NULL);
	CHECK_DRV(cuMemFree(d));
}

static void arrays(void)
{
	CUarray a, b;
	CUmipmappedArray m;
	CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 1000, .Height = 100, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	CUDA_ARRAY3D_DESCRIPTOR d3 = {
	    .Width = 100, .Height = 100, .Depth = 10, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
	CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_HALF, .NumChannels = 2};

	driver_context();
	CHECK_DRV(cuArrayCreate(&a, &d2));
	CHECK_DRV(cuArray3DCreate(&b, &d3));
	CHECK_DRV(cuMipmappedArrayCreate(&m, &dm, 3));
	CHECK_DRV(cuArrayDestroy(a));
	CHECK_DRV(cuArrayDestroy(b));
	CHECK_DRV(cuMipmappedArrayDestroy(m));
}

static void host_register(void)
{
	static char buf[22000003];

	driver_context();
	CHECK_DRV(cuMemHostRegister(buf, sizeof buf, CU_MEMHOSTREGISTER_PORTABLE));
	check(cuMemHostRegister(buf, 1, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "registering twice fails");
	CHECK_DRV(cuMemHostUnregister(buf));
}

static void pool_attributes(void)
{
	CUmemoryPool pool;
	cuuint64_t threshold = 64ull << 20;
	int off = 0;

	driver_context();
	CHECK_DRV(cuDeviceGetDefaultMemPool(&pool, 0));
	CHECK_DRV(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	CHECK_DRV(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
}

static void ipc_export(const char *self)
{
	CUdeviceptr d;
	CUipcMemHandle h;
	CUmemGenericAllocationHandle vmm;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	char hex[2 * sizeof h.reserved + 1], fd_text[16];
	int fd = -1, status;
	pid_t pid;

	driver_context();
	CHECK_DRV(cuMemAlloc(&d, 22000004));
	CHECK_DRV(cuIpcGetMemHandle(&h, d));
	CHECK_DRV(cuMemCreate(&vmm, 2 << 20, &prop, 0));
	CHECK_DRV(cuMemExportToShareableHandle(&fd, vmm, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	for (size_t i = 0; i < sizeof h.reserved; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
	snprintf(fd_text, sizeof fd_text, "%d", fd);
	fflush(NULL);
	if ((pid = fork()) == 0) {
		execl(self, self, "import", hex, fd_text, (char *)NULL);
		_exit(127);
	}
	check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the importing child");
	CHECK_DRV(cuMemRelease(vmm));
	CHECK_DRV(cuMemFree(d));
}

static NOINLINE void ipc_import(const char *hex, int fd)
{
	CUipcMemHandle h = {{0}};
	CUdeviceptr d, va;
	CUmemGenericAllocationHandle vmm;

	for (size_t i = 0; i < sizeof h.reserved && hex[2 * i] && hex[2 * i + 1]; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		h.reserved[i] = (char)v;
	}
	driver_context();
	CHECK_DRV(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CHECK_DRV(cuIpcCloseMemHandle(d));
	CHECK_DRV(cuMemImportFromShareableHandle(&vmm, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CHECK_DRV(cuMemAddressReserve(&va, 2 << 20, 0, 0, 0));
	CHECK_DRV(cuMemMap(va, 2 << 20, 0, vmm, 0));
	CHECK_DRV(cuMemUnmap(va, 2 << 20));
	CHECK_DRV(cuMemRelease(vmm));
	CHECK_DRV(cuMemAddressFree(va, 2 << 20));
}

static void libraries(const char *dir)
{
	static const char *const names[2] = {"libnccl.so.2", "libcublasLt.so.13"};
	static const char *const entries[2] = {"nccl_buffers", "cublaslt_workspace"};
	CUdeviceptr d[3];
	size_t free_bytes, total;
	char path[4096];
	void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD), *p = NULL;
	cudaError_t (*rt_malloc)(void **, size_t) =
	    rt ? (cudaError_t(*)(void **, size_t))dlsym(rt, "cudaMalloc") : NULL;

	driver_context();
	CHECK_DRV(cuMemAlloc(&d[0], 5 << 20));
	check(rt_malloc && rt_malloc(&p, 7 << 20) == cudaSuccess, "the runtime's own cudaMalloc");
	for (int i = 0; i < 2; i++) {
		void *lib;
		CUresult (*alloc)(CUdeviceptr *, size_t);
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		lib = dlopen(path, RTLD_NOW);
		alloc = lib ? (CUresult(*)(CUdeviceptr *, size_t))dlsym(lib, entries[i]) : NULL;
		check(alloc != NULL, path);
		if (alloc)
			CHECK_DRV(alloc(&d[i + 1], (size_t)(i + 1) * (10 << 20)));
	}
	CHECK_DRV(cuMemGetInfo(&free_bytes, &total));
	printf("used %zu\n", total - free_bytes);
	for (int i = 0; i < 3; i++)
		CHECK_DRV(cuMemFree(d[i]));
	CHECK_DRV(cuMemFree((CUdeviceptr)p));
}

static NOINLINE CUgraphNode alloc_node(CUgraph g, size_t size, CUdeviceptr *dptr)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
						      .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
					.bytesize = size};
	CUgraphNode n = NULL;

	CHECK_DRV(cuGraphAddMemAllocNode(&n, g, NULL, 0, &p));
	*dptr = p.dptr;
	return n;
}

static void graph_nodes(void)
{
	CUstream s;
	CUgraph g1, g2, g3, g4, g5, g6, big;
	CUgraphExec x1, x2, x3, x4, x5, x6, xbig;
	CUgraphNode a, f;
	CUdeviceptr d1, d2, d3, d4, huge;
	CUDA_GRAPH_INSTANTIATE_PARAMS up = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD};
	size_t free_bytes, total;

	driver_context();
	CHECK_DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	/* allocated and freed inside the graph: the memory stays with it until trimmed */
	CHECK_DRV(cuGraphCreate(&g1, 0));
	a = alloc_node(g1, 22000010, &d1);
	CHECK_DRV(cuGraphAddMemFreeNode(&f, g1, &a, 1, d1));
	CHECK_DRV(cuGraphInstantiateWithFlags(&x1, g1, 0));
	CHECK_DRV(cuGraphLaunch(x1, s));
	CHECK_DRV(cuGraphLaunch(x1, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuDeviceGraphMemTrim(0));

	/* reserved by the upload, freed outside the graph: the memory goes with the executable graph */
	CHECK_DRV(cuGraphCreate(&g2, 0));
	alloc_node(g2, 22000011, &d2);
	up.hUploadStream = s;
	CHECK_DRV(cuGraphInstantiateWithParams(&x2, g2, &up));
	CHECK_DRV(cuGraphLaunch(x2, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuMemFree(d2));
	CHECK_DRV(cuGraphExecDestroy(x2));
	CHECK_DRV(cuGraphDestroy(g2));

	/* outlives its executable graph; another graph's free node frees it */
	CHECK_DRV(cuGraphCreate(&g3, 0));
	alloc_node(g3, 22000012, &d3);
	CHECK_DRV(cuGraphInstantiateWithFlags(&x3, g3, 0));
	CHECK_DRV(cuGraphLaunch(x3, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuGraphExecDestroy(x3));
	CHECK_DRV(cuGraphDestroy(g3));
	CHECK_DRV(cuGraphCreate(&g4, 0));
	CHECK_DRV(cuGraphAddMemFreeNode(&f, g4, NULL, 0, d3));
	CHECK_DRV(cuGraphInstantiateWithFlags(&x4, g4, 0));
	CHECK_DRV(cuGraphLaunch(x4, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuGraphExecDestroy(x4));
	CHECK_DRV(cuGraphDestroy(g4));

	/* captured: cuMemAllocAsync and cuMemFreeAsync become nodes, not allocations */
	CHECK_DRV(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK_DRV(cuMemAllocAsync(&d4, 22000013, s));
	CHECK_DRV(cuMemFreeAsync(d4, s));
	CHECK_DRV(cuStreamEndCapture(s, &g5));
	CHECK_DRV(cuGraphInstantiateWithFlags(&x5, g5, 0));
	CHECK_DRV(cuGraphLaunch(x5, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuGraphExecDestroy(x5));
	CHECK_DRV(cuGraphDestroy(g5));

	/* captured through the runtime, freed after the launch */
	{
		void *p = NULL;
		cudaStream_t rs = (cudaStream_t)s;
		CHECK_RT(cudaStreamBeginCapture(rs, cudaStreamCaptureModeGlobal));
		CHECK_RT(cudaMallocAsync(&p, 22000014, rs));
		CHECK_RT(cudaStreamEndCapture(rs, (cudaGraph_t *)&g6));
		CHECK_DRV(cuGraphInstantiateWithFlags(&x6, g6, 0));
		CHECK_DRV(cuGraphLaunch(x6, s));
		CHECK_RT(cudaFreeAsync(p, rs));
		CHECK_RT(cudaStreamSynchronize(rs));
		CHECK_RT(cudaDeviceGraphMemTrim(0));
		CHECK_DRV(cuGraphExecDestroy(x6));
		CHECK_DRV(cuGraphDestroy(g6));
	}

	/* an address the capture freed, given to its next allocation */
	{
		void *p = NULL, *q = NULL;
		cudaStream_t rs = (cudaStream_t)s;
		CHECK_RT(cudaStreamBeginCapture(rs, cudaStreamCaptureModeGlobal));
		CHECK_RT(cudaMallocAsync(&p, 22000015, rs));
		CHECK_RT(cudaFreeAsync(p, rs));
		CHECK_RT(cudaMallocAsync(&q, 11000016, rs));
		CHECK_RT(cudaStreamEndCapture(rs, (cudaGraph_t *)&g6));
		printf("reused %d\n", p == q);
		CHECK_DRV(cuGraphInstantiateWithFlags(&x6, g6, 0));
		CHECK_DRV(cuGraphLaunch(x6, s));
		CHECK_RT(cudaFreeAsync(q, rs));
		CHECK_RT(cudaStreamSynchronize(rs));
		CHECK_DRV(cuGraphExecDestroy(x6));
		CHECK_DRV(cuGraphDestroy(g6));
		CHECK_RT(cudaDeviceGraphMemTrim(0));
	}

	/* more than the device has: the launch fails, nothing is allocated */
	CHECK_DRV(cuMemGetInfo(&free_bytes, &total));
	CHECK_DRV(cuGraphCreate(&big, 0));
	alloc_node(big, total + (1 << 20), &huge);
	CHECK_DRV(cuGraphInstantiateWithFlags(&xbig, big, 0));
	check(cuGraphLaunch(xbig, s) == CUDA_ERROR_OUT_OF_MEMORY, "a launch past the device fails");
	CHECK_DRV(cuGraphExecDestroy(xbig));
	CHECK_DRV(cuGraphDestroy(big));

	CHECK_DRV(cuGraphExecDestroy(x1));
	CHECK_DRV(cuGraphDestroy(g1));
	CHECK_DRV(cuStreamDestroy(s));
}

/* A driver function as the runtime gets it: through the cuGetProcAddress_v2 its dlsym gives. */
static void *lookup(const char *name, int version)
{
	static PFN_cuGetProcAddress_v12000 gpa;
	CUdriverProcAddressQueryResult st;
	void *fn = NULL, *drv;

	if (!gpa && (drv = dlopen("libcuda.so.1", RTLD_NOW)))
		gpa = (PFN_cuGetProcAddress_v12000)dlsym(drv, "cuGetProcAddress_v2");
	check(gpa && gpa(name, &fn, version, 0, &st) == CUDA_SUCCESS && fn, name);
	return fn;
}

/* cuGraphInstantiate's CUDA 10 and 11 ABI, which cudaTypedefs.h keeps for the driver's own build */
typedef CUresult(CUDAAPI *instantiate_logged)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

static NOINLINE CUgraphNode add_node(CUgraph g, const CUgraphNode *dep, CUgraphNodeParams *p)
{
	PFN_cuGraphAddNode_v12020 add = (PFN_cuGraphAddNode_v12020)lookup("cuGraphAddNode", 12020);
	CUgraphNode n = NULL;

	check(add && add(&n, g, dep, dep ? 1 : 0, p) == CUDA_SUCCESS, "cuGraphAddNode at 12020");
	return n;
}

static void lookups(const char *self)
{
	PFN_cuGraphAddNode_v12030 add2 = (PFN_cuGraphAddNode_v12030)lookup("cuGraphAddNode", 12030);
	instantiate_logged inst1 = (instantiate_logged)lookup("cuGraphInstantiate", 10000);
	instantiate_logged inst2 = (instantiate_logged)lookup("cuGraphInstantiate", 11000);
	CUgraphNodeParams alloc = {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
				   .alloc = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
							   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
					     .bytesize = 22000020}};
	CUgraphNodeParams release = {.type = CU_GRAPH_NODE_TYPE_MEM_FREE};
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUgraph g1, g2;
	CUgraphExec x1, x2;
	CUgraphNode a, n;
	CUstream s;
	CUdeviceptr d, p;
	CUmemoryPool pool;
	CUipcMemHandle h;
	CUmemPoolPtrExportData data;
	char ipc_hex[2 * sizeof h + 1], ptr_hex[2 * sizeof data + 1], fd_text[16];
	int fd = -1, status;
	pid_t pid;

	driver_context();
	CHECK_DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK_DRV(cuGraphCreate(&g1, 0));
	a = add_node(g1, NULL, &alloc);
	release.free.dptr = alloc.alloc.dptr;
	add_node(g1, &a, &release);
	check(inst1 && inst1(&x1, g1, NULL, NULL, 0) == CUDA_SUCCESS, "cuGraphInstantiate at 10000");
	CHECK_DRV(cuGraphLaunch(x1, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuDeviceGraphMemTrim(0));

	CHECK_DRV(cuGraphCreate(&g2, 0));
	alloc.alloc.bytesize = 22000021;
	check(add2 && add2(&n, g2, NULL, NULL, 0, &alloc) == CUDA_SUCCESS, "cuGraphAddNode at 12030");
	check(inst2 && inst2(&x2, g2, NULL, NULL, 0) == CUDA_SUCCESS, "cuGraphInstantiate at 11000");
	CHECK_DRV(cuGraphLaunch(x2, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuGraphExecDestroy(x2));
	CHECK_DRV(cuGraphDestroy(g2));
	CHECK_DRV(cuMemFree(alloc.alloc.dptr));
	CHECK_DRV(cuGraphExecDestroy(x1));
	CHECK_DRV(cuGraphDestroy(g1));

	CHECK_DRV(cuMemAlloc(&d, 22000022));
	CHECK_DRV(cuIpcGetMemHandle(&h, d));
	CHECK_DRV(cuMemPoolCreate(&pool, &props));
	CHECK_DRV(cuMemAllocFromPoolAsync(&p, 22000023, pool, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK_DRV(cuMemPoolExportPointer(&data, p));
	to_hex(&h, sizeof h, ipc_hex);
	to_hex(&data, sizeof data, ptr_hex);
	snprintf(fd_text, sizeof fd_text, "%d", fd);
	fflush(NULL);
	if ((pid = fork()) == 0) {
		execl(self, self, "lookups-import", ipc_hex, fd_text, ptr_hex, (char *)NULL);
		_exit(127);
	}
	check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the importing child");
	CHECK_DRV(cuMemFreeAsync(p, s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuMemPoolDestroy(pool));
	CHECK_DRV(cuMemFree(d));
	CHECK_DRV(cuStreamDestroy(s));
}

static NOINLINE void lookups_import(const char *ipc_hex, int fd, const char *ptr_hex)
{
	PFN_cuIpcOpenMemHandle_v11000 open1;
	PFN_cuMemPoolImportPointer_v11020 import;
	CUipcMemHandle h = {{0}};
	CUmemPoolPtrExportData data = {{0}};
	CUmemoryPool pool;
	CUdeviceptr d, p;

	from_hex(ipc_hex, &h, sizeof h);
	from_hex(ptr_hex, &data, sizeof data);
	driver_context();
	/* the CUDA 4.1 ABI takes what the 11.0 one takes */
	open1 = (PFN_cuIpcOpenMemHandle_v11000)lookup("cuIpcOpenMemHandle", 4010);
	import = (PFN_cuMemPoolImportPointer_v11020)lookup("cuMemPoolImportPointer", 11020);
	check(open1 && open1(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS, "cuIpcOpenMemHandle at 4010");
	CHECK_DRV(cuIpcCloseMemHandle(d));
	CHECK_DRV(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
						     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	check(import && import(&p, pool, &data) == CUDA_SUCCESS, "cuMemPoolImportPointer");
	CHECK_DRV(cuMemFree(p));
	CHECK_DRV(cuMemPoolDestroy(pool));
}

static void *entry(const char *name)
{
	enum cudaDriverEntryPointQueryResult st;
	void *fn = NULL;

	check(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &st) == cudaSuccess && fn, name);
	return fn;
}

static NOINLINE void entry_points(void)
{
	PFN_cuMemCreate_v10020 create = (PFN_cuMemCreate_v10020)entry("cuMemCreate");
	PFN_cuMemAddressReserve_v10020 reserve = (PFN_cuMemAddressReserve_v10020)entry("cuMemAddressReserve");
	PFN_cuMemMap_v10020 map = (PFN_cuMemMap_v10020)entry("cuMemMap");
	PFN_cuMemUnmap_v10020 unmap = (PFN_cuMemUnmap_v10020)entry("cuMemUnmap");
	PFN_cuMemRelease_v10020 release = (PFN_cuMemRelease_v10020)entry("cuMemRelease");
	PFN_cuMemAddressFree_v10020 addr_free = (PFN_cuMemAddressFree_v10020)entry("cuMemAddressFree");
	PFN_cuMemAlloc_v3020 alloc = NULL;
	PFN_cuMemFree_v3020 release_alloc = NULL;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemGenericAllocationHandle h;
	CUdeviceptr va, d;
	enum cudaDriverEntryPointQueryResult st;

	CHECK_RT(cudaSetDevice(0));
	CHECK_RT(cudaFree(NULL)); /* the runtime's context, current */
	check(create && reserve && map && unmap && release && addr_free, "the VMM entry points");
	if (!create || !reserve || !map || !unmap || !release || !addr_free)
		return;
	CHECK_DRV(create(&h, 12 << 20, &prop, 0));
	CHECK_DRV(reserve(&va, 12 << 20, 0, 0, 0));
	CHECK_DRV(map(va, 12 << 20, 0, h, 0));
	CHECK_DRV(unmap(va, 12 << 20));
	CHECK_DRV(release(h));
	CHECK_DRV(addr_free(va, 12 << 20));
	CHECK_RT(cudaGetDriverEntryPoint("cuMemAlloc", (void **)&alloc, cudaEnableDefault, &st));
	CHECK_RT(cudaGetDriverEntryPoint("cuMemFree", (void **)&release_alloc, cudaEnableDefault, &st));
	check(alloc && release_alloc, "cuMemAlloc and cuMemFree through cudaGetDriverEntryPoint");
	if (alloc && release_alloc) {
		CHECK_DRV(alloc(&d, 22000030));
		CHECK_DRV(release_alloc(d));
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "freenull"))
		free_null();
	else if (!strcmp(mode, "arrays"))
		arrays();
	else if (!strcmp(mode, "register"))
		host_register();
	else if (!strcmp(mode, "poolattr"))
		pool_attributes();
	else if (!strcmp(mode, "graph"))
		graph_nodes();
	else if (!strcmp(mode, "ipc"))
		ipc_export(argv[0]);
	else if (!strcmp(mode, "libraries") && argc > 2)
		libraries(argv[2]);
	else if (!strcmp(mode, "import") && argc > 3)
		ipc_import(argv[2], atoi(argv[3]));
	else if (!strcmp(mode, "entrypoints"))
		entry_points();
	else if (!strcmp(mode, "lookups"))
		lookups(argv[0]);
	else if (!strcmp(mode, "lookups-import") && argc > 4)
		lookups_import(argv[2], atoi(argv[3]), argv[4]);
	else {
		fprintf(stderr, "usage: paths MODE (see the comment at the top of paths.c)\n");
		return 2;
	}
	return failures ? 1 : 0;
}
