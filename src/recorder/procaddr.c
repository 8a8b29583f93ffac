/* How the runtime and the libraries that carry their own static runtime reach the
 * driver: dlsym(libcuda, "cuGetProcAddress_v2"), then cuGetProcAddress by base name,
 * version and per-thread-stream flag. memtap interposes dlsym (entry in dlsym_x86_64.S)
 * to hand back its cuGetProcAddress wrappers; those call the real one first, and for a
 * wrapped function at a version whose ABI memtap knows, return memtap's wrapper of what
 * the real one gave. Each caller gets what its own handle gives, wrapped: a wrapper per
 * real function (layers.c), so a driver layer in front of the driver and the driver
 * behind it are both called. Everything else passes through untouched. */
#include <string.h>

#include "recorder/prim.h"
#include "recorder/hooks.h"

/* for the exported names (programs linked with -lcuda): libcuda.so.1's */
static PFN_cuGetProcAddress_v12000 real_gpa2;
static PFN_cuGetProcAddress_v11030 real_gpa1;

static const struct hook {
	const char *base, *symbol;
	size_t length; /* the base's: the runtime's few hundred lookups at start compare few names */
	int version;
	bool ptsz;
} hooks[] = {
#define DRV(base, sym, ver, ptsz, ...) {#base, #sym, sizeof #base - 1, ver, ptsz},
#include "recorder/driver_hooks.def"
#undef DRV
};

static CUresult gpa2(PFN_cuGetProcAddress_v12000 real, const char *symbol, void **pfn, int version, cuuint64_t flags,
		     CUdriverProcAddressQueryResult *status);
static CUresult gpa1(PFN_cuGetProcAddress_v11030 real, const char *symbol, void **pfn, int version, cuuint64_t flags);

/* One wrapper of each cuGetProcAddress ABI per real one (layers.c). */
static PFN_cuGetProcAddress_v12000 gpa2_real[MTP_LAYERS];
static PFN_cuGetProcAddress_v11030 gpa1_real[MTP_LAYERS];
#define GPA(k)                                                                                                         \
	static CUresult CUDAAPI gpa2_at##k(const char *symbol, void **pfn, int version, cuuint64_t flags,              \
					   CUdriverProcAddressQueryResult *status)                                     \
	{                                                                                                              \
		return gpa2(__atomic_load_n(&gpa2_real[k], __ATOMIC_ACQUIRE), symbol, pfn, version, flags, status);    \
	}                                                                                                              \
	static CUresult CUDAAPI gpa1_at##k(const char *symbol, void **pfn, int version, cuuint64_t flags)              \
	{                                                                                                              \
		return gpa1(__atomic_load_n(&gpa1_real[k], __ATOMIC_ACQUIRE), symbol, pfn, version, flags);            \
	}
GPA(0)
GPA(1)
GPA(2)
GPA(3)
_Static_assert(MTP_LAYERS == 4, "one GPA line per slot");
static void *const gpa2_wrappers[MTP_LAYERS] = {(void *)gpa2_at0, (void *)gpa2_at1, (void *)gpa2_at2, (void *)gpa2_at3};
static void *const gpa1_wrappers[MTP_LAYERS] = {(void *)gpa1_at0, (void *)gpa1_at1, (void *)gpa1_at2, (void *)gpa1_at3};

static bool has_ptsz_twin(const char *base)
{
	for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++)
		if (hooks[i].ptsz && strcmp(hooks[i].base, base) == 0)
			return true;
	return false;
}

/* The driver answered a lookup; swap in memtap's wrapper where one applies: the row of
 * the newest ABI not past the version asked, the one the driver returns. */
void mtp_procaddr_substitute(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	size_t best = sizeof hooks / sizeof hooks[0], length;

	if (!symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u')
		return;
	if (strcmp(symbol, "cuGetProcAddress") == 0) {
		/* the runtime asks for both ABIs and serves cudaGetDriverEntryPoint* through them */
		if (version >= 12000)
			*pfn = mtp_layer_wrap((void **)gpa2_real, gpa2_wrappers, *pfn);
		else if (version >= 11030)
			*pfn = mtp_layer_wrap((void **)gpa1_real, gpa1_wrappers, *pfn);
		return;
	}
	if (version > MTP_NEWEST_KNOWN)
		return;
	length = strlen(symbol);
	for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
		const struct hook *h = &hooks[i];
		if (h->length != length || version < h->version || strcmp(symbol, h->base) != 0)
			continue;
		/* a function with a per-thread twin: the flag picks which one the driver returned */
		if (h->ptsz != ptsz && (h->ptsz || has_ptsz_twin(h->base)))
			continue;
		if (best == sizeof hooks / sizeof hooks[0] || h->version > hooks[best].version)
			best = i;
	}
	if (best < sizeof hooks / sizeof hooks[0])
		*pfn = mtp_drv_wrap((unsigned)best, *pfn);
}

void mtp_procaddr_forget(void)
{
	__atomic_store_n(&real_gpa2, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&real_gpa1, NULL, __ATOMIC_RELEASE);
}

/* No real one (its library was unloaded, or none was given): libcuda.so.1's, found by name. */
static CUresult gpa2(PFN_cuGetProcAddress_v12000 real, const char *symbol, void **pfn, int version, cuuint64_t flags,
		     CUdriverProcAddressQueryResult *status)
{
	CUresult r;

	if (!real && !(real = mtp_lookup_once((void **)&real_gpa2, "cuGetProcAddress_v2")))
		return CUDA_ERROR_NOT_INITIALIZED;
	r = real(symbol, pfn, version, flags, status);
	if (r == CUDA_SUCCESS)
		mtp_procaddr_substitute(symbol, pfn, version, flags);
	return r;
}

static CUresult gpa1(PFN_cuGetProcAddress_v11030 real, const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	CUresult r;

	if (!real && !(real = mtp_lookup_once((void **)&real_gpa1, "cuGetProcAddress")))
		return CUDA_ERROR_NOT_INITIALIZED;
	r = real(symbol, pfn, version, flags);
	if (r == CUDA_SUCCESS)
		mtp_procaddr_substitute(symbol, pfn, version, flags);
	return r;
}

/* The exported cuGetProcAddress names, for programs that link libcuda. */
MTP_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
					     CUdriverProcAddressQueryResult *status)
{
	return gpa2(NULL, symbol, pfn, version, flags, status);
}

MTP_EXPORT CUresult CUDAAPI mtp_gpa1_export(const char *symbol, void **pfn, int version,
					    cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult CUDAAPI mtp_gpa1_export(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return gpa1(NULL, symbol, pfn, version, flags);
}

/* dlsym on a real handle (RTLD_NEXT and RTLD_DEFAULT never get here): what this handle
 * gives, wrapped. */
void *mt_dlsym_hook(void *handle, const char *name)
{
	void *p = mt_dlsym_resolve()(handle, name);

	if (!p || !name || name[0] != 'c' || name[1] != 'u')
		return p;
	if (strcmp(name, "cuGetProcAddress_v2") == 0)
		return mtp_layer_wrap((void **)gpa2_real, gpa2_wrappers, p);
	if (strcmp(name, "cuGetProcAddress") == 0)
		return mtp_layer_wrap((void **)gpa1_real, gpa1_wrappers, p);
	for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++)
		if (strcmp(name, hooks[i].symbol) == 0)
			return mtp_drv_wrap((unsigned)i, p);
	return p;
}
