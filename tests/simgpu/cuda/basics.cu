/* Kernels, launches, copies, memsets, events, streams, symbols, pinned, managed and
 * registered host memory, device properties and IPC handles through the runtime, as a
 * program built with nvcc -cudart shared uses them. Kernels do not run on simgpu: what
 * the program reads back from device memory is not checked, what it copies between host
 * buffers is. */
#include <cuda_runtime.h>
#include <spawn.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "check.h"

extern char **environ;

__device__ float scale_by[4];
__constant__ int table[16];

__global__ void add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = (a[i] + b[i]) * scale_by[0] + table[0];
}

template <typename T> __global__ void fill(T *p, T v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = v;
}

/* basics open HEX: another process opens the IPC handle (a forked child cannot: CUDA
 * answers cudaErrorInitializationError there, as it did on an H200) */
static int open_handle(const char *hex)
{
	cudaIpcMemHandle_t h;
	void *p = NULL;

	for (size_t i = 0; i < sizeof h.reserved; i++)
		sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&h.reserved[i]);
	CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
	TRUE(p != NULL);
	CHECK(cudaIpcCloseMemHandle(p));
	return 0;
}

/* Runs this program again to open the handle, without memtap's library (one trace: the
 * job's); a sanitizer's stays. */
static int spawn_open(const cudaIpcMemHandle_t *h)
{
	static char preload[4096] = "LD_PRELOAD=";
	char hex[2 * sizeof h->reserved + 1], *argv[] = {(char *)"basics", (char *)"open", hex, NULL}, *env[256];
	const char *old = getenv("LD_PRELOAD");
	size_t n = 0;
	int status = -1;
	pid_t pid;

	for (size_t i = 0; i < sizeof h->reserved; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h->reserved[i]);
	for (const char *p = old; p && *p; p += strcspn(p, ":") + (p[strcspn(p, ":")] == ':')) {
		int len = (int)strcspn(p, ":");
		if (len && !memmem(p, len, "libmemtap", 9))
			snprintf(preload + strlen(preload), sizeof preload - strlen(preload), "%s%.*s",
				 preload[11] ? ":" : "", len, p);
	}
	for (char **e = environ; *e && n < 254; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
			env[n++] = *e;
	env[n++] = preload;
	env[n] = NULL;
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env) != 0)
		return -1;
	waitpid(pid, &status, 0);
	return status;
}

int main(int argc, char **argv)
{
	const int n = 50000;
	const size_t bytes = n * sizeof(float);
	float *a, *b, *c, *host, *pinned, *managed, *back;
	int count = 0, dev = -1, values[16];
	struct cudaDeviceProp prop;
	cudaStream_t s1, s2;
	cudaEvent_t start, stop, mid;
	float ms = -1, f4[4] = {1, 2, 3, 4};
	void *sym = NULL;
	size_t symsize = 0;

	if (argc == 3 && !strcmp(argv[1], "open"))
		return open_handle(argv[2]);
	CHECK(cudaGetDeviceCount(&count));
	TRUE(count >= 1);
	CHECK(cudaSetDevice(0));
	CHECK(cudaGetDevice(&dev));
	TRUE(dev == 0);
	CHECK(cudaGetDeviceProperties(&prop, 0));
	TRUE(prop.major == 9 && prop.multiProcessorCount > 0 && prop.totalGlobalMem > 0 && prop.warpSize == 32);
	TRUE(strlen(prop.name) > 0);
	CHECK(cudaFree(0)); /* the idiom that creates the context */

	CHECK(cudaMalloc(&a, bytes));
	EXPECT(bytes);
	CHECK(cudaMalloc(&b, bytes + 4));
	EXPECT(bytes + 4);
	CHECK(cudaMalloc(&c, bytes + 8));
	EXPECT(bytes + 8);
	host = (float *)malloc(bytes);
	back = (float *)malloc(bytes);
	for (int i = 0; i < n; i++)
		host[i] = (float)i;
	CHECK(cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(b, host, bytes, cudaMemcpyDefault));
	CHECK(cudaMemset(c, 0, bytes));
	CHECK(cudaMemcpyToSymbol(scale_by, f4, sizeof f4));
	for (int i = 0; i < 16; i++)
		values[i] = i;
	CHECK(cudaMemcpyToSymbol(table, values, sizeof values));
	memset(values, 0xff, sizeof values);
	CHECK(cudaGetSymbolAddress(&sym, scale_by));
	CHECK(cudaGetSymbolSize(&symsize, scale_by));
	TRUE(sym != NULL && symsize == sizeof f4);

	add<<<(n + 255) / 256, 256>>>(a, b, c, n);
	CHECK(cudaGetLastError());
	fill<float><<<dim3(196), dim3(256), 0, 0>>>(c, 1.0f, n);
	CHECK(cudaPeekAtLastError());
	fill<int><<<1, 2048>>>((int *)c, 1, n); /* too many threads a block: refused */
	ERROR_IS(cudaGetLastError(), cudaErrorInvalidValue);
	CHECK(cudaGetLastError());
	{
		void *args[] = {&a, &b, &c, (void *)&n};
		CHECK(cudaLaunchKernel((const void *)add, dim3(196), dim3(256), args, 0, 0));
	}
	{
		struct cudaFuncAttributes fa;
		CHECK(cudaFuncGetAttributes(&fa, add));
		TRUE(fa.maxThreadsPerBlock > 0);
	}
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(back, c, bytes, cudaMemcpyDeviceToHost));

	/* host to host really copies, through the runtime */
	memset(back, 0, bytes);
	CHECK(cudaMemcpy(back, host, bytes, cudaMemcpyHostToHost));
	TRUE(memcmp(back, host, bytes) == 0);
	{
		/* and so do 2D and 3D copies between host buffers: every other row of 100 floats */
		struct cudaMemcpy3DParms c3 = {};
		memset(back, 0, bytes);
		c3.srcPtr = make_cudaPitchedPtr(host, 200 * sizeof(float), 100 * sizeof(float), 10);
		c3.dstPtr = make_cudaPitchedPtr(back, 200 * sizeof(float), 100 * sizeof(float), 10);
		c3.extent = make_cudaExtent(100 * sizeof(float), 10, 2);
		c3.kind = cudaMemcpyDefault;
		CHECK(cudaMemcpy3D(&c3));
		TRUE(back[99] == 99 && back[100] == 0 && back[200] == 200 && back[2000 + 99] == 2099);
		CHECK(cudaMemcpy2D(back + 100, 200 * sizeof(float), host + 100, 200 * sizeof(float),
				   100 * sizeof(float), 20, cudaMemcpyHostToHost));
		TRUE(memcmp(back, host, 4000 * sizeof(float)) == 0);
	}

	/* pinned memory, streams, events */
	CHECK(cudaMallocHost(&pinned, bytes + 12));
	EXPECT(bytes + 12);
	CHECK(cudaStreamCreate(&s1));
	CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CHECK(cudaEventCreate(&start));
	CHECK(cudaEventCreate(&stop));
	CHECK(cudaEventCreateWithFlags(&mid, cudaEventDisableTiming));
	CHECK(cudaEventRecord(start, s1));
	CHECK(cudaMemcpyAsync(a, pinned, bytes, cudaMemcpyHostToDevice, s1));
	fill<float><<<196, 256, 0, s1>>>(a, 2.0f, n);
	CHECK(cudaEventRecord(mid, s1));
	CHECK(cudaStreamWaitEvent(s2, mid, 0));
	CHECK(cudaMemsetAsync(b, 1, bytes, s2));
	CHECK(cudaMemcpyAsync(pinned, host, bytes, cudaMemcpyHostToHost, s2));
	CHECK(cudaEventRecord(stop, s1));
	CHECK(cudaEventSynchronize(stop));
	CHECK(cudaStreamSynchronize(s2));
	TRUE(memcmp(pinned, host, bytes) == 0);
	CHECK(cudaEventElapsedTime(&ms, start, stop));
	TRUE(ms >= 0);
	ERROR_IS(cudaEventElapsedTime(&ms, start, mid), cudaErrorInvalidResourceHandle);
	ERROR_IS(cudaGetLastError(), cudaErrorInvalidResourceHandle); /* and clears it */
	CHECK(cudaGetLastError());
	CHECK(cudaEventQuery(stop));
	CHECK(cudaStreamQuery(s1));
	CHECK(cudaEventDestroy(start));
	CHECK(cudaEventDestroy(stop));
	CHECK(cudaEventDestroy(mid));
	CHECK(cudaStreamDestroy(s1));
	CHECK(cudaStreamDestroy(s2));

	/* managed memory is host memory here: a copy into it is visible at once */
	CHECK(cudaMallocManaged(&managed, bytes + 16));
	EXPECT(bytes + 16);
	CHECK(cudaMemcpy(managed, host, bytes, cudaMemcpyDefault));
	TRUE(memcmp(managed, host, bytes) == 0);
	CHECK(cudaMemset(managed, 0, 64));
	TRUE(managed[0] == 0 && managed[15] == 0 && managed[16] == 16.0f);

	/* registered host memory */
	{
		float *dp = NULL;
		unsigned flags = 0;
		CHECK(cudaHostRegister(back, bytes, cudaHostRegisterMapped));
		EXPECT(bytes); /* registered host memory is recorded, as pinned memory the job holds */
		CHECK(cudaHostGetDevicePointer((void **)&dp, back, 0));
		CHECK(cudaHostGetFlags(&flags, back));
		TRUE(dp != NULL && (flags & cudaHostRegisterMapped));
		/* from pageable memory the kind says is the device's: refused */
		ERROR_IS(cudaMemcpy(back, host, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
		ERROR_IS(cudaGetLastError(), cudaErrorInvalidValue);
		CHECK(cudaHostUnregister(back));
	}

	/* an IPC handle, opened by another process */
	{
		cudaIpcMemHandle_t h;
		int status;
		CHECK(cudaIpcGetMemHandle(&h, a));
		fflush(stdout);
		status = spawn_open(&h);
		TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}

	{
		size_t free_b = 0, total_b = 0;
		CHECK(cudaMemGetInfo(&free_b, &total_b));
		TRUE(free_b < total_b);
	}
	CHECK(cudaFree(a));
	CHECK(cudaFree(b));
	CHECK(cudaFree(c));
	CHECK(cudaFreeHost(pinned));
	CHECK(cudaFree(managed));
	ERROR_IS(cudaFree(a), cudaErrorInvalidValue);
	ERROR_IS(cudaGetLastError(), cudaErrorInvalidValue);
	free(host);
	free(back);
	CHECK(cudaDeviceReset());
	printf("basics: done\n");
	return 0;
}
