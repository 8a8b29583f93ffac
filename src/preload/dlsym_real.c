/* Finds glibc's own dlsym for dlsym_stub.S. dlvsym is called from this library, so
 * RTLD_NEXT here means the library after us: glibc, never the application's choice. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "dlsym_stub.h"

mt_dlsym_fn mt_real_dlsym;

mt_dlsym_fn mt_dlsym_resolve(void)
{
	mt_dlsym_fn f = mt_real_dlsym;

	if (f)
		return f;
	f = (mt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!f)
		f = (mt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	__atomic_store_n(&mt_real_dlsym, f, __ATOMIC_RELEASE);
	return f;
}
