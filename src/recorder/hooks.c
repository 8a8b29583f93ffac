/* The recording helpers of the driver and runtime hooks and the CUPTI backend (hooks.h):
 * an allocation made, a release, a failure (with the driver's free and total memory,
 * under a policy's cap the cap's, and the policies' on_oom asked whether to try again),
 * a release that failed after it was recorded, and the calls both backends record the
 * same way (arrays' bytes, pool attributes, imports, cuGraphAddNode's memory nodes). */
#include "recorder/hooks.h"

static void *mem_get_info, *address_range;

bool mtp_hook_failed(uint8_t kind, uint8_t api, uint8_t device, uint64_t size, int error, int try_)
{
	struct mt_event e = {.kind = kind, .flags = api, .device = device, .size = size, .error = error};
	PFN_cuMemGetInfo_v3020 info = (PFN_cuMemGetInfo_v3020)mtp_lookup_once(&mem_get_info, "cuMemGetInfo_v2");
	size_t free_bytes = 0, total = 0;

	if (error == CUDA_ERROR_OUT_OF_MEMORY && info && info(&free_bytes, &total) == CUDA_SUCCESS) {
		uint64_t cap = mtp_cap_of(device, total);
		/* under a policy's cap the device is the cap's size */
		if (cap && cap < total) {
			free_bytes = total - free_bytes < cap ? cap - (total - free_bytes) : 0;
			total = cap;
		}
		e.aux = free_bytes;
		e.aux2 = total;
	}
	mtp_record(&e, true);
	/* the runtime's cudaErrorMemoryAllocation is the driver's CUDA_ERROR_OUT_OF_MEMORY: both 2 */
	return error == CUDA_ERROR_OUT_OF_MEMORY && try_ == 0 && mtp_policy_oom(&e);
}

uint8_t mtp_location_device(const CUmemLocation *loc)
{
	return loc && loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 && loc->id < MT_NO_DEVICE
		   ? (uint8_t)loc->id
		   : MT_NO_DEVICE;
}

static size_t format_size(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 4; /* a format memtap does not know: its element size is a guess */
	}
}

uint64_t mtp_array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels, unsigned levels)
{
	uint64_t total = 0, elem = format_size(f) * channels;

	h = h ? h : 1;
	d = d ? d : 1;
	for (unsigned l = 0; l < levels && w; l++) {
		total += (uint64_t)w * h * d * elem;
		w = w > 1 ? w / 2 : 1;
		h = h > 1 ? h / 2 : 1;
		d = d > 1 ? d / 2 : 1;
	}
	return total;
}

void mtp_hook_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, const void *value)
{
	/* the reuse flags are ints, the thresholds and high-water marks 64-bit */
	bool wide = attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
		    attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ||
		    attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT;
	struct mt_event e = {
	    .kind = MT_EV_POOL_ATTR, .device = MT_NO_DEVICE, .aux = (uintptr_t)pool, .aux2 = (uint64_t)attr};

	if (!value)
		return;
	e.size = wide ? *(const cuuint64_t *)value : (uint64_t) * (const int *)value;
	mtp_record(&e, false);
}

void mtp_hook_ipc_opened(int error, CUdeviceptr dptr, unsigned flags)
{
	PFN_cuMemGetAddressRange_v3020 range =
	    (PFN_cuMemGetAddressRange_v3020)mtp_lookup_once(&address_range, "cuMemGetAddressRange_v2");
	CUdeviceptr base;
	size_t size = 0;

	/* the size is the driver's to say: the handle does not */
	if (!error && (!range || range(&base, &size, dptr) != CUDA_SUCCESS))
		size = 0;
	mtp_hook_outcome(1, error, MT_EV_ALLOC, MT_API_IPC, MT_NO_DEVICE, dptr, size, flags, 0);
}

void mtp_hook_imported(CUmemGenericAllocationHandle handle)
{
	struct mt_event e = {.kind = MT_EV_VMM_CREATE,
			     .flags = CU_MEM_LOCATION_TYPE_DEVICE,
			     .device = MT_NO_DEVICE,
			     .aux = handle,
			     .aux2 = MT_VMM_IMPORTED};
	mtp_record(&e, true);
}

void mtp_hook_graph_node(CUgraph g, const CUgraphNodeParams *p)
{
	if (!p)
		return;
	if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		mtp_graph_alloc_node(g, p->alloc.dptr, p->alloc.bytesize,
				     mtp_location_device(&p->alloc.poolProps.location));
	else if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
		mtp_graph_free_node(g, p->free.dptr);
}
