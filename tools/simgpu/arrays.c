/* simgpu arrays: cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate and their
 * destroys. An array is device memory charged like cuMemAlloc's, at width x height x
 * depth x channels x the format's size (each level of a mipmapped array halves its
 * extents, down to 1), behind an opaque handle; its contents are never touched. */
#include "sim.h"

#include <stdlib.h>

struct CUarray_st {
	struct sim_block *block;
};

struct CUmipmappedArray_st {
	struct sim_block *block;
};

static struct sim_map arrays; /* CUarray or CUmipmappedArray -> its block */

static size_t format_size(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

/* The bytes of `levels` levels, or 0 for a descriptor the driver refuses. */
static size_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels, unsigned levels)
{
	size_t elem = format_size(f) * channels, total = 0;

	if (!elem || !w || (channels != 1 && channels != 2 && channels != 4) || !levels)
		return 0;
	h = h ? h : 1;
	d = d ? d : 1;
	for (unsigned l = 0; l < levels; l++) {
		if (h > SIZE_MAX / w || d > SIZE_MAX / (w * h) || elem > SIZE_MAX / (w * h * d))
			return 0;
		total += w * h * d * elem;
		w = w > 1 ? w / 2 : 1;
		h = h > 1 ? h / 2 : 1;
		d = d > 1 ? d / 2 : 1;
	}
	return total;
}

static CUresult create(void **out, size_t bytes, size_t handle_size)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;
	struct CUarray_st *a;

	if (r != CUDA_SUCCESS)
		return r;
	if (!out || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(a = calloc(1, handle_size)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_lock();
	r = sim_inject_failure(bytes) ? CUDA_ERROR_OUT_OF_MEMORY
				      : sim_device_alloc(dev, bytes, SIM_ALIGN, SIM_KIND_ARRAY, &b);
	if (r == CUDA_SUCCESS && sim_map_put(&arrays, (uintptr_t)a, b)) {
		sim_device_release(b);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_unlock();
	if (r != CUDA_SUCCESS) {
		free(a);
		return r;
	}
	a->block = b;
	*out = a;
	return CUDA_SUCCESS;
}

static CUresult destroy(void *handle)
{
	CUresult r = sim_check_init();
	struct sim_block *b;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	b = handle ? sim_map_del(&arrays, (uintptr_t)handle) : NULL;
	if (b)
		sim_device_release(b);
	sim_unlock();
	if (!b)
		return CUDA_ERROR_INVALID_HANDLE;
	free(handle);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	return create((void **)pHandle, array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels, 1),
		      sizeof(struct CUarray_st));
}

CUresult CUDAAPI cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	return create((void **)pHandle, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1),
		      sizeof(struct CUarray_st));
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	return create((void **)pHandle, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, levels),
		      sizeof(struct CUmipmappedArray_st));
}

CUresult CUDAAPI cuArrayDestroy(CUarray a)
{
	return destroy(a);
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray a)
{
	return destroy(a);
}
