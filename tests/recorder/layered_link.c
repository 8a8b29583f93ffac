/* N cuMemAlloc/cuMemFree pairs of 22000005 bytes (argv[1], default 100), linked with
 * -lcuda: behind a driver layer (tests/recorder/layer), the program's libcuda.so.1 is the
 * layer, and memtap's exported names call it. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100;
	CUcontext c;

	if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c)) {
		fprintf(stderr, "layered_link: no context\n");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		CUdeviceptr p;
		if (cuMemAlloc(&p, 22000005) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
			fprintf(stderr, "layered_link: allocation %ld failed\n", i);
			return 1;
		}
	}
	return 0;
}
