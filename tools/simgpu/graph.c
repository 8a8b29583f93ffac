/* simgpu graphs: nodes added directly or by stream capture, executable graphs that run
 * their nodes in dependency order at launch (kernels counted, copies and memsets done as
 * copy.c does them, host nodes called), and graph memory nodes with the lifetime that
 * cuGraphAddMemAllocNode's documentation and the programming guide give:
 * - adding an allocation node reserves its address, fixed for the graph's life; a
 *   captured allocation takes the address of one the capture has already freed, where it
 *   fits (the guide's "address reuse within a graph"; PyTorch 2.11's captures on an H200
 *   showed it): the two nodes share the memory;
 * - a launch (or an upload) that reaches the node backs it: the memory is charged to
 *   the device (and can run the device out of memory) and the allocation is live;
 * - a free node, cuMemFree, cuMemFreeAsync, or a relaunch of a graph instantiated with
 *   CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH ends the allocation; its memory stays
 *   with the executable graph for its next launch;
 * - cuDeviceGraphMemTrim releases the memory of allocations that are not live, and so
 *   does destroying the executable graph; an allocation still live then is released
 *   when it is freed. Relaunching with live allocations and no auto-free fails with
 *   CUDA_ERROR_INVALID_VALUE.
 * The attribute USED_MEM_CURRENT counts the memory backed, live or not, as the driver's on
 * an H200 did (2026-11-30: not 0 after a launch whose allocations were all freed inside
 * it, while the executable graph lived): here it is RESERVED_MEM_CURRENT. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

union params {
	struct {
		CUfunction f;
		unsigned grid[3], block[3], smem;
	} kernel;
	CUDA_MEMCPY3D copy;
	CUDA_MEMSET_NODE_PARAMS set;
	struct {
		CUhostFn fn;
		void *data;
	} host;
	CUgraph child;
	CUevent event;
	struct sim_graph_alloc *alloc;
	CUdeviceptr free;
};

struct CUgraphNode_st {
	CUgraph graph;
	CUgraphNodeType type;
	CUgraphNode *deps;
	size_t ndeps;
	union params u;
};

struct CUgraph_st {
	CUgraphNode *nodes;
	size_t n, cap;
	bool memory;		     /* has allocation or free nodes */
	struct CUgraphExec_st *exec; /* such a graph's one executable graph */
};

struct step {
	CUgraphNodeType type;
	union params u;
};

struct CUgraphExec_st {
	CUgraph graph;	    /* NULL once destroyed */
	struct step *steps; /* in dependency order, child graphs inlined */
	size_t n;
	unsigned long long flags;
	struct sim_graph_alloc **allocs;
	size_t nallocs;
};

/* ---- graph memory ---------------------------------------------------------------------- */

struct sim_graph_alloc *sim_graph_alloc_at(uintptr_t addr)
{
	return sim_map_get(&sim.graph_mem, addr);
}

/* An allocation nothing refers to, neither live nor backed, gives its address back. */
static void alloc_release(struct sim_graph_alloc *a)
{
	if (a->refs > 0 || a->live || a->backed)
		return;
	sim_map_del(&sim.graph_mem, a->addr);
	sim_extent_del(a->addr);
	sim_space_free(&sim.dev[a->device].space, a->addr, a->footprint);
	free(a);
}

static void unback(struct sim_graph_alloc *a)
{
	struct sim_device *d = &sim.dev[a->device];

	if (!a->backed || a->live)
		return;
	a->backed = false;
	d->used -= a->footprint;
	d->graph_reserved -= a->footprint;
}

static void high(struct sim_device *d)
{
	if (d->graph_reserved > d->graph_used_high)
		d->graph_used_high = d->graph_reserved;
	if (d->graph_reserved > d->graph_reserved_high)
		d->graph_reserved_high = d->graph_reserved;
}

static CUresult back(struct sim_graph_alloc *a)
{
	struct sim_device *d = &sim.dev[a->device];

	if (a->backed)
		return CUDA_SUCCESS;
	if (sim_inject_failure(a->size) || a->footprint > d->capacity - d->used)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->backed = true;
	d->used += a->footprint;
	d->graph_reserved += a->footprint;
	high(d);
	return CUDA_SUCCESS;
}

static void end_life(struct sim_graph_alloc *a)
{
	a->live = false;
	if (!a->exec) { /* its executable graph is gone: nothing keeps the memory */
		unback(a);
		alloc_release(a);
	}
}

CUresult sim_graph_alloc_free(struct sim_graph_alloc *a)
{
	if (!a->live)
		return CUDA_ERROR_INVALID_VALUE;
	end_life(a);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device)
{
	CUresult r = sim_check_device(device);

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	for (size_t i = 0; i < sim.graph_mem.cap; i++) {
		struct sim_graph_alloc *a = sim_map_at(&sim.graph_mem, i);
		if (a && a->device == device && !a->live)
			unback(a);
	}
	sim_unlock();
	return CUDA_SUCCESS;
}

static CUresult graph_mem_attribute(CUdevice device, CUgraphMem_attribute attr, void *value, bool set)
{
	CUresult r = sim_check_device(device);
	cuuint64_t *v = value;
	struct sim_device *d;

	if (r != CUDA_SUCCESS)
		return r;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	d = &sim.dev[device];
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
		if (set)
			r = CUDA_ERROR_INVALID_VALUE;
		else
			*v = d->graph_reserved; /* used: backed, as reserved (above) */
		break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: {
		size_t *h = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH ? &d->graph_used_high : &d->graph_reserved_high;
		if (!set)
			*v = *h;
		else if (*v == 0) /* the only value allowed: reset to the current level */
			*h = d->graph_reserved;
		else
			r = CUDA_ERROR_INVALID_VALUE;
		break;
	}
	default:
		r = CUDA_ERROR_INVALID_VALUE;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	return graph_mem_attribute(device, attr, value, false);
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	return graph_mem_attribute(device, attr, value, true);
}

/* ---- graphs and nodes ------------------------------------------------------------------------ */

CUgraph sim_graph_new(void)
{
	CUgraph g = calloc(1, sizeof *g);

	if (g && sim_obj_add(g, SIM_OBJ_GRAPH)) {
		free(g);
		g = NULL;
	}
	return g;
}

static void node_free(CUgraphNode n)
{
	if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
		n->u.alloc->refs--;
		alloc_release(n->u.alloc);
	}
	sim_obj_del(n);
	free(n->deps);
	free(n);
}

void sim_graph_free(CUgraph g)
{
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	if (g->exec)
		g->exec->graph = NULL;
	sim_obj_del(g);
	free(g->nodes);
	free(g);
}

CUresult sim_graph_add(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out)
{
	CUgraphNode n;

	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < ndeps; i++) {
		if (!sim_obj_is(deps[i], SIM_OBJ_NODE) || deps[i]->graph != g)
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t k = 0; k < i; k++)
			if (deps[k] == deps[i])
				return CUDA_ERROR_INVALID_VALUE; /* no duplicates, as documented */
	}
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		CUgraphNode *nodes = realloc(g->nodes, cap * sizeof *nodes);
		if (!nodes)
			return CUDA_ERROR_OUT_OF_MEMORY;
		g->nodes = nodes;
		g->cap = cap;
	}
	if (!(n = calloc(1, sizeof *n)) || (ndeps && !(n->deps = malloc(ndeps * sizeof *deps))) ||
	    sim_obj_add(n, SIM_OBJ_NODE)) {
		if (n)
			free(n->deps);
		free(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->graph = g;
	n->type = type;
	if (ndeps)
		memcpy(n->deps, deps, ndeps * sizeof *deps);
	n->ndeps = ndeps;
	g->nodes[g->n++] = n;
	*out = n;
	return CUDA_SUCCESS;
}

void sim_node_kernel(CUgraphNode n, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem)
{
	n->u.kernel.f = f;
	memcpy(n->u.kernel.grid, grid, sizeof n->u.kernel.grid);
	memcpy(n->u.kernel.block, block, sizeof n->u.kernel.block);
	n->u.kernel.smem = smem;
}

void sim_node_copy(CUgraphNode n, const CUDA_MEMCPY3D *c)
{
	n->u.copy = *c;
}

void sim_node_memset(CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p)
{
	n->u.set = *p;
}

void sim_node_host(CUgraphNode n, CUhostFn fn, void *data)
{
	n->u.host.fn = fn;
	n->u.host.data = data;
}

void sim_node_event(CUgraphNode n, CUevent ev)
{
	n->u.event = ev;
}

/* An allocation node's allocation: its address, reserved now, free of charge. */
static CUresult new_alloc(int dev, size_t size, struct sim_graph_alloc **out)
{
	struct sim_graph_alloc *a = calloc(1, sizeof *a);
	size_t fp = (size + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;

	if (!a || fp < size || sim_space_alloc(&sim.dev[dev].space, fp, SIM_ALIGN, 0, &a->addr)) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (sim_extent_add(a->addr, fp, SIM_EXT_GRAPH, dev, a) || sim_map_put(&sim.graph_mem, a->addr, a)) {
		sim_extent_del(a->addr);
		sim_space_free(&sim.dev[dev].space, a->addr, fp);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->size = size;
	a->footprint = fp;
	a->device = dev;
	a->refs = 1; /* the graph */
	*out = a;
	return CUDA_SUCCESS;
}

static void attach_alloc(CUgraphNode n, struct sim_graph_alloc *a)
{
	n->u.alloc = a;
	n->graph->memory = true;
}

/* In g, the allocation nodes at addr, and its free nodes. */
static size_t nodes_at(CUgraph g, CUdeviceptr addr, size_t *frees)
{
	size_t allocs = 0;

	*frees = 0;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->u.alloc->addr == addr)
			allocs++;
		else if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE && g->nodes[i]->u.free == addr)
			++*frees;
	return allocs;
}

/* A free node frees an allocation of an allocation node (of this graph or another),
 * once per graph, or once for each node of this graph that shares its address. */
static CUresult check_free(CUgraph g, CUdeviceptr dptr)
{
	size_t frees, allocs = nodes_at(g, dptr, &frees);

	return sim_graph_alloc_at(dptr) && frees < (allocs ? allocs : 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* An allocation of g on dev that the capture has freed and size fits in, to share. */
static struct sim_graph_alloc *freed_in(CUgraph g, int dev, size_t size)
{
	for (size_t i = 0; i < g->n; i++) {
		struct sim_graph_alloc *a =
		    g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? g->nodes[i]->u.alloc : NULL;
		size_t frees;
		if (a && a->device == dev && size <= a->footprint && nodes_at(g, a->addr, &frees) == frees)
			return a;
	}
	return NULL;
}

/* cuMemAllocAsync on a capturing stream: an allocation node behind the stream's work. */
CUresult sim_capture_alloc(CUstream s, int dev, size_t size, CUdeviceptr *dptr)
{
	struct sim_graph_alloc *a = freed_in(sim_capture_graph(s), dev, size);
	CUgraphNode n;
	CUresult r = a ? (a->refs++, CUDA_SUCCESS) : new_alloc(dev, size, &a);

	if (r != CUDA_SUCCESS)
		return r;
	r = sim_capture_add(s, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &n);
	if (r != CUDA_SUCCESS) {
		a->refs--;
		alloc_release(a);
		return r;
	}
	attach_alloc(n, a);
	*dptr = a->addr;
	return CUDA_SUCCESS;
}

/* cuMemFreeAsync on a capturing stream: a free node, for graph memory only. */
CUresult sim_capture_free(CUstream s, CUgraph g, CUdeviceptr dptr)
{
	CUgraphNode n;
	CUresult r = check_free(g, dptr);

	if (r == CUDA_SUCCESS)
		r = sim_capture_add(s, CU_GRAPH_NODE_TYPE_MEM_FREE, &n);
	if (r == CUDA_SUCCESS) {
		n->u.free = dptr;
		g->memory = true;
	}
	return r;
}

/* The front of every cuGraphAdd*Node: a graph, an out-pointer, dependencies. */
static CUresult add(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType type)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_obj_is(g, SIM_OBJ_GRAPH))
		return CUDA_ERROR_INVALID_VALUE;
	return sim_graph_add(g, type, deps, ndeps, out);
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	CUresult r = sim_check_init();
	CUgraph g;

	if (r != CUDA_SUCCESS)
		return r;
	if (!phGraph || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	g = sim_graph_new();
	sim_unlock();
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phGraph = g;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (sim_obj_is(hGraph, SIM_OBJ_GRAPH))
		sim_graph_free(hGraph);
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

static CUresult add_kernel(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			   const CUDA_KERNEL_NODE_PARAMS *p)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	CUfunction f;
	unsigned grid[3], block[3];

	if (r != CUDA_SUCCESS)
		return r;
	if (!p || (p->kernelParams && p->extra))
		return CUDA_ERROR_INVALID_VALUE;
	grid[0] = p->gridDimX, grid[1] = p->gridDimY, grid[2] = p->gridDimZ;
	block[0] = p->blockDimX, block[1] = p->blockDimY, block[2] = p->blockDimZ;
	sim_lock();
	r = sim_launch_check(p->func ? p->func : (CUfunction)(void *)p->kern, dev, grid, block, p->sharedMemBytes, &f);
	if (r == CUDA_SUCCESS)
		r = add(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_KERNEL);
	if (r == CUDA_SUCCESS)
		sim_node_kernel(*out, f, grid, block, p->sharedMemBytes);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

/* The v1 parameters (CUDA 10.0) are the v2 ones without kern and ctx. */
CUresult CUDAAPI sim_add_kernel_v1(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				   const CUDA_KERNEL_NODE_PARAMS_v1 *) __asm__("cuGraphAddKernelNode");
CUresult CUDAAPI sim_add_kernel_v1(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				   const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS v2;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	memset(&v2, 0, sizeof v2);
	memcpy(&v2, p, sizeof *p);
	return add_kernel(out, g, deps, ndeps, &v2);
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *p)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(hNode, SIM_OBJ_NODE) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		const unsigned *gr = hNode->u.kernel.grid, *bl = hNode->u.kernel.block;
		*p = (CUDA_KERNEL_NODE_PARAMS){.func = hNode->u.kernel.f,
					       .gridDimX = gr[0],
					       .gridDimY = gr[1],
					       .gridDimZ = gr[2],
					       .blockDimX = bl[0],
					       .blockDimY = bl[1],
					       .blockDimZ = bl[2],
					       .sharedMemBytes = hNode->u.kernel.smem};
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	CUresult r;

	(void)ctx;
	if (!copyParams)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_copy3d(copyParams, false);
	if (r == CUDA_SUCCESS)
		r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMCPY);
	if (r == CUDA_SUCCESS)
		sim_node_copy(*phGraphNode, copyParams);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	CUresult r;

	(void)ctx;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_memset(p->dst, p->pitch, p->value, p->elementSize, p->width, p->height, false);
	if (r == CUDA_SUCCESS)
		r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMSET);
	if (r == CUDA_SUCCESS)
		sim_node_memset(*phGraphNode, p);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				    size_t numDependencies, const CUDA_HOST_NODE_PARAMS *p)
{
	CUresult r;

	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_HOST);
	if (r == CUDA_SUCCESS)
		sim_node_host(*phGraphNode, p->fn, p->userData);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				     size_t numDependencies)
{
	CUresult r;

	sim_lock();
	r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY);
	sim_unlock();
	return r;
}

/* A child graph runs inside its parent; one with memory nodes cannot be a child here. */
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					  size_t numDependencies, CUgraph childGraph)
{
	CUresult r;

	sim_lock();
	if (!sim_obj_is(childGraph, SIM_OBJ_GRAPH) || childGraph == hGraph || childGraph->memory)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_GRAPH);
	if (r == CUDA_SUCCESS)
		(*phGraphNode)->u.child = childGraph;
	sim_unlock();
	return r;
}

static CUresult add_event(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUevent ev,
			  CUgraphNodeType type)
{
	CUresult r;

	sim_lock();
	if (!sim_obj_is(ev, SIM_OBJ_EVENT))
		r = CUDA_ERROR_INVALID_VALUE;
	else
		r = add(out, g, deps, ndeps, type);
	if (r == CUDA_SUCCESS)
		sim_node_event(*out, ev);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					   size_t numDependencies, CUevent event)
{
	return add_event(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					 size_t numDependencies, CUevent event)
{
	return add_event(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

static CUresult add_mem_alloc(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	CUresult r = sim_check_init();
	int dev;

	if (r != CUDA_SUCCESS)
		return r;
	if (!p || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    p->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_INVALID_VALUE;
	dev = p->poolProps.location.id;
	if (dev < 0 || dev >= sim.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	sim_lock();
	struct sim_graph_alloc *a;
	r = new_alloc(dev, p->bytesize, &a);
	if (r == CUDA_SUCCESS) {
		r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
		if (r == CUDA_SUCCESS) {
			attach_alloc(*phGraphNode, a);
			p->dptr = a->addr;
		} else {
			a->refs = 0;
			alloc_release(a);
		}
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	return add_mem_alloc(phGraphNode, hGraph, dependencies, numDependencies, p);
}

static CUresult add_mem_free(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			     size_t numDependencies, CUdeviceptr dptr)
{
	CUresult r;

	sim_lock();
	r = sim_obj_is(hGraph, SIM_OBJ_GRAPH) ? check_free(hGraph, dptr) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = add(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEM_FREE);
	if (r == CUDA_SUCCESS) {
		(*phGraphNode)->u.free = dptr;
		hGraph->memory = true;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				       size_t numDependencies, CUdeviceptr dptr)
{
	return add_mem_free(phGraphNode, hGraph, dependencies, numDependencies, dptr);
}

/* CUDA 12.2's generic node, for the kinds simgpu builds from parameters alone: memory
 * nodes (cuGraphAddMemAllocNode's, the address written back) and empty nodes; any other
 * kind is refused as not supported. */
static CUresult add_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeParams *p)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		CUDA_MEM_ALLOC_NODE_PARAMS a = {.poolProps = p->alloc.poolProps,
						.accessDescs = p->alloc.accessDescs,
						.accessDescCount = p->alloc.accessDescCount,
						.bytesize = p->alloc.bytesize};
		r = add_mem_alloc(out, g, deps, ndeps, &a);
		if (r == CUDA_SUCCESS)
			p->alloc.dptr = a.dptr;
		return r;
	}
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return add_mem_free(out, g, deps, ndeps, p->free.dptr);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		sim_lock();
		r = add(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_EMPTY);
		sim_unlock();
		return r;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

CUresult CUDAAPI sim_add_node_v1(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				 CUgraphNodeParams *) __asm__("cuGraphAddNode");
CUresult CUDAAPI sim_add_node_v1(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				 CUgraphNodeParams *p)
{
	return add_node(out, g, deps, ndeps, p);
}

/* the v2 ABI (12.3) adds edge data: only the default edge is simulated */
CUresult CUDAAPI cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
				size_t ndeps, CUgraphNodeParams *p)
{
	static const CUgraphEdgeData plain;

	for (size_t i = 0; edges && i < ndeps; i++)
		if (memcmp(&edges[i], &plain, sizeof plain) != 0)
			return CUDA_ERROR_NOT_SUPPORTED;
	return add_node(out, g, deps, ndeps, p);
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!params_out)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(hNode, SIM_OBJ_NODE) || hNode->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		memset(params_out, 0, sizeof *params_out);
		params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		params_out->poolProps.location.id = hNode->u.alloc->device;
		params_out->bytesize = hNode->u.alloc->size;
		params_out->dptr = hNode->u.alloc->addr;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!dptr_out)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(hNode, SIM_OBJ_NODE) || hNode->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		*dptr_out = hNode->u.free;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!type)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (sim_obj_is(hNode, SIM_OBJ_NODE))
		*type = hNode->type;
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

/* Lists the graph's nodes that pass `want` (all, or the roots): the count when nodes is NULL. */
static CUresult list_nodes(CUgraph g, CUgraphNode *nodes, size_t *num, bool roots)
{
	CUresult r = sim_check_init();
	size_t k = 0;

	if (r != CUDA_SUCCESS)
		return r;
	if (!num)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(g, SIM_OBJ_GRAPH)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		for (size_t i = 0; i < g->n; i++) {
			if (roots && g->nodes[i]->ndeps)
				continue;
			if (nodes && k < *num)
				nodes[k] = g->nodes[i];
			k++;
		}
		if (nodes && k > *num)
			k = *num;
		for (size_t i = k; nodes && i < *num; i++)
			nodes[i] = NULL;
		*num = k;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	return list_nodes(hGraph, nodes, numNodes, false);
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
	return list_nodes(hGraph, rootNodes, numRootNodes, true);
}

static CUresult node_deps(CUgraphNode n, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *num)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!num)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(n, SIM_OBJ_NODE)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (deps) {
		size_t k = n->ndeps < *num ? n->ndeps : *num;
		memcpy(deps, n->deps, k * sizeof *deps);
		if (edges)
			memset(edges, 0, k * sizeof *edges);
		*num = k;
	} else {
		*num = n->ndeps;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI sim_node_deps_v1(CUgraphNode, CUgraphNode *, size_t *) __asm__("cuGraphNodeGetDependencies");
CUresult CUDAAPI sim_node_deps_v1(CUgraphNode hNode, CUgraphNode *deps, size_t *num)
{
	return node_deps(hNode, deps, NULL, num);
}

CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *deps, CUgraphEdgeData *edgeData,
					    size_t *num)
{
	return node_deps(hNode, deps, edgeData, num);
}

static CUresult graph_edges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges, size_t *num)
{
	CUresult r = sim_check_init();
	size_t k = 0;

	if (r != CUDA_SUCCESS)
		return r;
	if (!num || (!from) != (!to))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(g, SIM_OBJ_GRAPH)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		for (size_t i = 0; i < g->n; i++) {
			for (size_t d = 0; d < g->nodes[i]->ndeps; d++) {
				if (from && k < *num) {
					from[k] = g->nodes[i]->deps[d];
					to[k] = g->nodes[i];
					if (edges)
						memset(&edges[k], 0, sizeof edges[k]);
				}
				k++;
			}
		}
		*num = from && k > *num ? *num : k;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI sim_graph_edges_v1(CUgraph, CUgraphNode *, CUgraphNode *, size_t *) __asm__("cuGraphGetEdges");
CUresult CUDAAPI sim_graph_edges_v1(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
	return graph_edges(g, from, to, NULL, num);
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges, size_t *num)
{
	return graph_edges(g, from, to, edges, num);
}

static CUresult add_dependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (n && (!from || !to))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(g, SIM_OBJ_GRAPH))
		r = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
		CUgraphNode t = to[i];
		CUgraphNode *d;
		if (!sim_obj_is(from[i], SIM_OBJ_NODE) || !sim_obj_is(t, SIM_OBJ_NODE) || from[i]->graph != g ||
		    t->graph != g || from[i] == t) {
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		for (size_t k = 0; k < t->ndeps; k++)
			if (t->deps[k] == from[i])
				r = CUDA_ERROR_INVALID_VALUE; /* the edge exists */
		if (r != CUDA_SUCCESS || !(d = realloc(t->deps, (t->ndeps + 1) * sizeof *d))) {
			r = r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		t->deps = d;
		t->deps[t->ndeps++] = from[i];
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI sim_add_deps_v1(CUgraph, const CUgraphNode *, const CUgraphNode *,
				 size_t) __asm__("cuGraphAddDependencies");
CUresult CUDAAPI sim_add_deps_v1(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	return add_dependencies(g, from, to, n);
}

CUresult CUDAAPI cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
					const CUgraphEdgeData *edgeData, size_t n)
{
	(void)edgeData; /* every edge is a full dependency here */
	return add_dependencies(g, from, to, n);
}

/* A graph with memory nodes cannot be cloned; any other is copied node by node, then
 * its edges by position. */
CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph original)
{
	CUresult r = sim_check_init();
	CUgraph c;

	if (r != CUDA_SUCCESS)
		return r;
	if (!phGraphClone)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(original, SIM_OBJ_GRAPH)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (original->memory) { /* as the driver on an H200 answered (2026-11-30) */
		r = CUDA_ERROR_NOT_SUPPORTED;
	} else if (!(c = sim_graph_new())) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		for (size_t i = 0; i < original->n && r == CUDA_SUCCESS; i++) {
			CUgraphNode n;
			r = sim_graph_add(c, original->nodes[i]->type, NULL, 0, &n);
			if (r == CUDA_SUCCESS)
				n->u = original->nodes[i]->u;
		}
		for (size_t i = 0; i < original->n && r == CUDA_SUCCESS; i++) {
			CUgraphNode o = original->nodes[i], n = c->nodes[i];
			if (o->ndeps && !(n->deps = malloc(o->ndeps * sizeof *n->deps))) {
				r = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			for (size_t k = 0; k < o->ndeps; k++)
				for (size_t j = 0; j < original->n; j++)
					if (original->nodes[j] == o->deps[k])
						n->deps[n->ndeps++] = c->nodes[j];
		}
		if (r == CUDA_SUCCESS)
			*phGraphClone = c;
		else
			sim_graph_free(c);
	}
	sim_unlock();
	return r;
}

/* Removing a node takes its edges with it; graphs with memory nodes keep theirs. */
CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode)
{
	CUresult r = sim_check_init();
	CUgraph g;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_obj_is(hNode, SIM_OBJ_NODE) || hNode->graph->memory) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		g = hNode->graph;
		for (size_t i = 0; i < g->n; i++) {
			CUgraphNode n = g->nodes[i];
			size_t k = 0;
			for (size_t j = 0; j < n->ndeps; j++)
				if (n->deps[j] != hNode)
					n->deps[k++] = n->deps[j];
			n->ndeps = k;
		}
		for (size_t i = 0; i < g->n; i++)
			if (g->nodes[i] == hNode) {
				memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof *g->nodes);
				g->n--;
				break;
			}
		node_free(hNode);
	}
	sim_unlock();
	return r;
}

/* ---- executable graphs ------------------------------------------------------------------------ */

/* Appends g's nodes to the executable graph in dependency order (Kahn's algorithm),
 * child graphs inlined; a cycle fails. */
static CUresult flatten(struct CUgraphExec_st *x, CUgraph g, size_t *cap, int depth)
{
	size_t n = g->n, done = 0;
	bool *placed = calloc(n ? n : 1, sizeof *placed);
	CUresult r = CUDA_SUCCESS;

	if (!placed)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (depth > 16)
		r = CUDA_ERROR_INVALID_VALUE;
	while (done < n && r == CUDA_SUCCESS) {
		size_t before = done;
		for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
			CUgraphNode node = g->nodes[i];
			bool ready = !placed[i];
			for (size_t k = 0; k < node->ndeps && ready; k++)
				for (size_t j = 0; j < n; j++)
					if (g->nodes[j] == node->deps[k] && !placed[j])
						ready = false;
			if (!ready)
				continue;
			placed[i] = true;
			done++;
			if (node->type == CU_GRAPH_NODE_TYPE_GRAPH) {
				r = flatten(x, node->u.child, cap, depth + 1);
				continue;
			}
			if (x->n == *cap) {
				size_t c = *cap ? 2 * *cap : 16;
				struct step *s = realloc(x->steps, c * sizeof *s);
				if (!s) {
					r = CUDA_ERROR_OUT_OF_MEMORY;
					break;
				}
				x->steps = s;
				*cap = c;
			}
			x->steps[x->n++] = (struct step){node->type, node->u};
		}
		if (done == before && r == CUDA_SUCCESS)
			r = CUDA_ERROR_INVALID_VALUE; /* a cycle */
	}
	free(placed);
	return r;
}

static void exec_free(struct CUgraphExec_st *x)
{
	for (size_t i = 0; i < x->nallocs; i++) {
		struct sim_graph_alloc *a = x->allocs[i];
		a->exec = NULL;
		a->refs--;
		unback(a); /* its memory goes back unless the allocation is live */
		alloc_release(a);
	}
	if (x->graph)
		x->graph->exec = NULL;
	sim_obj_del(x);
	free(x->allocs);
	free(x->steps);
	free(x);
}

static CUresult upload(struct CUgraphExec_st *x)
{
	for (size_t i = 0; i < x->nallocs; i++) {
		CUresult r = back(x->allocs[i]);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
	CUresult r = sim_check_init();
	const unsigned long long known =
	    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
	    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	struct CUgraphExec_st *x;
	size_t cap = 0;

	if (r != CUDA_SUCCESS)
		return r;
	if (!out || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(g, SIM_OBJ_GRAPH) || (g->memory && g->exec)) {
		r = CUDA_ERROR_INVALID_VALUE; /* a graph with memory nodes has one executable graph at a time */
	} else if (!(x = calloc(1, sizeof *x))) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		x->flags = flags;
		r = flatten(x, g, &cap, 0);
		for (size_t i = 0; i < x->n && r == CUDA_SUCCESS; i++) {
			struct sim_graph_alloc **l;
			if (x->steps[i].type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
				continue;
			if (!(l = realloc(x->allocs, (x->nallocs + 1) * sizeof *l))) {
				r = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			x->allocs = l;
			l[x->nallocs++] = x->steps[i].u.alloc;
		}
		if (r == CUDA_SUCCESS && sim_obj_add(x, SIM_OBJ_EXEC))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		if (r != CUDA_SUCCESS) {
			free(x->allocs);
			free(x->steps);
			free(x);
		} else {
			for (size_t i = 0; i < x->nallocs; i++) {
				x->allocs[i]->exec = x;
				x->allocs[i]->refs++;
			}
			if (g->memory) {
				g->exec = x;
				x->graph = g;
			}
			if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
				r = upload(x);
			*out = x;
		}
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
		return CUDA_ERROR_INVALID_VALUE; /* only cuGraphInstantiateWithParams uploads */
	return instantiate(phGraphExec, hGraph, flags);
}

/* The v1 and v2 ABIs (CUDA 10.0, 11.0) report errors through a node and a log. */
static CUresult instantiate_logged(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
	CUresult r = instantiate(out, g, 0);

	if (err)
		*err = NULL;
	if (log && size)
		log[0] = '\0';
	return r;
}

CUresult CUDAAPI sim_instantiate_v1(CUgraphExec *, CUgraph, CUgraphNode *, char *,
				    size_t) __asm__("cuGraphInstantiate");
CUresult CUDAAPI sim_instantiate_v1(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
	return instantiate_logged(out, g, err, log, size);
}

CUresult CUDAAPI sim_instantiate_v2(CUgraphExec *, CUgraph, CUgraphNode *, char *,
				    size_t) __asm__("cuGraphInstantiate_v2");
CUresult CUDAAPI sim_instantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
	return instantiate_logged(out, g, err, log, size);
}

static CUresult instantiate_params(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	CUresult r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = instantiate(out, g, p->flags);
	p->hErrNode_out = NULL;
	p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return instantiate_params(out, g, p);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return instantiate_params(out, g, p);
}

CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (sim_obj_is(hGraphExec, SIM_OBJ_EXEC))
		*flags = hGraphExec->flags;
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (sim_obj_is(hGraphExec, SIM_OBJ_EXEC))
		exec_free(hGraphExec);
	else
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

/* Runs one step. Under the lock, which a host node's function runs without. */
static CUresult run_step(struct CUgraphExec_st *x, size_t i, int dev)
{
	struct step *s = &x->steps[i];
	CUfunction f;
	CUresult r;

	switch (s->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		r = sim_launch_check(s->u.kernel.f, dev, s->u.kernel.grid, s->u.kernel.block, s->u.kernel.smem, &f);
		if (r == CUDA_SUCCESS)
			sim_launched(f, s->u.kernel.grid, s->u.kernel.block, s->u.kernel.smem);
		return r;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return sim_copy3d(&s->u.copy, true);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		return sim_memset(s->u.set.dst, s->u.set.pitch, s->u.set.value, s->u.set.elementSize, s->u.set.width,
				  s->u.set.height, true);
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUhostFn fn = s->u.host.fn;
		void *data = s->u.host.data;
		sim_unlock();
		fn(data);
		sim_lock();
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		if (sim_obj_is(s->u.event, SIM_OBJ_EVENT)) {
			s->u.event->recorded = true;
			s->u.event->ns = sim_now_ns();
			s->u.event->stream = 0;
		}
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		struct sim_graph_alloc *a = s->u.alloc;
		r = back(a);
		a->live |= r == CUDA_SUCCESS;
		return r;
	}
	case CU_GRAPH_NODE_TYPE_MEM_FREE: {
		struct sim_graph_alloc *a = sim_graph_alloc_at(s->u.free);
		if (a && a->live)
			end_life(a);
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_SUCCESS;
	}
}

static CUresult graph_launch(CUgraphExec x, CUstream s)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_obj_is(x, SIM_OBJ_EXEC)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (!sim_valid_stream(s)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (sim_capturing(s)) {
		r = sim_capture_fail(s); /* launching a graph into a capture is not simulated */
	} else {
		for (size_t i = 0; i < x->nallocs && r == CUDA_SUCCESS; i++) {
			if (!x->allocs[i]->live)
				continue;
			if (x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
				end_life(x->allocs[i]);
			else
				r = CUDA_ERROR_INVALID_VALUE; /* allocations of the last launch are still live */
		}
		for (size_t i = 0; i < x->n && r == CUDA_SUCCESS; i++)
			r = run_step(x, i, sim_stream_device(s, dev));
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream ? hStream : CU_STREAM_PER_THREAD);
}

static CUresult graph_upload(CUgraphExec x, CUstream s)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_obj_is(x, SIM_OBJ_EXEC))
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!sim_valid_stream(s))
		r = CUDA_ERROR_INVALID_HANDLE;
	else
		r = upload(x);
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_upload(hGraphExec, hStream);
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_upload(hGraphExec, hStream ? hStream : CU_STREAM_PER_THREAD);
}
