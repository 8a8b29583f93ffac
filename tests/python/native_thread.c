/* For tests/python/test_frames.py: an allocation made on a thread that never ran
 * Python, called from Python through ctypes. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>

struct request {
	size_t size;
	void *ptr;
};

static void *run(void *arg)
{
	struct request *r = arg;

	if (cudaMalloc(&r->ptr, r->size) != cudaSuccess)
		r->ptr = NULL;
	return NULL;
}

uintptr_t alloc_on_native_thread(size_t size)
{
	struct request r = {size, NULL};
	pthread_t t;

	if (pthread_create(&t, NULL, run, &r) != 0)
		return 0;
	pthread_join(t, NULL);
	return (uintptr_t)r.ptr;
}
