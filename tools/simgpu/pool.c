/* simgpu stream-ordered pools: cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync
 * and the cuMemPool* calls. A pool keeps freed blocks reserved (still charged to the
 * device, as the real driver's pools are) and reuses them; at synchronisation it
 * releases what it holds above its release threshold (default 0), and when a request
 * would not fit it first releases the unused memory of the device's pools. On a
 * capturing stream an allocation or a free becomes a graph memory node (graph.c). A
 * pool made for file descriptors is shared with other processes: its handle is a file
 * naming the exporter's process and pool, an allocation's export data its address and
 * size, and an import is a range of this process's addresses, freed as any allocation. */
#define _GNU_SOURCE /* memfd_create */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void sim_pool_init(struct CUmemPoolHandle_st *p, int device, bool is_default)
{
	memset(p, 0, sizeof *p);
	p->device = device;
	p->is_default = is_default;
	p->reuse_flags[0] = p->reuse_flags[1] = p->reuse_flags[2] = 1;
}

static void pool_free_if_done(struct CUmemPoolHandle_st *p)
{
	if (p->destroyed && p->reserved == 0) {
		free(p->cache);
		free(p);
	}
}

static void uncache(struct CUmemPoolHandle_st *p, size_t i)
{
	struct sim_block *b = p->cache[i];

	p->cache[i] = p->cache[--p->ncache];
	p->reserved -= b->footprint;
	sim_device_release(b);
}

void sim_pool_trim(struct CUmemPoolHandle_st *p, size_t keep)
{
	/* largest first, so a trim releases as few blocks as it must */
	while (p->reserved > keep && p->ncache > 0) {
		size_t big = 0;
		for (size_t i = 1; i < p->ncache; i++)
			if (p->cache[i]->footprint > p->cache[big]->footprint)
				big = i;
		uncache(p, big);
	}
}

/* Calls fn for the default pool and every live created pool of device dev. */
static void each_pool(int dev, void (*fn)(struct CUmemPoolHandle_st *))
{
	fn(&sim.dev[dev].default_pool);
	for (size_t i = 0; i < sim.pools.cap; i++) {
		struct CUmemPoolHandle_st *p = sim_map_at(&sim.pools, i);
		if (p && p->device == dev)
			fn(p);
	}
}

static void sync_one(struct CUmemPoolHandle_st *p)
{
	sim_pool_trim(p, p->release_threshold);
}

static void empty_one(struct CUmemPoolHandle_st *p)
{
	sim_pool_trim(p, 0);
}

void sim_pools_sync(int dev)
{
	each_pool(dev, sync_one);
}

void sim_pool_return(struct sim_block *b)
{
	struct CUmemPoolHandle_st *p = b->pool;

	p->used -= b->footprint;
	if (p->destroyed || p->ncache == p->capcache) {
		size_t cap = p->capcache ? 2 * p->capcache : 16;
		struct sim_block **n = p->destroyed ? NULL : realloc(p->cache, cap * sizeof *n);
		if (!n) { /* cannot cache it: release it now */
			p->reserved -= b->footprint;
			sim_device_release(b);
			pool_free_if_done(p);
			return;
		}
		p->cache = n;
		p->capcache = cap;
	}
	b->cached = true;
	p->cache[p->ncache++] = b;
}

static void note_high(struct CUmemPoolHandle_st *p)
{
	if (p->used > p->used_high)
		p->used_high = p->used;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
}

/* Best fit among cached blocks no more than twice the request. */
static struct sim_block *reuse(struct CUmemPoolHandle_st *p, size_t size)
{
	size_t best = p->ncache;

	for (size_t i = 0; i < p->ncache; i++) {
		size_t f = p->cache[i]->footprint;
		if (f >= size && f / 2 <= size && (best == p->ncache || f < p->cache[best]->footprint))
			best = i;
	}
	if (best == p->ncache)
		return NULL;
	struct sim_block *b = p->cache[best];
	p->cache[best] = p->cache[--p->ncache];
	b->cached = false;
	b->size = size;
	return b;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream, bool from_current)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b = NULL;

	if (r != CUDA_SUCCESS)
		return r;
	if (!dptr || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (from_current)
		pool = sim.dev[dev].current_pool;
	if (!sim_valid_stream(stream)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (!pool || (!pool->is_default && sim_map_get(&sim.pools, (uintptr_t)pool) != pool) || pool->from_pid) {
		r = CUDA_ERROR_INVALID_VALUE; /* unknown, or imported: only its owner allocates from it */
	} else if (sim_capturing(stream)) {
		r = sim_capture_alloc(stream, pool->device, size, dptr);
		sim_unlock();
		return r;
	} else if (sim_inject_failure(size)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!(b = reuse(pool, size))) {
		r = sim_device_alloc(pool->device, size, SIM_ALIGN, SIM_KIND_POOLED, &b);
		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			each_pool(pool->device, empty_one);
			r = sim_device_alloc(pool->device, size, SIM_ALIGN, SIM_KIND_POOLED, &b);
		}
		if (r == CUDA_SUCCESS) {
			b->pool = pool;
			pool->reserved += b->footprint;
		}
	}
	if (r == CUDA_SUCCESS) {
		pool->used += b->footprint;
		note_high(pool);
		*dptr = b->addr;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream h)
{
	return pool_alloc(dptr, bytesize, NULL, h, true);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream h)
{
	return pool_alloc(dptr, bytesize, NULL, h ? h : CU_STREAM_PER_THREAD, true);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream h)
{
	return pool_alloc(dptr, bytesize, pool, h, false);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream h)
{
	return pool_alloc(dptr, bytesize, pool, h ? h : CU_STREAM_PER_THREAD, false);
}

/* Pooled memory goes back to its pool; plain cuMemAlloc memory is released, as the real
 * driver allows freeing either kind here; a graph's allocation ends. */
static CUresult free_async(CUdeviceptr ptr, CUstream h)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct sim_block *b;
	struct sim_graph_alloc *g;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	b = sim_map_get(&sim.blocks, ptr);
	g = b ? NULL : sim_graph_alloc_at(ptr);
	if (!sim_valid_stream(h))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (sim_capturing(h))
		r = sim_capture_free(h, sim_capture_graph(h), ptr);
	else if (g)
		r = sim_graph_alloc_free(g);
	else if (!b && sim_pool_import_free(ptr))
		r = CUDA_SUCCESS;
	else if (!b || b->cached || (b->kind != SIM_KIND_POOLED && b->kind != SIM_KIND_DEVICE))
		r = CUDA_ERROR_INVALID_VALUE;
	else if (b->kind == SIM_KIND_POOLED)
		sim_pool_return(b);
	else
		sim_device_release(b);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr ptr, CUstream h)
{
	return free_async(ptr, h);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream h)
{
	return free_async(ptr, h ? h : CU_STREAM_PER_THREAD);
}

/* ---- pool objects ---------------------------------------------------------------------- */

static bool valid_pool(CUmemoryPool p)
{
	if (!p)
		return false;
	for (int i = 0; i < sim.ndev; i++)
		if (p == &sim.dev[i].default_pool)
			return true;
	return sim_map_get(&sim.pools, (uintptr_t)p) == p;
}

/* A new pool (its memory freed if it cannot be kept) into the driver's table, and out. */
static CUresult keep(struct CUmemPoolHandle_st *p, CUmemoryPool *out)
{
	CUresult r = CUDA_SUCCESS;

	sim_lock();
	if (sim_map_put(&sim.pools, (uintptr_t)p, p)) {
		free(p);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*out = p;
	return r;
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	struct CUmemPoolHandle_st *p;
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->location.id < 0 || props->location.id >= sim.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	p = malloc(sizeof *p);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_pool_init(p, props->location.id, false);
	p->shareable = props->handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return keep(p, pool);
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!pool || sim_map_get(&sim.pools, (uintptr_t)pool) != pool) {
		r = CUDA_ERROR_INVALID_VALUE; /* unknown, or a device's default pool */
	} else {
		sim_map_del(&sim.pools, (uintptr_t)pool);
		for (int i = 0; i < sim.ndev; i++)
			if (sim.dev[i].current_pool == pool)
				sim.dev[i].current_pool = &sim.dev[i].default_pool;
		sim_pool_trim(pool, 0);
		pool->destroyed = true;
		pool_free_if_done(pool);
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (valid_pool(pool))
		sim_pool_trim(pool, keep);
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

static CUresult pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value, bool set)
{
	CUresult r = sim_check_init();
	cuuint64_t *u = value;
	int *flag;

	if (r != CUDA_SUCCESS)
		return r;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!valid_pool(pool)) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		flag = &pool->reuse_flags[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		if (set)
			*flag = *(int *)value != 0;
		else
			*(int *)value = *flag;
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		if (set)
			pool->release_threshold = *u;
		else
			*u = pool->release_threshold;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
		size_t *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? &pool->used_high : &pool->reserved_high;
		size_t now = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? pool->used : pool->reserved;
		if (!set)
			*u = *high;
		else if (*u == 0) /* the only value allowed: reset to the current level */
			*high = now;
		else
			r = CUDA_ERROR_INVALID_VALUE;
		break;
	}
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			r = CUDA_ERROR_INVALID_VALUE;
		else
			*u = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? pool->used : pool->reserved;
		break;
	default:
		r = CUDA_ERROR_INVALID_VALUE;
	}
out:
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return pool_attribute(pool, attr, value, true);
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return pool_attribute(pool, attr, value, false);
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= sim.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*pool_out = &sim.dev[dev].default_pool;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= sim.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	sim_lock();
	*pool = sim.dev[dev].current_pool;
	sim_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (dev < 0 || dev >= sim.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	sim_lock();
	if (valid_pool(pool) && pool->device == dev)
		sim.dev[dev].current_pool = pool;
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

/* ---- sharing with other processes ------------------------------------------------------ */

#define POOL_MAGIC 0x73696d67706f6f6cull /* "simgpool" */
#define PTR_MAGIC 0x73696d6770707472ull	 /* "simgpptr" */

struct pool_share {
	uint64_t magic, pid;
	uintptr_t pool;
	int32_t device;
};

struct ptr_share {
	uint64_t magic, pid;
	uintptr_t pool, addr;
	uint64_t size;
};
_Static_assert(sizeof(struct ptr_share) <= sizeof(CUmemPoolPtrExportData), "export data holds it");

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType type,
						  unsigned long long flags)
{
	CUresult r = sim_check_init();
	struct pool_share sh = {POOL_MAGIC, (uint64_t)getpid(), (uintptr_t)pool, 0};
	int fd = -1;

	if (r != CUDA_SUCCESS)
		return r;
	if (!handle_out || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	sim_lock();
	if (!valid_pool(pool) || !pool->shareable || pool->from_pid)
		r = CUDA_ERROR_INVALID_VALUE;
	else if ((sh.device = pool->device, fd = memfd_create("simgpu-pool", 0)) < 0 ||
		 pwrite(fd, &sh, sizeof sh, 0) != (ssize_t)sizeof sh)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	sim_unlock();
	return sim_hand_fd(r, fd, handle_out);
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
						    CUmemAllocationHandleType type, unsigned long long flags)
{
	CUresult r = sim_check_init();
	struct pool_share sh;
	struct CUmemPoolHandle_st *p;

	if (r != CUDA_SUCCESS)
		return r;
	if (!pool_out || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (pread((int)(intptr_t)handle, &sh, sizeof sh, 0) != (ssize_t)sizeof sh || sh.magic != POOL_MAGIC ||
	    sh.device < 0 || sh.device >= sim.ndev)
		return CUDA_ERROR_INVALID_VALUE;
	if (sh.pid == (uint64_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!(p = malloc(sizeof *p)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_pool_init(p, sh.device, false);
	p->from_pid = sh.pid;
	p->from_pool = sh.pool;
	return keep(p, pool_out);
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
	CUresult r = sim_check_init();
	struct sim_block *b;

	if (r != CUDA_SUCCESS)
		return r;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	b = sim_map_get(&sim.blocks, ptr);
	if (!b || b->kind != SIM_KIND_POOLED || b->cached || !b->pool->shareable) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		struct ptr_share sh = {PTR_MAGIC, (uint64_t)getpid(), (uintptr_t)b->pool, b->addr, b->size};
		memset(out, 0, sizeof *out);
		memcpy(out->reserved, &sh, sizeof sh);
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *data)
{
	CUresult r = sim_check_init();
	struct ptr_share sh;
	size_t span;
	uintptr_t addr;

	if (r != CUDA_SUCCESS)
		return r;
	if (!ptr_out || !data)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&sh, data->reserved, sizeof sh);
	span = (sh.size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1);
	sim_lock();
	if (!valid_pool(pool) || !pool->from_pid || sh.magic != PTR_MAGIC || sh.pid != pool->from_pid ||
	    sh.pool != pool->from_pool || !sh.size)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (sim_space_alloc(&sim.dev[pool->device].space, span, SIM_ALIGN, 0, &addr))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else if (sim_extent_add(addr, sh.size, SIM_EXT_POOL_IMPORT, pool->device, NULL)) {
		sim_space_free(&sim.dev[pool->device].space, addr, span);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		*ptr_out = addr;
	}
	sim_unlock();
	return r;
}

bool sim_pool_import_free(uintptr_t ptr)
{
	const struct sim_extent *e = sim_extent_find(ptr);

	if (!e || e->kind != SIM_EXT_POOL_IMPORT || e->start != ptr)
		return false;
	sim_space_free(&sim.dev[e->device].space, e->start, (e->size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1));
	sim_extent_del(e->start);
	return true;
}
