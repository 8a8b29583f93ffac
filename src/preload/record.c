/* The recording hot path: per-thread single-producer rings that the writer thread
 * drains. Pushing an event is a few stores and one release; a full ring waits a
 * bounded time for the writer, then counts the event as dropped. A thread's ring is
 * made on its first event and handed to the writer to free when the thread ends. */
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "preload/mtp.h"

__thread struct mtp_thread mtp_self MTP_TLS;
int mtp_state;
struct mtp_ring *mtp_rings;
uint64_t mtp_dropped_total;
uint64_t mtp_start_ns;

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

static void thread_gone(void *arg)
{
	struct mtp_ring *r = arg;

	/* events after this (other destructors) get a new ring */
	if (mtp_self.ring == r)
		mtp_self.ring = NULL;
	mtp_python_thread_gone();
	__atomic_store_n(&r->orphan, true, __ATOMIC_RELEASE);
}

static void make_key(void)
{
	pthread_key_create(&ring_key, thread_gone);
}

static MTP_NOINLINE struct mtp_ring *thread_start(struct mtp_thread *t)
{
	size_t bytes = sizeof(struct mtp_ring) + mtp_opt.ring * sizeof(struct mt_event);
	struct mtp_ring *r = mtp_map(bytes);
	struct mt_event e = {.kind = MT_EV_THREAD, .device = MT_NO_DEVICE};

	if (!r)
		return NULL;
	r->mask = (uint32_t)mtp_opt.ring - 1;
	r->next = __atomic_load_n(&mtp_rings, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&mtp_rings, &r->next, r, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	pthread_once(&key_once, make_key);
	pthread_setspecific(ring_key, r);
	t->ring = r;
	if (!t->stack_cache)
		t->stack_cache = mtp_stack_cache_new(); /* no cache: stacks come the slow way */
	if (!t->index)
		t->index = __atomic_add_fetch(&thread_count, 1, __ATOMIC_RELAXED);
	e.aux = (uint64_t)gettid();
	mtp_record(&e, false);
	return r;
}

#define FULL_WAIT_NS 10000000ull /* the longest a thread waits for room: 10 ms */

/* The ring is full: wait for the writer a bounded time, then count the event dropped.
 * After a short spin the CPU is given up, since on a busy machine the writer may need
 * this very core. */
static MTP_NOINLINE void push_full(struct mtp_ring *r, const struct mt_event *e)
{
	uint64_t head = r->head, until = mtp_now() + FULL_WAIT_NS;

	mtp_writer_wake();
	for (unsigned i = 1;; i++) {
		if (head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) <= r->mask) {
			r->slot[head & r->mask] = *e;
			__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
			return;
		}
		if (i < 64) {
			__builtin_ia32_pause();
			continue;
		}
		sched_yield();
		if (i % 16 == 0 && mtp_now() > until)
			break;
	}
	__atomic_store_n(&r->dropped, r->dropped + 1, __ATOMIC_RELAXED);
}

static inline void push(struct mtp_ring *r, const struct mt_event *e)
{
	uint64_t head = r->head, used = head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);

	if (unlikely(used > r->mask)) {
		push_full(r, e);
		return;
	}
	r->slot[head & r->mask] = *e;
	__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
	/* half full: call the writer now rather than at its next tick (once per half ring) */
	if (unlikely(used == (r->mask + 1) / 2))
		mtp_writer_wake();
}

uint8_t mtp_current_tag(void)
{
	return mtp_self.tag_depth > 0 ? mtp_self.tag[mtp_self.tag_depth - 1] : 0;
}

void mtp_set_open_range(uint32_t id)
{
	__atomic_store_n(&open_range, id, __ATOMIC_RELAXED);
}

void mtp_record(struct mt_event *e, bool with_stack)
{
	struct mtp_thread *t = &mtp_self;
	struct mtp_ring *r = t->ring;

	if (unlikely(!r) && !(r = thread_start(t))) {
		__atomic_add_fetch(&mtp_dropped_total, 1, __ATOMIC_RELAXED);
		return;
	}
	/* a device's first sight goes before the event, in time order too */
	if (e->device != MT_NO_DEVICE)
		mtp_note_device(e->device);
	e->thread = t->index;
	e->time = mtp_now();
	e->phase = t->phase_depth > 0 ? t->phase[t->phase_depth - 1] : __atomic_load_n(&open_range, __ATOMIC_RELAXED);
	if (!e->tag)
		e->tag = mtp_current_tag();
	if (with_stack && mtp_opt.depth && (!mtp_opt.capture_stacks || __atomic_load_n(&mtp_capturing, __ATOMIC_RELAXED)))
		e->stack = mtp_stack_capture();
	if (unlikely(mtp_state == MTP_CLOSED))
		mtp_write_late(e);
	else
		push(r, e);
}

/* In a forked child only the forking thread exists: its ring, emptied, is the only one. */
void mtp_rings_reset_child(void)
{
	struct mtp_ring *r = mtp_self.ring;

	if (r) {
		r->head = r->tail = r->dropped = 0;
		r->next = NULL;
	}
	mtp_rings = r;
	mtp_dropped_total = 0;
}
