/* simgpu copies and memsets, every cuMemcpy and cuMemset ABI and its per-thread twin.
 * Both sides are checked: device memory must lie inside a live allocation, whole. Then
 * host memory is really written: a destination in host memory (pageable, pinned,
 * registered or managed) receives the source's bytes when the source is host memory
 * too, and zeros when it is device memory, which simgpu never stores; a destination in
 * device memory is left untouched. So a program reads back what it copied between host
 * buffers and zeros from the device. Work queued on a capturing stream becomes a graph
 * node instead, done when the graph is launched. Arrays are refused (not simulated). */
#include "sim.h"

#include <string.h>

/* One side of a copy: its address, checked against the memory type the caller named. */
static CUresult side(CUmemorytype type, const void *host, CUdeviceptr device, uintptr_t *p, enum sim_where *w,
		     size_t span)
{
	int dev;
	CUresult r;

	switch (type) {
	case CU_MEMORYTYPE_HOST:
		*p = (uintptr_t)host;
		r = sim_locate(*p, span, w, &dev);
		return r == CUDA_SUCCESS && *w == SIM_DEVICE ? CUDA_ERROR_INVALID_VALUE : r;
	case CU_MEMORYTYPE_DEVICE:
		*p = device;
		r = sim_locate(*p, span, w, &dev);
		/* a device pointer must be memory the driver knows, not pageable host memory */
		return r == CUDA_SUCCESS && !sim_extent_find(*p) ? CUDA_ERROR_INVALID_VALUE : r;
	case CU_MEMORYTYPE_UNIFIED:
		*p = device;
		return sim_locate(*p, span, w, &dev);
	case CU_MEMORYTYPE_ARRAY:
		return sim_refuse("CUDA arrays");
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The bytes a pitched 3D region spans from its first row, or 0 on overflow. */
static size_t span(size_t pitch, size_t height, size_t width, size_t rows, size_t depth)
{
	size_t slice = pitch * (height ? height : rows);

	if (pitch && slice / pitch != (height ? height : rows))
		return 0;
	return (depth - 1) * slice + (rows - 1) * pitch + width;
}

CUresult sim_copy3d(const CUDA_MEMCPY3D *c, bool run)
{
	uintptr_t src, dst;
	enum sim_where ws, wd;
	size_t w = c->WidthInBytes, h = c->Height ? c->Height : 1, d = c->Depth ? c->Depth : 1;
	size_t sp = h > 1 || d > 1 ? c->srcPitch : w, dp = h > 1 || d > 1 ? c->dstPitch : w;
	size_t soff, doff, sspan, dspan;
	CUresult r;

	if (c->reserved0 || c->reserved1 || c->srcLOD || c->dstLOD || (h > 1 && (sp < w || dp < w)) ||
	    (d > 1 && ((c->srcHeight && c->srcHeight < h) || (c->dstHeight && c->dstHeight < h))))
		return CUDA_ERROR_INVALID_VALUE;
	if (w == 0)
		return CUDA_SUCCESS;
	soff = c->srcZ * sp * (c->srcHeight ? c->srcHeight : h) + c->srcY * sp + c->srcXInBytes;
	doff = c->dstZ * dp * (c->dstHeight ? c->dstHeight : h) + c->dstY * dp + c->dstXInBytes;
	sspan = span(sp, c->srcHeight, w, h, d);
	dspan = span(dp, c->dstHeight, w, h, d);
	if (!sspan || !dspan)
		return CUDA_ERROR_INVALID_VALUE;
	r = side(c->srcMemoryType, c->srcHost, c->srcDevice, &src, &ws, 0);
	if (r == CUDA_SUCCESS)
		r = side(c->srcMemoryType, (const char *)c->srcHost + soff, c->srcDevice + soff, &src, &ws, sspan);
	if (r == CUDA_SUCCESS)
		r = side(c->dstMemoryType, c->dstHost, c->dstDevice, &dst, &wd, 0);
	if (r == CUDA_SUCCESS)
		r = side(c->dstMemoryType, (char *)c->dstHost + doff, c->dstDevice + doff, &dst, &wd, dspan);
	if (r != CUDA_SUCCESS || wd == SIM_DEVICE || !run)
		return r;
	for (size_t z = 0; z < d; z++) {
		for (size_t y = 0; y < h; y++) {
			char *to = (char *)dst + z * dp * (c->dstHeight ? c->dstHeight : h) + y * dp;
			const char *from = (const char *)src + z * sp * (c->srcHeight ? c->srcHeight : h) + y * sp;
			if (ws == SIM_HOST)
				memmove(to, from, w);
			else
				memset(to, 0, w); /* device memory holds no data: it reads as zeros */
		}
	}
	return CUDA_SUCCESS;
}

static CUDA_MEMCPY3D linear(CUmemorytype dt, CUdeviceptr dst, CUmemorytype st, CUdeviceptr src, size_t n)
{
	CUDA_MEMCPY3D c = {.srcMemoryType = st, .dstMemoryType = dt, .WidthInBytes = n, .Height = 1, .Depth = 1};

	if (st == CU_MEMORYTYPE_HOST)
		c.srcHost = (const void *)src;
	else
		c.srcDevice = src;
	if (dt == CU_MEMORYTYPE_HOST)
		c.dstHost = (void *)dst;
	else
		c.dstDevice = dst;
	return c;
}

/* Runs a copy now, or adds it to the graph its stream is capturing. */
static CUresult copy_on(CUstream s, const CUDA_MEMCPY3D *c)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	CUgraphNode n;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_valid_stream(s)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (sim_capturing(s)) {
		r = sim_copy3d(c, false);
		if (r == CUDA_SUCCESS)
			r = sim_capture_add(s, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
		if (r == CUDA_SUCCESS)
			sim_node_copy(n, c);
	} else {
		r = sim_copy3d(c, true);
	}
	sim_unlock();
	return r;
}

static CUresult copy(CUstream s, CUmemorytype dt, CUdeviceptr dst, CUmemorytype st, CUdeviceptr src, size_t n)
{
	CUDA_MEMCPY3D c = linear(dt, dst, st, src, n);
	return copy_on(s, &c);
}

#define PT(s) ((s) ? (s) : CU_STREAM_PER_THREAD)
#define H CU_MEMORYTYPE_HOST
#define D CU_MEMORYTYPE_DEVICE
#define U CU_MEMORYTYPE_UNIFIED

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(NULL, U, dst, U, src, n);
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(CU_STREAM_PER_THREAD, U, dst, U, src, n);
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(s, U, dst, U, src, n);
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(PT(s), U, dst, U, src, n);
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(NULL, D, dst, H, (CUdeviceptr)src, n);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(CU_STREAM_PER_THREAD, D, dst, H, (CUdeviceptr)src, n);
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy(s, D, dst, H, (CUdeviceptr)src, n);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy(PT(s), D, dst, H, (CUdeviceptr)src, n);
}

CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	return copy(NULL, H, (CUdeviceptr)dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	return copy(CU_STREAM_PER_THREAD, H, (CUdeviceptr)dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(s, H, (CUdeviceptr)dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(PT(s), H, (CUdeviceptr)dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(NULL, D, dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(CU_STREAM_PER_THREAD, D, dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(s, D, dst, D, src, n);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(PT(s), D, dst, D, src, n);
}

/* Contexts name devices here; every device's memory is in the one address space. */
static CUresult peer(CUstream s, CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
	bool ok;

	sim_lock();
	ok = sim_is_context(dctx) && sim_is_context(sctx);
	sim_unlock();
	return ok ? copy(s, D, dst, D, src, n) : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
	return peer(NULL, dst, dctx, src, sctx, n);
}

CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
	return peer(CU_STREAM_PER_THREAD, dst, dctx, src, sctx, n);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
				   CUstream s)
{
	return peer(s, dst, dctx, src, sctx, n);
}

CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
					CUstream s)
{
	return peer(PT(s), dst, dctx, src, sctx, n);
}

static CUresult copy2d(CUstream s, const CUDA_MEMCPY2D *p)
{
	CUDA_MEMCPY3D c;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	c = (CUDA_MEMCPY3D){.srcXInBytes = p->srcXInBytes,
			    .srcY = p->srcY,
			    .srcMemoryType = p->srcMemoryType,
			    .srcHost = p->srcHost,
			    .srcDevice = p->srcDevice,
			    .srcArray = p->srcArray,
			    .srcPitch = p->srcPitch,
			    .dstXInBytes = p->dstXInBytes,
			    .dstY = p->dstY,
			    .dstMemoryType = p->dstMemoryType,
			    .dstHost = p->dstHost,
			    .dstDevice = p->dstDevice,
			    .dstArray = p->dstArray,
			    .dstPitch = p->dstPitch,
			    .WidthInBytes = p->WidthInBytes,
			    .Height = p->Height,
			    .Depth = 1};
	return copy_on(s, &c);
}

CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D *p)
{
	return copy2d(NULL, p);
}

CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p)
{
	return copy2d(CU_STREAM_PER_THREAD, p);
}

CUresult CUDAAPI cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *p)
{
	return copy2d(NULL, p);
}

CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
	return copy2d(CU_STREAM_PER_THREAD, p);
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
	return copy2d(s, p);
}

CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s)
{
	return copy2d(PT(s), p);
}

static CUresult copy3d(CUstream s, const CUDA_MEMCPY3D *p)
{
	return p ? copy_on(s, p) : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemcpy3D(const CUDA_MEMCPY3D *p)
{
	return copy3d(NULL, p);
}

CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p)
{
	return copy3d(CU_STREAM_PER_THREAD, p);
}

CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream s)
{
	return copy3d(s, p);
}

CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s)
{
	return copy3d(PT(s), p);
}

static CUresult copy3d_peer(CUstream s, const CUDA_MEMCPY3D_PEER *p)
{
	CUDA_MEMCPY3D c;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	c = (CUDA_MEMCPY3D){.srcXInBytes = p->srcXInBytes,
			    .srcY = p->srcY,
			    .srcZ = p->srcZ,
			    .srcLOD = p->srcLOD,
			    .srcMemoryType = p->srcMemoryType,
			    .srcHost = p->srcHost,
			    .srcDevice = p->srcDevice,
			    .srcArray = p->srcArray,
			    .srcPitch = p->srcPitch,
			    .srcHeight = p->srcHeight,
			    .dstXInBytes = p->dstXInBytes,
			    .dstY = p->dstY,
			    .dstZ = p->dstZ,
			    .dstLOD = p->dstLOD,
			    .dstMemoryType = p->dstMemoryType,
			    .dstHost = p->dstHost,
			    .dstDevice = p->dstDevice,
			    .dstArray = p->dstArray,
			    .dstPitch = p->dstPitch,
			    .dstHeight = p->dstHeight,
			    .WidthInBytes = p->WidthInBytes,
			    .Height = p->Height,
			    .Depth = p->Depth};
	return copy_on(s, &c);
}

CUresult CUDAAPI cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)
{
	return copy3d_peer(NULL, p);
}

CUresult CUDAAPI cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p)
{
	return copy3d_peer(CU_STREAM_PER_THREAD, p);
}

CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
	return copy3d_peer(s, p);
}

CUresult CUDAAPI cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
	return copy3d_peer(PT(s), p);
}

/* ---- memsets ------------------------------------------------------------------------------ */

CUresult sim_memset(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height, bool run)
{
	enum sim_where w;
	size_t row = width * elem, total;
	int dev;
	CUresult r;

	if ((elem != 1 && elem != 2 && elem != 4) || dst % elem || (height > 1 && pitch < row) ||
	    (width && row / width != elem))
		return CUDA_ERROR_INVALID_VALUE;
	if (row == 0 || height == 0)
		return CUDA_SUCCESS;
	total = height > 1 ? (height - 1) * pitch + row : row;
	if (height > 1 && (total - row) / (height - 1) != pitch)
		return CUDA_ERROR_INVALID_VALUE;
	r = sim_locate(dst, total, &w, &dev);
	if (r == CUDA_SUCCESS && !sim_extent_find(dst))
		r = CUDA_ERROR_INVALID_VALUE; /* not memory the driver knows */
	if (r != CUDA_SUCCESS || w == SIM_DEVICE || !run)
		return r;
	for (size_t y = 0; y < height; y++) {
		char *p = (char *)dst + y * (height > 1 ? pitch : 0);
		for (size_t i = 0; i < width; i++) {
			if (elem == 1) {
				p[i] = (char)value;
			} else if (elem == 2) {
				uint16_t v = (uint16_t)value;
				memcpy(p + 2 * i, &v, 2);
			} else {
				uint32_t v = value;
				memcpy(p + 4 * i, &v, 4);
			}
		}
	}
	return CUDA_SUCCESS;
}

static CUresult set_on(CUstream s, CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width,
		       size_t height)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	CUgraphNode n;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_valid_stream(s)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (sim_capturing(s)) {
		CUDA_MEMSET_NODE_PARAMS p = {dst, pitch, value, elem, width, height};
		r = sim_memset(dst, pitch, value, elem, width, height, false);
		if (r == CUDA_SUCCESS)
			r = sim_capture_add(s, CU_GRAPH_NODE_TYPE_MEMSET, &n);
		if (r == CUDA_SUCCESS)
			sim_node_memset(n, &p);
	} else {
		r = sim_memset(dst, pitch, value, elem, width, height, true);
	}
	sim_unlock();
	return r;
}

/* Each memset ABI, with its per-thread twin: 1D sets are one row of N elements. */
#define MEMSET1(name, type, elem)                                                                                      \
	CUresult CUDAAPI name(CUdeviceptr dst, type v, size_t n)                                                       \
	{                                                                                                              \
		return set_on(NULL, dst, 0, v, elem, n, 1);                                                            \
	}                                                                                                              \
	CUresult CUDAAPI name##_v2_ptds(CUdeviceptr dst, type v, size_t n)                                             \
	{                                                                                                              \
		return set_on(CU_STREAM_PER_THREAD, dst, 0, v, elem, n, 1);                                            \
	}
#define MEMSET1_ASYNC(name, type, elem)                                                                                \
	CUresult CUDAAPI name(CUdeviceptr dst, type v, size_t n, CUstream s)                                           \
	{                                                                                                              \
		return set_on(s, dst, 0, v, elem, n, 1);                                                               \
	}                                                                                                              \
	CUresult CUDAAPI name##_ptsz(CUdeviceptr dst, type v, size_t n, CUstream s)                                    \
	{                                                                                                              \
		return set_on(PT(s), dst, 0, v, elem, n, 1);                                                           \
	}
#define MEMSET2(name, type, elem)                                                                                      \
	CUresult CUDAAPI name(CUdeviceptr dst, size_t pitch, type v, size_t w, size_t h)                               \
	{                                                                                                              \
		return set_on(NULL, dst, pitch, v, elem, w, h);                                                        \
	}                                                                                                              \
	CUresult CUDAAPI name##_v2_ptds(CUdeviceptr dst, size_t pitch, type v, size_t w, size_t h)                     \
	{                                                                                                              \
		return set_on(CU_STREAM_PER_THREAD, dst, pitch, v, elem, w, h);                                        \
	}
#define MEMSET2_ASYNC(name, type, elem)                                                                                \
	CUresult CUDAAPI name(CUdeviceptr dst, size_t pitch, type v, size_t w, size_t h, CUstream s)                   \
	{                                                                                                              \
		return set_on(s, dst, pitch, v, elem, w, h);                                                           \
	}                                                                                                              \
	CUresult CUDAAPI name##_ptsz(CUdeviceptr dst, size_t pitch, type v, size_t w, size_t h, CUstream s)            \
	{                                                                                                              \
		return set_on(PT(s), dst, pitch, v, elem, w, h);                                                       \
	}

MEMSET1(cuMemsetD8, unsigned char, 1)
MEMSET1(cuMemsetD16, unsigned short, 2)
MEMSET1(cuMemsetD32, unsigned int, 4)
MEMSET1_ASYNC(cuMemsetD8Async, unsigned char, 1)
MEMSET1_ASYNC(cuMemsetD16Async, unsigned short, 2)
MEMSET1_ASYNC(cuMemsetD32Async, unsigned int, 4)
MEMSET2(cuMemsetD2D8, unsigned char, 1)
MEMSET2(cuMemsetD2D16, unsigned short, 2)
MEMSET2(cuMemsetD2D32, unsigned int, 4)
MEMSET2_ASYNC(cuMemsetD2D8Async, unsigned char, 1)
MEMSET2_ASYNC(cuMemsetD2D16Async, unsigned short, 2)
MEMSET2_ASYNC(cuMemsetD2D32Async, unsigned int, 4)
