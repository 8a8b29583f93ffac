/* The recording hot path: per-thread single-producer rings that the writer thread
 * drains. Pushing an event is a few stores and one release. A full ring is replaced by
 * one twice its size while max_memory allows, up to `ring` events; else it waits a
 * bounded time for the writer, then counts the event as dropped. Every event made is
 * pushed or counted in mtp_drops with its reason, never lost silently.
 * A thread's first event maps its block (a guard page, memtap's own stack for the slow
 * paths, its stack cache, its log) and a first ring of MTP_FIRST_RING events; threads
 * that make few events stay small. The writer frees both once the thread has ended and
 * its rings are drained. A signal handler that records while its thread is inside
 * mtp_record leaves the event in the thread's nested slots; the interrupted record
 * pushes it when done. */
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "recorder/mtp.h"

__thread struct mtp_thread mtp_self MTP_TLS;
int mtp_state;
struct mtp_log *mtp_logs;
uint64_t mtp_drops[MT_DROP_COUNT];
uint64_t mtp_start_ns;
uintptr_t mtp_rt_lo, mtp_rt_span;

static uint32_t thread_count;
static uint32_t open_range; /* innermost NVTX start/end range, process-wide */
static pthread_key_t ring_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

uint64_t mtp_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mtp_drop(enum mt_drop why, uint64_t n)
{
	__atomic_add_fetch(&mtp_drops[why], n, __ATOMIC_RELAXED);
}

/* A hook entered while another hook runs on this thread: the runtime calling the driver,
 * a driver layer calling the driver, and memtap calling either are parts of the outer
 * call; anything else (a signal handler's call) is an event of its own. */
bool mtp_reentered(const void *caller)
{
	uintptr_t c = (uintptr_t)caller;

	if (c >= mtp_self_start && c < mtp_self_end)
		return false;
	return c - __atomic_load_n(&mtp_rt_lo, __ATOMIC_RELAXED) >= __atomic_load_n(&mtp_rt_span, __ATOMIC_RELAXED) &&
	       !mtp_layer_caller(c);
}

/* A stack for first lookups (dlsym of a runtime or driver function: several KiB of the
 * loader's) on threads that have no block yet. One thread at a time: another finds it
 * taken and maps a stack of its own for the lookup, never waiting (a wait could invert
 * the loader's lock), and never using the caller's stack, which may have less than the
 * loader needs (16 threads of 16 KiB making their first call together crashed). */
static char lookup_stack[MTP_OWN_STACK] __attribute__((aligned(64)));
static bool lookup_taken;

void *mtp_slow_stack(void *(*fn)(void *), void *arg)
{
	struct mtp_thread *t = &mtp_self;
	char *mapped = NULL, *top = lookup_stack + sizeof lookup_stack;
	void *r;

	if (t->own_stack || t->on_own_stack)
		return mtp_own_stack(fn, arg);
	if (__atomic_exchange_n(&lookup_taken, true, __ATOMIC_ACQUIRE)) {
		/* a guard page below, as for a thread's own stack; past max_memory, the caller's */
		if (!(mapped = mtp_map(MTP_PAGE + MTP_OWN_STACK)))
			return fn(arg);
		mprotect(mapped, MTP_PAGE, PROT_NONE);
		top = mapped + MTP_PAGE + MTP_OWN_STACK;
	}
	t->on_own_stack = true;
	r = mtp_on_stack(fn, arg, top);
	t->on_own_stack = false;
	if (mapped)
		mtp_unmap(mapped, MTP_PAGE + MTP_OWN_STACK);
	else
		__atomic_store_n(&lookup_taken, false, __ATOMIC_RELEASE);
	return r;
}

static void thread_gone(void *arg)
{
	struct mtp_log *l = arg;

	/* events after this (other destructors) get a new block: the writer frees this one */
	if (mtp_self.log == l) {
		mtp_self.log = NULL;
		mtp_self.ring = NULL;
		mtp_self.stack_cache = NULL;
		mtp_self.own_stack = NULL;
	}
	mtp_python_thread_gone();
	__atomic_store_n(&l->orphan, true, __ATOMIC_RELEASE);
}

static void make_key(void)
{
	pthread_key_create(&ring_key, thread_gone);
}

static inline void put(struct mtp_thread *t, struct mt_event *e, bool with_stack);

/* On the thread's own stack: the log joins the registry. */
static void *register_thread(void *arg)
{
	struct mtp_log *l = arg;

	l->next = __atomic_load_n(&mtp_logs, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&mtp_logs, &l->next, l, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	pthread_once(&key_once, make_key);
	pthread_setspecific(ring_key, l);
	return l;
}

static struct mtp_ring *new_ring(uint64_t n)
{
	struct mtp_ring *r = mtp_map(MTP_RING_BYTES(n));

	mt_assert(n > 0 && (n & (n - 1)) == 0); /* push takes head & mask as the slot */
	if (r) {
		r->mask = (uint32_t)n - 1;
		r->bytes = MTP_RING_BYTES(n);
	}
	return r;
}

/* Runs on the application's stack, so it only maps; the rest runs on the block's own
 * stack. Its THREAD event is made either way: pushed, or counted with the thread's drops. */
static MTP_NOINLINE bool thread_start(struct mtp_thread *t)
{
	char *b;
	struct mtp_log *l;
	struct mtp_ring *r = NULL;
	bool first = !t->index;

	/* the writer is started at a thread's first event: every ring has one (a forked
	   child's thread starts again here, mtp_rings_reset_child) */
	mtp_writer_start_pending();
	if (t->log) { /* a forked child's forking thread (mtp_rings_reset_child): its log, named again */
		struct mt_event e = {.kind = MT_EV_THREAD, .device = MT_NO_DEVICE, .aux = (uint64_t)mtp_gettid()};
		t->ring = t->log->first;
		put(t, &e, false);
		return true;
	}
	if (first)
		t->index = __atomic_add_fetch(&thread_count, 1, __ATOMIC_RELAXED);
	if ((b = mtp_map(MTP_BLOCK_BYTES)) &&
	    !(r = new_ring(mtp_opt.ring < MTP_FIRST_RING ? mtp_opt.ring : MTP_FIRST_RING))) {
		mtp_unmap(b, MTP_BLOCK_BYTES);
		b = NULL;
	}
	if (!b) {
		if (first)
			mtp_drop(MT_DROP_MEMORY, 1); /* its THREAD event */
		return false;
	}
	/* an overflow of memtap's own stack faults here instead of writing over other memory */
	mprotect(b, MTP_PAGE, PROT_NONE);
	l = (struct mtp_log *)(b + MTP_PAGE + MTP_OWN_STACK + MTP_STACK_CACHE_BYTES);
	l->block = b;
	l->first = r;
	t->stack_cache = (struct mtp_stack_cache *)(b + MTP_PAGE + MTP_OWN_STACK);
	t->own_stack = b + MTP_PAGE + MTP_OWN_STACK;
	mtp_own_stack(register_thread, l);
	t->log = l;
	t->ring = r;
	if (first) {
		struct mt_event e = {.kind = MT_EV_THREAD, .device = MT_NO_DEVICE, .aux = (uint64_t)mtp_gettid()};
		put(t, &e, false);
	}
	return true;
}

/* A ring twice the size takes over, up to `ring` events, while max_memory allows. The
 * old one is sealed (its head final) by the release of `newer`. */
static bool grow(struct mtp_thread *t)
{
	struct mtp_ring *r = t->ring, *bigger;

	if (r->mask + 1 >= mtp_opt.ring || !(bigger = new_ring(2 * ((uint64_t)r->mask + 1))))
		return false;
	__atomic_store_n(&r->newer, bigger, __ATOMIC_RELEASE);
	t->ring = bigger;
	return true;
}

static MTP_NOINLINE void half_full(struct mtp_thread *t)
{
	mtp_writer_wake();
	if (t->ring->mask + 1 < mtp_opt.ring)
		grow(t);
}

#define SIGNAL_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)
static inline bool try_push(struct mtp_ring *r, const struct mt_event *e)
{
	uint64_t head = r->head;

	if (head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) > r->mask)
		return false;
	r->slot[head & r->mask] = *e;
	__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
	return true;
}

/* The ring is full: grow it, or sleep until the writer has drained it. The event is
 * dropped only when the writer is stuck or cannot drain (mtp_writer_await_room), and
 * counted for memory when max_memory kept the ring below `ring` events. */
static MTP_NOINLINE void push_full(struct mtp_thread *t, const struct mt_event *e)
{
	uint64_t began = 0;
	bool stunted = false, waiting = t->waiting, room = true;

	for (unsigned i = 0;; i++) {
		if (try_push(t->ring, e))
			break;
		if (grow(t)) {
			try_push(t->ring, e);
			break;
		}
		stunted = t->ring->mask + 1 < mtp_opt.ring; /* it could not grow */
		if (!began) {
			began = mtp_now();
			mtp_writer_wake();
		}
		/* between two tries the ring is left alone: a signal handler's event may go in.
		   A writer at work on another core makes room in a moment; else, sleep. */
		t->waiting = true;
		SIGNAL_FENCE();
		if (i < 64)
			mtp_cpu_relax();
		else
			room = mtp_writer_await_room();
		SIGNAL_FENCE();
		t->waiting = waiting;
		SIGNAL_FENCE();
		if (!room && !try_push(t->ring, e)) {
			__atomic_store_n(&t->log->dropped, t->log->dropped + 1, __ATOMIC_RELAXED);
			if (stunted)
				__atomic_store_n(&t->log->stunted, t->log->stunted + 1, __ATOMIC_RELAXED);
			break;
		}
	}
	if (began) {
		__atomic_store_n(&t->log->waited_ns, t->log->waited_ns + (mtp_now() - began), __ATOMIC_RELAXED);
		__atomic_store_n(&t->log->waits, t->log->waits + 1, __ATOMIC_RELAXED);
	}
}

static inline void push(struct mtp_thread *t, const struct mt_event *e)
{
	struct mtp_ring *r = t->ring;
	uint64_t head = r->head, used = head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

	if (unlikely(used > r->mask)) {
		mt_assert(used == (uint64_t)r->mask + 1);
		push_full(t, e);
		return;
	}
	r->slot[head & r->mask] = *e;
	__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
	/* half full: call the writer now rather than at its next tick (once per half ring), and
	   a busy thread's ring grows while the other half still has room */
	if (unlikely(used == (r->mask + 1) / 2))
		half_full(t);
}

/* The event goes to the ring; once the END is written (the process is exiting), the
 * thread waits until it is in the file too. */
static inline void deliver(struct mtp_thread *t, struct mt_event *e)
{
	push(t, e);
	if (unlikely(mtp_state_now() == MTP_CLOSED))
		mtp_writer_sync();
}

uint8_t mtp_current_tag(void)
{
	return mtp_self.tag_depth > 0 ? mtp_self.tag[mtp_self.tag_depth - 1] : 0;
}

void mtp_set_open_range(uint32_t id)
{
	__atomic_store_n(&open_range, id, __ATOMIC_RELAXED);
}

/* The innermost NVTX range pushed on the thread, or else the process's open start/end range. */
static inline uint32_t phase(const struct mtp_thread *t)
{
	uint64_t level = t->phase_depth - 1, slot;

	if (t->phase_depth == 0)
		return __atomic_load_n(&open_range, __ATOMIC_RELAXED);
	slot = t->phase[level % MTP_PHASE_SLOTS];
	return slot >> 32 == (uint32_t)level ? (uint32_t)slot : __atomic_load_n(&mtp_phase_cut, __ATOMIC_RELAXED);
}

static inline void stamp(struct mtp_thread *t, struct mt_event *e)
{
	e->thread = t->index;
	e->time = mtp_now();
	e->phase = phase(t);
	if (!e->tag)
		e->tag = mtp_current_tag();
}

/* A device's first sight: its DEVICE event and memtap's reading of the driver's count. */
static void *device_event(void *arg)
{
	struct mt_event *d = arg;

	mtp_device_event(d[0].device, &d[0]);
	if (d[0].kind == MT_EV_DEVICE)
		mtp_device_reading(d[0].device, MT_MEMINFO_FIRST_USE, &d[1]);
	return NULL;
}

/* Stamp, stack and push one event. */
static inline void fill(struct mtp_thread *t, struct mt_event *e, bool with_stack)
{
	stamp(t, e);
	if (with_stack && mtp_opt.depth &&
	    (!mtp_opt.capture_stacks || __atomic_load_n(&mtp_capturing, __ATOMIC_RELAXED)))
		e->stack = mtp_stack_capture();
	deliver(t, e);
}

/* A device's first sight goes before the event, in time order too; memtap's reading of
 * the driver's count was taken after the call the event records: it goes after it. */
static MTP_NOINLINE void first_sight(struct mtp_thread *t, struct mt_event *e, bool with_stack)
{
	struct mt_event d[2] = {{.device = e->device}};

	mtp_own_stack(device_event, d);
	if (d[0].kind == MT_EV_DEVICE) {
		stamp(t, &d[0]);
		deliver(t, &d[0]);
	}
	fill(t, e, with_stack);
	if (d[1].kind == MT_EV_MEMINFO) {
		stamp(t, &d[1]);
		deliver(t, &d[1]);
	}
}

/* Fill and push one event; the thread has a ring. */
static inline void put(struct mtp_thread *t, struct mt_event *e, bool with_stack)
{
	if (unlikely(!mtp_device_seen(e->device)))
		first_sight(t, e, with_stack);
	else
		fill(t, e, with_stack);
}

/* A signal handler recorded while its thread was inside mtp_record: the ring and the
 * stack cache are in use, so the event waits, without a stack, in a nested slot. */
static MTP_NOINLINE void record_nested(struct mtp_thread *t, const struct mt_event *e)
{
	uint32_t head = t->nested_head;

	if (t->waiting) {
		/* the interrupted record waits for room in a full ring, between two tries:
		   this event waits its turn the same way (nested slots would overflow) */
		struct mt_event now = *e;
		now.stack = 0;
		stamp(t, &now);
		if (!try_push(t->ring, &now))
			push_full(t, &now);
		return;
	}
	if (t->nesting || head - t->nested_tail >= MTP_NESTED) {
		mtp_drop(MT_DROP_NESTED, 1);
		return;
	}
	t->nesting = true;
	SIGNAL_FENCE();
	t->nested[head % MTP_NESTED] = *e;
	t->nested[head % MTP_NESTED].stack = 0;
	stamp(t, &t->nested[head % MTP_NESTED]);
	SIGNAL_FENCE();
	t->nested_head = head + 1;
	SIGNAL_FENCE();
	t->nesting = false;
}

/* Ends a record: the events signal handlers left meanwhile go in, then the thread is no
 * longer busy. A handler that stores one after the last look sees busy still set, so the
 * slots are looked at once more after busy is cleared. */
static MTP_NOINLINE void finish_nested(struct mtp_thread *t)
{
	for (;;) {
		while (t->nested_tail != t->nested_head) {
			struct mt_event e = t->nested[t->nested_tail % MTP_NESTED];
			SIGNAL_FENCE();
			t->nested_tail++;
			e.thread = t->index;
			if (t->ring)
				deliver(t, &e);
			else
				mtp_drop(MT_DROP_MEMORY, 1);
		}
		SIGNAL_FENCE();
		t->busy = false;
		SIGNAL_FENCE();
		if (t->nested_tail == t->nested_head)
			return;
		t->busy = true;
		SIGNAL_FENCE();
	}
}

/* The same, the usual case (no handler made an event) inline. */
static inline void finish(struct mtp_thread *t)
{
	if (likely(t->nested_tail == t->nested_head)) {
		SIGNAL_FENCE();
		t->busy = false;
		SIGNAL_FENCE();
		if (likely(t->nested_tail == t->nested_head))
			return;
		t->busy = true;
		SIGNAL_FENCE();
	}
	finish_nested(t);
}

void mtp_record(struct mt_event *e, bool with_stack)
{
	struct mtp_thread *t = &mtp_self;

	if (unlikely(t->busy)) {
		record_nested(t, e);
		return;
	}
	t->busy = true;
	SIGNAL_FENCE();
	if (likely(t->ring) || thread_start(t))
		put(t, e, with_stack);
	else
		mtp_drop(MT_DROP_MEMORY, 1); /* no block for this thread under max_memory */
	finish(t);
}

uint32_t mtp_stack_now(void)
{
	struct mtp_thread *t = &mtp_self;
	uint32_t id = 0;

	if (t->busy || !mtp_opt.depth || (mtp_opt.capture_stacks && !__atomic_load_n(&mtp_capturing, __ATOMIC_RELAXED)))
		return 0;
	t->busy = true;
	SIGNAL_FENCE();
	if (likely(t->ring) || thread_start(t))
		id = mtp_stack_capture();
	finish(t);
	return id;
}

static void unmap_rings(struct mtp_ring *r, const struct mtp_ring *keep)
{
	while (r && r != keep) {
		struct mtp_ring *newer = r->newer;
		mtp_unmap(r, r->bytes);
		r = newer;
	}
}

/* In a forked child only the forking thread exists: its log, emptied, is the only one;
 * the other threads' blocks and rings (the parent's events) go back to the system. Its
 * THREAD event went into the parent's trace: the ring is taken up again at the thread's
 * next event, with a THREAD event of the child's own (thread_start), so that the child's
 * trace names its thread, and a child that records nothing still writes no file. */
void mtp_rings_reset_child(void)
{
	struct mtp_log *mine = mtp_self.log, *l, *next;

	for (l = mtp_logs; l; l = next) {
		next = l->next;
		if (l == mine)
			continue;
		unmap_rings(l->first, NULL);
		mtp_unmap(l->block, MTP_BLOCK_BYTES);
	}
	if (mine) {
		struct mtp_ring *r = mtp_self.ring;
		unmap_rings(mine->first, r); /* the older rings held the parent's events */
		r->head = r->tail = 0;
		r->newer = NULL;
		mine->first = r;
		mine->dropped = mine->stunted = 0;
		mine->next = NULL;
	}
	mtp_logs = mine;
	for (int i = 0; i < MT_DROP_COUNT; i++)
		mtp_drops[i] = 0;
	mtp_self.ring = NULL;
}
