/* Driver layers: the real functions that callers' own handles gave memtap (dlsym of a
 * driver, cuGetProcAddress), each kept in a slot that has a wrapper of its own (driver.c,
 * procaddr.c). A layer in front of the driver (found first as libcuda.so.1, loading the
 * real one by path, as GPU-sharing tools do) is then called by memtap's wrapper, and calls
 * memtap's wrapper of the driver in turn. The code ranges of the libraries those real
 * functions live in tell a layer's call into a hook while the outer hook runs (part of
 * that call) from a signal handler's; slots into a library that went are emptied. */
#include "recorder/hooks.h"

#define MAX_CLAIMS 256
#define MAX_RANGES 8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct claim {
	void **slot;
	uintptr_t lo, hi; /* the library of its real function */
} claims[MAX_CLAIMS];
static unsigned nclaims;
/* read without the lock (mtp_layer_caller): an entry is written before nranges counts it */
static struct range {
	uintptr_t lo, hi;
} ranges[MAX_RANGES];
static unsigned nranges;

struct where {
	const void *p;
	uintptr_t lo, hi;
	bool found;
};

static void *find(void *arg)
{
	struct where *w = arg;

	w->found = mtp_module_of(w->p, &w->lo, &w->hi);
	return NULL;
}

static void add_range(uintptr_t lo, uintptr_t hi)
{
	unsigned i, n = __atomic_load_n(&nranges, __ATOMIC_RELAXED);

	for (i = 0; i < n; i++)
		if (ranges[i].lo == lo && ranges[i].hi == hi)
			return;
	for (i = 0; i < n; i++) {
		if (!__atomic_load_n(&ranges[i].hi, __ATOMIC_RELAXED)) { /* one that went */
			__atomic_store_n(&ranges[i].lo, lo, __ATOMIC_RELAXED);
			__atomic_store_n(&ranges[i].hi, hi, __ATOMIC_RELEASE);
			return;
		}
	}
	if (n < MAX_RANGES) {
		ranges[n] = (struct range){lo, hi};
		__atomic_store_n(&nranges, n + 1, __ATOMIC_RELEASE);
	}
}

void mtp_layer_library(uintptr_t lo, uintptr_t hi)
{
	pthread_mutex_lock(&lock);
	add_range(lo, hi);
	pthread_mutex_unlock(&lock);
}

void *mtp_layer_wrap(void **real, void *const *wrappers, void *p)
{
	struct where w = {.p = p};
	unsigned k;

	/* memtap's own function (a handle whose scope has memtap first) is not wrapped again */
	if (!p || ((uintptr_t)p >= mtp_self_start && (uintptr_t)p < mtp_self_end))
		return p;
	for (k = 0; k < MTP_LAYERS; k++)
		if (__atomic_load_n(&real[k], __ATOMIC_ACQUIRE) == p)
			return wrappers[k];
	mtp_slow_stack(find, &w); /* the loader needs kilobytes a small fiber does not have */
	pthread_mutex_lock(&lock);
	for (k = 0; k < MTP_LAYERS; k++) {
		void *have = __atomic_load_n(&real[k], __ATOMIC_RELAXED);
		if (have == p)
			break;
		if (!have && (!w.found || nclaims < MAX_CLAIMS)) {
			if (w.found) {
				claims[nclaims++] = (struct claim){real + k, w.lo, w.hi};
				add_range(w.lo, w.hi);
			}
			__atomic_store_n(&real[k], p, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	/* no room: the caller gets the real function, and its calls are not recorded */
	return k < MTP_LAYERS ? wrappers[k] : p;
}

bool mtp_layer_caller(uintptr_t caller)
{
	unsigned n = __atomic_load_n(&nranges, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++) {
		uintptr_t hi = __atomic_load_n(&ranges[i].hi, __ATOMIC_ACQUIRE);
		uintptr_t lo = __atomic_load_n(&ranges[i].lo, __ATOMIC_RELAXED);
		if (hi > lo && caller - lo < hi - lo) /* hi 0: a library that went */
			return true;
	}
	return false;
}

void mtp_layers_forget(void)
{
	unsigned n = __atomic_load_n(&nranges, __ATOMIC_RELAXED);

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < n; i++) {
		uintptr_t lo = ranges[i].lo, hi = ranges[i].hi;
		if (!hi || mtp_module_loaded(lo, hi))
			continue;
		/* its wrappers find the function again by name at their next call */
		for (unsigned c = 0; c < nclaims;) {
			if (claims[c].lo == lo && claims[c].hi == hi) {
				__atomic_store_n(claims[c].slot, NULL, __ATOMIC_RELEASE);
				claims[c] = claims[--nclaims];
			} else {
				c++;
			}
		}
		__atomic_store_n(&ranges[i].hi, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&lock);
}
