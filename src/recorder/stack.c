/* Native stacks. The first application frame is found by walking memtap's own frames
 * through their frame pointers (libmemtap is built with them). Then each thread keeps
 * its last stack with the address of every saved return address ("slot"): when the
 * new stack reaches one of those slots holding the same value, and every slot beyond
 * it still holds its value, those frames have not changed and are reused (bytehound's
 * and memray's idea). Only the new frames are walked, with each return address's
 * frame size learned earlier. Anything unexpected falls back to a full unwind; frame
 * sizes are learned from the compiler's unwind tables, once per new return address.
 * Both go through libgcc's _Unwind_Backtrace, which keeps no state but its caches:
 * libunwind (1.6) validates memory through a pipe it keeps in the process's descriptor
 * table and reads, writes and closes by number, so a job that closes its descriptors
 * would hand it its own files. The result is interned: a repeated stack costs one id.
 * Symbols are resolved offline from the trace's module map. */
#include <string.h>
#include <unwind.h>

#include "recorder/mtp.h"

#define MAX_FRAMES 256
/* At most this many of memtap's frames sit above the caller; past it, a full unwind. The
 * TSan build has 14 when memtap-vmm maps a page under memtap_alloc. */
#define OWN_FRAMES 32
#define FRESH_MAX 16	   /* new frames walked before giving up on the cache */
#define VARIABLE INT32_MIN /* a return address whose frame size is not fixed (alloca) */

uintptr_t mtp_self_start, mtp_self_end, mtp_tracker_lo, mtp_tracker_span;
uint64_t mtp_stack_checks, mtp_stack_mismatches;

struct mtp_stack_cache {
	uint32_t n, id;
	uintptr_t top; /* highest slot ever seen on this thread: reads stay below */
	/* innermost first; at [n] the end mark: a slot that never holds its ip (set_frames) */
	uintptr_t ip[MAX_FRAMES + 1];
	uintptr_t slot[MAX_FRAMES + 1];
	uintptr_t mark;
	uintptr_t fresh_ip[FRESH_MAX], fresh_slot[FRESH_MAX]; /* here, not on the application's stack */
};
_Static_assert(sizeof(struct mtp_stack_cache) <= MTP_STACK_CACHE_BYTES,
	       "the stack cache fits its room in a thread's block");

/* ---- frame sizes by return address: distance from its slot to the caller's slot ---- */

#define SIZES (1u << 16)
static uintptr_t size_keys[SIZES];
static int32_t size_vals[SIZES];
static pthread_mutex_t size_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t size_slot(uintptr_t ip)
{
	return (uint32_t)((ip * 0x9e3779b97f4a7c15ull) >> 48) & (SIZES - 1);
}

static int32_t size_of(uintptr_t ip)
{
	for (uint32_t i = size_slot(ip), n = 0; n < 32; i = (i + 1) & (SIZES - 1), n++) {
		uintptr_t k = __atomic_load_n(&size_keys[i], __ATOMIC_ACQUIRE);
		if (k == ip)
			return __atomic_load_n(&size_vals[i], __ATOMIC_RELAXED);
		if (k == 0)
			return 0;
	}
	return 0;
}

static void learn_size(uintptr_t ip, int64_t d)
{
	int32_t v = d > 0 && d < (1 << 30) ? (int32_t)d : VARIABLE;

	mtp_self.sizing = true;
	pthread_mutex_lock(&size_lock);
	for (uint32_t i = size_slot(ip), n = 0; n < 32; i = (i + 1) & (SIZES - 1), n++) {
		if (size_keys[i] == ip) {
			if (size_vals[i] != v) /* two sizes seen: never trust it */
				__atomic_store_n(&size_vals[i], VARIABLE, __ATOMIC_RELAXED);
			break;
		}
		if (size_keys[i] == 0) {
			size_vals[i] = v;
			__atomic_store_n(&size_keys[i], ip, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&size_lock);
	mtp_self.sizing = false;
}

/* fork: the child gets the table of frame sizes with its lock free, never one a thread
 * held at the fork; a fork from a signal handler that interrupted this thread's own
 * learning does not wait for itself (the child goes on with that learning too) */
void mtp_stack_atfork_prepare(void)
{
	if (!mtp_self.sizing)
		pthread_mutex_lock(&size_lock);
}

void mtp_stack_atfork_parent(void)
{
	if (!mtp_self.sizing)
		pthread_mutex_unlock(&size_lock);
}

void mtp_stack_atfork_child(void)
{
	pthread_mutex_init(&size_lock, NULL);
}

/* The cache holds n frames; the mark after them stops suffix_holds' loop. */
static void set_frames(struct mtp_stack_cache *c, uint32_t n)
{
	c->n = n;
	c->mark = 0;
	c->slot[n] = (uintptr_t)&c->mark;
	c->ip[n] = 1;
}

/* ---- learning from the unwind tables ---- */

struct learn {
	uintptr_t ip0;
	int k, max;
	bool started;
	struct mtp_stack_cache *c;
};

static _Unwind_Reason_Code learn_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct learn *l = arg;
	uintptr_t ip = _Unwind_GetIP(ctx), cfa = _Unwind_GetCFA(ctx);

	if (ip == 0) /* libgcc's last frame, past _start */
		return _URC_END_OF_STACK;
	if (!l->started) {
		if (ip != l->ip0)
			return _URC_NO_REASON;
		l->started = true;
	}
	/* libgcc gives, with a return address, the CFA of the frame that returns to it:
	   the return address sits just below that CFA */
	if (l->k < l->max) {
		l->c->ip[l->k] = ip;
		l->c->slot[l->k] = cfa - sizeof(uintptr_t);
		if (l->k > 0)
			learn_size(l->c->ip[l->k - 1], (int64_t)(l->c->slot[l->k] - l->c->slot[l->k - 1]));
		l->k++;
	}
	return l->k < l->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* Fills the cache with the stack from ip0 outward, slots included; false if it could not. */
static MTP_NOINLINE bool learn_stack(struct mtp_stack_cache *c, uintptr_t ip0, uintptr_t slot0)
{
	struct learn l = {.ip0 = ip0, .max = (int)mtp_opt.depth, .c = c};

	_Unwind_Backtrace(learn_frame, &l);
	if (l.k == 0 || c->slot[0] != slot0) {
		set_frames(c, 0);
		return false;
	}
	set_frames(c, (uint32_t)l.k);
	if (c->slot[l.k - 1] > c->top)
		c->top = c->slot[l.k - 1];
	return true;
}

/* ---- the walks ---- */

/* The first application frame: the return address above memtap's own frames. */
static bool first_frame(uintptr_t *ip0, uintptr_t *slot0)
{
	uintptr_t *fp = __builtin_frame_address(0);

	for (int i = 0; i < OWN_FRAMES && fp; i++) {
		uintptr_t *slot = mtp_frame_return_slot(fp), ret = *slot, *next;
		if (!mtp_own_code(ret)) {
			*ip0 = ret;
			*slot0 = (uintptr_t)slot;
			return true;
		}
		next = mtp_frame_up(fp);
		if (next <= fp)
			return false;
		fp = next;
	}
	return false;
}

/* The cached stack's outer slots are read to see whether they still hold the same return
 * addresses: when the thread's call chain changed, a slot may be in a frame that has
 * returned, which AddressSanitizer poisons. Reading it is the point (a different value
 * says the cache does not hold), so these reads are not checked. */
#define STALE_READS __attribute__((no_sanitize("address")))

STALE_READS static MTP_NOINLINE bool suffix_holds(const struct mtp_stack_cache *c, uint32_t from)
{
	/* every frame of every captured stack: four at a time, still stopping at the first
	   change (a slot past it may be in a stack that is gone); the end mark stops it at n */
#define HOLDS(k) (*(const uintptr_t *)c->slot[i + (k)] == c->ip[i + (k)])
	for (size_t i = from;; i += 4) {
		if (!HOLDS(0))
			return i == c->n;
		if (!HOLDS(1))
			return i + 1 == c->n;
		if (!HOLDS(2))
			return i + 2 == c->n;
		if (!HOLDS(3))
			return i + 3 == c->n;
	}
#undef HOLDS
}

/* New frames from (ip, slot) until they join the cached stack; 0 when they do not. */
STALE_READS static uint32_t walk_to_cache(struct mtp_stack_cache *c, uintptr_t ip, uintptr_t slot)
{
	uintptr_t *fresh_ip = c->fresh_ip, *fresh_slot = c->fresh_slot;
	uint32_t nf = 0, k = 0, n;

	for (;;) {
		while (k < c->n && c->slot[k] < slot)
			k++;
		if (k < c->n && c->slot[k] == slot && c->ip[k] == ip && suffix_holds(c, k + 1))
			break;
		int32_t d = size_of(ip);
		if (nf == FRESH_MAX || d <= 0 || slot + (uintptr_t)d > c->top)
			return 0;
		fresh_ip[nf] = ip;
		fresh_slot[nf] = slot;
		nf++;
		slot += (uintptr_t)d;
		ip = *(const uintptr_t *)slot;
	}
	if (nf == 0 && k == 0)
		return c->id; /* the very stack of last time */
	n = nf + c->n - k;
	if (n > mtp_opt.depth)
		n = (uint32_t)mtp_opt.depth;
	if (n > nf) {
		memmove(&c->ip[nf], &c->ip[k], (n - nf) * sizeof c->ip[0]);
		memmove(&c->slot[nf], &c->slot[k], (n - nf) * sizeof c->slot[0]);
	}
	memcpy(c->ip, fresh_ip, nf * sizeof c->ip[0]);
	memcpy(c->slot, fresh_slot, nf * sizeof c->slot[0]);
	set_frames(c, n);
	c->id = mtp_table_intern(&mtp_stacks, c->ip, (size_t)n * sizeof c->ip[0]);
	return c->id ? c->id : 0;
}

/* The plain way: every frame from the unwind tables, memtap's own dropped. */
struct full {
	uintptr_t *out;
	int n, max;
	bool in_own; /* past libgcc's own frame, in memtap's */
};

static _Unwind_Reason_Code full_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct full *f = arg;
	uintptr_t ip = _Unwind_GetIP(ctx);
	bool own = mtp_own_code(ip);

	if (ip == 0) /* libgcc's last frame, past _start */
		return _URC_END_OF_STACK;
	f->in_own |= own;
	if (f->n == 0 && (own || !f->in_own))
		return _URC_NO_REASON;
	f->out[f->n++] = ip;
	return f->n < f->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static uint32_t full_unwind(uintptr_t *out)
{
	struct full f = {out, 0, (int)mtp_opt.depth, false};

	if (f.max > 0)
		_Unwind_Backtrace(full_frame, &f);
	return (uint32_t)f.n;
}

/* The slow paths below run on the thread's own stack (mtp_own_stack): libgcc's
 * unwinder, Python frames and interning need kilobytes, which a program
 * allocating on a small fiber or signal stack does not have. */
struct slow_args {
	struct mtp_stack_cache *c;
	uintptr_t ip0, slot0;
	bool have_first;
	uint32_t id;
};

static void *slow(void *arg)
{
	struct slow_args *a = arg;
	struct mtp_stack_cache *c = a->c;
	uintptr_t frames[MAX_FRAMES];
	uint32_t n;

	if (c && a->have_first && learn_stack(c, a->ip0, a->slot0)) {
		c->id = mtp_table_intern(&mtp_stacks, c->ip, (size_t)c->n * sizeof c->ip[0]);
		a->id = c->id;
		return NULL;
	}
	n = full_unwind(frames);
	a->id = n ? mtp_table_intern(&mtp_stacks, frames, (size_t)n * sizeof frames[0]) : 0;
	return NULL;
}

/* check_stacks=1: compare every cached answer with a full unwind, counting differences. */
static void *cross_check(void *arg)
{
	uintptr_t frames[MAX_FRAMES];
	uint32_t id = ((struct slow_args *)arg)->id, n = full_unwind(frames), got = 0;
	size_t len = 0;
	const void *p = id ? mtp_table_get(&mtp_stacks, id, &len) : NULL;

	got = (uint32_t)(len / sizeof frames[0]);
	__atomic_add_fetch(&mtp_stack_checks, 1, __ATOMIC_RELAXED);
	if (got != n || (n && memcmp(p, frames, n * sizeof frames[0]) != 0))
		__atomic_add_fetch(&mtp_stack_mismatches, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *python(void *arg)
{
	struct slow_args *a = arg;

	a->id = mtp_python_stack(a->id);
	return NULL;
}

uint32_t mtp_stack_capture(void)
{
	struct slow_args a = {.c = mtp_self.stack_cache};

	a.have_first = first_frame(&a.ip0, &a.slot0);
	if (likely(a.c && a.c->n && a.have_first))
		a.id = walk_to_cache(a.c, a.ip0, a.slot0);
	if (unlikely(!a.id))
		mtp_own_stack(slow, &a);
	if (unlikely(mtp_opt.check_stacks))
		mtp_own_stack(cross_check, &a);
	if (mtp_python_maybe())
		mtp_own_stack(python, &a);
	return a.id;
}
