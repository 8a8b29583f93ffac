/* The runtime's answers to requests that fail, and the last error each leaves: run alone,
 * under memtap and under memtap's caching allocator, the output must be the same line for
 * line (tests/alloc/test_alloc.py). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

static void say(const char *what, cudaError_t e, void *p)
{
	cudaError_t last = cudaGetLastError();

	printf("%s: %d, last error %d, then %d%s\n", what, (int)e, (int)last, (int)cudaGetLastError(),
	       p ? "" : ", no pointer");
}

int main(void)
{
	cudaStream_t bogus = (cudaStream_t)(uintptr_t)0x1234, s;
	void *p = NULL, *q = NULL;
	cudaError_t e;

	e = cudaMalloc(&p, SIZE_MAX);
	say("cudaMalloc(SIZE_MAX)", e, p);
	e = cudaMalloc(&p, (size_t)1 << 50);
	say("cudaMalloc(1 PiB)", e, p);
	e = cudaMalloc(NULL, 16);
	say("cudaMalloc(NULL)", e, NULL);
	p = &p;
	e = cudaMalloc(&p, 0);
	say("cudaMalloc(0)", e, p);
	p = NULL;
	e = cudaMallocAsync(&p, 16, bogus);
	say("cudaMallocAsync(bad stream)", e, p);
	e = cudaMallocAsync(&p, SIZE_MAX, 0);
	say("cudaMallocAsync(SIZE_MAX)", e, p);
	e = cudaStreamCreate(&s);
	say("cudaStreamCreate", e, s);
	e = cudaMallocAsync(&q, 1 << 20, s);
	say("cudaMallocAsync(a stream)", e, q);
	e = cudaFreeAsync(q, bogus);
	say("cudaFreeAsync(bad stream)", e, q);
	e = cudaFreeAsync(q, s);
	say("cudaFreeAsync", e, q);
	e = cudaMalloc(&q, 1 << 20);
	say("cudaMalloc(1 MiB)", e, q);
	e = cudaFree((void *)(uintptr_t)0x1234);
	say("cudaFree(not allocated)", e, NULL);
	e = cudaFree(q);
	say("cudaFree", e, q);
	e = cudaFree(NULL);
	say("cudaFree(NULL)", e, NULL);
	e = cudaStreamDestroy(s);
	say("cudaStreamDestroy", e, s);
	return 0;
}
