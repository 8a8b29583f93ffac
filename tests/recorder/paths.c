/* The allocation paths of issue 22, each with sizes that say which path made it, run on
 * simgpu under memtap: `paths MODE`.
 *   freenull    cuMemFree(0), cudaFree(NULL), cuMemFreeHost(NULL), cuMemFreeAsync(0):
 *               none is a free; one allocation of 22000001 bytes, freed */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "paths: %s failed\n", what);
		failures++;
	}
}
#define CHECK_RT(call) check((call) == cudaSuccess, #call)
#define CHECK_DRV(call) check((call) == CUDA_SUCCESS, #call)

static void driver_context(void)
{
	CUcontext c;

	CHECK_DRV(cuInit(0));
	CHECK_DRV(cuDevicePrimaryCtxRetain(&c, 0));
	CHECK_DRV(cuCtxSetCurrent(c));
}

static void free_null(void)
{
	CUdeviceptr d;

	driver_context();
	CHECK_DRV(cuMemAlloc(&d, 22000001));
	cuMemFree(0); /* whatever the driver answers, nothing is freed */
	CHECK_RT(cudaFree(NULL));
	cuMemFreeHost(NULL);
	cuMemFreeAsync(0, NULL);
	CHECK_DRV(cuMemFree(d));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "freenull"))
		free_null();
	else {
		fprintf(stderr, "usage: paths MODE (see the comment at the top of paths.c)\n");
		return 2;
	}
	return failures ? 1 : 0;
}
