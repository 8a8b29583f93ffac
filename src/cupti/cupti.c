/* The CUPTI backend: `memtap run --backend=cupti` sets CUDA_INJECTION64_PATH, the driver
 * loads this library during cuInit and calls InitializeInjection, which subscribes to
 * CUPTI's driver-API callbacks for the memory calls. Releases are recorded on entry,
 * allocations and failures on exit, into the same events and trace as the preload
 * backend. No symbol games: libraries with a static runtime are seen too. But CUPTI
 * allows one subscriber per process (Nsight tools and torch.profiler are others), and
 * it cannot change results, so capping memory needs the preload backend.
 * Not yet verified on a GPU: tests feed the callback CUPTI's own structures. */
#include <cupti.h>
#include <string.h>

#include "cupti/cupti_backend.h"
#include "recorder/hooks.h"

/* A free of NULL frees nothing, whatever the driver answers: not a release. */
static bool frees_null(CUpti_CallbackId cbid, const void *params)
{
	switch (cbid) {
	case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
		return ((const cuMemFree_v2_params *)params)->dptr == 0;
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
		return ((const cuMemFreeAsync_params *)params)->dptr == 0;
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
		return ((const cuMemFreeHost_params *)params)->p == NULL;
	case CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy:
		return ((const cuArrayDestroy_params *)params)->hArray == NULL;
	case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy:
		return ((const cuMipmappedArrayDestroy_params *)params)->hMipmappedArray == NULL;
	case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
		return ((const cuMemHostUnregister_params *)params)->p == NULL;
	case CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle:
		return ((const cuIpcCloseMemHandle_params *)params)->dptr == 0;
	default:
		return false;
	}
}

/* What a call's enter leaves for its exit, in the callback's correlation word: the graph
 * a capturing stream builds (its stream-ordered calls add memory nodes), or this mark for
 * a free of graph memory, which graph.c records when the memory goes back. */
#define NOT_RECORDED 1

static bool ptsz_of(CUpti_CallbackId cbid)
{
	return cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz ||
	       cbid == CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz ||
	       cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz;
}

/* Releases, before the driver acts on them: the address may be reused at once. */
static void on_enter(CUpti_CallbackId cbid, const void *params, uint64_t *corr)
{
	if (frees_null(cbid, params))
		return;
	switch (cbid) {
	case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: {
		CUdeviceptr dptr = ((const cuMemFree_v2_params *)params)->dptr;
		if (mtp_graph_freed(dptr))
			*corr = NOT_RECORDED;
		else
			mtp_hook_gone(MT_EV_FREE, dptr, 0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
		const cuMemFreeAsync_params *p = params; /* the _ptsz struct has the same layout */
		CUgraph g = mtp_graph_capturing(p->hStream, ptsz_of(cbid));
		if (g && mtp_graph_owns(p->dptr))
			*corr = (uintptr_t)g; /* a free node, added on exit */
		else if (mtp_graph_freed(p->dptr))
			*corr = NOT_RECORDED;
		else
			mtp_hook_gone(MT_EV_FREE, p->dptr, 0, (uintptr_t)p->hStream);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz:
		*corr =
		    (uintptr_t)mtp_graph_capturing(((const cuMemAllocAsync_params *)params)->hStream, ptsz_of(cbid));
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
		*corr = (uintptr_t)mtp_graph_capturing(((const cuMemAllocFromPoolAsync_params *)params)->hStream,
						       ptsz_of(cbid));
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy:
		mtp_graph_exec_destroyed(((const cuGraphExecDestroy_params *)params)->hGraphExec);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuGraphDestroy:
		mtp_graph_destroyed(((const cuGraphDestroy_params *)params)->hGraph);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuDeviceGraphMemTrim:
		mtp_graph_trimmed(((const cuDeviceGraphMemTrim_params *)params)->device);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
		mtp_hook_gone(MT_EV_HOST_FREE, (uintptr_t)((const cuMemFreeHost_params *)params)->p, 0, 0);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
		mtp_hook_gone(MT_EV_VMM_RELEASE, 0, 0, ((const cuMemRelease_params *)params)->handle);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
		const cuMemUnmap_params *p = params;
		mtp_hook_gone(MT_EV_VMM_UNMAP, p->ptr, p->size, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree: {
		const cuMemAddressFree_params *p = params;
		mtp_hook_gone(MT_EV_VMM_ADDR_FREE, p->ptr, p->size, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy:
		mtp_hook_gone(MT_EV_POOL_DESTROY, 0, 0, (uintptr_t)((const cuMemPoolDestroy_params *)params)->pool);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy:
		mtp_hook_gone(MT_EV_FREE, (uintptr_t)((const cuArrayDestroy_params *)params)->hArray, 0, 0);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy:
		mtp_hook_gone(MT_EV_FREE, (uintptr_t)((const cuMipmappedArrayDestroy_params *)params)->hMipmappedArray,
			      0, 0);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
		mtp_hook_gone(MT_EV_HOST_FREE, (uintptr_t)((const cuMemHostUnregister_params *)params)->p, 0, 0);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle:
		mtp_hook_gone(MT_EV_FREE, ((const cuIpcCloseMemHandle_params *)params)->dptr, 0, 0);
		break;
	default:
		break;
	}
}

/* Allocations and failures, read from the parameters after the driver returned. */
static void on_exit_(CUpti_CallbackId cbid, const void *params, CUresult r, uint64_t corr)
{
	CUgraph capturing = corr > NOT_RECORDED ? (CUgraph)(uintptr_t)corr : NULL;
	uint8_t dev;

	if (corr == NOT_RECORDED)
		return; /* a free of graph memory: nothing was recorded on enter */
	switch (cbid) {
	case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
		const cuMemAlloc_v2_params *p = params;
		mtp_hook_outcome(0, r, MT_EV_ALLOC, MT_API_DRIVER, mtp_driver_device(), r ? 0 : *p->dptr, p->bytesize,
				 0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
		const cuMemAllocPitch_v2_params *p = params;
		mtp_hook_outcome(0, r, MT_EV_ALLOC, MT_API_PITCH, mtp_driver_device(), r ? 0 : *p->dptr,
				 r ? p->WidthInBytes * p->Height : *p->pPitch * p->Height, 0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
		const cuMemAllocManaged_params *p = params;
		mtp_hook_outcome(0, r, MT_EV_MANAGED_ALLOC, MT_API_MANAGED, mtp_driver_device(), r ? 0 : *p->dptr,
				 p->bytesize, p->flags, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
		const cuMemHostAlloc_params *p = params;
		mtp_hook_outcome(0, r, MT_EV_HOST_ALLOC, MT_API_HOST, MT_NO_DEVICE, r ? 0 : (uintptr_t)*p->pp,
				 p->bytesize, p->Flags, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
		const cuMemAllocHost_v2_params *p = params;
		mtp_hook_outcome(0, r, MT_EV_HOST_ALLOC, MT_API_HOST, MT_NO_DEVICE, r ? 0 : (uintptr_t)*p->pp,
				 p->bytesize, 0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
		const cuMemAllocAsync_params *p = params;
		if (capturing && r == CUDA_SUCCESS) {
			mtp_graph_alloc_node(capturing, *p->dptr, p->bytesize, mtp_driver_device());
			break;
		}
		mtp_hook_outcome(0, r, MT_EV_ALLOC, MT_API_ASYNC, mtp_driver_device(), r ? 0 : *p->dptr, p->bytesize,
				 (uintptr_t)p->hStream, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
		const cuMemAllocFromPoolAsync_params *p = params;
		if (capturing && r == CUDA_SUCCESS) {
			mtp_graph_alloc_node(capturing, *p->dptr, p->bytesize, mtp_driver_device());
			break;
		}
		mtp_hook_outcome(0, r, MT_EV_ALLOC, MT_API_POOL, mtp_driver_device(), r ? 0 : *p->dptr, p->bytesize,
				 (uintptr_t)p->hStream, (uintptr_t)p->pool);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
		const cuMemCreate_params *p = params;
		dev = mtp_location_device(p->prop ? &p->prop->location : NULL);
		if (r == CUDA_SUCCESS) {
			struct mt_event e = {.kind = MT_EV_VMM_CREATE,
					     .device = dev,
					     .size = p->size,
					     .aux = *p->handle,
					     .flags = p->prop ? (uint8_t)p->prop->location.type : 0};
			mtp_record(&e, true);
		} else {
			mtp_hook_failed(MT_EV_ALLOC_FAILED, MT_API_VMM, dev, p->size, r, 0);
		}
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
		const cuMemMap_params *p = params;
		struct mt_event e = {.kind = MT_EV_VMM_MAP,
				     .device = MT_NO_DEVICE,
				     .addr = p->ptr,
				     .size = p->size,
				     .aux = p->handle,
				     .aux2 = p->offset,
				     .error = r};
		mtp_record(&e, r == CUDA_SUCCESS);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve: {
		const cuMemAddressReserve_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_hook_gone(MT_EV_VMM_RESERVE, *p->ptr, p->size, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess: {
		const cuMemSetAccess_params *p = params;
		if (r == CUDA_SUCCESS && p->desc && p->count) {
			struct mt_event e = {.kind = MT_EV_VMM_ACCESS,
					     .device = mtp_location_device(&p->desc[0].location),
					     .addr = p->ptr,
					     .size = p->size,
					     .aux = p->desc[0].flags};
			mtp_record(&e, false);
		}
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate: {
		const cuMemPoolCreate_params *p = params;
		if (r == CUDA_SUCCESS) {
			struct mt_event e = {.kind = MT_EV_POOL_CREATE,
					     .aux = (uintptr_t)*p->pool,
					     .device =
						 mtp_location_device(p->poolProps ? &p->poolProps->location : NULL)};
			mtp_record(&e, true);
		}
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo: {
		const cuMemPoolTrimTo_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_hook_gone(MT_EV_POOL_TRIM, 0, p->minBytesToKeep, (uintptr_t)p->pool);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2: {
		const cuMemGetInfo_v2_params *p = params;
		if (r == CUDA_SUCCESS) {
			struct mt_event e = {.kind = MT_EV_MEMINFO,
					     .device = mtp_driver_device(),
					     .aux = p->free ? *p->free : 0,
					     .aux2 = p->total ? *p->total : 0};
			mtp_record(&e, false);
		}
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2: {
		const cuArrayCreate_v2_params *p = params;
		const CUDA_ARRAY_DESCRIPTOR *d = p->pAllocateArray;
		mtp_hook_outcome(1, r, MT_EV_ALLOC, MT_API_ARRAY, mtp_driver_device(), r ? 0 : (uintptr_t)*p->pHandle,
				 d ? mtp_array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels, 1) : 0, 0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2: {
		const cuArray3DCreate_v2_params *p = params;
		const CUDA_ARRAY3D_DESCRIPTOR *d = p->pAllocateArray;
		mtp_hook_outcome(1, r, MT_EV_ALLOC, MT_API_ARRAY, mtp_driver_device(), r ? 0 : (uintptr_t)*p->pHandle,
				 d ? mtp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1) : 0,
				 0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate: {
		const cuMipmappedArrayCreate_params *p = params;
		const CUDA_ARRAY3D_DESCRIPTOR *d = p->pMipmappedArrayDesc;
		mtp_hook_outcome(
		    1, r, MT_EV_ALLOC, MT_API_ARRAY, mtp_driver_device(), r ? 0 : (uintptr_t)*p->pHandle,
		    d ? mtp_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, p->numMipmapLevels)
		      : 0,
		    0, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
		const cuMemHostRegister_v2_params *p = params;
		mtp_hook_outcome(1, r, MT_EV_HOST_ALLOC, MT_API_REGISTER, MT_NO_DEVICE, r ? 0 : (uintptr_t)p->p,
				 p->bytesize, p->Flags, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle:
	case CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2: {
		const cuIpcOpenMemHandle_v2_params *p = params; /* the v1 struct has the same layout */
		mtp_hook_ipc_opened(r, r ? 0 : *p->pdptr, p->Flags);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemPoolImportPointer: {
		const cuMemPoolImportPointer_params *p = params;
		mtp_hook_ipc_opened(r, r ? 0 : *p->ptr_out, 0);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemImportFromShareableHandle: {
		const cuMemImportFromShareableHandle_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_hook_imported(*p->handle);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuMemPoolSetAttribute: {
		const cuMemPoolSetAttribute_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_hook_pool_attr(p->pool, p->attr, p->value);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode: {
		const cuGraphAddMemAllocNode_params *p = params;
		if (r == CUDA_SUCCESS && p->nodeParams)
			mtp_graph_alloc_node(p->hGraph, p->nodeParams->dptr, p->nodeParams->bytesize,
					     mtp_location_device(&p->nodeParams->poolProps.location));
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode: {
		const cuGraphAddMemFreeNode_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_graph_free_node(p->hGraph, p->dptr);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode: {
		const cuGraphAddNode_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_hook_graph_node(p->hGraph, p->nodeParams);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2: {
		const cuGraphAddNode_v2_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_hook_graph_node(p->hGraph, p->nodeParams);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate:
	case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2: {
		const cuGraphInstantiate_v2_params *p = params; /* the v1 struct has the same layout */
		if (r == CUDA_SUCCESS)
			mtp_graph_instantiated(p->hGraph, *p->phGraphExec, false);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags: {
		const cuGraphInstantiateWithFlags_params *p = params;
		if (r == CUDA_SUCCESS)
			mtp_graph_instantiated(p->hGraph, *p->phGraphExec, false);
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams:
	case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz: {
		const cuGraphInstantiateWithParams_params *p = params; /* the _ptsz struct has the same layout */
		if (r == CUDA_SUCCESS)
			mtp_graph_instantiated(p->hGraph, *p->phGraphExec,
					       p->instantiateParams &&
						   (p->instantiateParams->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
		break;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
	case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
		mtp_graph_ran(((const cuGraphLaunch_params *)params)->hGraph, r, false);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuGraphUpload:
	case CUPTI_DRIVER_TRACE_CBID_cuGraphUpload_ptsz:
		mtp_graph_ran(((const cuGraphUpload_params *)params)->hGraph, r, true);
		break;
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
		if (capturing) { /* a free node, not a release */
			if (r == CUDA_SUCCESS)
				mtp_graph_free_node(capturing, ((const cuMemFreeAsync_params *)params)->dptr);
			break;
		}
		/* fall through */
	case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
	case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
	case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
	case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap:
	case CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree:
	case CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy:
	case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy:
	case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
	case CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle:
		/* the release recorded on entry did not happen */
		if (!frees_null(cbid, params))
			mtp_hook_release_failed(r,
						cbid == CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost ||
							cbid == CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister
						    ? MT_EV_HOST_FREE
						    : MT_EV_FREE,
						0);
		break;
	default:
		break;
	}
}

const CUpti_CallbackId mtp_cupti_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
    CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve,
    CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree,
    CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolSetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate,
    CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister,
    CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle,
    CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolImportPointer,
    CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle,
    CUPTI_DRIVER_TRACE_CBID_cuMemImportFromShareableHandle,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphUpload,
    CUPTI_DRIVER_TRACE_CBID_cuGraphUpload_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuGraphDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuDeviceGraphMemTrim,
};
const size_t mtp_cupti_nids = sizeof mtp_cupti_ids / sizeof mtp_cupti_ids[0];

void CUPTIAPI mtp_cupti_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
	const CUpti_CallbackData *cd = data;

	(void)userdata;
	if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !cd || !cd->functionParams)
		return;
	/* the same guard as the preload hooks: nothing recorded from inside memtap */
	if (mtp_enter_outer()) {
		uint64_t none = 0, *corr = cd->correlationData ? cd->correlationData : &none;
		if (cd->callbackSite == CUPTI_API_ENTER) {
			*corr = 0;
			on_enter(cbid, cd->functionParams, corr);
		} else if (cd->functionReturnValue) {
			on_exit_(cbid, cd->functionParams, *(const CUresult *)cd->functionReturnValue, *corr);
		}
	}
	mtp_leave();
}
