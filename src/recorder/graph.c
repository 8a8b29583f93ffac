/* Graph memory nodes (the CUDA programming guide's "Graph memory nodes"): memtap keeps a
 * shadow of each allocation node (its address, fixed for the graph's life, its size,
 * device and the stack that added it) and of each free node, and records the memory
 * when the driver holds it: an ALLOC with API "graph" when an upload or a launch backs
 * the node (at the node's own stack), a FREE when the memory goes back to the device:
 * cuDeviceGraphMemTrim or the executable graph's destruction for memory no allocation
 * uses, or a free (node, cuMemFree, cuMemFreeAsync) of an allocation that outlived its
 * executable graph. A free node or cuMemFree of an allocation whose executable graph
 * lives ends its use, not the graph's hold on the memory: that is recorded at trim or
 * destroy. Allocation nodes of a graph may share an address where their lives do not
 * overlap (the guide's "address reuse within a graph": PyTorch 2.11's captures on an H200
 * did): the address is recorded once, at the widest of them, while any holds it. Not the
 * hot path: one lock; a free checks the table only while it holds graph memory. The lock
 * is never waited for by its own holder (a signal handler). */
#include <string.h>

#include "recorder/hooks.h"

struct gnode {
	uint64_t addr, size;
	uintptr_t graph, exec; /* 0: destroyed, or not instantiated */
	uint32_t stack;
	uint8_t device;
	bool is_free; /* a free node of `graph`: addr the allocation it frees */
	bool backed;  /* the driver holds memory for it: recorded as allocated */
	bool live;    /* in use: launched, not yet freed */
};

static struct gnode *nodes;
static size_t count, cap;
size_t mtp_graph_allocs;
static const void *owner;
static __thread char me; /* its address names the thread */
static void *capture_info;

static bool lock(void)
{
	const void *none = NULL;

	if (__atomic_load_n(&owner, __ATOMIC_RELAXED) == &me)
		return false; /* a signal handler inside this thread's own hold */
	while (!__atomic_compare_exchange_n(&owner, &none, &me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		none = NULL;
		mtp_cpu_relax();
	}
	return true;
}

static void unlock(void)
{
	__atomic_store_n(&owner, NULL, __ATOMIC_RELEASE);
}

static struct gnode *add(void)
{
	if (count == cap) {
		size_t c = cap ? 2 * cap : 256;
		struct gnode *n = mtp_grow(nodes, cap * sizeof *nodes, c * sizeof *nodes);
		if (!n)
			return NULL; /* past max_memory: this node is not followed */
		nodes = n;
		cap = c;
	}
	memset(&nodes[count], 0, sizeof nodes[count]);
	return &nodes[count++];
}

static void drop(size_t i)
{
	if (!nodes[i].is_free)
		__atomic_sub_fetch(&mtp_graph_allocs, 1, __ATOMIC_RELAXED);
	nodes[i] = nodes[--count];
}

/* The allocation at addr: the one in use, if one is */
static struct gnode *find_alloc(uint64_t addr)
{
	struct gnode *found = NULL;

	for (size_t i = 0; i < count; i++)
		if (!nodes[i].is_free && nodes[i].addr == addr && (!found || nodes[i].live))
			found = &nodes[i];
	return found;
}

/* Another allocation node whose memory the driver holds at n's address. */
static bool shared(const struct gnode *n)
{
	for (size_t i = 0; i < count; i++)
		if (&nodes[i] != n && !nodes[i].is_free && nodes[i].addr == n->addr && nodes[i].backed)
			return true;
	return false;
}

static void back(struct gnode *n)
{
	if (!n->backed) {
		struct mt_event e = {.kind = MT_EV_ALLOC,
				     .flags = MT_API_GRAPH,
				     .device = n->device,
				     .addr = n->addr,
				     .size = n->size,
				     .aux2 = n->exec,
				     .stack = n->stack};
		for (size_t i = 0; i < count; i++) /* the widest of its executable graph's nodes there */
			if (!nodes[i].is_free && nodes[i].addr == n->addr && nodes[i].exec == n->exec &&
			    nodes[i].graph == n->graph && nodes[i].size > e.size)
				e.size = nodes[i].size;
		if (!shared(n))
			mtp_record(&e, false);
		n->backed = true;
	}
}

static void unback(struct gnode *n)
{
	if (n->backed) {
		n->backed = false;
		if (!shared(n))
			mtp_hook_gone(MT_EV_FREE, n->addr, 0, 0);
	}
}

/* Nothing refers to it any more: its graph and executable graph are gone, it is not in use. */
static bool gone(const struct gnode *n)
{
	return !n->graph && !n->exec && !n->live;
}

static void sweep(void)
{
	for (size_t i = 0; i < count;)
		if (gone(&nodes[i]))
			drop(i);
		else
			i++;
}

CUgraph mtp_graph_capturing(CUstream s, bool ptsz)
{
	PFN_cuStreamGetCaptureInfo_v11030 info;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUgraph g = NULL;

	if (!s && ptsz)
		s = CU_STREAM_PER_THREAD;
	if (!s || s == CU_STREAM_LEGACY)
		return NULL; /* the legacy stream never captures; asking could end another's capture */
	info = (PFN_cuStreamGetCaptureInfo_v11030)mtp_lookup_once(&capture_info, "cuStreamGetCaptureInfo_v2");
	if (!info || info(s, &st, NULL, &g, NULL, NULL) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return NULL;
	return g;
}

void mtp_graph_alloc_node(CUgraph g, uint64_t addr, uint64_t size, uint8_t device)
{
	uint32_t stack = mtp_stack_now();
	struct gnode *n;

	if (!g || !addr || !lock())
		return;
	if ((n = add())) {
		n->addr = addr;
		n->size = size;
		n->device = device;
		n->graph = (uintptr_t)g;
		n->stack = stack;
		__atomic_add_fetch(&mtp_graph_allocs, 1, __ATOMIC_RELAXED);
	}
	unlock();
}

void mtp_graph_free_node(CUgraph g, uint64_t addr)
{
	struct gnode *n;

	if (!g || !addr || !lock())
		return;
	if ((n = add())) {
		n->addr = addr;
		n->graph = (uintptr_t)g;
		n->is_free = true;
	}
	unlock();
}

bool mtp_graph_owns(uint64_t addr)
{
	bool r = false;

	if (!__atomic_load_n(&mtp_graph_allocs, __ATOMIC_RELAXED) || !lock())
		return false;
	r = find_alloc(addr) != NULL;
	unlock();
	return r;
}

/* An allocation's use ends; its memory goes back only when no executable graph keeps it. */
static void end_use(struct gnode *n)
{
	n->live = false;
	if (!n->exec)
		unback(n);
}

/* mtp_graph_freed, once the shadow holds allocations. Memory the driver never backed is
 * no graph memory to free: a node of a capture that failed (its graph gone without
 * cuGraphDestroy) must not hide a later allocation there. */
bool mtp_graph_held(uint64_t addr)
{
	struct gnode *n;
	bool held = false;

	if (!lock())
		return false;
	if ((n = find_alloc(addr)) != NULL && (n->backed || n->live)) {
		held = true;
		end_use(n);
		sweep();
	}
	unlock();
	return held;
}

void mtp_graph_instantiated(CUgraph g, CUgraphExec x, bool upload)
{
	if (!lock())
		return;
	for (size_t i = 0; i < count; i++)
		if (nodes[i].graph == (uintptr_t)g) {
			nodes[i].exec = (uintptr_t)x;
			if (upload && !nodes[i].is_free)
				back(&nodes[i]);
		}
	unlock();
}

/* A launch backs every allocation node of x (the driver reserves what the graph needs,
 * at the first launch or an upload) and runs its free nodes after its allocations. */
static void launched(CUgraphExec x, bool upload_only)
{
	if (!lock())
		return;
	for (size_t i = 0; i < count; i++)
		if (nodes[i].exec == (uintptr_t)x && !nodes[i].is_free) {
			back(&nodes[i]);
			nodes[i].live |= !upload_only;
		}
	for (size_t i = 0; i < count && !upload_only; i++) {
		struct gnode *a;
		if (nodes[i].exec == (uintptr_t)x && nodes[i].is_free && (a = find_alloc(nodes[i].addr)))
			end_use(a);
	}
	sweep();
	unlock();
}

/* Memory no allocation uses goes back; a live allocation keeps its own until freed. */
void mtp_graph_exec_destroyed(CUgraphExec x)
{
	if (!x || !lock())
		return;
	for (size_t i = 0; i < count; i++)
		if (nodes[i].exec == (uintptr_t)x) {
			nodes[i].exec = 0;
			if (!nodes[i].is_free && !nodes[i].live)
				unback(&nodes[i]);
		}
	sweep();
	unlock();
}

void mtp_graph_destroyed(CUgraph g)
{
	if (!g || !lock())
		return;
	for (size_t i = 0; i < count; i++)
		if (nodes[i].graph == (uintptr_t)g)
			nodes[i].graph = 0;
	sweep();
	unlock();
}

void mtp_graph_trimmed(int device)
{
	if (!lock())
		return;
	for (size_t i = 0; i < count; i++)
		if (!nodes[i].is_free && nodes[i].device == device && !nodes[i].live)
			unback(&nodes[i]);
	unlock();
}

/* A failed launch or upload that ran out of memory: what it needed and had not. */
static uint64_t unbacked(CUgraphExec x, uint8_t *device)
{
	uint64_t bytes = 0;

	if (!lock())
		return 0;
	for (size_t i = 0; i < count; i++)
		if (nodes[i].exec == (uintptr_t)x && !nodes[i].is_free && !nodes[i].backed) {
			bytes += nodes[i].size;
			*device = nodes[i].device;
		}
	unlock();
	return bytes;
}

void mtp_graph_ran(CUgraphExec x, int error, bool upload_only)
{
	uint8_t dev = MT_NO_DEVICE;
	uint64_t need;

	if (error == CUDA_SUCCESS)
		launched(x, upload_only);
	else if (error == CUDA_ERROR_OUT_OF_MEMORY && (need = unbacked(x, &dev)))
		mtp_hook_failed(MT_EV_ALLOC_FAILED, MT_API_GRAPH, dev, need, error, 1);
}

/* A forked child: only the forking thread goes on, so no other holds the lock; the
 * parent's graphs are not the child's (a CUDA context does not survive a fork). */
void mtp_graph_reset_child(void)
{
	count = 0;
	__atomic_store_n(&mtp_graph_allocs, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&owner, NULL, __ATOMIC_RELAXED);
}
