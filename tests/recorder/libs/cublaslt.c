/* Built as libcublasLt.so.13 for the report's by-library test: a workspace asked for the
 * way cuBLASLt's static runtime asks, through the driver. Nothing of NVIDIA's is in it. */
#include <cuda.h>

CUresult cublaslt_workspace(CUdeviceptr *d, size_t n)
{
	CUresult r = cuMemAlloc(d, n);

	__asm__ volatile("" ::: "memory"); /* not a tail call: this library's frame stays on the stack */
	return r;
}
