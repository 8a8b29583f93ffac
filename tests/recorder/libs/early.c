/* Built as libearly.so for the recorder's test of allocations made before memtap starts: a
 * library whose constructor allocates device memory (22000040 bytes). A program linked
 * with it runs that constructor before memtap's own, which the loader runs after the
 * constructors of every library loaded after it. */
#include <cuda_runtime_api.h>

static void *early;

__attribute__((constructor)) static void allocate_early(void)
{
	if (cudaMalloc(&early, 22000040) != cudaSuccess)
		early = NULL;
}

int early_release(void)
{
	return early && cudaFree(early) == cudaSuccess ? 0 : 1;
}
