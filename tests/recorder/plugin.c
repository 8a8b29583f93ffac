/* A library the recorder's workload loads with dlopen after start: its allocation's
 * stack must still be symbolized (the module map is rewritten when libraries load). */
#include <cuda_runtime_api.h>

__attribute__((noinline)) void plugin_alloc(void)
{
	void *p;
	if (cudaMalloc(&p, 12000006) == cudaSuccess)
		cudaFree(p);
}

/* The same for tests/recorder/reload.c, which prints the results. */
int plugin_malloc(size_t size)
{
	void *p;
	cudaError_t r = cudaMalloc(&p, size);

	return r ? (int)r : (int)cudaFree(p);
}
