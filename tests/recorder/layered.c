/* N cudaMalloc/cudaFree pairs of 22000002 bytes (argv[1], default 100), through the
 * runtime only: run behind a driver layer (tests/recorder/layer) under memtap. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100;

	for (long i = 0; i < n; i++) {
		void *p;
		if (cudaMalloc(&p, 22000002) != cudaSuccess || cudaFree(p) != cudaSuccess) {
			fprintf(stderr, "layered: allocation %ld failed\n", i);
			return 1;
		}
	}
	return 0;
}
