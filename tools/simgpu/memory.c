/* simgpu memory: cuMemAlloc/Free/AllocPitch, pinned host memory, managed memory,
 * cuMemGetInfo, host registration, pointer queries and IPC memory handles. Device bytes
 * are charged at their 512-byte-rounded footprint, so cuMemGetInfo always equals
 * capacity minus the footprints of live device memory (plain, pooled, VMM-created,
 * graph memory, module globals). Managed memory oversubscribes, as on Linux GPUs: it is
 * host-backed and not charged to the device. Every live range is an extent, so any
 * pointer can be placed (space.c). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
	if (sim_extent_add(addr, footprint, SIM_EXT_BLOCK, dev, b)) {
		sim_map_del(&sim.blocks, addr);
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
	sim_extent_del(b->addr);
	sim_space_free(&d->space, b->addr, b->footprint);
	d->used -= b->footprint;
	free(b);
}

/* Host-backed memory (pinned or managed): real, writable, lazily paged. */
static CUresult host_alloc(size_t size, enum sim_kind kind, int dev, unsigned flags, uintptr_t *out)
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
	*b = (struct sim_block){
	    .addr = (uintptr_t)p, .size = size, .footprint = size, .device = dev, .kind = kind, .flags = flags};
	if (sim_extent_add((uintptr_t)p, size, SIM_EXT_BLOCK, -1, b)) {
		sim_map_del(&sim.blocks, (uintptr_t)p);
		free(b);
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (kind == SIM_KIND_HOST)
		sim.host_bytes += size;
	*out = (uintptr_t)p;
	return CUDA_SUCCESS;
}

static void host_release(struct sim_block *b)
{
	sim_map_del(&sim.blocks, b->addr);
	sim_extent_del(b->addr);
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

/* Frees device, pooled, managed, graph or pool-imported memory; pinned host memory is
 * not cuMemFree's to free. Freeing 0 succeeds, as the real driver's does (the runtime's
 * cudaFree(NULL) reaches it). */
CUresult CUDAAPI cuMemFree(CUdeviceptr ptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;
	struct sim_graph_alloc *g;

	if (r != CUDA_SUCCESS || ptr == 0)
		return r;
	sim_lock();
	b = sim_map_get(&sim.blocks, ptr);
	g = b ? NULL : sim_graph_alloc_at(ptr);
	if (g)
		r = sim_graph_alloc_free(g);
	else if (!b && sim_pool_import_free(ptr))
		r = CUDA_SUCCESS;
	else if (!b || b->cached || b->kind == SIM_KIND_HOST || b->kind == SIM_KIND_ARRAY)
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
	r = sim_inject_failure(bytesize) ? CUDA_ERROR_OUT_OF_MEMORY
					 : host_alloc(bytesize, SIM_KIND_MANAGED, dev, flags, &p);
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
	r = sim_inject_failure(size) ? CUDA_ERROR_OUT_OF_MEMORY : host_alloc(size, SIM_KIND_HOST, dev, flags, &p);
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

/* ---- host registration: host memory stays host memory, now known to the driver --------- */

struct registration {
	unsigned flags;
};

static CUresult host_register(void *p, size_t bytesize, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
			       CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
	struct registration *reg;
	uintptr_t a = (uintptr_t)p;

	if (r != CUDA_SUCCESS)
		return r;
	if (!p || bytesize == 0 || (flags & ~known) || a + bytesize < a)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	/* any overlap with memory the driver already knows */
	for (size_t i = 0; i < sim.nextents && r == CUDA_SUCCESS; i++) {
		const struct sim_extent *e = &sim.extents[i];
		if (e->start < a + bytesize && a < e->start + e->size)
			r = e->kind == SIM_EXT_REGISTERED || e->kind == SIM_EXT_BLOCK
				? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
				: CUDA_ERROR_INVALID_VALUE;
	}
	if (r == CUDA_SUCCESS) {
		reg = malloc(sizeof *reg);
		if (!reg || sim_extent_add(a, bytesize, SIM_EXT_REGISTERED, -1, reg)) {
			free(reg);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			reg->flags = flags;
		}
	}
	sim_unlock();
	return r;
}

/* The v1 ABI (CUDA 4.0) takes the same arguments as the v2 one (6.5). */
CUresult CUDAAPI sim_host_register_v1(void *, size_t, unsigned int) __asm__("cuMemHostRegister");
CUresult CUDAAPI sim_host_register_v1(void *p, size_t bytesize, unsigned int flags)
{
	return host_register(p, bytesize, flags);
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
	return host_register(p, bytesize, flags);
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	e = sim_extent_find((uintptr_t)p);
	if (!e || e->kind != SIM_EXT_REGISTERED || e->start != (uintptr_t)p) {
		r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	} else {
		free(e->owner);
		sim_extent_del(e->start);
	}
	sim_unlock();
	return r;
}

/* Pinned or registered host memory, found by any address inside it. Under the lock. */
static const struct sim_extent *pinned_at(uintptr_t p)
{
	const struct sim_extent *e = sim_extent_find(p);

	if (e && e->kind == SIM_EXT_BLOCK && ((struct sim_block *)e->owner)->kind == SIM_KIND_HOST)
		return e;
	return e && e->kind == SIM_EXT_REGISTERED ? e : NULL;
}

/* With unified addressing the device reaches host memory at the host's address. */
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pdptr || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (pinned_at((uintptr_t)p))
		*pdptr = (CUdeviceptr)p;
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	if (!pFlags)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	e = pinned_at((uintptr_t)p);
	if (!e)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (e->kind == SIM_EXT_BLOCK)
		*pFlags = ((struct sim_block *)e->owner)->flags;
	else
		*pFlags = ((struct registration *)e->owner)->flags;
	sim_unlock();
	return r;
}

/* ---- pointer queries ------------------------------------------------------------------- */

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const struct sim_extent *e;
	enum sim_where w;
	int d;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	e = sim_extent_find(dptr);
	if (!e || e->kind == SIM_EXT_REGISTERED || sim_locate(dptr, 1, &w, &d) != CUDA_SUCCESS) {
		r = CUDA_ERROR_NOT_FOUND;
	} else {
		if (pbase)
			*pbase = e->start;
		if (psize)
			*psize = e->kind == SIM_EXT_BLOCK ? ((struct sim_block *)e->owner)->size : e->size;
	}
	sim_unlock();
	return r;
}

/* One attribute of the memory at ptr (e NULL: memory the driver does not know). */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, const struct sim_extent *e)
{
	const struct sim_block *b = e && e->kind == SIM_EXT_BLOCK ? e->owner : NULL;
	bool host = e && (e->kind == SIM_EXT_REGISTERED || (b && b->kind == SIM_KIND_HOST));
	bool managed = b && b->kind == SIM_KIND_MANAGED;
	int dev = e && e->device >= 0 ? e->device : 0;

	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = e ? &sim.dev[dev].primary : NULL;
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = !e	      ? 0
				    : host    ? CU_MEMORYTYPE_HOST
				    : managed ? CU_MEMORYTYPE_UNIFIED
					      : CU_MEMORYTYPE_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		/* device memory has no host address; everything else has the same one on both sides */
		*(void **)data =
		    !e || (attr == CU_POINTER_ATTRIBUTE_HOST_POINTER && !host && !managed) ? NULL : (void *)ptr;
		break;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = e != NULL;
		break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		*(unsigned long long *)data = e ? e->start : 0;
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = managed;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = e ? dev : -2;
		break;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = b && b->kind == SIM_KIND_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		*(void **)data = e ? (void *)e->start : NULL;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		*(size_t *)data = e ? e->size : 0;
		break;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data = 0;
		break;
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		*(int *)data = 0;
		break;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		*(int *)data = e ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
		break;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = b && b->kind == SIM_KIND_POOLED ? b->pool : NULL;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	CUresult r = sim_check_init();
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	e = sim_extent_find(ptr);
	/* unlike the plural call, the singular one refuses memory the driver does not know */
	r = e ? pointer_attribute(data, attribute, ptr, e) : CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
					CUdeviceptr ptr)
{
	CUresult r = sim_check_init();
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	if (!attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	e = sim_extent_find(ptr);
	for (unsigned i = 0; i < numAttributes && r == CUDA_SUCCESS; i++)
		r = data[i] ? pointer_attribute(data[i], attributes[i], ptr, e) : CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

/* Managed memory is host memory already: prefetches and advice are checked, then done. */
static CUresult managed_range(CUdeviceptr p, size_t count)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	e = sim_extent_find(p);
	if (!e || e->kind != SIM_EXT_BLOCK || ((struct sim_block *)e->owner)->kind != SIM_KIND_MANAGED ||
	    count > e->size - (p - e->start))
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI sim_prefetch_v1(CUdeviceptr, size_t, CUdevice, CUstream) __asm__("cuMemPrefetchAsync");
CUresult CUDAAPI sim_prefetch_v1(CUdeviceptr p, size_t count, CUdevice dst, CUstream s)
{
	(void)dst;
	(void)s;
	return managed_range(p, count);
}

CUresult CUDAAPI sim_prefetch_v1_ptsz(CUdeviceptr, size_t, CUdevice, CUstream) __asm__("cuMemPrefetchAsync_ptsz");
CUresult CUDAAPI sim_prefetch_v1_ptsz(CUdeviceptr p, size_t count, CUdevice dst, CUstream s)
{
	return sim_prefetch_v1(p, count, dst, s);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUmemLocation location, unsigned int flags, CUstream s)
{
	(void)location;
	(void)s;
	return flags ? CUDA_ERROR_INVALID_VALUE : managed_range(p, count);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t count, CUmemLocation location, unsigned int flags,
					    CUstream s)
{
	return cuMemPrefetchAsync(p, count, location, flags, s);
}

CUresult CUDAAPI sim_advise_v1(CUdeviceptr, size_t, CUmem_advise, CUdevice) __asm__("cuMemAdvise");
CUresult CUDAAPI sim_advise_v1(CUdeviceptr p, size_t count, CUmem_advise advice, CUdevice dev)
{
	(void)advice;
	(void)dev;
	return managed_range(p, count);
}

CUresult CUDAAPI cuMemAdvise(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation location)
{
	(void)advice;
	(void)location;
	return managed_range(p, count);
}

/* ---- IPC memory handles ------------------------------------------------------------------
 * A handle names the exporting process and its allocation. Opening it in another process
 * maps the same size at an address of that process's device space, charged to nothing
 * (the exporter holds the memory); the exporter itself cannot open its own handle. */

#define IPC_MAGIC 0x73696d6770754d31ull /* "simgpuM1" */

struct ipc_handle {
	uint64_t magic;
	uint64_t pid;
	uint64_t base, size;
	int32_t device;
};

struct ipc_open {
	struct ipc_handle h;
	int refs;
};

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;

	if (r != CUDA_SUCCESS)
		return r;
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	b = sim_map_get(&sim.blocks, dptr);
	/* only cuMemAlloc'd memory: pooled memory is shared with cuMemPoolExportPointer */
	if (!b || b->kind != SIM_KIND_DEVICE) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		struct ipc_handle h = {IPC_MAGIC, (uint64_t)getpid(), b->addr, b->size, b->device};
		memset(pHandle, 0, sizeof *pHandle);
		memcpy(pHandle->reserved, &h, sizeof h);
	}
	sim_unlock();
	return r;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct ipc_handle h;
	struct ipc_open *o = NULL;
	uintptr_t addr;

	if (r != CUDA_SUCCESS)
		return r;
	memcpy(&h, handle.reserved, sizeof h);
	if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || h.magic != IPC_MAGIC || !h.size)
		return CUDA_ERROR_INVALID_VALUE;
	if (h.pid == (uint64_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	sim_lock();
	for (size_t i = 0; i < sim.nextents && !o; i++)
		if (sim.extents[i].kind == SIM_EXT_IPC &&
		    !memcmp(&((struct ipc_open *)sim.extents[i].owner)->h, &h, sizeof h))
			o = sim.extents[i].owner;
	if (o) {
		/* opened before by this process: the same address, one more reference */
		o->refs++;
		for (size_t i = 0; i < sim.nextents; i++)
			if (sim.extents[i].owner == o)
				*pdptr = sim.extents[i].start;
	} else if (!(o = malloc(sizeof *o)) ||
		   sim_space_alloc(&sim.dev[dev].space, (h.size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1), SIM_ALIGN,
				   0, &addr)) {
		free(o);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (sim_extent_add(addr, h.size, SIM_EXT_IPC, dev, o)) {
		sim_space_free(&sim.dev[dev].space, addr, (h.size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1));
		free(o);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		*o = (struct ipc_open){h, 1};
		*pdptr = addr;
	}
	sim_unlock();
	return r;
}

/* The v1 ABI (CUDA 4.1) takes the same arguments as the v2 one (11.0). */
CUresult CUDAAPI sim_ipc_open_v1(CUdeviceptr *, CUipcMemHandle, unsigned int) __asm__("cuIpcOpenMemHandle");
CUresult CUDAAPI sim_ipc_open_v1(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	return ipc_open(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	return ipc_open(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	e = sim_extent_find(dptr);
	if (!e || e->kind != SIM_EXT_IPC || e->start != dptr) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		struct ipc_open *o = e->owner;
		if (--o->refs == 0) {
			sim_space_free(&sim.dev[e->device].space, e->start,
				       (e->size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1));
			sim_extent_del(e->start);
			free(o);
		}
	}
	sim_unlock();
	return r;
}

/* ---- IPC event handles: an event opened elsewhere is complete (no work crosses processes) ---- */

#define IPC_EVENT_MAGIC 0x73696d6770754531ull /* "simgpuE1" */

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	CUresult r = sim_check_init();
	uint64_t h[3] = {IPC_EVENT_MAGIC, (uint64_t)getpid(), (uint64_t)(uintptr_t)event};

	if (r != CUDA_SUCCESS)
		return r;
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(event, SIM_OBJ_EVENT))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (!(event->flags & CU_EVENT_INTERPROCESS))
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	if (r == CUDA_SUCCESS) {
		memset(pHandle, 0, sizeof *pHandle);
		memcpy(pHandle->reserved, h, sizeof h);
	}
	return r;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	uint64_t h[3];

	memcpy(h, handle.reserved, sizeof h);
	if (!phEvent || h[0] != IPC_EVENT_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	if (h[1] == (uint64_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	return cuEventCreate(phEvent, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
}
