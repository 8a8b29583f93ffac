/* Built as libnccl.so.2 for the report's by-library test: memory asked for the way NCCL
 * asks for its buffers, through the driver. Nothing of NVIDIA's is in it. */
#include <cuda.h>

CUresult nccl_buffers(CUdeviceptr *d, size_t n)
{
	CUresult r = cuMemAlloc(d, n);

	__asm__ volatile("" ::: "memory"); /* not a tail call: this library's frame stays on the stack */
	return r;
}
