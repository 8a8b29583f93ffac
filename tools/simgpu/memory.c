/* simgpu memory: cuMemAlloc/Free/AllocPitch, pinned host memory (allocated or
 * registered), managed memory, cuMemGetAddressRange and cuMemGetInfo. Device bytes are charged at their
 * 512-byte-rounded footprint, so cuMemGetInfo always equals capacity minus the footprints of live device memory (plain,
 * pooled and VMM-created). Managed memory oversubscribes, as on Linux GPUs: it is host-backed and not charged to the
 * device. */
#include "sim.h"

#include <stdlib.h>
#include <sys/mman.h>

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

CUresult sim_device_alloc(int dev, size_t size, size_t align, enum sim_kind kind, struct sim_block **out)
{
	struct sim_device *d = &sim.dev[dev];
	size_t footprint = round_up(size, SIM_ALIGN);
	struct sim_block *b;
	uintptr_t addr;

	if (footprint < size || footprint > d->capacity - d->used)
		return CUDA_ERROR_OUT_OF_MEMORY;
	b = malloc(sizeof *b);
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (sim_space_alloc(&d->space, footprint, align, 0, &addr)) {
		free(b);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*b = (struct sim_block){.addr = addr, .size = size, .footprint = footprint, .device = dev, .kind = kind};
	if (sim_map_put(&sim.blocks, addr, b)) {
		sim_space_free(&d->space, addr, footprint);
		free(b);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	d->used += footprint;
	*out = b;
	return CUDA_SUCCESS;
}

void sim_device_release(struct sim_block *b)
{
	struct sim_device *d = &sim.dev[b->device];

	sim_map_del(&sim.blocks, b->addr);
	sim_space_free(&d->space, b->addr, b->footprint);
	d->used -= b->footprint;
	free(b);
}

/* Host-backed memory (pinned or managed): real, writable, lazily paged. */
static CUresult host_alloc(size_t size, enum sim_kind kind, int dev, uintptr_t *out)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct sim_block *b;

	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	b = malloc(sizeof *b);
	if (!b || sim_map_put(&sim.blocks, (uintptr_t)p, b)) {
		free(b);
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*b = (struct sim_block){.addr = (uintptr_t)p, .size = size, .footprint = size, .device = dev, .kind = kind};
	if (kind == SIM_KIND_HOST)
		sim.host_bytes += size;
	*out = (uintptr_t)p;
	return CUDA_SUCCESS;
}

static void host_release(struct sim_block *b)
{
	sim_map_del(&sim.blocks, b->addr);
	munmap((void *)b->addr, b->size);
	if (b->kind == SIM_KIND_HOST)
		sim.host_bytes -= b->size;
	free(b);
}

/* The shared front of every allocation entry point: init, context, out-pointer, size. */
static CUresult begin_alloc(void *out, size_t size, int *dev)
{
	CUresult r = sim_current_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!out || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult device_alloc(CUdeviceptr *dptr, size_t size)
{
	int dev;
	CUresult r = begin_alloc(dptr, size, &dev);
	struct sim_block *b;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	r = sim_inject_failure(size) ? CUDA_ERROR_OUT_OF_MEMORY
				     : sim_device_alloc(dev, size, SIM_ALIGN, SIM_KIND_DEVICE, &b);
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*dptr = b->addr;
	return r;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	return device_alloc(dptr, bytesize);
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
	CUresult r;

	if (!pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return sim.initialized ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
	size_t p = round_up(width, SIM_ALIGN);
	if (height > SIZE_MAX / p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = device_alloc(dptr, p * height);
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

/* Frees device, pooled or managed memory; pinned host memory is not cuMemFree's to free. */
CUresult CUDAAPI cuMemFree(CUdeviceptr ptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	b = sim_map_get(&sim.blocks, ptr);
	if (!b || b->cached || b->kind == SIM_KIND_HOST || b->kind == SIM_KIND_ARRAY)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (b->kind == SIM_KIND_MANAGED)
		host_release(b);
	else if (b->kind == SIM_KIND_POOLED)
		sim_pool_return(b);
	else
		sim_device_release(b);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!free_bytes && !total)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (free_bytes)
		*free_bytes = sim.dev[dev].capacity - sim.dev[dev].used;
	if (total)
		*total = sim.dev[dev].capacity;
	sim_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	int dev;
	CUresult r = begin_alloc(dptr, bytesize, &dev);
	uintptr_t p;

	if (r != CUDA_SUCCESS)
		return r;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_inject_failure(bytesize) ? CUDA_ERROR_OUT_OF_MEMORY : host_alloc(bytesize, SIM_KIND_MANAGED, dev, &p);
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*dptr = p;
	return r;
}

static CUresult pinned_alloc(void **pp, size_t size, unsigned int flags)
{
	int dev;
	CUresult r = begin_alloc(pp, size, &dev);
	const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
	uintptr_t p;

	if (r != CUDA_SUCCESS)
		return r;
	if (flags & ~known)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_inject_failure(size) ? CUDA_ERROR_OUT_OF_MEMORY : host_alloc(size, SIM_KIND_HOST, dev, &p);
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*pp = (void *)p;
	return r;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	return pinned_alloc(pp, bytesize, flags);
}

CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize)
{
	return pinned_alloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	b = sim_map_get(&sim.blocks, (uintptr_t)p);
	if (b && b->kind == SIM_KIND_HOST)
		host_release(b);
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

/* ---- host registration: the caller's pages, pinned; not charged to the device ---- */

static struct sim_map registered; /* start -> its size, cast */

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
			       CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

	if (r != CUDA_SUCCESS)
		return r;
	if (!p || !bytesize || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	for (size_t i = 0; i < registered.cap && r == CUDA_SUCCESS; i++) {
		uintptr_t start = registered.keys[i], size = (uintptr_t)sim_map_at(&registered, i);
		if (size && start < (uintptr_t)p + bytesize && (uintptr_t)p < start + size)
			r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	}
	if (r == CUDA_SUCCESS && sim_map_put(&registered, (uintptr_t)p, (void *)(uintptr_t)bytesize))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS)
		sim.host_bytes += bytesize;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	uintptr_t size;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	size = (uintptr_t)sim_map_del(&registered, (uintptr_t)p);
	if (size)
		sim.host_bytes -= size;
	sim_unlock();
	return size ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* The allocation holding dptr: device, pooled, managed or array memory, or an IPC import. */
CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	r = CUDA_ERROR_NOT_FOUND;
	for (size_t i = 0; i < sim.blocks.cap && r != CUDA_SUCCESS; i++) {
		struct sim_block *b = sim_map_at(&sim.blocks, i);
		if (b && b->kind != SIM_KIND_HOST && !b->cached && dptr >= b->addr && dptr < b->addr + b->size) {
			if (base)
				*base = b->addr;
			if (size)
				*size = b->size;
			r = CUDA_SUCCESS;
		}
	}
	if (r != CUDA_SUCCESS)
		r = sim_ipc_range(dptr, base, size);
	sim_unlock();
	return r;
}
