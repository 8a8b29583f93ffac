/* Every entry point memtap hooks (src/recorder/driver_hooks.def, runtime_hooks.def),
 * called on simgpu with a distinct value for each argument that memtap records: sizes of
 * their own, two streams, pools that are not the streams, flags that are not 0 or 1, the
 * current device 1 and device 2 where an argument names a device (SIMGPU_DEVICES=3).
 * Each call prints one line, `NAME key=value ...`, with what it passed and what came back
 * (decimal), and for graph calls the graph memory it backs or frees (`backs=`, `frees=`),
 * after a `process pid=N` line naming the process whose trace holds it;
 * test_args.py makes the events memtap must record from these lines and holds the trace
 * to them field by field. A line with `spare=1` only pads simgpu's handle numbers.
 *   args          the driver's entry points (-lcuda), then the runtime's
 *   args import HEX FD POOLFD PTR   run by exec from `args`: opens the IPC handle HEX
 *                 (flags 1) with each ABI, imports the shareable handle FD, and the pool
 *                 allocation PTR (hex) from the pool shared as POOLFD, then closes them all
 *   args cached   under memtap run --allocator=caching: the runtime's entry points, which
 *                 memtap's caching allocator serves, and PyTorch's pluggable entry points
 *                 (memtap_alloc, memtap_free, memtap_record_stream) on device 2 */
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

#define MiB (1ull << 20)

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *, cudaStream_t);
cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *, void **, unsigned long long,
						   enum cudaDriverEntryPointQueryResult *);
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(const char *, void **, unsigned int, unsigned long long,
							    enum cudaDriverEntryPointQueryResult *);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec, CUstream);

/* cuGraphInstantiate's CUDA 10 and 11 ABI, which cudaTypedefs.h keeps for the driver's own build */
typedef CUresult(CUDAAPI *instantiate_logged)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "args: %s failed\n", what);
		failures++;
	}
}
#define CHECK_RT(call) check((call) == cudaSuccess, #call)
#define CHECK_DRV(call) check((call) == CUDA_SUCCESS, #call)
#define U(x) ((unsigned long long)(uintptr_t)(x))

/* A driver entry point at the version NVIDIA's runtime looks it up (memtap's cuGetProcAddress) */
static void *lookup(const char *name, int version)
{
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;

	check(cuGetProcAddress(name, &fn, version, 0, &st) == CUDA_SUCCESS && fn, name);
	return fn;
}

enum { CURRENT = 1, OTHER = 2 }; /* the current device, and the device an argument names */

static const CUmemLocation other = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = OTHER};
static const CUmemLocation current = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CURRENT};

/* ---- plain, pitched, managed, pinned, stream-ordered, pools ---- */

static void driver_memory(CUstream s1, CUstream s2)
{
	CUdeviceptr d[9];
	void *h[2];
	size_t pitch, free_bytes, total;
	CUmemoryPool pool, far;
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = current};
	CUmemPoolProps far_props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = other};
	cuuint64_t threshold = 64 * MiB + 5;
	int reuse = 1;

	CHECK_DRV(cuMemAlloc(&d[0], 24000001));
	printf("cuMemAlloc_v2 addr=%llu size=24000001\n", U(d[0]));
	CHECK_DRV(cuMemAllocPitch(&d[1], &pitch, 3000, 70, 8));
	printf("cuMemAllocPitch_v2 addr=%llu width=3000 height=70 elem=8 pitch=%zu\n", U(d[1]), pitch);
	CHECK_DRV(cuMemAllocManaged(&d[2], 24000003, CU_MEM_ATTACH_HOST));
	printf("cuMemAllocManaged addr=%llu size=24000003 flags=%d\n", U(d[2]), CU_MEM_ATTACH_HOST);
	CHECK_DRV(cuMemHostAlloc(&h[0], 24000004, CU_MEMHOSTALLOC_DEVICEMAP));
	printf("cuMemHostAlloc addr=%llu size=24000004 flags=%d\n", U(h[0]), CU_MEMHOSTALLOC_DEVICEMAP);
	CHECK_DRV(cuMemAllocHost(&h[1], 24000005));
	printf("cuMemAllocHost_v2 addr=%llu size=24000005\n", U(h[1]));
	CHECK_DRV(cuMemAllocAsync(&d[3], 24000006, s1));
	printf("cuMemAllocAsync addr=%llu size=24000006 stream=%llu\n", U(d[3]), U(s1));
	CHECK_DRV(cuMemAllocAsync_ptsz(&d[4], 24000007, s2));
	printf("cuMemAllocAsync_ptsz addr=%llu size=24000007 stream=%llu\n", U(d[4]), U(s2));
	CHECK_DRV(cuMemPoolCreate(&pool, &props));
	printf("cuMemPoolCreate pool=%llu device=%d\n", U(pool), CURRENT);
	CHECK_DRV(cuMemPoolCreate(&far, &far_props));
	printf("cuMemPoolCreate pool=%llu device=%d\n", U(far), OTHER);
	CHECK_DRV(cuMemAllocFromPoolAsync(&d[5], 24000008, pool, s1));
	printf("cuMemAllocFromPoolAsync addr=%llu size=24000008 pool=%llu stream=%llu\n", U(d[5]), U(pool), U(s1));
	CHECK_DRV(cuMemAllocFromPoolAsync_ptsz(&d[6], 24000009, pool, s2));
	printf("cuMemAllocFromPoolAsync_ptsz addr=%llu size=24000009 pool=%llu stream=%llu\n", U(d[6]), U(pool), U(s2));
	CHECK_DRV(cuMemGetInfo(&free_bytes, &total));
	printf("cuMemGetInfo_v2 free=%zu total=%zu\n", free_bytes, total);
	for (int i = 0; i < 3; i++) {
		CHECK_DRV(cuMemFree(d[i]));
		printf("cuMemFree_v2 addr=%llu\n", U(d[i]));
	}
	for (int i = 0; i < 2; i++) {
		CHECK_DRV(cuMemFreeHost(h[i]));
		printf("cuMemFreeHost addr=%llu\n", U(h[i]));
	}
	/* each freed on the other stream than the one it was made on */
	CHECK_DRV(cuMemFreeAsync(d[3], s2));
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(d[3]), U(s2));
	CHECK_DRV(cuMemFreeAsync_ptsz(d[4], s1));
	printf("cuMemFreeAsync_ptsz addr=%llu stream=%llu\n", U(d[4]), U(s1));
	CHECK_DRV(cuMemFreeAsync(d[5], s2));
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(d[5]), U(s2));
	CHECK_DRV(cuMemFreeAsync(d[6], s1));
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(d[6]), U(s1));
	CHECK_DRV(cuStreamSynchronize(s1));
	CHECK_DRV(cuStreamSynchronize(s2));
	CHECK_DRV(cuMemPoolTrimTo(pool, 5 * MiB + 3));
	printf("cuMemPoolTrimTo pool=%llu keep=%llu\n", U(pool), 5 * MiB + 3);
	CHECK_DRV(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	printf("cuMemPoolSetAttribute pool=%llu attr=%d value=%llu\n", U(pool), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
	       (unsigned long long)threshold);
	CHECK_DRV(cuMemPoolSetAttribute(far, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &reuse));
	printf("cuMemPoolSetAttribute pool=%llu attr=%d value=%d\n", U(far),
	       CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, reuse);
	CHECK_DRV(cuMemPoolDestroy(pool));
	printf("cuMemPoolDestroy pool=%llu\n", U(pool));
	CHECK_DRV(cuMemPoolDestroy(far));
	printf("cuMemPoolDestroy pool=%llu\n", U(far));
}

/* ---- virtual memory management: physical memory on device 2, the context on device 1 ---- */

/* Handles made and released first, so that the ones the calls below get are not 1, 2 or 3
 * (simgpu numbers handles from 1): no handle equals a location type or the imported mark. */
static void spare_handles(int n)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = current};
	CUmemGenericAllocationHandle h[4];

	for (int i = 0; i < n; i++) {
		CHECK_DRV(cuMemCreate(&h[i], 2 * MiB, &prop, 0));
		printf("cuMemCreate handle=%llu size=%llu device=%d location=%d spare=1\n", U(h[i]), 2 * MiB, CURRENT,
		       CU_MEM_LOCATION_TYPE_DEVICE);
	}
	for (int i = 0; i < n; i++) {
		CHECK_DRV(cuMemRelease(h[i]));
		printf("cuMemRelease handle=%llu spare=1\n", U(h[i]));
	}
}

static void driver_vmm(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = other};
	CUmemAccessDesc desc = {.location = other, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle a;
	CUdeviceptr va;

	spare_handles(3);
	CHECK_DRV(cuMemCreate(&a, 6 * MiB, &prop, 0));
	printf("cuMemCreate handle=%llu size=%llu device=%d location=%d\n", U(a), 6 * MiB, OTHER,
	       CU_MEM_LOCATION_TYPE_DEVICE);
	CHECK_DRV(cuMemAddressReserve(&va, 12 * MiB, 4 * MiB, 0, 0));
	printf("cuMemAddressReserve addr=%llu size=%llu alignment=%llu\n", U(va), 12 * MiB, 4 * MiB);
	CHECK_DRV(cuMemMap(va + 2 * MiB, 4 * MiB, 0, a, 0));
	printf("cuMemMap addr=%llu size=%llu offset=0 handle=%llu\n", U(va + 2 * MiB), 4 * MiB, U(a));
	CHECK_DRV(cuMemSetAccess(va + 2 * MiB, 4 * MiB, &desc, 1));
	printf("cuMemSetAccess addr=%llu size=%llu device=%d flags=%d\n", U(va + 2 * MiB), 4 * MiB, OTHER,
	       CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_DRV(cuMemUnmap(va + 2 * MiB, 4 * MiB));
	printf("cuMemUnmap addr=%llu size=%llu\n", U(va + 2 * MiB), 4 * MiB);
	CHECK_DRV(cuMemRelease(a));
	printf("cuMemRelease handle=%llu\n", U(a));
	CHECK_DRV(cuMemAddressFree(va, 12 * MiB));
	printf("cuMemAddressFree addr=%llu size=%llu\n", U(va), 12 * MiB);
}

/* ---- arrays and host registration ---- */

static void driver_arrays(void)
{
	static char buf[24000010];
	CUarray a, b;
	CUmipmappedArray m;
	CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 1000, .Height = 30, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	CUDA_ARRAY3D_DESCRIPTOR d3 = {
	    .Width = 50, .Height = 40, .Depth = 6, .Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 2};
	CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_HALF, .NumChannels = 1};

	CHECK_DRV(cuArrayCreate(&a, &d2));
	printf("cuArrayCreate_v2 addr=%llu size=%d\n", U(a), 1000 * 30 * 4 * 4);
	CHECK_DRV(cuArray3DCreate(&b, &d3));
	printf("cuArray3DCreate_v2 addr=%llu size=%d\n", U(b), 50 * 40 * 6 * 2 * 2);
	CHECK_DRV(cuMipmappedArrayCreate(&m, &dm, 3));
	printf("cuMipmappedArrayCreate addr=%llu size=%d\n", U(m), (64 * 32 + 32 * 16 + 16 * 8) * 2);
	CHECK_DRV(cuArrayDestroy(a));
	printf("cuArrayDestroy addr=%llu\n", U(a));
	CHECK_DRV(cuArrayDestroy(b));
	printf("cuArrayDestroy addr=%llu\n", U(b));
	CHECK_DRV(cuMipmappedArrayDestroy(m));
	printf("cuMipmappedArrayDestroy addr=%llu\n", U(m));
	CHECK_DRV(cuMemHostRegister(buf, sizeof buf, CU_MEMHOSTREGISTER_DEVICEMAP));
	printf("cuMemHostRegister_v2 addr=%llu size=%zu flags=%d\n", U(buf), sizeof buf, CU_MEMHOSTREGISTER_DEVICEMAP);
	CHECK_DRV(cuMemHostUnregister(buf));
	printf("cuMemHostUnregister addr=%llu\n", U(buf));
}

/* ---- graph memory nodes: each instantiation, launch and upload entry point backs its own ---- */

static CUgraph node_graph(size_t size, const CUmemLocation *where, CUdeviceptr *dptr)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = *where},
					.bytesize = size};
	CUgraph g = NULL;
	CUgraphNode n = NULL;

	CHECK_DRV(cuGraphCreate(&g, 0));
	CHECK_DRV(cuGraphAddMemAllocNode(&n, g, NULL, 0, &p));
	*dptr = p.dptr;
	printf("cuGraphAddMemAllocNode graph=%llu addr=%llu size=%zu device=%d\n", U(g), U(p.dptr), size, where->id);
	return g;
}

static void driver_graphs(CUstream s1, CUstream s2)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS up = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, .hUploadStream = s1};
	CUDA_GRAPH_INSTANTIATE_PARAMS plain = {0};
	CUdeviceptr d[6];
	CUgraph g[6];
	CUgraphExec x[6];
	CUgraphNode f;

	/* launched: in use until another graph's free node ends it */
	g[0] = node_graph(24000011, &other, &d[0]);
	CHECK_DRV(cuGraphInstantiateWithFlags(&x[0], g[0], 0));
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[0]), U(g[0]));
	CHECK_DRV(cuGraphLaunch(x[0], s1));
	printf("cuGraphLaunch exec=%llu stream=%llu backs=%llu\n", U(x[0]), U(s1), U(d[0]));
	/* backed by its instantiation's upload */
	g[1] = node_graph(24000012, &current, &d[1]);
	CHECK_DRV(cuGraphInstantiateWithParams(&x[1], g[1], &up));
	printf("cuGraphInstantiateWithParams exec=%llu graph=%llu backs=%llu\n", U(x[1]), U(g[1]), U(d[1]));
	/* backed by uploads: not in use, each device's trim gives back its own */
	g[2] = node_graph(24000013, &other, &d[2]);
	CHECK_DRV(cuGraphInstantiateWithParams_ptsz(&x[2], g[2], &plain));
	printf("cuGraphInstantiateWithParams_ptsz exec=%llu graph=%llu\n", U(x[2]), U(g[2]));
	CHECK_DRV(cuGraphUpload(x[2], s1));
	printf("cuGraphUpload exec=%llu stream=%llu backs=%llu\n", U(x[2]), U(s1), U(d[2]));
	g[3] = node_graph(24000014, &current, &d[3]);
	CHECK_DRV(cuGraphInstantiateWithFlags(&x[3], g[3], 0));
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[3]), U(g[3]));
	CHECK_DRV(cuGraphUpload_ptsz(x[3], s2));
	printf("cuGraphUpload_ptsz exec=%llu stream=%llu backs=%llu\n", U(x[3]), U(s2), U(d[3]));
	g[4] = node_graph(24000015, &other, &d[4]);
	CHECK_DRV(cuGraphInstantiateWithFlags(&x[4], g[4], 0));
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[4]), U(g[4]));
	CHECK_DRV(cuGraphLaunch_ptsz(x[4], s2));
	printf("cuGraphLaunch_ptsz exec=%llu stream=%llu backs=%llu\n", U(x[4]), U(s2), U(d[4]));
	CHECK_DRV(cuStreamSynchronize(s1));
	CHECK_DRV(cuStreamSynchronize(s2));
	/* device 2's trim: the uploaded 24000013 goes back, device 1's 24000014 stays */
	CHECK_DRV(cuDeviceGraphMemTrim(OTHER));
	printf("cuDeviceGraphMemTrim device=%d frees=%llu\n", OTHER, U(d[2]));
	/* the executable graph goes with the memory no allocation uses: 24000014 */
	CHECK_DRV(cuGraphExecDestroy(x[3]));
	printf("cuGraphExecDestroy exec=%llu frees=%llu\n", U(x[3]), U(d[3]));
	CHECK_DRV(cuGraphDestroy(g[3]));
	printf("cuGraphDestroy graph=%llu\n", U(g[3]));
	/* 24000011 outlives its executable graph; another graph's free node frees it */
	CHECK_DRV(cuGraphExecDestroy(x[0]));
	printf("cuGraphExecDestroy exec=%llu\n", U(x[0]));
	CHECK_DRV(cuGraphCreate(&g[5], 0));
	CHECK_DRV(cuGraphAddMemFreeNode(&f, g[5], NULL, 0, d[0]));
	printf("cuGraphAddMemFreeNode graph=%llu addr=%llu\n", U(g[5]), U(d[0]));
	CHECK_DRV(cuGraphInstantiateWithFlags(&x[5], g[5], 0));
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[5]), U(g[5]));
	CHECK_DRV(cuGraphLaunch(x[5], s1));
	printf("cuGraphLaunch exec=%llu stream=%llu frees=%llu\n", U(x[5]), U(s1), U(d[0]));
	CHECK_DRV(cuStreamSynchronize(s1));
	/* 24000012, uploaded only, goes with its executable graph; 24000015 is in use still */
	for (int i = 1; i < 6; i++)
		if (i != 3) {
			CHECK_DRV(cuGraphExecDestroy(x[i]));
			if (i == 1)
				printf("cuGraphExecDestroy exec=%llu frees=%llu\n", U(x[i]), U(d[1]));
			else
				printf("cuGraphExecDestroy exec=%llu\n", U(x[i]));
		}
	for (int i = 0; i < 6; i++)
		if (i != 3) {
			CHECK_DRV(cuGraphDestroy(g[i]));
			printf("cuGraphDestroy graph=%llu\n", U(g[i]));
		}
	/* freed outside its graph, once its executable graph is gone: its memory goes back */
	CHECK_DRV(cuMemFree(d[4]));
	printf("cuMemFree_v2 addr=%llu\n", U(d[4]));
	CHECK_DRV(cuDeviceGraphMemTrim(CURRENT));
	printf("cuDeviceGraphMemTrim device=%d\n", CURRENT);
}

/* ---- the generic and older graph entries, as NVIDIA's runtime looks them up ---- */

static void driver_graph_lookups(CUstream s)
{
	PFN_cuGraphAddNode_v12020 add = (PFN_cuGraphAddNode_v12020)lookup("cuGraphAddNode", 12020);
	PFN_cuGraphAddNode_v12030 add2 = (PFN_cuGraphAddNode_v12030)lookup("cuGraphAddNode", 12030);
	instantiate_logged inst[2] = {(instantiate_logged)lookup("cuGraphInstantiate", 10000),
				      (instantiate_logged)lookup("cuGraphInstantiate", 11000)};
	CUgraphNodeParams p[2] = {
	    {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
	     .alloc = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = current},
		       .bytesize = 24000017}},
	    {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
	     .alloc = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = other},
		       .bytesize = 24000018}}};
	CUgraph g[2];
	CUgraphExec x[2];
	CUgraphNode n;

	if (!add || !add2 || !inst[0] || !inst[1])
		return;
	CHECK_DRV(cuGraphCreate(&g[0], 0));
	check(add(&n, g[0], NULL, 0, &p[0]) == CUDA_SUCCESS, "cuGraphAddNode");
	printf("cuGraphAddNode graph=%llu addr=%llu size=24000017 device=%d\n", U(g[0]), U(p[0].alloc.dptr), CURRENT);
	CHECK_DRV(cuGraphCreate(&g[1], 0));
	check(add2(&n, g[1], NULL, NULL, 0, &p[1]) == CUDA_SUCCESS, "cuGraphAddNode_v2");
	printf("cuGraphAddNode_v2 graph=%llu addr=%llu size=24000018 device=%d\n", U(g[1]), U(p[1].alloc.dptr), OTHER);
	check(inst[0](&x[0], g[0], NULL, NULL, 0) == CUDA_SUCCESS, "cuGraphInstantiate");
	printf("cuGraphInstantiate exec=%llu graph=%llu\n", U(x[0]), U(g[0]));
	check(inst[1](&x[1], g[1], NULL, NULL, 0) == CUDA_SUCCESS, "cuGraphInstantiate_v2");
	printf("cuGraphInstantiate_v2 exec=%llu graph=%llu\n", U(x[1]), U(g[1]));
	CHECK_DRV(cuGraphLaunch(x[0], s));
	printf("cuGraphLaunch exec=%llu stream=%llu backs=%llu\n", U(x[0]), U(s), U(p[0].alloc.dptr));
	CHECK_DRV(cuGraphUpload(x[1], s));
	printf("cuGraphUpload exec=%llu stream=%llu backs=%llu\n", U(x[1]), U(s), U(p[1].alloc.dptr));
	CHECK_DRV(cuStreamSynchronize(s));
	/* uploaded only: its memory goes with its executable graph; the launched one's outlives it */
	CHECK_DRV(cuGraphExecDestroy(x[1]));
	printf("cuGraphExecDestroy exec=%llu frees=%llu\n", U(x[1]), U(p[1].alloc.dptr));
	CHECK_DRV(cuGraphExecDestroy(x[0]));
	printf("cuGraphExecDestroy exec=%llu\n", U(x[0]));
	for (int i = 0; i < 2; i++) {
		CHECK_DRV(cuGraphDestroy(g[i]));
		printf("cuGraphDestroy graph=%llu\n", U(g[i]));
	}
	CHECK_DRV(cuMemFree(p[0].alloc.dptr));
	printf("cuMemFree_v2 addr=%llu\n", U(p[0].alloc.dptr));
}

/* ---- IPC, shareable handles and pool allocations: opened by a second process ---- */

static void driver_exports(const char *self, CUstream s)
{
	CUdeviceptr d, q;
	CUipcMemHandle h;
	CUmemGenericAllocationHandle vmm;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    .location = other};
	CUmemPoolProps shared = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				 .location = other};
	CUmemoryPool pool;
	CUmemPoolPtrExportData data;
	char hex[2 * sizeof h.reserved + 1], ptr_hex[2 * sizeof data + 1], fd_text[16], pool_fd_text[16];
	int fd = -1, pool_fd = -1, status;
	pid_t pid;

	CHECK_DRV(cuMemAlloc(&d, 24000016));
	printf("cuMemAlloc_v2 addr=%llu size=24000016\n", U(d));
	CHECK_DRV(cuIpcGetMemHandle(&h, d));
	CHECK_DRV(cuMemCreate(&vmm, 2 * MiB, &prop, 0));
	printf("cuMemCreate handle=%llu size=%llu device=%d location=%d\n", U(vmm), 2 * MiB, OTHER,
	       CU_MEM_LOCATION_TYPE_DEVICE);
	CHECK_DRV(cuMemExportToShareableHandle(&fd, vmm, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK_DRV(cuMemPoolCreate(&pool, &shared));
	printf("cuMemPoolCreate pool=%llu device=%d\n", U(pool), OTHER);
	CHECK_DRV(cuMemAllocFromPoolAsync(&q, 24000019, pool, s));
	printf("cuMemAllocFromPoolAsync addr=%llu size=24000019 pool=%llu stream=%llu\n", U(q), U(pool), U(s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuMemPoolExportToShareableHandle(&pool_fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK_DRV(cuMemPoolExportPointer(&data, q));
	to_hex(h.reserved, sizeof h.reserved, hex);
	to_hex(&data, sizeof data, ptr_hex);
	snprintf(fd_text, sizeof fd_text, "%d", fd);
	snprintf(pool_fd_text, sizeof pool_fd_text, "%d", pool_fd);
	fflush(NULL);
	if ((pid = fork()) == 0) {
		execl(self, self, "import", hex, fd_text, pool_fd_text, ptr_hex, (char *)NULL);
		_exit(127);
	}
	check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the importing child");
	printf("process pid=%d\n", (int)getpid()); /* the lines that follow are this process's again */
	CHECK_DRV(cuMemFreeAsync(q, s));
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(q), U(s));
	CHECK_DRV(cuStreamSynchronize(s));
	CHECK_DRV(cuMemPoolDestroy(pool));
	printf("cuMemPoolDestroy pool=%llu\n", U(pool));
	CHECK_DRV(cuMemRelease(vmm));
	printf("cuMemRelease handle=%llu\n", U(vmm));
	CHECK_DRV(cuMemFree(d));
	printf("cuMemFree_v2 addr=%llu\n", U(d));
}

static void driver_imports(const char *hex, int fd, int pool_fd, const char *ptr_hex)
{
	PFN_cuIpcOpenMemHandle_v11000 open1 = (PFN_cuIpcOpenMemHandle_v11000)lookup("cuIpcOpenMemHandle", 4010);
	CUipcMemHandle h = {{0}};
	CUmemPoolPtrExportData data = {{0}};
	CUdeviceptr d, q;
	CUmemGenericAllocationHandle vmm;
	CUmemoryPool pool;

	from_hex(hex, h.reserved, sizeof h.reserved);
	from_hex(ptr_hex, &data, sizeof data);
	CHECK_DRV(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	printf("cuIpcOpenMemHandle_v2 addr=%llu size=24000016 flags=%d\n", U(d), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	CHECK_DRV(cuIpcCloseMemHandle(d));
	printf("cuIpcCloseMemHandle addr=%llu\n", U(d));
	/* the CUDA 4.1 ABI, which takes what the 11.0 one takes */
	if (open1) {
		check(open1(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS, "cuIpcOpenMemHandle");
		printf("cuIpcOpenMemHandle addr=%llu size=24000016 flags=%d\n", U(d),
		       CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		CHECK_DRV(cuIpcCloseMemHandle(d));
		printf("cuIpcCloseMemHandle addr=%llu\n", U(d));
	}
	spare_handles(3);
	CHECK_DRV(cuMemImportFromShareableHandle(&vmm, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	printf("cuMemImportFromShareableHandle handle=%llu\n", U(vmm));
	CHECK_DRV(cuMemRelease(vmm));
	printf("cuMemRelease handle=%llu\n", U(vmm));
	CHECK_DRV(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)pool_fd,
						     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK_DRV(cuMemPoolImportPointer(&q, pool, &data));
	printf("cuMemPoolImportPointer addr=%llu size=24000019\n", U(q));
	CHECK_DRV(cuMemFree(q));
	printf("cuMemFree_v2 addr=%llu\n", U(q));
	CHECK_DRV(cuMemPoolDestroy(pool));
	printf("cuMemPoolDestroy pool=%llu\n", U(pool));
}

/* ---- the runtime's entry points, on device 1 ---- */

static void runtime_memory(void)
{
	void *p[10];
	size_t pitch, free_bytes, total;
	struct cudaPitchedPtr pp;
	cudaStream_t s1, s2;
	cudaMemPool_t pool;
	struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
					 .location = {.type = cudaMemLocationTypeDevice, .id = CURRENT}};

	CHECK_RT(cudaSetDevice(CURRENT));
	CHECK_RT(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CHECK_RT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CHECK_RT(cudaMalloc(&p[0], 24000021));
	printf("cudaMalloc addr=%llu size=24000021\n", U(p[0]));
	CHECK_RT(cudaMallocPitch(&p[1], &pitch, 2000, 90));
	printf("cudaMallocPitch addr=%llu width=2000 height=90 pitch=%zu\n", U(p[1]), pitch);
	CHECK_RT(cudaMalloc3D(&pp, (struct cudaExtent){1000, 10, 7}));
	printf("cudaMalloc3D addr=%llu width=1000 height=10 depth=7 pitch=%zu\n", U(pp.ptr), pp.pitch);
	CHECK_RT(cudaMallocManaged(&p[2], 24000024, cudaMemAttachHost));
	printf("cudaMallocManaged addr=%llu size=24000024 flags=%d\n", U(p[2]), cudaMemAttachHost);
	CHECK_RT(cudaMallocHost(&p[3], 24000025));
	printf("cudaMallocHost addr=%llu size=24000025\n", U(p[3]));
	CHECK_RT(cudaHostAlloc(&p[4], 24000026, cudaHostAllocMapped));
	printf("cudaHostAlloc addr=%llu size=24000026 flags=%d\n", U(p[4]), cudaHostAllocMapped);
	CHECK_RT(cudaMallocAsync(&p[5], 24000027, s1));
	printf("cudaMallocAsync addr=%llu size=24000027 stream=%llu\n", U(p[5]), U(s1));
	CHECK_RT(cudaMallocAsync_ptsz(&p[6], 24000028, s2));
	printf("cudaMallocAsync_ptsz addr=%llu size=24000028 stream=%llu\n", U(p[6]), U(s2));
	CHECK_RT(cudaMemPoolCreate(&pool, &props)); /* the runtime's call reaches the driver's hook */
	printf("cudaMemPoolCreate pool=%llu device=%d\n", U(pool), CURRENT);
	CHECK_RT(cudaMallocFromPoolAsync(&p[7], 24000029, pool, s1));
	printf("cudaMallocFromPoolAsync addr=%llu size=24000029 pool=%llu stream=%llu\n", U(p[7]), U(pool), U(s1));
	CHECK_RT(cudaMallocFromPoolAsync_ptsz(&p[8], 24000030, pool, s2));
	printf("cudaMallocFromPoolAsync_ptsz addr=%llu size=24000030 pool=%llu stream=%llu\n", U(p[8]), U(pool), U(s2));
	CHECK_RT(cudaMemGetInfo(&free_bytes, &total));
	printf("cudaMemGetInfo free=%zu total=%zu\n", free_bytes, total);
	CHECK_RT(cudaFree(p[0]));
	printf("cudaFree addr=%llu\n", U(p[0]));
	CHECK_RT(cudaFree(p[1]));
	printf("cudaFree addr=%llu\n", U(p[1]));
	CHECK_RT(cudaFree(pp.ptr));
	printf("cudaFree addr=%llu\n", U(pp.ptr));
	CHECK_RT(cudaFree(p[2]));
	printf("cudaFree addr=%llu\n", U(p[2]));
	CHECK_RT(cudaFreeHost(p[3]));
	printf("cudaFreeHost addr=%llu\n", U(p[3]));
	CHECK_RT(cudaFreeHost(p[4]));
	printf("cudaFreeHost addr=%llu\n", U(p[4]));
	CHECK_RT(cudaFreeAsync(p[5], s2));
	printf("cudaFreeAsync addr=%llu stream=%llu\n", U(p[5]), U(s2));
	CHECK_RT(cudaFreeAsync_ptsz(p[6], s1));
	printf("cudaFreeAsync_ptsz addr=%llu stream=%llu\n", U(p[6]), U(s1));
	CHECK_RT(cudaFreeAsync(p[7], s2));
	printf("cudaFreeAsync addr=%llu stream=%llu\n", U(p[7]), U(s2));
	CHECK_RT(cudaFreeAsync_ptsz(p[8], s1));
	printf("cudaFreeAsync_ptsz addr=%llu stream=%llu\n", U(p[8]), U(s1));
	CHECK_RT(cudaStreamSynchronize(s1));
	CHECK_RT(cudaStreamSynchronize(s2));
	CHECK_RT(cudaMemPoolDestroy(pool));
	printf("cudaMemPoolDestroy pool=%llu\n", U(pool));
	CHECK_RT(cudaStreamDestroy(s1));
	CHECK_RT(cudaStreamDestroy(s2));
}

/* ---- the driver's entry points as the runtime hands them out: memtap's wrappers, which record
 * what the cuMemAlloc each gives allocates ---- */

static void runtime_entry_points(void)
{
	static const char *const names[] = {"cudaGetDriverEntryPoint", "cudaGetDriverEntryPoint_ptsz",
					    "cudaGetDriverEntryPointByVersion",
					    "cudaGetDriverEntryPointByVersion_ptsz"};
	enum cudaDriverEntryPointQueryResult st;

	for (int i = 0; i < 4; i++) {
		PFN_cuMemAlloc_v3020 alloc = NULL;
		CUdeviceptr d;
		cudaError_t r =
		    i == 0   ? cudaGetDriverEntryPoint("cuMemAlloc", (void **)&alloc, cudaEnableDefault, &st)
		    : i == 1 ? cudaGetDriverEntryPoint_ptsz("cuMemAlloc", (void **)&alloc, cudaEnableDefault, &st)
		    : i == 2
			? cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&alloc, 12000, cudaEnableDefault, &st)
			: cudaGetDriverEntryPointByVersion_ptsz("cuMemAlloc", (void **)&alloc, 12000, cudaEnableDefault,
								&st);
		check(r == cudaSuccess && alloc, names[i]);
		if (!alloc)
			continue;
		CHECK_DRV(alloc(&d, 24000041 + i));
		printf("%s addr=%llu size=%d\n", names[i], U(d), 24000041 + i);
		CHECK_DRV(cuMemFree(d));
		printf("cuMemFree_v2 addr=%llu\n", U(d));
	}
}

/* ---- PyTorch's pluggable entry points (CUDAPluggableAllocator): memtap's, when it is loaded ---- */

static void pluggable(void)
{
	void *(*alloc)(size_t, int, cudaStream_t) =
	    (void *(*)(size_t, int, cudaStream_t))dlsym(RTLD_DEFAULT, "memtap_alloc");
	void (*release)(void *, size_t, int, cudaStream_t) =
	    (void (*)(void *, size_t, int, cudaStream_t))dlsym(RTLD_DEFAULT, "memtap_free");
	void (*record)(void *, cudaStream_t) =
	    (void (*)(void *, cudaStream_t))dlsym(RTLD_DEFAULT, "memtap_record_stream");
	cudaStream_t s1, s2;
	void *p[2];

	check(alloc && release && record, "memtap's pluggable entry points");
	if (!alloc || !release || !record)
		return;
	CHECK_RT(cudaSetDevice(OTHER));
	CHECK_RT(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CHECK_RT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CHECK_RT(cudaSetDevice(CURRENT)); /* PyTorch's guard sets the device; the call names it */
	p[0] = alloc(24000031, OTHER, s1);
	printf("memtap_alloc addr=%llu size=24000031 device=%d stream=%llu\n", U(p[0]), OTHER, U(s1));
	p[1] = alloc(24000032, OTHER, s2);
	printf("memtap_alloc addr=%llu size=24000032 device=%d stream=%llu\n", U(p[1]), OTHER, U(s2));
	record(p[0], s2);
	printf("memtap_record_stream addr=%llu stream=%llu\n", U(p[0]), U(s2));
	release(p[0], 24000031, OTHER, s1);
	printf("memtap_free addr=%llu size=24000031 device=%d stream=%llu\n", U(p[0]), OTHER, U(s1));
	release(p[1], 24000032, OTHER, s2);
	printf("memtap_free addr=%llu size=24000032 device=%d stream=%llu\n", U(p[1]), OTHER, U(s2));
	CHECK_RT(cudaSetDevice(OTHER));
	CHECK_RT(cudaStreamSynchronize(s2));
	CHECK_RT(cudaStreamDestroy(s1));
	CHECK_RT(cudaStreamDestroy(s2));
	CHECK_RT(cudaSetDevice(CURRENT));
}

int main(int argc, char **argv)
{
	CUcontext c;
	CUstream s1, s2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("process pid=%d\n", (int)getpid()); /* each process writes a trace of its own */
	CHECK_DRV(cuInit(0));
	CHECK_DRV(cuDevicePrimaryCtxRetain(&c, CURRENT));
	CHECK_DRV(cuCtxSetCurrent(c));
	if (argc > 5 && !strcmp(argv[1], "import")) {
		driver_imports(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
		return failures ? 1 : 0;
	}
	if (argc == 2 && !strcmp(argv[1], "cached")) {
		runtime_memory();
		runtime_entry_points();
		pluggable();
		return failures ? 1 : 0;
	}
	if (argc != 1) {
		fprintf(stderr, "usage: args (see the comment at the top of args.c)\n");
		return 2;
	}
	CHECK_DRV(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CHECK_DRV(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	driver_memory(s1, s2);
	driver_vmm();
	driver_arrays();
	driver_graphs(s1, s2);
	driver_graph_lookups(s1);
	driver_exports(argv[0], s2);
	CHECK_DRV(cuStreamDestroy(s1));
	CHECK_DRV(cuStreamDestroy(s2));
	runtime_memory();
	runtime_entry_points();
	return failures ? 1 : 0;
}
