/* A second preload that, like many tools, finds the real cudaMalloc with
 * dlsym(RTLD_NEXT, ...). Under memtap's dlsym hook that must still mean "the next
 * library after this one", or the call would loop back here forever. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static int calls;

cudaError_t CUDARTAPI cudaMalloc(void **p, size_t size)
{
	static cudaError_t (*real)(void **, size_t);
	static int depth;
	cudaError_t e;

	if (!real)
		real = (cudaError_t(*)(void **, size_t))dlsym(RTLD_NEXT, "cudaMalloc");
	if (!real || ++depth > 1) {
		fprintf(stderr, "next: cudaMalloc looped back into itself\n");
		abort();
	}
	calls++;
	e = real(p, size);
	depth--;
	return e;
}

__attribute__((destructor)) static void report(void)
{
	fprintf(stderr, "next: %d cudaMalloc calls passed through\n", calls);
}
