/* What every CUDA backend needs from the driver beside the calls it watches: driver
 * functions looked up once in libcuda.so.1 (which the process has loaded by then) and
 * forgotten if it is unloaded, the current device, a device's name and capacity (a
 * DEVICE event on first sight), and memtap's own readings of the driver's count. */
#include <dlfcn.h>
#include <link.h>

#include "recorder/prim.h"
#include "recorder/hooks.h"

static void *ctx_get_device, *device_get_name, *device_total_mem, *mem_get_info;
uint64_t mtp_devices_seen;
static uint64_t totals[64];

/* Every slot filled by mtp_driver_lookup, and the driver's code range, so that pointers
 * into an unloaded driver are never called (mtp_driver_forget). */
static void **slots[128];
static unsigned nslots;
static uintptr_t driver_lo, driver_hi;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

/* The injected library interposes dlsym and must ask glibc's own (dlsym_x86_64.S) so as
 * not to be handed its own wrappers; the CUPTI backend has no such stub. */
extern __attribute__((weak)) mt_dlsym_fn mt_dlsym_resolve(void);

static int find_module(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t *range = arg, lo, hi;

	(void)size;
	if (!mtp_load_bounds(info, &lo, &hi))
		return 0;
	if (range[2] ? lo == range[0] && hi == range[1] : range[0] >= lo && range[0] < hi) {
		range[0] = lo;
		range[1] = hi;
		return 1;
	}
	return 0;
}

bool mtp_module_of(const void *p, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t range[3] = {(uintptr_t)p, 0, 0};

	if (!dl_iterate_phdr(find_module, range))
		return false;
	*lo = range[0];
	*hi = range[1];
	return true;
}

bool mtp_module_loaded(uintptr_t lo, uintptr_t hi)
{
	uintptr_t range[3] = {lo, hi, 1};

	return dl_iterate_phdr(find_module, range) != 0;
}

void *mtp_dlsym(void *handle, const char *name)
{
	return mt_dlsym_resolve ? mt_dlsym_resolve()(handle, name) : dlsym(handle, name);
}

/* The preload backend interposes dlclose (loader.c); memtap's own calls skip it. */
extern __attribute__((weak)) int mtp_dlclose_next(void *handle);

int mtp_dlclose(void *handle)
{
	return mtp_dlclose_next ? mtp_dlclose_next(handle) : dlclose(handle);
}

void *mtp_driver_symbol(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *p;

	if (!h)
		return NULL;
	p = mtp_dlsym(h, name);
	mtp_dlclose(h);
	return p;
}

static void *driver_symbol(void *name)
{
	return mtp_driver_symbol(name);
}

void *mtp_driver_lookup(void **slot, const char *name)
{
	/* on memtap's stack: the loader needs kilobytes a small fiber does not have */
	void *p = mtp_slow_stack(driver_symbol, (void *)name);
	unsigned i;

	pthread_mutex_lock(&slots_lock);
	for (i = 0; i < nslots && slots[i] != slot; i++)
		;
	if (i == nslots && nslots < sizeof slots / sizeof slots[0])
		slots[nslots++] = slot;
	/* what libcuda.so.1 is: when a layer, its calls into the driver are part of the hook's call */
	if (p && !driver_hi && mtp_module_of(p, &driver_lo, &driver_hi))
		mtp_layer_library(driver_lo, driver_hi);
	__atomic_store_n(slot, p, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&slots_lock);
	return p;
}

/* A library was unloaded: if it was the driver, every pointer into it is forgotten and
 * looked up again at its next use. True when it was. */
bool mtp_driver_forget(void)
{
	bool gone;

	pthread_mutex_lock(&slots_lock);
	gone = driver_hi && !mtp_module_loaded(driver_lo, driver_hi);
	if (gone) {
		for (unsigned i = 0; i < nslots; i++)
			__atomic_store_n(slots[i], NULL, __ATOMIC_RELAXED);
		driver_lo = driver_hi = 0;
	}
	pthread_mutex_unlock(&slots_lock);
	return gone;
}

uint8_t mtp_driver_device(void)
{
	PFN_cuCtxGetDevice_v2000 get = (PFN_cuCtxGetDevice_v2000)mtp_lookup_once(&ctx_get_device, "cuCtxGetDevice");
	CUdevice d;

	if (get && get(&d) == CUDA_SUCCESS && d >= 0 && d < MT_NO_DEVICE)
		return (uint8_t)d;
	return MT_NO_DEVICE;
}

/* The first thread to claim the device fills its DEVICE event; others leave e->kind alone. */
void mtp_device_event(uint8_t dev, struct mt_event *e)
{
	char name[256] = "";
	size_t total = 0;
	uint64_t cap;

	if (mtp_device_seen(dev) || (__atomic_fetch_or(&mtp_devices_seen, 1ull << dev, __ATOMIC_RELAXED) >> dev & 1))
		return;
	PFN_cuDeviceGetName_v2000 get_name =
	    (PFN_cuDeviceGetName_v2000)mtp_lookup_once(&device_get_name, "cuDeviceGetName");
	PFN_cuDeviceTotalMem_v3020 get_total =
	    (PFN_cuDeviceTotalMem_v3020)mtp_lookup_once(&device_total_mem, "cuDeviceTotalMem_v2");

	if (get_name)
		get_name(name, sizeof name, dev);
	if (get_total)
		get_total(&total, dev);
	__atomic_store_n(&totals[dev], total, __ATOMIC_RELAXED);
	cap = mtp_cap_of(dev, total);
	*e = (struct mt_event){
	    .kind = MT_EV_DEVICE, .device = dev, .size = total, .aux = mtp_intern(name), .aux2 = cap < total ? cap : 0};
}

uint64_t mtp_device_total(uint8_t dev)
{
	return dev < 64 ? __atomic_load_n(&totals[dev], __ATOMIC_RELAXED) : 0;
}

void mtp_device_reading(uint8_t dev, uint8_t why, struct mt_event *e)
{
	PFN_cuMemGetInfo_v3020 info = (PFN_cuMemGetInfo_v3020)mtp_lookup_once(&mem_get_info, "cuMemGetInfo_v2");
	size_t free_bytes, total;

	/* cuMemGetInfo answers for the current context's device only */
	if (dev == MT_NO_DEVICE || mtp_driver_device() != dev || !info || info(&free_bytes, &total) != CUDA_SUCCESS ||
	    free_bytes > total)
		return;
	*e = (struct mt_event){.kind = MT_EV_MEMINFO, .device = dev, .flags = why, .aux = free_bytes, .aux2 = total};
}
