/* What every CUDA backend needs from the driver beside the calls it watches: the
 * current device, a device's name and capacity (a DEVICE event on first sight), and
 * the recording helpers for allocations, releases and failures. Driver functions are
 * looked up once in libcuda.so.1, which the process has loaded by then. */
#include <dlfcn.h>

#include "preload/dlsym_stub.h"
#include "preload/hooks.h"

static void *ctx_get_device, *device_get_name, *device_total_mem, *mem_get_info;
static uint64_t devices_seen;
static uint64_t totals[64];

/* The injected library interposes dlsym and must ask glibc's own (dlsym_stub.S) so as
 * not to be handed its own wrappers; the CUPTI backend has no such stub. */
extern __attribute__((weak)) mt_dlsym_fn mt_dlsym_resolve(void);

void *mtp_dlsym(void *handle, const char *name)
{
	return mt_dlsym_resolve ? mt_dlsym_resolve()(handle, name) : dlsym(handle, name);
}

void *mtp_driver_symbol(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *p;

	if (!h)
		return NULL;
	p = mtp_dlsym(h, name);
	dlclose(h);
	return p;
}

uint8_t mtp_driver_device(void)
{
	PFN_cuCtxGetDevice_v2000 get = (PFN_cuCtxGetDevice_v2000)mtp_lookup_once(&ctx_get_device, "cuCtxGetDevice");
	CUdevice d;

	if (get && get(&d) == CUDA_SUCCESS && d >= 0 && d < MT_NO_DEVICE)
		return (uint8_t)d;
	return MT_NO_DEVICE;
}

void mtp_note_device(uint8_t dev)
{
	struct mt_event e = {.kind = MT_EV_DEVICE, .device = dev};
	char name[256] = "";
	size_t total = 0;

	if (dev >= 64 || (__atomic_load_n(&devices_seen, __ATOMIC_RELAXED) >> dev & 1))
		return;
	if (__atomic_fetch_or(&devices_seen, 1ull << dev, __ATOMIC_RELAXED) >> dev & 1)
		return;
	PFN_cuDeviceGetName_v2000 get_name = (PFN_cuDeviceGetName_v2000)mtp_lookup_once(&device_get_name, "cuDeviceGetName");
	PFN_cuDeviceTotalMem_v3020 get_total =
		(PFN_cuDeviceTotalMem_v3020)mtp_lookup_once(&device_total_mem, "cuDeviceTotalMem_v2");

	if (get_name)
		get_name(name, sizeof name, dev);
	if (get_total)
		get_total(&total, dev);
	__atomic_store_n(&totals[dev], total, __ATOMIC_RELAXED);
	e.size = total;
	e.aux = mtp_intern(name);
	mtp_record(&e, false);
}

uint64_t mtp_device_total(uint8_t dev)
{
	return dev < 64 ? __atomic_load_n(&totals[dev], __ATOMIC_RELAXED) : 0;
}

void mtp_hook_made(uint8_t kind, uint8_t api, uint8_t device, uint64_t addr, uint64_t size, uint64_t aux,
		   uint64_t aux2)
{
	struct mt_event e = {.kind = kind, .flags = api, .device = device, .addr = addr, .size = size,
			     .aux = aux, .aux2 = aux2};
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
