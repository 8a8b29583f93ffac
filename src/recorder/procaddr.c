/* How the runtime and the libraries that carry their own static runtime reach the
 * driver: dlsym(libcuda, "cuGetProcAddress_v2"), then cuGetProcAddress by base name,
 * version and per-thread-stream flag. memtap interposes dlsym (entry in dlsym_x86_64.S)
 * to hand back its cuGetProcAddress wrappers; those call the real one first, and for a
 * wrapped function at a version whose ABI memtap knows, keep the real pointer and
 * return memtap's wrapper. Everything else passes through untouched. */
#include <string.h>

#include "recorder/prim.h"
#include "recorder/hooks.h"

static PFN_cuGetProcAddress_v12000 real_gpa2;
static PFN_cuGetProcAddress_v11030 real_gpa1;

static const struct hook {
	const char *base, *symbol;
	int version;
	bool ptsz;
	void *wrapper;
	void **real;
} hooks[] = {
#define DRV(base, sym, ver, ptsz) {#base, #sym, ver, ptsz, (void *)sym, (void **)&mtp_real_##sym},
#include "recorder/driver_hooks.def"
#undef DRV
};

static CUresult CUDAAPI gpa2(const char *symbol, void **pfn, int version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status);
static CUresult CUDAAPI gpa1(const char *symbol, void **pfn, int version, cuuint64_t flags);

static bool has_ptsz_twin(const char *base)
{
	for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++)
		if (hooks[i].ptsz && strcmp(hooks[i].base, base) == 0)
			return true;
	return false;
}

/* The driver answered a lookup; swap in memtap's wrapper where one applies. */
static void substitute(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

	if (!symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u')
		return;
	if (strcmp(symbol, "cuGetProcAddress") == 0) {
		/* the runtime asks for both ABIs and serves cudaGetDriverEntryPoint* through them */
		if (version >= 12000) {
			__atomic_store_n(&real_gpa2, (PFN_cuGetProcAddress_v12000)*pfn, __ATOMIC_RELEASE);
			*pfn = (void *)gpa2;
		} else if (version >= 11030) {
			__atomic_store_n(&real_gpa1, (PFN_cuGetProcAddress_v11030)*pfn, __ATOMIC_RELEASE);
			*pfn = (void *)gpa1;
		}
		return;
	}
	if (version > MTP_NEWEST_KNOWN)
		return;
	for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
		const struct hook *h = &hooks[i];
		if (version < h->version || strcmp(symbol, h->base) != 0)
			continue;
		/* a function with a per-thread twin: the flag picks which one the driver returned */
		if (h->ptsz != ptsz && (h->ptsz || has_ptsz_twin(h->base)))
			continue;
		__atomic_store_n(h->real, *pfn, __ATOMIC_RELEASE);
		*pfn = h->wrapper;
		return;
	}
}

void mtp_procaddr_forget(void)
{
	__atomic_store_n(&real_gpa2, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&real_gpa1, NULL, __ATOMIC_RELEASE);
}

/* Found again by name after the driver was unloaded and loaded anew. */
static CUresult CUDAAPI gpa2(const char *symbol, void **pfn, int version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	PFN_cuGetProcAddress_v12000 real = mtp_lookup_once((void **)&real_gpa2, "cuGetProcAddress_v2");
	CUresult r = real ? real(symbol, pfn, version, flags, status) : CUDA_ERROR_NOT_INITIALIZED;

	if (r == CUDA_SUCCESS)
		substitute(symbol, pfn, version, flags);
	return r;
}

static CUresult CUDAAPI gpa1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	PFN_cuGetProcAddress_v11030 real = mtp_lookup_once((void **)&real_gpa1, "cuGetProcAddress");
	CUresult r = real ? real(symbol, pfn, version, flags) : CUDA_ERROR_NOT_INITIALIZED;

	if (r == CUDA_SUCCESS)
		substitute(symbol, pfn, version, flags);
	return r;
}

/* The exported cuGetProcAddress names, for programs that link libcuda. */
MTP_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
					     CUdriverProcAddressQueryResult *status)
{
	if (!mtp_lookup_once((void **)&real_gpa2, "cuGetProcAddress_v2"))
		return CUDA_ERROR_NOT_INITIALIZED;
	return gpa2(symbol, pfn, version, flags, status);
}

MTP_EXPORT CUresult CUDAAPI mtp_gpa1_export(const char *symbol, void **pfn, int version,
					    cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult CUDAAPI mtp_gpa1_export(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	if (!mtp_lookup_once((void **)&real_gpa1, "cuGetProcAddress"))
		return CUDA_ERROR_NOT_INITIALIZED;
	return gpa1(symbol, pfn, version, flags);
}

/* dlsym on a real handle (RTLD_NEXT and RTLD_DEFAULT never get here). */
void *mt_dlsym_hook(void *handle, const char *name)
{
	void *p = mt_dlsym_resolve()(handle, name);

	if (!p || !name || name[0] != 'c' || name[1] != 'u')
		return p;
	if (strcmp(name, "cuGetProcAddress_v2") == 0) {
		__atomic_store_n(&real_gpa2, (PFN_cuGetProcAddress_v12000)p, __ATOMIC_RELEASE);
		return (void *)gpa2;
	}
	if (strcmp(name, "cuGetProcAddress") == 0) {
		__atomic_store_n(&real_gpa1, (PFN_cuGetProcAddress_v11030)p, __ATOMIC_RELEASE);
		return (void *)gpa1;
	}
	for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
		if (strcmp(name, hooks[i].symbol) == 0) {
			__atomic_store_n(hooks[i].real, p, __ATOMIC_RELEASE);
			return hooks[i].wrapper;
		}
	}
	return p;
}
