/* LD_PRELOAD test library: watches how a runtime reaches the driver. It logs to
 * $SPY_LOG every dlsym on a real handle ("dlsym NAME") and every cuGetProcAddress
 * lookup: "gpa [NAME] VERSION FLAGS" through the dlsym'd cuGetProcAddress_v2,
 * "gpa-self ..." through the pointer the driver returned for cuGetProcAddress itself,
 * "gpa1 ..." through the v1 (4-argument) one. */
#include <cudaTypedefs.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recorder/prim.h"

static PFN_cuGetProcAddress_v12000 real_gpa2;
static PFN_cuGetProcAddress_v11030 real_gpa1;

static void note(const char *fmt, ...)
{
	const char *path = getenv("SPY_LOG");
	char line[512];
	va_list ap;
	int fd, n;

	if (!path)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n > (int)sizeof line - 2)
		return;
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
	if (fd >= 0) {
		if (write(fd, line, (size_t)n) != n) {
			/* nothing to do: the test will miss the line */
		}
		close(fd);
	}
}

static CUresult lookup(const char *tag, const char *sym, void **pfn, int ver, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *st);

static CUresult CUDAAPI spy_gpa2(const char *sym, void **pfn, int ver, cuuint64_t flags,
				 CUdriverProcAddressQueryResult *st)
{
	return lookup("gpa", sym, pfn, ver, flags, st);
}

static CUresult CUDAAPI spy_gpa2_self(const char *sym, void **pfn, int ver, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *st)
{
	return lookup("gpa-self", sym, pfn, ver, flags, st);
}

static CUresult CUDAAPI spy_gpa1(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	note("gpa1 [%s] %d %llu", sym ? sym : "(null)", ver, (unsigned long long)flags);
	return real_gpa1(sym, pfn, ver, flags);
}

static CUresult lookup(const char *tag, const char *sym, void **pfn, int ver, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *st)
{
	CUresult r;

	note("%s [%s] %d %llu", tag, sym ? sym : "(null)", ver, (unsigned long long)flags);
	r = real_gpa2(sym, pfn, ver, flags, st);
	if (r == CUDA_SUCCESS && sym && pfn && strcmp(sym, "cuGetProcAddress") == 0) {
		if (ver >= 12000) {
			*pfn = (void *)spy_gpa2_self;
		} else {
			real_gpa1 = (PFN_cuGetProcAddress_v11030)*pfn;
			*pfn = (void *)spy_gpa1;
		}
	}
	return r;
}

void *mt_dlsym_hook(void *handle, const char *name)
{
	void *p = mt_dlsym_resolve()(handle, name);

	note("dlsym %s", name);
	if (p && strcmp(name, "cuGetProcAddress_v2") == 0) {
		real_gpa2 = (PFN_cuGetProcAddress_v12000)p;
		return (void *)spy_gpa2;
	}
	return p;
}
