/* The program of the recorder's early-start test (test_recorder.py): linked with
 * libearly.so, whose constructor allocated 22000040 bytes before main, it frees them, then
 * allocates and frees 22000041 bytes. Exit 0 when every call succeeded. */
#include <cuda_runtime_api.h>

int early_release(void);

int main(void)
{
	void *p;

	if (early_release() || cudaMalloc(&p, 22000041) != cudaSuccess || cudaFree(p) != cudaSuccess)
		return 1;
	return 0;
}
