/* simgpu virtual memory management: cuMemCreate/Release (physical handles, charged to
 * the device at creation), cuMemAddressReserve/Free (address ranges, free of charge),
 * cuMemMap/Unmap/SetAccess, and shareable handles: an exported handle is a file
 * descriptor whose size is the memory's, and an imported one is memory another process
 * owns, not charged here. Physical memory is returned to the device when the handle
 * has been released and its last mapping is gone, as cuMemRelease's documentation says. */
#define _GNU_SOURCE /* memfd_create */
#include "sim.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct handle {
	size_t size;
	int device;    /* -1: host memory */
	bool imported; /* another process's memory: not charged */
	bool released;
	int refs; /* one for the handle itself, one per mapping */
};

struct reservation {
	uintptr_t start;
	size_t size;
};

struct mapping {
	uintptr_t start;
	size_t size;
	CUmemGenericAllocationHandle handle;
};

static struct sim_map handles, reservations, mappings;
static CUmemGenericAllocationHandle next_handle = 1;

static void drop_ref(CUmemGenericAllocationHandle id, struct handle *h)
{
	if (--h->refs > 0)
		return;
	if (h->imported)
		;
	else if (h->device >= 0)
		sim.dev[h->device].used -= h->size;
	else
		sim.host_bytes -= h->size;
	sim_map_del(&handles, id);
	free(h);
}

static bool granular(size_t n)
{
	return n % SIM_GRANULE == 0;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!granularity || !prop ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = SIM_GRANULE;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	CUresult r = sim_check_init();
	struct handle *h;
	int device = -1;

	if (r != CUDA_SUCCESS)
		return r;
	if (!out || !prop || flags != 0 || size == 0 || !granular(size))
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_NOT_SUPPORTED;
	switch (prop->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (prop->location.id < 0 || prop->location.id >= sim.ndev)
			return CUDA_ERROR_INVALID_DEVICE;
		device = prop->location.id;
		break;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	sim_lock();
	if (sim_inject_failure(size) || (device >= 0 && size > sim.dev[device].capacity - sim.dev[device].used)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!(h = malloc(sizeof *h)) || sim_map_put(&handles, next_handle, h)) {
		free(h);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		*h = (struct handle){.size = size, .device = device, .refs = 1};
		if (device >= 0)
			sim.dev[device].used += size;
		else
			sim.host_bytes += size;
		*out = next_handle++;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle id)
{
	CUresult r = sim_check_init();
	struct handle *h;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	h = sim_map_get(&handles, id);
	if (!h || h->released) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		h->released = true;
		drop_ref(id, h);
	}
	sim_unlock();
	return r;
}

CUresult sim_hand_fd(CUresult r, int fd, void *out)
{
	if (r != CUDA_SUCCESS) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle id,
					      CUmemAllocationHandleType type, unsigned long long flags)
{
	CUresult r = sim_check_init();
	struct handle *h;
	int fd = -1;

	if (r != CUDA_SUCCESS)
		return r;
	if (!out || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	sim_lock();
	h = sim_map_get(&handles, id);
	if (!h || h->released)
		r = CUDA_ERROR_INVALID_VALUE;
	else if ((fd = memfd_create("simgpu-shared", 0)) < 0 || ftruncate(fd, (off_t)h->size) != 0)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	sim_unlock();
	return sim_hand_fd(r, fd, out);
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *os_handle,
						CUmemAllocationHandleType type)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct handle *h;
	struct stat st;

	if (r != CUDA_SUCCESS)
		return r;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (fstat((int)(intptr_t)os_handle, &st) != 0 || st.st_size <= 0 || !granular((size_t)st.st_size))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!(h = malloc(sizeof *h)) || sim_map_put(&handles, next_handle, h)) {
		free(h);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		*h = (struct handle){.size = (size_t)st.st_size, .device = dev, .imported = true, .refs = 1};
		*out = next_handle++;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				     unsigned long long flags)
{
	CUresult r = sim_check_init();
	struct reservation *v;
	uintptr_t start;

	if (r != CUDA_SUCCESS)
		return r;
	if (!ptr || size == 0 || !granular(size) || flags != 0 || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment < SIM_GRANULE)
		alignment = SIM_GRANULE;
	sim_lock();
	/* the address is a hint: taken or misaligned, the range goes elsewhere */
	if (!addr || addr % alignment || sim_space_alloc(&sim.va, size, alignment, addr, &start))
		if (sim_space_alloc(&sim.va, size, alignment, 0, &start))
			r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS) {
		v = malloc(sizeof *v);
		if (!v || sim_map_put(&reservations, start, v)) {
			free(v);
			sim_space_free(&sim.va, start, size);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			*v = (struct reservation){start, size};
			*ptr = start;
		}
	}
	sim_unlock();
	return r;
}

/* Calls fn on each mapping overlapping [start, start+size); stops when fn returns false. */
static void each_mapping(uintptr_t start, size_t size, bool (*fn)(struct mapping *, void *), void *arg)
{
	for (size_t i = 0; i < mappings.cap; i++) {
		struct mapping *m = sim_map_at(&mappings, i);
		if (m && m->start < start + size && start < m->start + m->size && !fn(m, arg))
			return;
	}
}

static bool found(struct mapping *m, void *arg)
{
	(void)m;
	*(bool *)arg = true;
	return false;
}

static bool overlaps_mapping(uintptr_t start, size_t size)
{
	bool any = false;
	each_mapping(start, size, found, &any);
	return any;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult r = sim_check_init();
	struct reservation *v;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	v = sim_map_get(&reservations, ptr);
	if (!v || v->size != size || overlaps_mapping(ptr, size)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		sim_map_del(&reservations, ptr);
		sim_space_free(&sim.va, ptr, size);
		free(v);
	}
	sim_unlock();
	return r;
}

static bool reserved(uintptr_t start, size_t size)
{
	for (size_t i = 0; i < reservations.cap; i++) {
		struct reservation *v = sim_map_at(&reservations, i);
		if (v && start >= v->start && start + size <= v->start + v->size)
			return true;
	}
	return false;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle id,
			  unsigned long long flags)
{
	CUresult r = sim_check_init();
	struct handle *h;
	struct mapping *m;

	if (r != CUDA_SUCCESS)
		return r;
	if (size == 0 || !granular(size) || ptr % SIM_GRANULE || offset != 0 || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	h = sim_map_get(&handles, id);
	if (!h || h->released) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (size > h->size || !reserved(ptr, size) || overlaps_mapping(ptr, size)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (!(m = malloc(sizeof *m)) || sim_map_put(&mappings, ptr, m)) {
		free(m);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (sim_extent_add(ptr, size, SIM_EXT_MAPPING, h->device, m)) {
		sim_map_del(&mappings, ptr);
		free(m);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		*m = (struct mapping){.start = ptr, .size = size, .handle = id};
		h->refs++;
	}
	sim_unlock();
	return r;
}

struct unmap_check {
	uintptr_t start;
	size_t size, count;
	bool partial;
};

static bool check_unmap(struct mapping *m, void *arg)
{
	struct unmap_check *c = arg;

	if (m->start < c->start || m->start + m->size > c->start + c->size)
		c->partial = true;
	c->count++;
	return !c->partial;
}

/* Unmaps every mapping inside the range; a range that cuts a mapping is refused whole. */
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult r = sim_check_init();
	struct unmap_check c = {ptr, size, 0, false};

	if (r != CUDA_SUCCESS)
		return r;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	each_mapping(ptr, size, check_unmap, &c);
	if (c.partial || c.count == 0) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		for (size_t i = 0; i < mappings.cap; i++) {
			struct mapping *m = sim_map_at(&mappings, i);
			if (!m || m->start < ptr || m->start >= ptr + size)
				continue;
			sim_map_del(&mappings, m->start);
			sim_extent_del(m->start);
			drop_ref(m->handle, sim_map_get(&handles, m->handle));
			free(m);
		}
	}
	sim_unlock();
	return r;
}

struct coverage {
	uintptr_t start, end;
	size_t covered;
};

static bool add_covered(struct mapping *m, void *arg)
{
	struct coverage *c = arg;
	uintptr_t lo = m->start > c->start ? m->start : c->start;
	uintptr_t hi = m->start + m->size < c->end ? m->start + m->size : c->end;

	c->covered += hi - lo;
	return true;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	CUresult r = sim_check_init();
	struct coverage c = {ptr, ptr + size, 0};

	if (r != CUDA_SUCCESS)
		return r;
	if (!desc || count == 0 || size == 0 || ptr % SIM_GRANULE || !granular(size))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		CUmemAccess_flags f = desc[i].flags;
		if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		    (desc[i].location.id < 0 || desc[i].location.id >= sim.ndev))
			return CUDA_ERROR_INVALID_DEVICE;
		if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	sim_lock();
	/* mappings never overlap, so their parts in the range add up to it only when it is all mapped */
	each_mapping(ptr, size, add_covered, &c);
	if (c.covered != size)
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}
