/* simgpu IPC: cuIpcGetMemHandle writes the exporting process, address, size and device
 * into the handle; cuIpcOpenMemHandle in another process maps it at an address of that
 * device's space without charging this process (the memory is the exporter's), and
 * cuIpcCloseMemHandle unmaps it. A process opening its own handle is refused
 * (CUDA_ERROR_INVALID_CONTEXT; what a real driver answers was not checked on a GPU). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ipc {
	char magic[8]; /* "simgpu" */
	int64_t pid;
	uint64_t addr, size;
	int32_t device;
};
_Static_assert(sizeof(struct ipc) <= sizeof(CUipcMemHandle), "fits a handle");

struct opened {
	uintptr_t addr;
	size_t size, footprint;
	int device;
};

static struct sim_map opened; /* address in this process -> struct opened */

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;
	struct ipc h = {.magic = "simgpu", .pid = getpid()};

	if (r != CUDA_SUCCESS)
		return r;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	b = sim_map_get(&sim.blocks, dptr);
	if (!b || b->cached || (b->kind != SIM_KIND_DEVICE && b->kind != SIM_KIND_POOLED)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		h.addr = b->addr;
		h.size = b->size;
		h.device = b->device;
	}
	sim_unlock();
	if (r == CUDA_SUCCESS) {
		memset(handle, 0, sizeof *handle);
		memcpy(handle->reserved, &h, sizeof h);
	}
	return r;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct ipc h;
	struct opened *o;
	uintptr_t addr;

	if (r != CUDA_SUCCESS)
		return r;
	memcpy(&h, handle.reserved, sizeof h);
	if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || memcmp(h.magic, "simgpu", 7) ||
	    h.device < 0 || h.device >= sim.ndev || !h.size)
		return CUDA_ERROR_INVALID_VALUE;
	if (h.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!(o = malloc(sizeof *o)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*o = (struct opened){
	    .size = h.size, .footprint = (h.size + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN, .device = h.device};
	sim_lock();
	if (sim_space_alloc(&sim.dev[h.device].space, o->footprint, SIM_ALIGN, 0, &addr)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (sim_map_put(&opened, addr, o)) {
		sim_space_free(&sim.dev[h.device].space, addr, o->footprint);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		o->addr = addr;
	}
	sim_unlock();
	if (r != CUDA_SUCCESS) {
		free(o);
		return r;
	}
	*pdptr = addr;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct opened *o;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if ((o = sim_map_del(&opened, dptr)))
		sim_space_free(&sim.dev[o->device].space, o->addr, o->footprint);
	sim_unlock();
	if (!o)
		return CUDA_ERROR_INVALID_VALUE;
	free(o);
	return CUDA_SUCCESS;
}

CUresult sim_ipc_range(CUdeviceptr dptr, CUdeviceptr *base, size_t *size)
{
	for (size_t i = 0; i < opened.cap; i++) {
		struct opened *o = sim_map_at(&opened, i);
		if (o && dptr >= o->addr && dptr < o->addr + o->size) {
			if (base)
				*base = o->addr;
			if (size)
				*size = o->size;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}
