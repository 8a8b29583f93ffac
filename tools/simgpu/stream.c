/* simgpu streams, events and stream capture. Work completes when it is queued (nothing
 * runs on a device), unless a test marked a stream busy (simgpu_stream_busy): then
 * events recorded on it stay incomplete until it is synchronized. An event keeps the
 * host time of its record, so elapsed times are real host intervals.
 * Capture follows the programming guide: a capturing stream's work becomes graph nodes
 * behind what the stream did last; an event recorded there carries those nodes, and a
 * stream that waits on it joins the capture (fork and join across streams). Host
 * callbacks run on the calling thread when their stream reaches them: at once. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

struct sim_capture {
	CUgraph graph;
	CUstream origin;
	CUstreamCaptureMode mode;
	bool invalid;
	unsigned long long id;
};

static unsigned long long next_capture_id = 1;
static __thread CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* ---- streams ------------------------------------------------------------------------ */

bool sim_valid_stream(CUstream s)
{
	return !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
	       sim_map_get(&sim.streams, (uintptr_t)s) != NULL;
}

/* The stream's state, or NULL for the built-in streams. Under the lock. */
static struct CUstream_st *stream_of(CUstream h)
{
	return sim_map_get(&sim.streams, (uintptr_t)h);
}

int sim_stream_device(CUstream h, int current)
{
	struct CUstream_st *s = stream_of(h);
	return s ? s->device : current;
}

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	s = calloc(1, sizeof *s);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* priorities run from 0 (least) to -5 (greatest); others are clamped, as documented */
	*s = (struct CUstream_st){.device = dev,
				  .flags = flags,
				  .priority = priority > 0    ? 0
					      : priority < -5 ? -5
							      : priority};
	sim_lock();
	if (sim_map_put(&sim.streams, (uintptr_t)s, s)) {
		free(s);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*ph = s;
	return r;
}

CUresult CUDAAPI cuStreamCreate(CUstream *ph, unsigned int flags)
{
	return stream_create(ph, flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	return stream_create(ph, flags, priority);
}

static CUresult stream_destroy(CUstream h)
{
	struct CUstream_st *s;

	if (!sim.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	sim_lock();
	s = sim_map_del(&sim.streams, (uintptr_t)h);
	sim_unlock();
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	free(s->deps);
	free(s);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_stream_destroy_v1(CUstream) __asm__("cuStreamDestroy");
CUresult CUDAAPI sim_stream_destroy_v1(CUstream h)
{
	return stream_destroy(h);
}

CUresult CUDAAPI cuStreamDestroy(CUstream h)
{
	return stream_destroy(h);
}

/* For tests: `stream` has work queued until it is synchronized. */
SIM_EXPORT void simgpu_stream_busy(CUstream h)
{
	struct CUstream_st *s;

	sim_lock();
	if ((s = stream_of(h)) != NULL)
		s->busy = true;
	sim_unlock();
}

/* Kernels launched so far, by streams and by graphs (for tests). */
SIM_EXPORT unsigned long long simgpu_launches(void)
{
	return __atomic_load_n(&sim.launches, __ATOMIC_RELAXED);
}

static void finish(struct CUstream_st *s)
{
	s->busy = false;
	s->syncs++;
}

static CUresult stream_sync(CUstream h)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	s = stream_of(h);
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (s && s->capture) {
		r = sim_capture_fail(h);
	} else {
		if (s)
			finish(s);
		sim_pools_sync(s ? s->device : dev);
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h)
{
	return stream_sync(h);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h)
{
	return stream_sync(h ? h : CU_STREAM_PER_THREAD);
}

static CUresult stream_query(CUstream h)
{
	CUresult r = sim_check_init();
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	s = stream_of(h);
	if (!sim_valid_stream(h))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (s && s->capture)
		r = sim_capture_fail(h);
	else if (s && s->busy)
		r = CUDA_ERROR_NOT_READY;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamQuery(CUstream h)
{
	return stream_query(h);
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h)
{
	return stream_query(h ? h : CU_STREAM_PER_THREAD);
}

/* The common front of the stream queries: a valid stream and an out-pointer. */
static CUresult query_front(CUstream h, const void *out, struct CUstream_st **s)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	*s = stream_of(h);
	r = sim_valid_stream(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

static CUresult stream_flags(CUstream h, unsigned int *flags)
{
	struct CUstream_st *s;
	CUresult r = query_front(h, flags, &s);

	if (r == CUDA_SUCCESS)
		*flags = s ? s->flags : CU_STREAM_DEFAULT;
	return r;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream h, unsigned int *flags)
{
	return stream_flags(h, flags);
}

CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int *flags)
{
	return stream_flags(h ? h : CU_STREAM_PER_THREAD, flags);
}

static CUresult stream_priority(CUstream h, int *priority)
{
	struct CUstream_st *s;
	CUresult r = query_front(h, priority, &s);

	if (r == CUDA_SUCCESS)
		*priority = s ? s->priority : 0;
	return r;
}

CUresult CUDAAPI cuStreamGetPriority(CUstream h, int *priority)
{
	return stream_priority(h, priority);
}

CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int *priority)
{
	return stream_priority(h ? h : CU_STREAM_PER_THREAD, priority);
}

static CUresult stream_device(CUstream h, CUdevice *device)
{
	struct CUstream_st *s;
	CUresult r = query_front(h, device, &s);
	int dev;

	if (r == CUDA_SUCCESS && !s)
		r = sim_current_device(&dev);
	if (r == CUDA_SUCCESS)
		*device = s ? s->device : dev;
	return r;
}

CUresult CUDAAPI cuStreamGetDevice(CUstream h, CUdevice *device)
{
	return stream_device(h, device);
}

CUresult CUDAAPI cuStreamGetDevice_ptsz(CUstream h, CUdevice *device)
{
	return stream_device(h ? h : CU_STREAM_PER_THREAD, device);
}

/* A stream belongs to its device's primary context, or the current context for built-ins. */
static CUresult stream_ctx(CUstream h, CUcontext *pctx, CUgreenCtx *green)
{
	CUdevice dev;
	CUresult r = stream_device(h, &dev);
	CUcontext cur = sim_current_context();

	if (r == CUDA_SUCCESS && !pctx)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r != CUDA_SUCCESS)
		return r;
	*pctx = cur && cur->device == dev ? cur : &sim.dev[dev].primary;
	if (green)
		*green = NULL;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCtx(CUstream h, CUcontext *pctx)
{
	return stream_ctx(h, pctx, NULL);
}

CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext *pctx)
{
	return stream_ctx(h ? h : CU_STREAM_PER_THREAD, pctx, NULL);
}

CUresult CUDAAPI cuStreamGetCtx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *green)
{
	return stream_ctx(h, pctx, green);
}

CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *pctx, CUgreenCtx *green)
{
	return stream_ctx(h ? h : CU_STREAM_PER_THREAD, pctx, green);
}

static CUresult stream_id(CUstream h, unsigned long long *id)
{
	struct CUstream_st *s;
	CUresult r = query_front(h, id, &s);

	if (r == CUDA_SUCCESS)
		*id = (unsigned long long)(uintptr_t)h;
	return r;
}

CUresult CUDAAPI cuStreamGetId(CUstream h, unsigned long long *id)
{
	return stream_id(h, id);
}

CUresult CUDAAPI cuStreamGetId_ptsz(CUstream h, unsigned long long *id)
{
	return stream_id(h ? h : CU_STREAM_PER_THREAD, id);
}

/* Managed memory is host memory here: attaching it changes nothing but is checked. */
static CUresult attach_mem(CUstream h, CUdeviceptr dptr, size_t length, unsigned int flags)
{
	CUresult r = sim_check_init();
	const struct sim_extent *e;

	if (r != CUDA_SUCCESS)
		return r;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	e = sim_extent_find(dptr);
	if (!sim_valid_stream(h))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (!e || e->kind != SIM_EXT_BLOCK || ((struct sim_block *)e->owner)->kind != SIM_KIND_MANAGED ||
		 (length && length > e->size - (dptr - e->start)) || (!length && dptr != e->start))
		r = CUDA_ERROR_INVALID_VALUE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamAttachMemAsync(CUstream h, CUdeviceptr dptr, size_t length, unsigned int flags)
{
	return attach_mem(h, dptr, length, flags);
}

CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream h, CUdeviceptr dptr, size_t length, unsigned int flags)
{
	return attach_mem(h ? h : CU_STREAM_PER_THREAD, dptr, length, flags);
}

/* ---- host functions: run when the stream reaches them, which is now -------------------- */

static CUresult host_func(CUstream h, CUhostFn fn, void *data)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	CUgraphNode n;
	bool run = false;

	if (r != CUDA_SUCCESS)
		return r;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (sim_capturing(h)) {
		r = sim_capture_add(h, CU_GRAPH_NODE_TYPE_HOST, &n);
		if (r == CUDA_SUCCESS)
			sim_node_host(n, fn, data);
	} else {
		run = true;
	}
	sim_unlock();
	if (run)
		fn(data); /* outside the lock: a host function may not call CUDA, but must not deadlock */
	return r;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream h, CUhostFn fn, void *userData)
{
	return host_func(h, fn, userData);
}

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *userData)
{
	return host_func(h ? h : CU_STREAM_PER_THREAD, fn, userData);
}

static CUresult add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned int flags)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!cb || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_valid_stream(h))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (sim_capturing(h))
		r = sim_capture_fail(h);
	sim_unlock();
	if (r == CUDA_SUCCESS)
		cb(h, CUDA_SUCCESS, data);
	return r;
}

CUresult CUDAAPI cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *userData, unsigned int flags)
{
	return add_callback(h, cb, userData, flags);
}

CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void *userData, unsigned int flags)
{
	return add_callback(h ? h : CU_STREAM_PER_THREAD, cb, userData, flags);
}

/* ---- events ----------------------------------------------------------------------------- */

CUresult CUDAAPI cuEventCreate(CUevent *ph, unsigned int flags)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	CUevent ev;

	if (r != CUDA_SUCCESS)
		return r;
	if (!ph || (flags & ~known) || ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!(ev = calloc(1, sizeof *ev)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	ev->flags = flags;
	sim_lock();
	if (sim_obj_add(ev, SIM_OBJ_EVENT)) {
		free(ev);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	sim_unlock();
	if (r == CUDA_SUCCESS)
		*ph = ev;
	return r;
}

static int copy_deps(CUgraphNode **to, size_t *nto, const CUgraphNode *from, size_t n)
{
	CUgraphNode *d = n ? malloc(n * sizeof *d) : NULL;

	if (n && !d)
		return -1;
	if (n)
		memcpy(d, from, n * sizeof *d);
	free(*to);
	*to = d;
	*nto = n;
	return 0;
}

static CUresult event_record(CUevent ev, CUstream h, unsigned int flags)
{
	CUresult r = sim_check_init();
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	s = stream_of(h);
	if (!sim_obj_is(ev, SIM_OBJ_EVENT) || !sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (s && s->capture) {
		/* the event now stands for what the stream captured so far: a stream that waits on it joins */
		if (copy_deps(&ev->deps, &ev->ndeps, s->deps, s->ndeps))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else
			ev->capture = s->capture;
	} else {
		ev->capture = NULL;
		ev->recorded = true;
		ev->ns = sim_now_ns();
		ev->stream = s && s->busy ? (uintptr_t)h : 0;
		ev->syncs = s ? s->syncs : 0;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuEventRecord(CUevent ev, CUstream h)
{
	return event_record(ev, h, 0);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent ev, CUstream h)
{
	return event_record(ev, h ? h : CU_STREAM_PER_THREAD, 0);
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent ev, CUstream h, unsigned int flags)
{
	return event_record(ev, h, flags);
}

CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent ev, CUstream h, unsigned int flags)
{
	return event_record(ev, h ? h : CU_STREAM_PER_THREAD, flags);
}

/* An event is complete unless recorded on a busy stream not synchronized since. */
static bool pending(CUevent ev)
{
	struct CUstream_st *s = ev->stream ? stream_of((CUstream)ev->stream) : NULL; /* a destroyed stream finished */

	return s && s->syncs == ev->syncs;
}

CUresult CUDAAPI cuEventQuery(CUevent ev)
{
	CUresult r;

	sim_lock();
	r = !sim_obj_is(ev, SIM_OBJ_EVENT) ? CUDA_ERROR_INVALID_HANDLE
	    : pending(ev)		   ? CUDA_ERROR_NOT_READY
					   : CUDA_SUCCESS;
	sim_unlock();
	return r;
}

/* Waiting for an event waits for its stream's work up to it: all of it, here. */
CUresult CUDAAPI cuEventSynchronize(CUevent ev)
{
	CUresult r = CUDA_SUCCESS;

	sim_lock();
	if (!sim_obj_is(ev, SIM_OBJ_EVENT))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (pending(ev))
		finish(stream_of((CUstream)ev->stream));
	sim_unlock();
	return r;
}

static CUresult event_destroy(CUevent ev)
{
	CUresult r = CUDA_SUCCESS;

	sim_lock();
	if (sim_obj_is(ev, SIM_OBJ_EVENT))
		sim_obj_del(ev);
	else
		r = CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	if (r == CUDA_SUCCESS) {
		free(ev->deps);
		free(ev);
	}
	return r;
}

CUresult CUDAAPI sim_event_destroy_v1(CUevent) __asm__("cuEventDestroy");
CUresult CUDAAPI sim_event_destroy_v1(CUevent ev)
{
	return event_destroy(ev);
}

CUresult CUDAAPI cuEventDestroy(CUevent ev)
{
	return event_destroy(ev);
}

static CUresult elapsed(float *ms, CUevent start, CUevent end)
{
	CUresult r = CUDA_SUCCESS;

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(start, SIM_OBJ_EVENT) || !sim_obj_is(end, SIM_OBJ_EVENT))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (!start->recorded || !end->recorded || ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (pending(start) || pending(end))
		r = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)((double)((int64_t)(end->ns - start->ns)) / 1e6);
	sim_unlock();
	return r;
}

CUresult CUDAAPI sim_event_elapsed_v1(float *, CUevent, CUevent) __asm__("cuEventElapsedTime");
CUresult CUDAAPI sim_event_elapsed_v1(float *ms, CUevent start, CUevent end)
{
	return elapsed(ms, start, end);
}

CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
	return elapsed(ms, start, end);
}

/* ---- waits and joins ---------------------------------------------------------------------- */

static CUresult add_deps(struct CUstream_st *s, const CUgraphNode *more, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		bool have = false;
		for (size_t k = 0; k < s->ndeps && !have; k++)
			have = s->deps[k] == more[i];
		if (have)
			continue;
		if (s->ndeps == s->capdeps) {
			size_t cap = s->capdeps ? 2 * s->capdeps : 4;
			CUgraphNode *d = realloc(s->deps, cap * sizeof *d);
			if (!d)
				return CUDA_ERROR_OUT_OF_MEMORY;
			s->deps = d;
			s->capdeps = cap;
		}
		s->deps[s->ndeps++] = more[i];
	}
	return CUDA_SUCCESS;
}

static CUresult wait_event(CUstream h, CUevent ev, unsigned int flags)
{
	CUresult r = sim_check_init();
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	s = stream_of(h);
	if (!sim_obj_is(ev, SIM_OBJ_EVENT) || !sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (ev->capture && !ev->capture->invalid) {
		if (!s) {
			r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy streams cannot join a capture */
		} else if (!s->capture) {
			s->capture = ev->capture; /* fork: the stream joins the capture behind the event */
			s->ndeps = 0;
			r = add_deps(s, ev->deps, ev->ndeps);
		} else if (s->capture == ev->capture) {
			r = add_deps(s, ev->deps, ev->ndeps); /* join */
		} else {
			r = sim_capture_fail(h);
			if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
				r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
		}
	} else if (s && s->capture && !(flags & CU_EVENT_WAIT_EXTERNAL)) {
		/* an event from outside the capture would order the graph against other work */
		(void)sim_capture_fail(h);
		r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
	} else if (s && pending(ev)) {
		s->busy = true; /* its work now waits for the busy stream's */
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags)
{
	return wait_event(h, ev, flags);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent ev, unsigned int flags)
{
	return wait_event(h ? h : CU_STREAM_PER_THREAD, ev, flags);
}

/* ---- capture ------------------------------------------------------------------------------ */

bool sim_capturing(CUstream h)
{
	struct CUstream_st *s = stream_of(h);
	return s && s->capture;
}

CUgraph sim_capture_graph(CUstream h)
{
	struct CUstream_st *s = stream_of(h);
	return s && s->capture ? s->capture->graph : NULL;
}

CUresult sim_capture_add(CUstream h, CUgraphNodeType type, CUgraphNode *out)
{
	struct CUstream_st *s = stream_of(h);
	CUgraphNode n;
	CUresult r;

	if (s->capture->invalid)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	r = sim_graph_add(s->capture->graph, type, s->deps, s->ndeps, &n);
	if (r != CUDA_SUCCESS)
		return r;
	s->ndeps = 0;
	r = add_deps(s, &n, 1);
	if (r == CUDA_SUCCESS)
		*out = n;
	return r;
}

CUresult sim_capture_fail(CUstream h)
{
	struct CUstream_st *s = stream_of(h);

	if (s && s->capture)
		s->capture->invalid = true;
	return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct CUstream_st *s;
	struct sim_capture *c;

	if (r != CUDA_SUCCESS)
		return r;
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	s = stream_of(h);
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (!s) {
		r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy default streams cannot capture */
	} else if (s->capture) {
		r = CUDA_ERROR_ILLEGAL_STATE;
	} else if (!(c = calloc(1, sizeof *c)) || !(c->graph = sim_graph_new())) {
		free(c);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		c->origin = h;
		c->mode = mode;
		c->id = next_capture_id++;
		s->capture = c;
		s->ndeps = 0;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI sim_begin_capture_v1(CUstream) __asm__("cuStreamBeginCapture");
CUresult CUDAAPI sim_begin_capture_v1(CUstream h)
{
	return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult CUDAAPI sim_begin_capture_v1_ptsz(CUstream) __asm__("cuStreamBeginCapture_ptsz");
CUresult CUDAAPI sim_begin_capture_v1_ptsz(CUstream h)
{
	return begin_capture(h ? h : CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode)
{
	return begin_capture(h, mode);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode)
{
	return begin_capture(h ? h : CU_STREAM_PER_THREAD, mode);
}

/* Ends the capture on every stream that joined it; events recorded into it forget it. */
static CUresult end_capture(CUstream h, CUgraph *graph)
{
	CUresult r = sim_check_init();
	struct CUstream_st *s;
	struct sim_capture *c;

	if (r != CUDA_SUCCESS)
		return r;
	if (!graph)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	s = stream_of(h);
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (!s || !s->capture) {
		r = CUDA_ERROR_ILLEGAL_STATE;
	} else if (s->capture->origin != h) {
		r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	} else {
		c = s->capture;
		for (size_t i = 0; i < sim.streams.cap; i++) {
			struct CUstream_st *o = sim_map_at(&sim.streams, i);
			if (o && o->capture == c) {
				o->capture = NULL;
				o->ndeps = 0;
			}
		}
		for (size_t i = 0; i < sim.objects.cap; i++) {
			CUevent ev = (CUevent)sim.objects.keys[i];
			if (sim_map_at(&sim.objects, i) && sim_obj_is(ev, SIM_OBJ_EVENT) && ev->capture == c)
				ev->capture = NULL;
		}
		if (c->invalid) {
			sim_graph_free(c->graph);
			*graph = NULL;
			r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		} else {
			*graph = c->graph;
		}
		free(c);
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph *graph)
{
	return end_capture(h, graph);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph *graph)
{
	return end_capture(h ? h : CU_STREAM_PER_THREAD, graph);
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	CUresult r = sim_check_init();
	struct CUstream_st *s;

	if (r != CUDA_SUCCESS)
		return r;
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	s = stream_of(h);
	if (!sim_valid_stream(h)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		struct sim_capture *c = s ? s->capture : NULL;
		*status = !c	       ? CU_STREAM_CAPTURE_STATUS_NONE
			  : c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
				       : CU_STREAM_CAPTURE_STATUS_ACTIVE;
		if (id && c)
			*id = c->id;
		if (graph)
			*graph = c ? c->graph : NULL;
		if (deps)
			*deps = c ? s->deps : NULL;
		if (edges)
			*edges = NULL; /* all edges are the default kind */
		if (ndeps)
			*ndeps = c ? s->ndeps : 0;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
	return capture_info(h, status, NULL, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *status)
{
	return capture_info(h ? h : CU_STREAM_PER_THREAD, status, NULL, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI sim_capture_info_v1(CUstream, CUstreamCaptureStatus *, cuuint64_t *) __asm__("cuStreamGetCaptureInfo");
CUresult CUDAAPI sim_capture_info_v1(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
	return capture_info(h, status, id, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI sim_capture_info_v1_ptsz(CUstream, CUstreamCaptureStatus *,
					  cuuint64_t *) __asm__("cuStreamGetCaptureInfo_ptsz");
CUresult CUDAAPI sim_capture_info_v1_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
	return capture_info(h ? h : CU_STREAM_PER_THREAD, status, id, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI sim_capture_info_v2(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **,
				     size_t *) __asm__("cuStreamGetCaptureInfo_v2");
CUresult CUDAAPI sim_capture_info_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
				     const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info(h, status, id, graph, deps, NULL, ndeps);
}

CUresult CUDAAPI sim_capture_info_v2_ptsz(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
					  const CUgraphNode **, size_t *) __asm__("cuStreamGetCaptureInfo_v2_ptsz");
CUresult CUDAAPI sim_capture_info_v2_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
					  const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info(h ? h : CU_STREAM_PER_THREAD, status, id, graph, deps, NULL, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
					const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	return capture_info(h, status, id, graph, deps, edges, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
						CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
						size_t *ndeps)
{
	return capture_info(h ? h : CU_STREAM_PER_THREAD, status, id, graph, deps, edges, ndeps);
}

/* The mode is kept per thread; simgpu does not refuse "unsafe" calls during a capture. */
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUstreamCaptureMode old;

	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	old = thread_capture_mode;
	thread_capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}
