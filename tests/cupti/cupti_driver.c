/* Loads memtap's CUPTI backend as the driver would (dlopen, InitializeInjection), then
 * plays driver calls through the stand-in libcupti's callback, with parameters in
 * CUPTI's generated structures. Each call has a size of its own; test_cupti.py checks
 * the trace. Usage: cupti_driver PATH_TO_libmemtap-cupti.so */
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

void fake_cupti_fire(CUpti_CallbackId cbid, const char *name, void *params, CUresult result);
int fake_cupti_enabled(CUpti_CallbackId cbid);

#define FIRE(name, params, result) fake_cupti_fire(CUPTI_DRIVER_TRACE_CBID_##name, #name, &(params), result)

/* Graph memory nodes: one built, backed by its launch, freed outside the graph while its
 * executable graph lives (no event) and released with it; one captured on a real
 * (simulated) capturing stream, backed by an upload, freed inside the graph and released
 * by a trim; a launch that runs out of memory. */
static NOINLINE void graph_through_cupti(void)
{
	CUgraph g1 = (CUgraph)0x6100, g2 = NULL, g3 = (CUgraph)0x6300;
	CUgraphExec x1 = (CUgraphExec)0x6200, x2 = (CUgraphExec)0x6400, x3 = (CUgraphExec)0x6500;
	CUgraphNode node = NULL;
	CUstream s = NULL;
	CUdeviceptr d = 0;
	CUDA_MEM_ALLOC_NODE_PARAMS ap = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
						       .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
					 .bytesize = 12000010,
					 .dptr = 0x720000000000ull};
	CUDA_GRAPH_INSTANTIATE_PARAMS up = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD};

	cuGraphAddMemAllocNode_params add = {&node, g1, NULL, 0, &ap};
	FIRE(cuGraphAddMemAllocNode, add, CUDA_SUCCESS);
	cuGraphInstantiateWithFlags_params inst = {&x1, g1, 0};
	FIRE(cuGraphInstantiateWithFlags, inst, CUDA_SUCCESS);
	cuGraphLaunch_params launch = {x1, NULL};
	FIRE(cuGraphLaunch, launch, CUDA_SUCCESS);
	cuMemFree_v2_params outside = {ap.dptr};
	FIRE(cuMemFree_v2, outside, CUDA_SUCCESS);
	cuGraphExecDestroy_params xdestroy = {x1};
	FIRE(cuGraphExecDestroy, xdestroy, CUDA_SUCCESS);
	cuGraphDestroy_params gdestroy = {g1};
	FIRE(cuGraphDestroy, gdestroy, CUDA_SUCCESS);

	if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) || cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL))
		return;
	d = 0x720000100000ull;
	cuMemAllocAsync_params async = {&d, 12000011, s};
	FIRE(cuMemAllocAsync, async, CUDA_SUCCESS);
	cuMemFreeAsync_params async_free = {d, s};
	FIRE(cuMemFreeAsync, async_free, CUDA_SUCCESS);
	if (cuStreamEndCapture(s, &g2))
		return;
	cuGraphInstantiateWithParams_params inst2 = {&x2, g2, &up};
	FIRE(cuGraphInstantiateWithParams, inst2, CUDA_SUCCESS);
	cuGraphLaunch_params launch2 = {x2, s};
	FIRE(cuGraphLaunch, launch2, CUDA_SUCCESS);
	cuDeviceGraphMemTrim_params trim = {0};
	FIRE(cuDeviceGraphMemTrim, trim, CUDA_SUCCESS);
	cuGraphExecDestroy_params xdestroy2 = {x2};
	FIRE(cuGraphExecDestroy, xdestroy2, CUDA_SUCCESS);
	cuGraphDestroy_params gdestroy2 = {g2};
	FIRE(cuGraphDestroy, gdestroy2, CUDA_SUCCESS);
	cuGraphDestroy(g2);
	cuStreamDestroy(s);

	ap.bytesize = 12000012;
	ap.dptr = 0x720000200000ull;
	cuGraphAddMemAllocNode_params add3 = {&node, g3, NULL, 0, &ap};
	FIRE(cuGraphAddMemAllocNode, add3, CUDA_SUCCESS);
	cuGraphInstantiateWithFlags_params inst3 = {&x3, g3, 0};
	FIRE(cuGraphInstantiateWithFlags, inst3, CUDA_SUCCESS);
	cuGraphLaunch_params launch3 = {x3, NULL};
	FIRE(cuGraphLaunch, launch3, CUDA_ERROR_OUT_OF_MEMORY);
	cuGraphExecDestroy_params xdestroy3 = {x3};
	FIRE(cuGraphExecDestroy, xdestroy3, CUDA_SUCCESS);
	cuGraphDestroy_params gdestroy3 = {g3};
	FIRE(cuGraphDestroy, gdestroy3, CUDA_SUCCESS);
}

/* The entries at the versions NVIDIA's runtime looks up: graph memory nodes added with
 * cuGraphAddNode (both ABIs) in graphs instantiated with cuGraphInstantiate (both), an
 * IPC handle opened with the CUDA 4.1 entry and a pool's allocation imported. */
static NOINLINE void lookups_through_cupti(void)
{
	CUgraph g4 = (CUgraph)0x6600, g5 = (CUgraph)0x6700;
	CUgraphExec x4 = (CUgraphExec)0x6800, x5 = (CUgraphExec)0x6900;
	CUgraphNode a = (CUgraphNode)0x6a00, f = (CUgraphNode)0x6b00;
	CUgraphNodeParams alloc = {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
				   .alloc = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
							   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
					     .bytesize = 12000013,
					     .dptr = 0x720000300000ull}};
	CUgraphNodeParams release = {.type = CU_GRAPH_NODE_TYPE_MEM_FREE, .free = {.dptr = 0x720000300000ull}};
	CUdeviceptr ipc = 0x730000000000ull, imported = 0x730000100000ull;
	CUipcMemHandle handle = {{0}};
	CUmemPoolPtrExportData data = {{0}};

	cuGraphAddNode_params add = {&a, g4, NULL, 0, &alloc};
	FIRE(cuGraphAddNode, add, CUDA_SUCCESS);
	cuGraphAddNode_v2_params add_free = {&f, g4, &a, NULL, 1, &release};
	FIRE(cuGraphAddNode_v2, add_free, CUDA_SUCCESS);
	cuGraphInstantiate_params inst = {&x4, g4, NULL, NULL, 0};
	FIRE(cuGraphInstantiate, inst, CUDA_SUCCESS);
	cuGraphLaunch_params launch = {x4, NULL};
	FIRE(cuGraphLaunch, launch, CUDA_SUCCESS);
	cuDeviceGraphMemTrim_params trim = {0};
	FIRE(cuDeviceGraphMemTrim, trim, CUDA_SUCCESS);

	alloc.alloc.bytesize = 12000015;
	alloc.alloc.dptr = 0x720000400000ull;
	cuGraphAddNode_v2_params add2 = {&a, g5, NULL, NULL, 0, &alloc};
	FIRE(cuGraphAddNode_v2, add2, CUDA_SUCCESS);
	cuGraphInstantiate_v2_params inst2 = {&x5, g5, NULL, NULL, 0};
	FIRE(cuGraphInstantiate_v2, inst2, CUDA_SUCCESS);
	cuGraphLaunch_params launch2 = {x5, NULL};
	FIRE(cuGraphLaunch, launch2, CUDA_SUCCESS);
	cuGraphExecDestroy_params xdestroy = {x5};
	FIRE(cuGraphExecDestroy, xdestroy, CUDA_SUCCESS);
	cuMemFree_v2_params outlived = {alloc.alloc.dptr};
	FIRE(cuMemFree_v2, outlived, CUDA_SUCCESS);

	cuIpcOpenMemHandle_params open1 = {&ipc, handle, 0};
	FIRE(cuIpcOpenMemHandle, open1, CUDA_SUCCESS);
	cuIpcCloseMemHandle_params close1 = {ipc};
	FIRE(cuIpcCloseMemHandle, close1, CUDA_SUCCESS);
	cuMemPoolImportPointer_params import = {&imported, (CUmemoryPool)0x5152, &data};
	FIRE(cuMemPoolImportPointer, import, CUDA_SUCCESS);
	cuMemFree_v2_params import_free = {imported};
	FIRE(cuMemFree_v2, import_free, CUDA_SUCCESS);
}

static NOINLINE void allocate_through_cupti(void)
{
	CUdeviceptr d = 0x700000001000ull, d2 = 0x700000200000ull, va = 0x710000000000ull;
	CUstream stream = (CUstream)0x5150;
	CUmemGenericAllocationHandle h = 77;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	void *host = (void *)0x7e0000000000ull;
	size_t pitch = 2048;

	cuMemAlloc_v2_params alloc = {&d, 12000001};
	FIRE(cuMemAlloc_v2, alloc, CUDA_SUCCESS);
	cuMemAllocPitch_v2_params pitched = {&d2, &pitch, 2000, 100, 4};
	FIRE(cuMemAllocPitch_v2, pitched, CUDA_SUCCESS);
	cuMemFree_v2_params free1 = {d};
	FIRE(cuMemFree_v2, free1, CUDA_SUCCESS);
	cuMemFree_v2_params free2 = {d2};
	FIRE(cuMemFree_v2, free2, CUDA_SUCCESS);

	d = 0x700000400000ull;
	cuMemAllocAsync_ptsz_params async = {&d, 12000003, stream};
	FIRE(cuMemAllocAsync_ptsz, async, CUDA_SUCCESS);
	cuMemFreeAsync_params async_free = {d, stream};
	FIRE(cuMemFreeAsync, async_free, CUDA_SUCCESS);

	cuMemHostAlloc_params pinned = {&host, 12000004, 0};
	FIRE(cuMemHostAlloc, pinned, CUDA_SUCCESS);
	cuMemFreeHost_params pinned_free = {host};
	FIRE(cuMemFreeHost, pinned_free, CUDA_SUCCESS);

	cuMemCreate_params create = {&h, 2 << 20, &prop, 0};
	FIRE(cuMemCreate, create, CUDA_SUCCESS);
	cuMemAddressReserve_params reserve = {&va, 4 << 20, 0, 0, 0};
	FIRE(cuMemAddressReserve, reserve, CUDA_SUCCESS);
	cuMemMap_params map = {va, 2 << 20, 0, h, 0};
	FIRE(cuMemMap, map, CUDA_SUCCESS);
	cuMemRelease_params release = {h};
	FIRE(cuMemRelease, release, CUDA_SUCCESS);
	cuMemUnmap_params unmap = {va, 2 << 20};
	FIRE(cuMemUnmap, unmap, CUDA_SUCCESS);
	cuMemAddressFree_params addr_free = {va, 4 << 20};
	FIRE(cuMemAddressFree, addr_free, CUDA_SUCCESS);

	cuMemAlloc_v2_params too_big = {&d, 12000005};
	FIRE(cuMemAlloc_v2, too_big, CUDA_ERROR_OUT_OF_MEMORY);
	cuMemFree_v2_params bad_free = {0x1234};
	FIRE(cuMemFree_v2, bad_free, CUDA_ERROR_INVALID_VALUE);

	/* arrays, host registration, imports, a pool attribute (issue 22's paths) */
	CUarray array = (CUarray)0x7a0000001000ull;
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1000, .Height = 100, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	cuArrayCreate_v2_params array_create = {&array, &ad};
	FIRE(cuArrayCreate_v2, array_create, CUDA_SUCCESS);
	cuArrayDestroy_params array_destroy = {array};
	FIRE(cuArrayDestroy, array_destroy, CUDA_SUCCESS);
	cuMemHostRegister_v2_params reg = {host, 12000006, 1};
	FIRE(cuMemHostRegister_v2, reg, CUDA_SUCCESS);
	cuMemHostUnregister_params unreg = {host};
	FIRE(cuMemHostUnregister, unreg, CUDA_SUCCESS);
	CUmemGenericAllocationHandle imported = 99;
	cuMemImportFromShareableHandle_params import = {&imported, (void *)3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	FIRE(cuMemImportFromShareableHandle, import, CUDA_SUCCESS);
	cuMemRelease_params release_import = {imported};
	FIRE(cuMemRelease, release_import, CUDA_SUCCESS);
	cuuint64_t threshold = 12000007;
	cuMemPoolSetAttribute_params attr = {(CUmemoryPool)0x5151, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold};
	FIRE(cuMemPoolSetAttribute, attr, CUDA_SUCCESS);

	/* frees of NULL free nothing, whatever the driver answers: no events */
	cuMemFree_v2_params null_free = {0};
	FIRE(cuMemFree_v2, null_free, CUDA_SUCCESS);
	FIRE(cuMemFree_v2, null_free, CUDA_ERROR_INVALID_VALUE);
	cuMemFreeAsync_params null_async = {0, stream};
	FIRE(cuMemFreeAsync, null_async, CUDA_SUCCESS);
	cuMemFreeHost_params null_host = {NULL};
	FIRE(cuMemFreeHost, null_host, CUDA_SUCCESS);

	graph_through_cupti();
	lookups_through_cupti();
}

int main(int argc, char **argv)
{
	void *lib;
	int (*init)(void);
	CUcontext ctx;

	if (argc < 2) {
		fprintf(stderr, "usage: cupti_driver LIBMEMTAP_CUPTI\n");
		return 2;
	}
	/* a context, so the backend can ask the (simulated) driver for the device and free memory */
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
		return 1;
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "cupti_driver: %s\n", dlerror());
		return 1;
	}
	init = (int (*)(void))dlsym(lib, "InitializeInjection");
	if (!init || init() != 1) {
		fprintf(stderr, "cupti_driver: InitializeInjection failed\n");
		return 1;
	}
	if (!fake_cupti_enabled(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) ||
	    !fake_cupti_enabled(CUPTI_DRIVER_TRACE_CBID_cuMemCreate) ||
	    fake_cupti_enabled(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)) {
		fprintf(stderr, "cupti_driver: the wrong callbacks are enabled\n");
		return 1;
	}
	allocate_through_cupti();
	return 0;
}
