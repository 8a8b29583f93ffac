/* simgpu's runtime: streams, events, stream capture and graphs, forwarded to the driver,
 * which keeps their state (stream.c, graph.c). Graph memory nodes follow the documented
 * lifetime rules there: an allocation is backed when a launch reaches its node, freed
 * by a free node, cudaFree or cudaFreeAsync, and its memory goes back to the device at
 * cudaDeviceGraphMemTrim or when the executable graph is destroyed. */
#include "runtime.h"

#include <string.h>

/* ---- streams ---------------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	READY();
	return rt_result(DRV(cuStreamCreateWithPriority, 5050)((CUstream *)pStream, flags, priority));
}

cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t stream, int *priority)
{
	READY();
	return rt_result(DRV(cuStreamGetPriority, 5050)((CUstream)stream, priority));
}

cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	READY();
	return rt_result(DRV(cuCtxGetStreamPriorityRange, 5050)(leastPriority, greatestPriority));
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
	READY();
	return rt_result(DRV(cuStreamQuery, 2000)((CUstream)stream));
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	READY();
	return rt_result(DRV(cuStreamWaitEvent, 3020)((CUstream)stream, (CUevent)event, flags));
}

cudaError_t CUDARTAPI cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
					    unsigned int flags)
{
	READY();
	/* the callback types differ only in the names of their parameter types */
	return rt_result(DRV(cuStreamAddCallback, 5000)((CUstream)stream, (CUstreamCallback)(void (*)(void))callback,
							userData, flags));
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	READY();
	return rt_result(DRV(cuLaunchHostFunc, 10000)((CUstream)stream, (CUhostFn)fn, userData));
}

/* ---- events ----------------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	READY();
	/* cudaEvent* and CU_EVENT_* flags have the same values */
	return rt_result(DRV(cuEventCreate, 2000)((CUevent *)event, flags));
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	READY();
	return rt_result(DRV(cuEventRecord, 2000)((CUevent)event, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	READY();
	return rt_result(DRV(cuEventRecordWithFlags, 11010)((CUevent)event, (CUstream)stream, flags));
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
	READY();
	return rt_result(DRV(cuEventQuery, 2000)((CUevent)event));
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
	READY();
	return rt_result(DRV(cuEventSynchronize, 2000)((CUevent)event));
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
	READY();
	return rt_result(DRV(cuEventDestroy, 4000)((CUevent)event));
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	READY();
	return rt_result(DRV(cuEventElapsedTime, 2000)(ms, (CUevent)start, (CUevent)end));
}

/* ---- stream capture ------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	READY();
	return rt_result(DRV(cuStreamBeginCapture, 10010)((CUstream)stream, (CUstreamCaptureMode)mode));
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	READY();
	return rt_result(DRV(cuStreamEndCapture, 10000)((CUstream)stream, (CUgraph *)pGraph));
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	READY();
	return rt_result(DRV(cuStreamIsCapturing, 10000)((CUstream)stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
					       unsigned long long *id_out, cudaGraph_t *graph_out,
					       const cudaGraphNode_t **dependencies_out,
					       const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	READY();
	return rt_result(DRV(cuStreamGetCaptureInfo, 12030)(
	    (CUstream)stream, (CUstreamCaptureStatus *)captureStatus_out, (cuuint64_t *)id_out, (CUgraph *)graph_out,
	    (const CUgraphNode **)dependencies_out, (const CUgraphEdgeData **)edgeData_out, numDependencies_out));
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	READY();
	return rt_result(DRV(cuThreadExchangeStreamCaptureMode, 10010)((CUstreamCaptureMode *)mode));
}

/* ---- graphs -------------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	READY();
	return rt_result(DRV(cuGraphCreate, 10000)((CUgraph *)pGraph, flags));
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
	READY();
	return rt_result(DRV(cuGraphDestroy, 10000)((CUgraph)graph));
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	READY();
	return rt_result(DRV(cuGraphInstantiateWithFlags, 11040)((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						    unsigned long long flags)
{
	return cudaGraphInstantiate(pGraphExec, graph, flags);
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	READY();
	return rt_result(DRV(cuGraphLaunch, 10000)((CUgraphExec)graphExec, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	READY();
	return rt_result(DRV(cuGraphUpload, 11010)((CUgraphExec)graphExec, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	READY();
	return rt_result(DRV(cuGraphExecDestroy, 10000)((CUgraphExec)graphExec));
}

cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
	READY();
	return rt_result(DRV(cuGraphGetNodes, 10000)((CUgraph)graph, (CUgraphNode *)nodes, numNodes));
}

cudaError_t CUDARTAPI cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					    const cudaGraphNode_t *pDependencies, size_t numDependencies)
{
	READY();
	return rt_result(DRV(cuGraphAddEmptyNode, 10000)((CUgraphNode *)pGraphNode, (CUgraph)graph,
							 (const CUgraphNode *)pDependencies, numDependencies));
}

cudaError_t CUDARTAPI cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					     const cudaGraphNode_t *pDependencies, size_t numDependencies,
					     const struct cudaKernelNodeParams *p)
{
	CUDA_KERNEL_NODE_PARAMS k;
	CUfunction f;
	cudaError_t e;

	READY();
	if (!p)
		return rt_note(cudaErrorInvalidValue);
	if ((e = rt_function(p->func, &f)) != cudaSuccess)
		return e;
	memset(&k, 0, sizeof k);
	k.func = f;
	k.gridDimX = p->gridDim.x, k.gridDimY = p->gridDim.y, k.gridDimZ = p->gridDim.z;
	k.blockDimX = p->blockDim.x, k.blockDimY = p->blockDim.y, k.blockDimZ = p->blockDim.z;
	k.sharedMemBytes = p->sharedMemBytes;
	k.kernelParams = p->kernelParams;
	k.extra = p->extra;
	return rt_result(DRV(cuGraphAddKernelNode, 12000)((CUgraphNode *)pGraphNode, (CUgraph)graph,
							  (const CUgraphNode *)pDependencies, numDependencies, &k));
}

cudaError_t CUDARTAPI cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					     const cudaGraphNode_t *pDependencies, size_t numDependencies,
					     const struct cudaMemcpy3DParms *p)
{
	CUDA_MEMCPY3D c;
	CUcontext ctx;
	cudaError_t e;

	READY();
	if ((e = rt_copy3d(p, &c)) != cudaSuccess || (e = rt_primary(rt_device(), &ctx)) != cudaSuccess)
		return e;
	return rt_result(DRV(cuGraphAddMemcpyNode, 10000)(
	    (CUgraphNode *)pGraphNode, (CUgraph)graph, (const CUgraphNode *)pDependencies, numDependencies, &c, ctx));
}

cudaError_t CUDARTAPI cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
	READY();
	return rt_result(DRV(cuGraphClone, 10000)((CUgraph *)pGraphClone, (CUgraph)originalGraph));
}

cudaError_t CUDARTAPI cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dst,
					       const void *src, size_t count, enum cudaMemcpyKind kind)
{
	CUDA_MEMCPY3D c;
	CUcontext ctx;
	cudaError_t e;

	READY();
	if ((unsigned)kind > cudaMemcpyDefault)
		return rt_note(cudaErrorInvalidMemcpyDirection);
	if ((e = rt_primary(rt_device(), &ctx)) != cudaSuccess)
		return e;
	memset(&c, 0, sizeof c);
	c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.srcDevice = (CUdeviceptr)src;
	c.dstDevice = (CUdeviceptr)dst;
	c.WidthInBytes = count;
	c.Height = c.Depth = 1;
	return rt_result(DRV(cuGraphAddMemcpyNode, 10000)(
	    (CUgraphNode *)pGraphNode, (CUgraph)graph, (const CUgraphNode *)pDependencies, numDependencies, &c, ctx));
}

cudaError_t CUDARTAPI cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					     const cudaGraphNode_t *pDependencies, size_t numDependencies,
					     const struct cudaMemsetParams *p)
{
	CUDA_MEMSET_NODE_PARAMS m;
	CUcontext ctx;
	cudaError_t e;

	READY();
	if (!p)
		return rt_note(cudaErrorInvalidValue);
	if ((e = rt_primary(rt_device(), &ctx)) != cudaSuccess)
		return e;
	memset(&m, 0, sizeof m);
	m.dst = (CUdeviceptr)p->dst;
	m.pitch = p->pitch;
	m.value = p->value;
	m.elementSize = p->elementSize;
	m.width = p->width;
	m.height = p->height;
	return rt_result(DRV(cuGraphAddMemsetNode, 10000)(
	    (CUgraphNode *)pGraphNode, (CUgraph)graph, (const CUgraphNode *)pDependencies, numDependencies, &m, ctx));
}

cudaError_t CUDARTAPI cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					   const cudaGraphNode_t *pDependencies, size_t numDependencies,
					   const struct cudaHostNodeParams *p)
{
	CUDA_HOST_NODE_PARAMS h;

	READY();
	if (!p)
		return rt_note(cudaErrorInvalidValue);
	h.fn = (CUhostFn)p->fn;
	h.userData = p->userData;
	return rt_result(DRV(cuGraphAddHostNode, 10000)((CUgraphNode *)pGraphNode, (CUgraph)graph,
							(const CUgraphNode *)pDependencies, numDependencies, &h));
}

/* The runtime's and the driver's node parameters have the same layout, field for field. */
_Static_assert(sizeof(struct cudaMemAllocNodeParams) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS),
	       "cudaMemAllocNodeParams is CUDA_MEM_ALLOC_NODE_PARAMS");

cudaError_t CUDARTAPI cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       struct cudaMemAllocNodeParams *nodeParams)
{
	CUDA_MEM_ALLOC_NODE_PARAMS a;
	CUresult r;

	READY();
	if (!nodeParams)
		return rt_note(cudaErrorInvalidValue);
	memcpy(&a, nodeParams, sizeof a);
	r = DRV(cuGraphAddMemAllocNode, 11040)((CUgraphNode *)pGraphNode, (CUgraph)graph,
					       (const CUgraphNode *)pDependencies, numDependencies, &a);
	if (r == CUDA_SUCCESS)
		nodeParams->dptr = (void *)a.dptr;
	return rt_result(r);
}

cudaError_t CUDARTAPI cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					      const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dptr)
{
	READY();
	return rt_result(DRV(cuGraphAddMemFreeNode, 11040)((CUgraphNode *)pGraphNode, (CUgraph)graph,
							   (const CUgraphNode *)pDependencies, numDependencies,
							   (CUdeviceptr)dptr));
}

cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device)
{
	READY();
	return rt_result(DRV(cuDeviceGraphMemTrim, 11040)(device));
}

cudaError_t CUDARTAPI cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
	READY();
	return rt_result(DRV(cuDeviceGetGraphMemAttribute, 11040)(device, (CUgraphMem_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
	READY();
	return rt_result(DRV(cuDeviceSetGraphMemAttribute, 11040)(device, (CUgraphMem_attribute)attr, value));
}
