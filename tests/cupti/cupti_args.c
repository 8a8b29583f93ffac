/* test_args.py's calls through the CUPTI backend: loads memtap's backend as the driver
 * would (dlopen, InitializeInjection) with the stand-in libcupti, and plays every driver
 * entry point memtap hooks through its callback, in CUPTI's own parameter structures,
 * with a distinct value for each argument (handles, streams and pools are made up; the
 * device is 1, device 2 where an argument names one). Each call prints the line
 * tests/recorder/args.c prints for it, so the same rules hold the trace to them.
 * Usage: cupti_args PATH_TO_libmemtap-cupti.so */
#include <cupti.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void fake_cupti_fire(CUpti_CallbackId cbid, const char *name, void *params, CUresult result);

#define FIRE(name, params) fake_cupti_fire(CUPTI_DRIVER_TRACE_CBID_##name, #name, &(params), CUDA_SUCCESS)
#define U(x) ((unsigned long long)(uintptr_t)(x))
#define MiB (1ull << 20)

enum { CURRENT = 1, OTHER = 2 };

static const CUmemLocation other = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = OTHER};
static const CUmemLocation current = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CURRENT};
static CUstream s1 = (CUstream)0x5110, s2 = (CUstream)0x5220;

static void memory(void)
{
	CUdeviceptr d[7] = {0x710000000000ull, 0x710001000000ull, 0x710002000000ull, 0x710003000000ull,
			    0x710004000000ull, 0x710005000000ull, 0x710006000000ull};
	void *h[2] = {(void *)0x720000000000ull, (void *)0x720001000000ull};
	size_t pitch = 3072, free_bytes = 80000 * MiB, total = 81920 * MiB;
	CUmemoryPool pool = (CUmemoryPool)0x6110, far = (CUmemoryPool)0x6220;
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = current};
	CUmemPoolProps far_props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = other};
	cuuint64_t threshold = 64 * MiB + 5;
	int reuse = 1;

	cuMemAlloc_v2_params alloc = {&d[0], 24000001};
	FIRE(cuMemAlloc_v2, alloc);
	printf("cuMemAlloc_v2 addr=%llu size=24000001\n", U(d[0]));
	cuMemAllocPitch_v2_params pitched = {&d[1], &pitch, 3000, 70, 8};
	FIRE(cuMemAllocPitch_v2, pitched);
	printf("cuMemAllocPitch_v2 addr=%llu width=3000 height=70 elem=8 pitch=%zu\n", U(d[1]), pitch);
	cuMemAllocManaged_params managed = {&d[2], 24000003, CU_MEM_ATTACH_HOST};
	FIRE(cuMemAllocManaged, managed);
	printf("cuMemAllocManaged addr=%llu size=24000003 flags=%d\n", U(d[2]), CU_MEM_ATTACH_HOST);
	cuMemHostAlloc_params host = {&h[0], 24000004, CU_MEMHOSTALLOC_DEVICEMAP};
	FIRE(cuMemHostAlloc, host);
	printf("cuMemHostAlloc addr=%llu size=24000004 flags=%d\n", U(h[0]), CU_MEMHOSTALLOC_DEVICEMAP);
	cuMemAllocHost_v2_params host2 = {&h[1], 24000005};
	FIRE(cuMemAllocHost_v2, host2);
	printf("cuMemAllocHost_v2 addr=%llu size=24000005\n", U(h[1]));
	cuMemAllocAsync_params async = {&d[3], 24000006, s1};
	FIRE(cuMemAllocAsync, async);
	printf("cuMemAllocAsync addr=%llu size=24000006 stream=%llu\n", U(d[3]), U(s1));
	cuMemAllocAsync_ptsz_params async2 = {&d[4], 24000007, s2};
	FIRE(cuMemAllocAsync_ptsz, async2);
	printf("cuMemAllocAsync_ptsz addr=%llu size=24000007 stream=%llu\n", U(d[4]), U(s2));
	cuMemPoolCreate_params made = {&pool, &props};
	FIRE(cuMemPoolCreate, made);
	printf("cuMemPoolCreate pool=%llu device=%d\n", U(pool), CURRENT);
	cuMemPoolCreate_params made2 = {&far, &far_props};
	FIRE(cuMemPoolCreate, made2);
	printf("cuMemPoolCreate pool=%llu device=%d\n", U(far), OTHER);
	cuMemAllocFromPoolAsync_params pooled = {&d[5], 24000008, pool, s1};
	FIRE(cuMemAllocFromPoolAsync, pooled);
	printf("cuMemAllocFromPoolAsync addr=%llu size=24000008 pool=%llu stream=%llu\n", U(d[5]), U(pool), U(s1));
	cuMemAllocFromPoolAsync_ptsz_params pooled2 = {&d[6], 24000009, pool, s2};
	FIRE(cuMemAllocFromPoolAsync_ptsz, pooled2);
	printf("cuMemAllocFromPoolAsync_ptsz addr=%llu size=24000009 pool=%llu stream=%llu\n", U(d[6]), U(pool), U(s2));
	cuMemGetInfo_v2_params info = {&free_bytes, &total};
	FIRE(cuMemGetInfo_v2, info);
	printf("cuMemGetInfo_v2 free=%zu total=%zu\n", free_bytes, total);
	for (int i = 0; i < 3; i++) {
		cuMemFree_v2_params f = {d[i]};
		FIRE(cuMemFree_v2, f);
		printf("cuMemFree_v2 addr=%llu\n", U(d[i]));
	}
	for (int i = 0; i < 2; i++) {
		cuMemFreeHost_params f = {h[i]};
		FIRE(cuMemFreeHost, f);
		printf("cuMemFreeHost addr=%llu\n", U(h[i]));
	}
	cuMemFreeAsync_params f3 = {d[3], s2};
	FIRE(cuMemFreeAsync, f3);
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(d[3]), U(s2));
	cuMemFreeAsync_ptsz_params f4 = {d[4], s1};
	FIRE(cuMemFreeAsync_ptsz, f4);
	printf("cuMemFreeAsync_ptsz addr=%llu stream=%llu\n", U(d[4]), U(s1));
	cuMemFreeAsync_params f5 = {d[5], s2};
	FIRE(cuMemFreeAsync, f5);
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(d[5]), U(s2));
	cuMemFreeAsync_params f6 = {d[6], s1};
	FIRE(cuMemFreeAsync, f6);
	printf("cuMemFreeAsync addr=%llu stream=%llu\n", U(d[6]), U(s1));
	cuMemPoolTrimTo_params trim = {pool, 5 * MiB + 3};
	FIRE(cuMemPoolTrimTo, trim);
	printf("cuMemPoolTrimTo pool=%llu keep=%llu\n", U(pool), 5 * MiB + 3);
	cuMemPoolSetAttribute_params attr = {pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold};
	FIRE(cuMemPoolSetAttribute, attr);
	printf("cuMemPoolSetAttribute pool=%llu attr=%d value=%llu\n", U(pool), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
	       (unsigned long long)threshold);
	cuMemPoolSetAttribute_params attr2 = {far, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &reuse};
	FIRE(cuMemPoolSetAttribute, attr2);
	printf("cuMemPoolSetAttribute pool=%llu attr=%d value=%d\n", U(far),
	       CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, reuse);
	cuMemPoolDestroy_params gone = {pool}, gone2 = {far};
	FIRE(cuMemPoolDestroy, gone);
	printf("cuMemPoolDestroy pool=%llu\n", U(pool));
	FIRE(cuMemPoolDestroy, gone2);
	printf("cuMemPoolDestroy pool=%llu\n", U(far));
}

static void vmm(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = other};
	CUmemAccessDesc desc = {.location = other, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle a = 0x7a7;
	CUdeviceptr va = 0x730000000000ull;

	cuMemCreate_params create = {&a, 6 * MiB, &prop, 0};
	FIRE(cuMemCreate, create);
	printf("cuMemCreate handle=%llu size=%llu device=%d location=%d\n", U(a), 6 * MiB, OTHER,
	       CU_MEM_LOCATION_TYPE_DEVICE);
	cuMemAddressReserve_params reserve = {&va, 12 * MiB, 4 * MiB, 0, 0};
	FIRE(cuMemAddressReserve, reserve);
	printf("cuMemAddressReserve addr=%llu size=%llu alignment=%llu\n", U(va), 12 * MiB, 4 * MiB);
	cuMemMap_params map = {va + 2 * MiB, 4 * MiB, 0, a, 0};
	FIRE(cuMemMap, map);
	printf("cuMemMap addr=%llu size=%llu offset=0 handle=%llu\n", U(va + 2 * MiB), 4 * MiB, U(a));
	cuMemSetAccess_params access = {va + 2 * MiB, 4 * MiB, &desc, 1};
	FIRE(cuMemSetAccess, access);
	printf("cuMemSetAccess addr=%llu size=%llu device=%d flags=%d\n", U(va + 2 * MiB), 4 * MiB, OTHER,
	       CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	cuMemUnmap_params unmap = {va + 2 * MiB, 4 * MiB};
	FIRE(cuMemUnmap, unmap);
	printf("cuMemUnmap addr=%llu size=%llu\n", U(va + 2 * MiB), 4 * MiB);
	cuMemRelease_params release = {a};
	FIRE(cuMemRelease, release);
	printf("cuMemRelease handle=%llu\n", U(a));
	cuMemAddressFree_params addr_free = {va, 12 * MiB};
	FIRE(cuMemAddressFree, addr_free);
	printf("cuMemAddressFree addr=%llu size=%llu\n", U(va), 12 * MiB);
}

static void arrays(void)
{
	CUarray a = (CUarray)0x7410, b = (CUarray)0x7420;
	CUmipmappedArray m = (CUmipmappedArray)0x7430;
	void *reg = (void *)0x740000000000ull;
	CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 1000, .Height = 30, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	CUDA_ARRAY3D_DESCRIPTOR d3 = {
	    .Width = 50, .Height = 40, .Depth = 6, .Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 2};
	CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_HALF, .NumChannels = 1};

	cuArrayCreate_v2_params c2 = {&a, &d2};
	FIRE(cuArrayCreate_v2, c2);
	printf("cuArrayCreate_v2 addr=%llu size=%d\n", U(a), 1000 * 30 * 4 * 4);
	cuArray3DCreate_v2_params c3 = {&b, &d3};
	FIRE(cuArray3DCreate_v2, c3);
	printf("cuArray3DCreate_v2 addr=%llu size=%d\n", U(b), 50 * 40 * 6 * 2 * 2);
	cuMipmappedArrayCreate_params cm = {&m, &dm, 3};
	FIRE(cuMipmappedArrayCreate, cm);
	printf("cuMipmappedArrayCreate addr=%llu size=%d\n", U(m), (64 * 32 + 32 * 16 + 16 * 8) * 2);
	cuArrayDestroy_params x2 = {a}, x3 = {b};
	FIRE(cuArrayDestroy, x2);
	printf("cuArrayDestroy addr=%llu\n", U(a));
	FIRE(cuArrayDestroy, x3);
	printf("cuArrayDestroy addr=%llu\n", U(b));
	cuMipmappedArrayDestroy_params xm = {m};
	FIRE(cuMipmappedArrayDestroy, xm);
	printf("cuMipmappedArrayDestroy addr=%llu\n", U(m));
	cuMemHostRegister_v2_params r = {reg, 24000010, CU_MEMHOSTREGISTER_DEVICEMAP};
	FIRE(cuMemHostRegister_v2, r);
	printf("cuMemHostRegister_v2 addr=%llu size=24000010 flags=%d\n", U(reg), CU_MEMHOSTREGISTER_DEVICEMAP);
	cuMemHostUnregister_params u = {reg};
	FIRE(cuMemHostUnregister, u);
	printf("cuMemHostUnregister addr=%llu\n", U(reg));
}

static CUgraph node_graph(uintptr_t id, size_t size, const CUmemLocation *where, CUdeviceptr *dptr)
{
	CUgraph g = (CUgraph)(0x6100 + id);
	CUgraphNode n = NULL;
	CUDA_MEM_ALLOC_NODE_PARAMS p = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = *where},
					.bytesize = size,
					.dptr = 0x750000000000ull + id * (64 * MiB)};
	cuGraphAddMemAllocNode_params add = {&n, g, NULL, 0, &p};

	FIRE(cuGraphAddMemAllocNode, add);
	*dptr = p.dptr;
	printf("cuGraphAddMemAllocNode graph=%llu addr=%llu size=%zu device=%d\n", U(g), U(p.dptr), size, where->id);
	return g;
}

static CUgraphExec exec_of(CUgraph g)
{
	return (CUgraphExec)((uintptr_t)g + 0x10000);
}

static void graphs(void)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS up = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, .hUploadStream = s1};
	CUDA_GRAPH_INSTANTIATE_PARAMS plain = {0};
	CUdeviceptr d[5];
	CUgraph g[6];
	CUgraphExec x[6];
	CUgraphNode f = NULL;

	g[0] = node_graph(0, 24000011, &other, &d[0]);
	x[0] = exec_of(g[0]);
	cuGraphInstantiateWithFlags_params i0 = {&x[0], g[0], 0};
	FIRE(cuGraphInstantiateWithFlags, i0);
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[0]), U(g[0]));
	cuGraphLaunch_params l0 = {x[0], s1};
	FIRE(cuGraphLaunch, l0);
	printf("cuGraphLaunch exec=%llu stream=%llu backs=%llu\n", U(x[0]), U(s1), U(d[0]));
	g[1] = node_graph(1, 24000012, &current, &d[1]);
	x[1] = exec_of(g[1]);
	cuGraphInstantiateWithParams_params i1 = {&x[1], g[1], &up};
	FIRE(cuGraphInstantiateWithParams, i1);
	printf("cuGraphInstantiateWithParams exec=%llu graph=%llu backs=%llu\n", U(x[1]), U(g[1]), U(d[1]));
	g[2] = node_graph(2, 24000013, &other, &d[2]);
	x[2] = exec_of(g[2]);
	cuGraphInstantiateWithParams_ptsz_params i2 = {&x[2], g[2], &plain};
	FIRE(cuGraphInstantiateWithParams_ptsz, i2);
	printf("cuGraphInstantiateWithParams_ptsz exec=%llu graph=%llu\n", U(x[2]), U(g[2]));
	cuGraphUpload_params u2 = {x[2], s1};
	FIRE(cuGraphUpload, u2);
	printf("cuGraphUpload exec=%llu stream=%llu backs=%llu\n", U(x[2]), U(s1), U(d[2]));
	g[3] = node_graph(3, 24000014, &current, &d[3]);
	x[3] = exec_of(g[3]);
	cuGraphInstantiateWithFlags_params i3 = {&x[3], g[3], 0};
	FIRE(cuGraphInstantiateWithFlags, i3);
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[3]), U(g[3]));
	cuGraphUpload_ptsz_params u3 = {x[3], s2};
	FIRE(cuGraphUpload_ptsz, u3);
	printf("cuGraphUpload_ptsz exec=%llu stream=%llu backs=%llu\n", U(x[3]), U(s2), U(d[3]));
	g[4] = node_graph(4, 24000015, &other, &d[4]);
	x[4] = exec_of(g[4]);
	cuGraphInstantiateWithFlags_params i4 = {&x[4], g[4], 0};
	FIRE(cuGraphInstantiateWithFlags, i4);
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[4]), U(g[4]));
	cuGraphLaunch_ptsz_params l4 = {x[4], s2};
	FIRE(cuGraphLaunch_ptsz, l4);
	printf("cuGraphLaunch_ptsz exec=%llu stream=%llu backs=%llu\n", U(x[4]), U(s2), U(d[4]));
	cuDeviceGraphMemTrim_params t2 = {OTHER};
	FIRE(cuDeviceGraphMemTrim, t2);
	printf("cuDeviceGraphMemTrim device=%d frees=%llu\n", OTHER, U(d[2]));
	cuGraphExecDestroy_params e3 = {x[3]};
	FIRE(cuGraphExecDestroy, e3);
	printf("cuGraphExecDestroy exec=%llu frees=%llu\n", U(x[3]), U(d[3]));
	cuGraphDestroy_params gd3 = {g[3]};
	FIRE(cuGraphDestroy, gd3);
	printf("cuGraphDestroy graph=%llu\n", U(g[3]));
	cuGraphExecDestroy_params e0 = {x[0]};
	FIRE(cuGraphExecDestroy, e0);
	printf("cuGraphExecDestroy exec=%llu\n", U(x[0]));
	g[5] = (CUgraph)0x6105;
	x[5] = exec_of(g[5]);
	cuGraphAddMemFreeNode_params fn = {&f, g[5], NULL, 0, d[0]};
	FIRE(cuGraphAddMemFreeNode, fn);
	printf("cuGraphAddMemFreeNode graph=%llu addr=%llu\n", U(g[5]), U(d[0]));
	cuGraphInstantiateWithFlags_params i5 = {&x[5], g[5], 0};
	FIRE(cuGraphInstantiateWithFlags, i5);
	printf("cuGraphInstantiateWithFlags exec=%llu graph=%llu\n", U(x[5]), U(g[5]));
	cuGraphLaunch_params l5 = {x[5], s1};
	FIRE(cuGraphLaunch, l5);
	printf("cuGraphLaunch exec=%llu stream=%llu frees=%llu\n", U(x[5]), U(s1), U(d[0]));
	for (int i = 1; i < 6; i++)
		if (i != 3) {
			cuGraphExecDestroy_params e = {x[i]};
			FIRE(cuGraphExecDestroy, e);
			if (i == 1)
				printf("cuGraphExecDestroy exec=%llu frees=%llu\n", U(x[i]), U(d[1]));
			else
				printf("cuGraphExecDestroy exec=%llu\n", U(x[i]));
		}
	for (int i = 0; i < 6; i++)
		if (i != 3) {
			cuGraphDestroy_params gd = {g[i]};
			FIRE(cuGraphDestroy, gd);
			printf("cuGraphDestroy graph=%llu\n", U(g[i]));
		}
	cuMemFree_v2_params free4 = {d[4]};
	FIRE(cuMemFree_v2, free4);
	printf("cuMemFree_v2 addr=%llu\n", U(d[4]));
	cuDeviceGraphMemTrim_params t1 = {CURRENT};
	FIRE(cuDeviceGraphMemTrim, t1);
	printf("cuDeviceGraphMemTrim device=%d\n", CURRENT);
}

/* The generic and older graph entries (tests/recorder/args.c's driver_graph_lookups) */
static void graph_lookups(void)
{
	CUgraphNodeParams p[2] = {
	    {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
	     .alloc = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = current},
		       .bytesize = 24000017,
		       .dptr = 0x760000000000ull}},
	    {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
	     .alloc = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = other},
		       .bytesize = 24000018,
		       .dptr = 0x760004000000ull}}};
	CUgraph g[2] = {(CUgraph)0x6107, (CUgraph)0x6108};
	CUgraphExec x[2] = {exec_of(g[0]), exec_of(g[1])};
	CUgraphNode n = NULL;

	cuGraphAddNode_params a0 = {&n, g[0], NULL, 0, &p[0]};
	FIRE(cuGraphAddNode, a0);
	printf("cuGraphAddNode graph=%llu addr=%llu size=24000017 device=%d\n", U(g[0]), U(p[0].alloc.dptr), CURRENT);
	cuGraphAddNode_v2_params a1 = {&n, g[1], NULL, NULL, 0, &p[1]};
	FIRE(cuGraphAddNode_v2, a1);
	printf("cuGraphAddNode_v2 graph=%llu addr=%llu size=24000018 device=%d\n", U(g[1]), U(p[1].alloc.dptr), OTHER);
	cuGraphInstantiate_params i0 = {&x[0], g[0], NULL, NULL, 0};
	FIRE(cuGraphInstantiate, i0);
	printf("cuGraphInstantiate exec=%llu graph=%llu\n", U(x[0]), U(g[0]));
	cuGraphInstantiate_v2_params i1 = {&x[1], g[1], NULL, NULL, 0};
	FIRE(cuGraphInstantiate_v2, i1);
	printf("cuGraphInstantiate_v2 exec=%llu graph=%llu\n", U(x[1]), U(g[1]));
	cuGraphLaunch_params l0 = {x[0], s1};
	FIRE(cuGraphLaunch, l0);
	printf("cuGraphLaunch exec=%llu stream=%llu backs=%llu\n", U(x[0]), U(s1), U(p[0].alloc.dptr));
	cuGraphUpload_params u1 = {x[1], s1};
	FIRE(cuGraphUpload, u1);
	printf("cuGraphUpload exec=%llu stream=%llu backs=%llu\n", U(x[1]), U(s1), U(p[1].alloc.dptr));
	cuGraphExecDestroy_params e1 = {x[1]};
	FIRE(cuGraphExecDestroy, e1);
	printf("cuGraphExecDestroy exec=%llu frees=%llu\n", U(x[1]), U(p[1].alloc.dptr));
	cuGraphExecDestroy_params e0 = {x[0]};
	FIRE(cuGraphExecDestroy, e0);
	printf("cuGraphExecDestroy exec=%llu\n", U(x[0]));
	for (int i = 0; i < 2; i++) {
		cuGraphDestroy_params gd = {g[i]};
		FIRE(cuGraphDestroy, gd);
		printf("cuGraphDestroy graph=%llu\n", U(g[i]));
	}
	cuMemFree_v2_params f0 = {p[0].alloc.dptr};
	FIRE(cuMemFree_v2, f0);
	printf("cuMemFree_v2 addr=%llu\n", U(p[0].alloc.dptr));
}

/* An IPC import's size is the driver's to say: the opened address is a real allocation. */
static void imports(void)
{
	CUdeviceptr d = 0, q = 0;
	CUipcMemHandle h = {{0}};
	CUmemGenericAllocationHandle vmm = 0x7b4;
	CUmemoryPool pool = (CUmemoryPool)0x6330;
	CUmemPoolPtrExportData data = {{0}};

	if (cuMemAlloc(&d, 24000016) != CUDA_SUCCESS)
		fprintf(stderr, "cupti_args: cuMemAlloc failed\n");
	cuIpcOpenMemHandle_v2_params open = {&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
	FIRE(cuIpcOpenMemHandle_v2, open);
	printf("cuIpcOpenMemHandle_v2 addr=%llu size=24000016 flags=%d\n", U(d), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	cuIpcCloseMemHandle_params close = {d};
	FIRE(cuIpcCloseMemHandle, close);
	printf("cuIpcCloseMemHandle addr=%llu\n", U(d));
	cuIpcOpenMemHandle_params open1 = {&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
	FIRE(cuIpcOpenMemHandle, open1);
	printf("cuIpcOpenMemHandle addr=%llu size=24000016 flags=%d\n", U(d), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	FIRE(cuIpcCloseMemHandle, close);
	printf("cuIpcCloseMemHandle addr=%llu\n", U(d));
	cuMemImportFromShareableHandle_params import = {&vmm, (void *)(intptr_t)7,
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	FIRE(cuMemImportFromShareableHandle, import);
	printf("cuMemImportFromShareableHandle handle=%llu\n", U(vmm));
	cuMemRelease_params release = {vmm};
	FIRE(cuMemRelease, release);
	printf("cuMemRelease handle=%llu\n", U(vmm));
	cuMemFree(d);
	if (cuMemAlloc(&q, 24000019) != CUDA_SUCCESS)
		fprintf(stderr, "cupti_args: cuMemAlloc failed\n");
	cuMemPoolImportPointer_params import_ptr = {&q, pool, &data};
	FIRE(cuMemPoolImportPointer, import_ptr);
	printf("cuMemPoolImportPointer addr=%llu size=24000019\n", U(q));
	cuMemFree_v2_params free_q = {q};
	FIRE(cuMemFree_v2, free_q);
	printf("cuMemFree_v2 addr=%llu\n", U(q));
	cuMemFree(q);
}

int main(int argc, char **argv)
{
	void *lib;
	int (*init)(void) = NULL;
	CUcontext c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* a context, so the backend can ask the (simulated) driver for the device */
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, CURRENT) || cuCtxSetCurrent(c)) {
		fprintf(stderr, "cupti_args: no context on device %d\n", CURRENT);
		return 1;
	}
	if (!(lib = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL) ||
	    !(init = (int (*)(void))dlsym(lib, "InitializeInjection")) || init() != 1) {
		fprintf(stderr, "cupti_args: cannot load %s\n", argc > 1 ? argv[1] : "(no path)");
		return 1;
	}
	printf("process pid=%d\n", (int)getpid());
	memory();
	vmm();
	arrays();
	graphs();
	graph_lookups();
	imports();
	return 0;
}
