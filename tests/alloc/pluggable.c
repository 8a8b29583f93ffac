/* PyTorch's CUDAPluggableAllocator, as torch/csrc/cuda/CUDAPluggableAllocator.cpp drives
 * an allocator library, pointed at memtap's entry points: init(device_count) when made,
 * alloc_fn(size, device, stream) under a device guard with {size, device, stream} kept in
 * a map under a mutex, free_fn(ptr, size, device, stream) from that map, reset on
 * empty_cache, memory_fraction and record_stream. Threads on their own streams run
 * training-like steps and free each other's tensors. Run under memtap on simgpu. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"

typedef void *(*alloc_fn_t)(size_t, int, cudaStream_t);
typedef void (*free_fn_t)(void *, size_t, int, cudaStream_t);

static alloc_fn_t alloc_fn;
static free_fn_t free_fn;
static void (*init_fn)(int);
static void (*reset_fn)(void);
static void (*fraction_fn)(double, int);
static void (*record_stream_fn)(void *, cudaStream_t);

/* the allocator's metadata table (std::unordered_map<void*, _AllocationMetadata> + mutex) */
#define META 65536
static struct meta {
	void *ptr;
	size_t size;
	int device;
	cudaStream_t stream;
} meta[META];
static pthread_mutex_t meta_lock = PTHREAD_MUTEX_INITIALIZER;
static long allocs, frees, foreign;

static void *torch_malloc(size_t size, int device, cudaStream_t stream)
{
	void *p;

	cudaSetDevice(device); /* c10::cuda::CUDAGuard */
	if (!(p = alloc_fn(size, device, stream)))
		return NULL;
	pthread_mutex_lock(&meta_lock);
	for (size_t i = ((uintptr_t)p >> 9) % META;; i = (i + 1) % META)
		if (!meta[i].ptr) {
			meta[i] = (struct meta){p, size, device, stream};
			break;
		}
	allocs++;
	pthread_mutex_unlock(&meta_lock);
	return p;
}

static void torch_raw_delete(void *p)
{
	struct meta m = {0};

	pthread_mutex_lock(&meta_lock);
	for (size_t i = ((uintptr_t)p >> 9) % META; meta[i].ptr; i = (i + 1) % META)
		if (meta[i].ptr == p) {
			m = meta[i];
			/* re-insert the rest of the probe chain */
			meta[i].ptr = NULL;
			for (size_t j = (i + 1) % META; meta[j].ptr; j = (j + 1) % META) {
				struct meta x = meta[j];

				meta[j].ptr = NULL;
				for (size_t k = ((uintptr_t)x.ptr >> 9) % META;; k = (k + 1) % META)
					if (!meta[k].ptr) {
						meta[k] = x;
						break;
					}
			}
			break;
		}
	if (m.ptr)
		frees++;
	else
		foreign++; /* "Trying to free a pointer not allocated here" */
	pthread_mutex_unlock(&meta_lock);
	if (m.ptr)
		free_fn(m.ptr, m.size, m.device, m.stream);
}

#define THREADS 4
#define STEPS 40
static void *handoff[THREADS];

static void *trainer(void *arg)
{
	int id = (int)(intptr_t)arg;
	cudaStream_t s[2];
	void *params[8], *acts[24];
	long bad = 0;

	cudaSetDevice(0);
	cudaStreamCreate(&s[0]);
	cudaStreamCreate(&s[1]);
	for (int i = 0; i < 8; i++)
		bad += !(params[i] = torch_malloc((size_t)(i + 1) * 3 << 20, 0, s[0]));
	for (int step = 0; step < STEPS; step++) {
		cudaStream_t st = s[step & 1];

		for (int l = 0; l < 24; l++) /* forward: activations of growing and odd sizes */
			bad += !(acts[l] = torch_malloc((size_t)(l % 6 + 1) * 1000003 + (size_t)id * 4096, 0, st));
		for (int l = 23; l >= 0; l--) { /* backward frees them in reverse, with temporaries */
			void *tmp = torch_malloc(257 * 1024, 0, st);

			bad += !tmp;
			torch_raw_delete(tmp);
			if (l == 3) { /* one tensor goes to the next thread, which frees it */
				void *old =
				    __atomic_exchange_n(&handoff[(id + 1) % THREADS], acts[l], __ATOMIC_ACQ_REL);

				if (old)
					torch_raw_delete(old);
				continue;
			}
			torch_raw_delete(acts[l]);
		}
	}
	for (int i = 0; i < 8; i++)
		torch_raw_delete(params[i]);
	cudaStreamDestroy(s[0]);
	cudaStreamDestroy(s[1]);
	return (void *)bad;
}

int main(void)
{
	int count = 0;
	long failed = 0;
	pthread_t t[THREADS];
	size_t free_b, total, free_after;
	cudaStream_t a, b;
	void (*busy)(CUstream) = NULL;
	void *p, *q, *driver;

	alloc_fn = (alloc_fn_t)dlsym(RTLD_DEFAULT, "memtap_alloc");
	free_fn = (free_fn_t)dlsym(RTLD_DEFAULT, "memtap_free");
	init_fn = (void (*)(int))dlsym(RTLD_DEFAULT, "memtap_init");
	reset_fn = (void (*)(void))dlsym(RTLD_DEFAULT, "memtap_reset");
	fraction_fn = (void (*)(double, int))dlsym(RTLD_DEFAULT, "memtap_memory_fraction");
	record_stream_fn = (void (*)(void *, cudaStream_t))dlsym(RTLD_DEFAULT, "memtap_record_stream");
	if (!alloc_fn || !free_fn || !init_fn || !reset_fn || !fraction_fn || !record_stream_fn) {
		printf("1..0 # SKIP memtap's entry points are not loaded\n");
		return 0;
	}
	cudaGetDeviceCount(&count); /* loads the driver (simgpu), where the test's hook lives */
	if ((driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) != NULL)
		busy = (void (*)(CUstream))dlsym(driver, "simgpu_stream_busy");
	if (!busy) {
		printf("1..0 # SKIP not on simgpu\n");
		return 0;
	}
	init_fn(count); /* createCustomAllocator */
	ok(count >= 1, "init(device_count) with %d devices", count);

	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, trainer, (void *)(intptr_t)i);
	for (int i = 0; i < THREADS; i++) {
		void *r;

		pthread_join(t[i], &r);
		failed += (long)r;
	}
	for (int i = 0; i < THREADS; i++)
		if (handoff[i])
			torch_raw_delete(handoff[i]);
	is(failed, 0, "%d threads on their own streams: every allocation served", THREADS);
	ok(allocs == frees && foreign == 0, "every tensor freed through the table (%ld allocations)", allocs);

	/* Tensor.record_stream: not reused while the other stream's work is queued */
	cudaStreamCreate(&a);
	cudaStreamCreate(&b);
	p = torch_malloc(6 << 20, 0, a);
	record_stream_fn(p, b);
	busy((CUstream)b);
	torch_raw_delete(p);
	q = torch_malloc(6 << 20, 0, a);
	ok(q && q != p, "record_stream: a block the other stream still uses is not handed out");
	torch_raw_delete(q);
	cudaStreamSynchronize(b);
	q = torch_malloc(6 << 20, 0, a);
	{
		void *r = torch_malloc(6 << 20, 0, a);

		ok(q == p || r == p, "after that stream synchronized, it is");
		torch_raw_delete(r);
	}
	torch_raw_delete(q);

	/* torch.cuda.set_per_process_memory_fraction and empty_cache */
	cudaMemGetInfo(&free_b, &total);
	fraction_fn(0.25, 0);
	p = torch_malloc(total / 5, 0, a);
	q = torch_malloc(total / 10, 0, a);
	ok(p && !q, "memory fraction 0.25: 20%% fits, 10%% more does not");
	torch_raw_delete(p);
	fraction_fn(1.0, 0);
	reset_fn(); /* empty_cache */
	cudaMemGetInfo(&free_after, &total);
	is(free_after, total, "empty_cache: every segment back to the device");
	ok(alloc_fn(0, 0, a) == NULL, "a zero-byte request gets no address");
	free_fn(NULL, 0, 0, a);
	cudaStreamDestroy(a);
	cudaStreamDestroy(b);
	return done();
}
