/* simgpu's fault injection (SIMGPU_FAIL_NTH, SIMGPU_FAIL_ABOVE) and its handling of
 * bad configuration values: a warning and the default, never a crash. */
#include <cuda.h>
#include <stdlib.h>

#include "../tap.h"

int main(void)
{
	CUcontext c;
	CUdeviceptr p[4];
	int n = 0;
	size_t f = 0, t = 0;

	setenv("SIMGPU_FAIL_NTH", "3", 1);
	setenv("SIMGPU_FAIL_ABOVE", "1MiB", 1);
	setenv("SIMGPU_DEVICES", "many", 1);
	setenv("SIMGPU_MEM", "lots", 1);
	is(cuInit(0), CUDA_SUCCESS, "cuInit with bad SIMGPU_DEVICES and SIMGPU_MEM");
	cuDeviceGetCount(&n);
	is(n, 1, "bad SIMGPU_DEVICES falls back to one device");
	cuDevicePrimaryCtxRetain(&c, 0);
	cuCtxSetCurrent(c);
	cuMemGetInfo(&f, &t);
	is(t, 80ull << 30, "bad SIMGPU_MEM falls back to 80 GiB");
	is(cuMemAlloc(&p[0], 4096), CUDA_SUCCESS, "first allocation");
	is(cuMemAlloc(&p[1], 4096), CUDA_SUCCESS, "second allocation");
	is(cuMemAlloc(&p[2], 4096), CUDA_ERROR_OUT_OF_MEMORY, "the third fails (SIMGPU_FAIL_NTH=3)");
	is(cuMemAlloc(&p[2], 4096), CUDA_SUCCESS, "the fourth succeeds");
	is(cuMemAlloc(&p[3], (1 << 20) + 1), CUDA_ERROR_OUT_OF_MEMORY, "above SIMGPU_FAIL_ABOVE fails");
	is(cuMemAlloc(&p[3], 1 << 20), CUDA_SUCCESS, "at SIMGPU_FAIL_ABOVE succeeds");
	for (int i = 0; i < 4; i++)
		cuMemFree(p[i]);
	cuMemGetInfo(&f, &t);
	is(f, t, "failed allocations left no trace");
	return done();
}
