/* simgpu's runtime: copies, memsets, host registration, IPC handles and managed-memory
 * hints, each forwarded to the driver. Addressing is unified, so a copy's kind is only
 * checked: the driver finds where each pointer is, really writes host memory and leaves
 * device memory untouched (what a program reads back from the device is not what it
 * wrote). */
#include "runtime.h"

#include <string.h>

static bool bad_kind(enum cudaMemcpyKind kind)
{
	return (unsigned)kind > cudaMemcpyDefault;
}

/* Memory CUDA does not know (pageable host memory) where the kind says the device: an
 * invalid value, as CUDA 13's runtime answered on an H200 (2026-11-30). */
static bool not_device(const void *p)
{
	unsigned type = 0;

	return DRV(cuPointerGetAttribute, 4000)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) !=
	       CUDA_SUCCESS;
}

static cudaError_t check_1d(void *dst, const void *src, enum cudaMemcpyKind kind)
{
	if (bad_kind(kind))
		return cudaErrorInvalidMemcpyDirection;
	if (((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && not_device(src)) ||
	    ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && not_device(dst)))
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	cudaError_t e;

	READY();
	if ((e = check_1d(dst, src, kind)) != cudaSuccess)
		return rt_note(e);
	if (count == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemcpy, 4000)((CUdeviceptr)dst, (CUdeviceptr)src, count));
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				      cudaStream_t stream)
{
	cudaError_t e;

	READY();
	if ((e = check_1d(dst, src, kind)) != cudaSuccess)
		return rt_note(e);
	if (count == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemcpyAsync, 4000)((CUdeviceptr)dst, (CUdeviceptr)src, count, (CUstream)stream));
}

static CUDA_MEMCPY2D copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height)
{
	CUDA_MEMCPY2D c;

	memset(&c, 0, sizeof c);
	c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.srcDevice = (CUdeviceptr)src;
	c.srcPitch = spitch;
	c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	c.dstDevice = (CUdeviceptr)dst;
	c.dstPitch = dpitch;
	c.WidthInBytes = width;
	c.Height = height;
	return c;
}

cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				   size_t height, enum cudaMemcpyKind kind)
{
	CUDA_MEMCPY2D c = copy2d(dst, dpitch, src, spitch, width, height);

	READY();
	if (bad_kind(kind))
		return rt_note(cudaErrorInvalidMemcpyDirection);
	if (width > dpitch || width > spitch)
		return rt_note(cudaErrorInvalidPitchValue);
	if (width == 0 || height == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemcpy2DUnaligned, 3020)(&c));
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
					size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	CUDA_MEMCPY2D c = copy2d(dst, dpitch, src, spitch, width, height);

	READY();
	if (bad_kind(kind))
		return rt_note(cudaErrorInvalidMemcpyDirection);
	if (width > dpitch || width > spitch)
		return rt_note(cudaErrorInvalidPitchValue);
	if (width == 0 || height == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemcpy2DAsync, 3020)(&c, (CUstream)stream));
}

cudaError_t rt_copy3d(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c)
{
	if (!p)
		return rt_note(cudaErrorInvalidValue);
	if (bad_kind(p->kind))
		return rt_note(cudaErrorInvalidMemcpyDirection);
	if (p->srcArray || p->dstArray)
		return rt_note(cudaErrorNotSupported); /* simgpu has no CUDA arrays */
	memset(c, 0, sizeof *c);
	c->srcMemoryType = c->dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	c->srcDevice = (CUdeviceptr)p->srcPtr.ptr;
	c->srcPitch = p->srcPtr.pitch;
	c->srcHeight = p->srcPtr.ysize;
	c->srcXInBytes = p->srcPos.x;
	c->srcY = p->srcPos.y;
	c->srcZ = p->srcPos.z;
	c->dstDevice = (CUdeviceptr)p->dstPtr.ptr;
	c->dstPitch = p->dstPtr.pitch;
	c->dstHeight = p->dstPtr.ysize;
	c->dstXInBytes = p->dstPos.x;
	c->dstY = p->dstPos.y;
	c->dstZ = p->dstPos.z;
	c->WidthInBytes = p->extent.width; /* in bytes without arrays */
	c->Height = p->extent.height;
	c->Depth = p->extent.depth;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
	CUDA_MEMCPY3D c;
	cudaError_t e;

	READY();
	if ((e = rt_copy3d(p, &c)) != cudaSuccess)
		return e;
	return rt_result(DRV(cuMemcpy3D, 3020)(&c));
}

cudaError_t CUDARTAPI cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
	CUDA_MEMCPY3D c;
	cudaError_t e;

	READY();
	if ((e = rt_copy3d(p, &c)) != cudaSuccess)
		return e;
	return rt_result(DRV(cuMemcpy3DAsync, 3020)(&c, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
	CUcontext dc, sc;
	cudaError_t e;

	READY();
	if ((e = rt_primary(dstDevice, &dc)) != cudaSuccess || (e = rt_primary(srcDevice, &sc)) != cudaSuccess)
		return e;
	if (count == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemcpyPeer, 4000)((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, count));
}

cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
					  cudaStream_t stream)
{
	CUcontext dc, sc;
	cudaError_t e;

	READY();
	if ((e = rt_primary(dstDevice, &dc)) != cudaSuccess || (e = rt_primary(srcDevice, &sc)) != cudaSuccess)
		return e;
	if (count == 0)
		return cudaSuccess;
	return rt_result(
	    DRV(cuMemcpyPeerAsync, 4000)((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, count, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
	READY();
	if (count == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemsetD8, 3020)((CUdeviceptr)devPtr, (unsigned char)value, count));
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	READY();
	if (count == 0)
		return cudaSuccess;
	return rt_result(
	    DRV(cuMemsetD8Async, 3020)((CUdeviceptr)devPtr, (unsigned char)value, count, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height)
{
	READY();
	if (width == 0 || height == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemsetD2D8, 3020)((CUdeviceptr)devPtr, pitch, (unsigned char)value, width, height));
}

cudaError_t CUDARTAPI cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height,
					cudaStream_t stream)
{
	READY();
	if (width == 0 || height == 0)
		return cudaSuccess;
	return rt_result(DRV(cuMemsetD2D8Async, 3020)((CUdeviceptr)devPtr, pitch, (unsigned char)value, width, height,
						      (CUstream)stream));
}

/* ---- host registration ------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	READY();
	/* cudaHostRegister* and CU_MEMHOSTREGISTER_* have the same values */
	return rt_result(DRV(cuMemHostRegister, 6050)(ptr, size, flags));
}

cudaError_t CUDARTAPI cudaHostUnregister(void *ptr)
{
	READY();
	return rt_result(DRV(cuMemHostUnregister, 4000)(ptr));
}

cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	READY();
	return rt_result(DRV(cuMemHostGetDevicePointer, 3020)((CUdeviceptr *)pDevice, pHost, flags));
}

cudaError_t CUDARTAPI cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
	READY();
	return rt_result(DRV(cuMemHostGetFlags, 2030)(pFlags, pHost));
}

/* ---- IPC ------------------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	READY();
	return rt_result(DRV(cuIpcGetMemHandle, 4010)((CUipcMemHandle *)handle, (CUdeviceptr)devPtr));
}

cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
	CUipcMemHandle h;

	READY();
	memcpy(&h, &handle, sizeof h);
	return rt_result(DRV(cuIpcOpenMemHandle, 11000)((CUdeviceptr *)devPtr, h, flags));
}

cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void *devPtr)
{
	READY();
	return rt_result(DRV(cuIpcCloseMemHandle, 4010)((CUdeviceptr)devPtr));
}

cudaError_t CUDARTAPI cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
	READY();
	return rt_result(DRV(cuIpcGetEventHandle, 4010)((CUipcEventHandle *)handle, (CUevent)event));
}

cudaError_t CUDARTAPI cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
	CUipcEventHandle h;

	READY();
	memcpy(&h, &handle, sizeof h);
	return rt_result(DRV(cuIpcOpenEventHandle, 4010)((CUevent *)event, h));
}

/* ---- pointers and managed memory ------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
	CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				       CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
				       CU_POINTER_ATTRIBUTE_IS_MANAGED};
	unsigned type = 0, managed = 0;
	int ordinal = -1;
	void *dev = NULL, *host = NULL;
	void *data[] = {&type, &ordinal, &dev, &host, &managed};
	CUresult r;

	READY();
	if (!attr)
		return rt_note(cudaErrorInvalidValue);
	memset(attr, 0, sizeof *attr);
	r = DRV(cuPointerGetAttributes, 7000)(5, which, data, (CUdeviceptr)ptr);
	if (r != CUDA_SUCCESS)
		return rt_result(r);
	/* memory CUDA does not know is unregistered host memory, as the real runtime says */
	attr->type = managed			    ? cudaMemoryTypeManaged
		     : type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
		     : type == CU_MEMORYTYPE_HOST   ? cudaMemoryTypeHost
						    : cudaMemoryTypeUnregistered;
	attr->device = ordinal < 0 ? rt_device() : ordinal;
	attr->devicePointer = attr->type == cudaMemoryTypeUnregistered ? NULL : dev;
	attr->hostPointer = attr->type == cudaMemoryTypeUnregistered ? NULL : host;
	return cudaSuccess;
}

static CUmemLocation location(struct cudaMemLocation l)
{
	CUmemLocation c;

	memset(&c, 0, sizeof c);
	c.type = (CUmemLocationType)l.type;
	c.id = l.id;
	return c;
}

cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation loc,
					   unsigned int flags, cudaStream_t stream)
{
	READY();
	return rt_result(
	    DRV(cuMemPrefetchAsync, 12020)((CUdeviceptr)devPtr, count, location(loc), flags, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
				    struct cudaMemLocation loc)
{
	READY();
	return rt_result(DRV(cuMemAdvise, 12020)((CUdeviceptr)devPtr, count, (CUmem_advise)advice, location(loc)));
}

cudaError_t CUDARTAPI cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr, size_t length, unsigned int flags)
{
	READY();
	return rt_result(DRV(cuStreamAttachMemAsync, 6000)((CUstream)stream, (CUdeviceptr)devPtr, length, flags));
}
