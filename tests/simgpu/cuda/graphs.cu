/* Stream capture and graphs, with memory nodes: a captured graph that allocates and
 * frees inside itself, and a built graph whose allocation outlives its launch until
 * cudaFree, with the graph memory attributes and cudaDeviceGraphMemTrim the documented
 * lifetime rules imply. Host nodes really run; kernels do not. */
#include <cuda_runtime.h>

#include "check.h"

__global__ void scale(float *p, float by, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] *= by;
}

static int host_runs;

static void CUDART_CB count_run(void *data)
{
	(void)data;
	host_runs++;
}

static size_t graph_attr(enum cudaGraphMemAttributeType a)
{
	unsigned long long v = ~0ull;
	CHECK(cudaDeviceGetGraphMemAttribute(0, a, &v));
	return (size_t)v;
}

int main(void)
{
	const int n = 1 << 20;
	cudaStream_t s;
	cudaGraph_t g, built;
	cudaGraphExec_t exec, exec2;
	enum cudaStreamCaptureStatus st;
	float *p = NULL, *host = NULL;
	static float rows[1024];
	size_t nnodes = 0;

	CHECK(cudaSetDevice(0));
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CHECK(cudaMallocHost(&host, 4096));
	EXPECT(4096);

	/* capture: allocation, work and free become nodes of one graph */
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK(cudaStreamIsCapturing(s, &st));
	TRUE(st == cudaStreamCaptureStatusActive);
	CHECK(cudaMallocAsync(&p, n * sizeof(float), s));
	EXPECT(n * sizeof(float));
	CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), s));
	scale<<<n / 256, 256, 0, s>>>(p, 2.0f, n);
	CHECK(cudaLaunchHostFunc(s, count_run, NULL));
	CHECK(cudaMemcpyAsync(host, p, 4096, cudaMemcpyDeviceToHost, s));
	CHECK(cudaFreeAsync(p, s));
	CHECK(cudaStreamEndCapture(s, &g));
	CHECK(cudaGraphGetNodes(g, NULL, &nnodes));
	TRUE(nnodes == 6);
	TRUE(host_runs == 0); /* captured, not run */
	CHECK(cudaGraphInstantiate(&exec, g, 0));
	CHECK(cudaGraphLaunch(exec, s));
	CHECK(cudaGraphLaunch(exec, s));
	CHECK(cudaStreamSynchronize(s));
	TRUE(host_runs == 2);
	{
		/* cudaGraphClone's documentation: not for graphs with memory nodes */
		cudaGraph_t clone;
		ERROR_IS(cudaGraphClone(&clone, g), cudaErrorNotSupported);
		(void)cudaGetLastError();
	}
	/* freed inside the graph: the memory stays with the executable graph until trimmed
	   (counted as used: the driver's answer on an H200) */
	TRUE(graph_attr(cudaGraphMemAttrUsedMemCurrent) >= n * sizeof(float));
	TRUE(graph_attr(cudaGraphMemAttrReservedMemHigh) >= n * sizeof(float));
	CHECK(cudaDeviceGraphMemTrim(0));
	TRUE(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);

	/* built by hand: an allocation node with no free node outlives the launch */
	{
		struct cudaMemAllocNodeParams a = {};
		struct cudaMemsetParams m = {};
		struct cudaKernelNodeParams k = {};
		struct cudaHostNodeParams h = {count_run, NULL};
		cudaGraphNode_t alloc, set, kern, copy, hostn;
		float by = 3.0f;
		int count = n;
		void *args[] = {&a.dptr, &by, &count};

		CHECK(cudaGraphCreate(&built, 0));
		a.poolProps.allocType = cudaMemAllocationTypePinned;
		a.poolProps.location.type = cudaMemLocationTypeDevice;
		a.poolProps.location.id = 0;
		a.bytesize = 3 << 20;
		CHECK(cudaGraphAddMemAllocNode(&alloc, built, NULL, 0, &a));
		EXPECT(3 << 20);
		TRUE(a.dptr != NULL);
		m.dst = a.dptr;
		m.value = 7;
		m.elementSize = 1;
		m.width = 3 << 20;
		m.height = 1;
		CHECK(cudaGraphAddMemsetNode(&set, built, &alloc, 1, &m));
		k.func = (void *)scale;
		k.gridDim = dim3(64);
		k.blockDim = dim3(256);
		k.kernelParams = args;
		CHECK(cudaGraphAddKernelNode(&kern, built, &set, 1, &k));
		CHECK(cudaGraphAddMemcpyNode1D(&copy, built, &kern, 1, host, a.dptr, 4096, cudaMemcpyDeviceToHost));
		CHECK(cudaGraphAddHostNode(&hostn, built, &copy, 1, &h));
		{
			/* a 3D copy node between host buffers really copies when the graph runs */
			struct cudaMemcpy3DParms c3 = {};
			cudaGraphNode_t c3n;
			for (int i = 0; i < 1024; i++)
				rows[i] = (float)i;
			c3.srcPtr = make_cudaPitchedPtr(rows, 64 * sizeof(float), 64 * sizeof(float), 16);
			c3.dstPtr = make_cudaPitchedPtr(host, 64 * sizeof(float), 64 * sizeof(float), 16);
			c3.extent = make_cudaExtent(32 * sizeof(float), 16, 1); /* half of each row */
			c3.kind = cudaMemcpyHostToHost;
			CHECK(cudaGraphAddMemcpyNode(&c3n, built, &hostn, 1, &c3));
		}
		CHECK(cudaGraphInstantiate(&exec2, built, 0));
		CHECK(cudaGraphLaunch(exec2, s));
		CHECK(cudaStreamSynchronize(s));
		TRUE(host_runs == 3);
		TRUE(host[0] == 0 && host[31] == 31 && host[64] == 64 && host[64 * 15 + 31] == 64 * 15 + 31);
		TRUE(graph_attr(cudaGraphMemAttrUsedMemCurrent) >= (size_t)(3 << 20));
		/* launching again before the allocation is freed is an error */
		TRUE(cudaGraphLaunch(exec2, s) != cudaSuccess);
		(void)cudaGetLastError();
		CHECK(cudaFree(a.dptr));
		/* its executable graph keeps the memory (the driver's answer on an H200) */
		TRUE(graph_attr(cudaGraphMemAttrUsedMemCurrent) >= (size_t)(3 << 20));
		CHECK(cudaGraphExecDestroy(exec2));
		CHECK(cudaGraphDestroy(built));
	}
	CHECK(cudaDeviceGraphMemTrim(0));
	TRUE(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);
	CHECK(cudaGraphExecDestroy(exec));
	CHECK(cudaGraphDestroy(g));
	CHECK(cudaStreamDestroy(s));
	CHECK(cudaFreeHost(host));
	printf("graphs: done\n");
	return 0;
}
