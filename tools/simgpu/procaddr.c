/* cuGetProcAddress over the proc table (procs.def): the newest ABI introduced at or before
 * the version asked, its per-thread twin for the per-thread flag, the real statuses for
 * unknown names and too-old versions. Also the log that $SIMGPU_LOG names: every lookup
 * with its answer, every refused call, every launch; it shows what a program asked of
 * the driver, which is how the tests compare NVIDIA's runtime with simgpu's. And the same
 * lookup under a private name, simgpu's stand-in for the driver's private tables. */
#include "sim.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void open_log(void)
{
	const char *path = getenv("SIMGPU_LOG");

	if (path && *path)
		log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

void sim_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	pthread_once(&log_once, open_log);
	if (log_fd < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	/* one write per line: O_APPEND keeps lines from threads and processes whole */
	if (write(log_fd, line, (size_t)n) != n) {
		/* a log that cannot be written loses the line, never the call */
	}
}

CUresult sim_refuse(const char *symbol)
{
	sim_log("refused %s", symbol);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* The first row for base, by binary search over the sorted table; sim_nprocs when none. */
static size_t first_row(const char *base)
{
	size_t lo = 0, hi = sim_nprocs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(sim_procs[mid].base, base) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < sim_nprocs && strcmp(sim_procs[lo].base, base) == 0 ? lo : sim_nprocs;
}

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status)
{
	const struct sim_proc *best = NULL;
	const cuuint64_t all = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	size_t i;

	if (!symbol || !pfn || (flags & ~all) || version > SIM_DRIVER_VERSION)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	i = first_row(symbol);
	for (size_t k = i; k < sim_nprocs && strcmp(sim_procs[k].base, symbol) == 0; k++) {
		const struct sim_proc *p = &sim_procs[k];
		if (p->version > version || (p->per_thread && !per_thread))
			continue;
		/* the newest ABI; at equal versions the twin, when the flag asks for it */
		if (!best || p->version > best->version || (p->version == best->version && p->per_thread))
			best = p;
	}
	if (best)
		*pfn = best->fn;
	if (status)
		*status = best		   ? CU_GET_PROC_ADDRESS_SUCCESS
			  : i < sim_nprocs ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
					   : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* Logs "gpa NAME VERSION FLAGS RESULT STATUS SYMBOL POINTER" (SYMBOL "-" when none). */
static CUresult logged(const char *symbol, void **pfn, int version, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r = lookup(symbol, pfn, version, flags, &st);
	const char *name = "-";

	if (r == CUDA_SUCCESS)
		for (size_t i = first_row(symbol); i < sim_nprocs && !strcmp(sim_procs[i].base, symbol); i++)
			if (sim_procs[i].fn == *pfn)
				name = sim_procs[i].symbol;
	if (status && r != CUDA_ERROR_INVALID_VALUE)
		*status = st;
	sim_log("gpa %s %d %llu %d %d %s %p", symbol && *symbol ? symbol : "(empty)", version,
		(unsigned long long)flags, (int)r, r == CUDA_ERROR_INVALID_VALUE ? -1 : (int)st, name,
		r == CUDA_SUCCESS ? *pfn : NULL);
	return r;
}

/* It works before cuInit, as the real one does. */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
				  CUdriverProcAddressQueryResult *status)
{
	return logged(symbol, pfn, version, flags, status);
}

CUresult CUDAAPI sim_get_proc_address_v1(const char *, void **, int, cuuint64_t) __asm__("cuGetProcAddress");
CUresult CUDAAPI sim_get_proc_address_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return logged(symbol, pfn, version, flags, NULL);
}

/* The same lookup by a name no tool wraps: the runtime's path with SIMGPU_ENTRY_POINTS=
 * private, as NVIDIA's runtime may serve cudaGetDriverEntryPoint through the driver's
 * private tables (cuGetExportTable), past the cuGetProcAddress a tool handed it. */
SIM_EXPORT CUresult simgpu_private_proc_address(const char *symbol, void **pfn, int version, cuuint64_t flags,
						CUdriverProcAddressQueryResult *status)
{
	return logged(symbol, pfn, version, flags, status);
}
