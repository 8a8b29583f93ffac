/* The recording helpers of the driver and runtime hooks (hooks.h): an allocation made,
 * a release, a failure (with the driver's free and total memory, under a policy's cap
 * the cap's, and the policies' on_oom asked whether to try again), and a release that
 * failed after it was recorded. */
#include "recorder/hooks.h"

static void *mem_get_info;

void mtp_hook_made(uint8_t kind, uint8_t api, uint8_t device, uint64_t addr, uint64_t size, uint64_t aux, uint64_t aux2)
{
	struct mt_event e = {
	    .kind = kind, .flags = api, .device = device, .addr = addr, .size = size, .aux = aux, .aux2 = aux2};
	mtp_record(&e, true);
}

void mtp_hook_gone(uint8_t kind, uint64_t addr, uint64_t size, uint64_t aux)
{
	struct mt_event e = {.kind = kind, .device = MT_NO_DEVICE, .addr = addr, .size = size, .aux = aux};
	mtp_record(&e, false);
}

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

bool mtp_hook_outcome(int try_, int error, uint8_t kind, uint8_t api, uint8_t device, uint64_t addr, uint64_t size,
		      uint64_t aux, uint64_t aux2)
{
	if (error)
		return mtp_hook_failed(MT_EV_ALLOC_FAILED, api, device, size, error, try_);
	if (addr) /* the runtime answers a zero-byte request with NULL: nothing was made */
		mtp_hook_made(kind, api, device, addr, size, aux, aux2);
	return false;
}

void mtp_hook_release_failed(int error, uint8_t kind, uint64_t addr)
{
	if (error) {
		struct mt_event e = {.kind = kind, .device = MT_NO_DEVICE, .addr = addr, .error = error};
		mtp_record(&e, false);
	}
}

uint8_t mtp_location_device(const CUmemLocation *loc)
{
	return loc && loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 && loc->id < MT_NO_DEVICE
		   ? (uint8_t)loc->id
		   : MT_NO_DEVICE;
}
