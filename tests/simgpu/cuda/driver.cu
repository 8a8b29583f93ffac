/* The driver API beside the runtime, as programs that use both do: virtual memory
 * management (create, reserve, map, access, unmap, release), a memory pool, and a PTX
 * module loaded and launched with cuLaunchKernel. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <string.h>

#include "check.h"

#define DRV(call)                                                                                                      \
	do {                                                                                                           \
		CUresult r_ = (call);                                                                                  \
		if (r_ != CUDA_SUCCESS) {                                                                              \
			const char *s_ = "?";                                                                          \
			cuGetErrorName(r_, &s_);                                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_);                             \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
			  ".visible .global .align 4 .b8 counter[64];\n"
			  ".visible .entry bump(.param .u64 p)\n{\n\tret;\n}\n";

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va, global;
	CUmodule mod;
	CUfunction bump;
	size_t gran = 0, size, gsize = 0;
	cudaMemPool_t pool;
	struct cudaMemPoolProps pp;
	cudaStream_t s;
	void *pooled = NULL;

	CHECK(cudaSetDevice(0));
	CHECK(cudaFree(0));
	DRV(cuCtxGetCurrent(&ctx));
	DRV(cuCtxGetDevice(&dev));
	TRUE(ctx != NULL && dev == 0);

	/* VMM */
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	size = 3 * gran;
	DRV(cuMemCreate(&h, size, &prop, 0));
	EXPECT(size);
	DRV(cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
	DRV(cuMemMap(va, size, 0, h, 0));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	DRV(cuMemSetAccess(va, size, &access, 1));
	CHECK(cudaMemset((void *)va, 0, size));
	DRV(cuMemUnmap(va, size));
	DRV(cuMemRelease(h));
	DRV(cuMemAddressFree(va, 2 * size));

	/* a pool of its own */
	memset(&pp, 0, sizeof pp);
	pp.allocType = cudaMemAllocationTypePinned;
	pp.location.type = cudaMemLocationTypeDevice;
	pp.location.id = 0;
	CHECK(cudaMemPoolCreate(&pool, &pp));
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaMallocFromPoolAsync(&pooled, 5 << 20, pool, s));
	EXPECT(5 << 20);
	CHECK(cudaFreeAsync(pooled, s));
	CHECK(cudaStreamSynchronize(s));
	CHECK(cudaMemPoolDestroy(pool));

	/* a module and a launch through the driver */
	DRV(cuModuleLoadData(&mod, ptx));
	DRV(cuModuleGetFunction(&bump, mod, "bump"));
	DRV(cuModuleGetGlobal(&global, &gsize, mod, "counter"));
	TRUE(gsize == 64);
	{
		void *args[] = {&global};
		DRV(cuLaunchKernel(bump, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, args, NULL));
		TRUE(cuLaunchKernel(bump, 1, 1, 1, 4096, 1, 1, 0, (CUstream)s, args, NULL) == CUDA_ERROR_INVALID_VALUE);
	}
	DRV(cuStreamSynchronize((CUstream)s));
	DRV(cuModuleUnload(mod));
	CHECK(cudaStreamDestroy(s));
	printf("driver: done\n");
	return 0;
}
