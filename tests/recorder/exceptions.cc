// C++ exceptions thrown and caught around device allocations under memtap: the
// unwinder memtap links must not take over the C++ runtime's.
#include <cuda_runtime_api.h>
#include <cstdio>
#include <stdexcept>

int main()
{
	int caught = 0;
	for (int i = 0; i < 1000; i++) {
		void *p = nullptr;
		try {
			if (cudaMalloc(&p, 4096) != cudaSuccess)
				return 1;
			throw std::runtime_error("thrown while holding device memory");
		} catch (const std::exception &) {
			caught++;
		}
		cudaFree(p);
	}
	std::printf("%d\n", caught);
	return caught == 1000 ? 0 : 1;
}
