/* PyTorch's tensors, from its CUDA caching allocator's trace tracker (PyTorch 2.2 and
 * later). memtap run builds torch_tracker.cc against the job's torch and names it in
 * `torch_tracker`; here, once torch's allocator is in the process and initialized, it is
 * loaded and attached, from the allocation hook that comes first (torch's own first
 * cudaMalloc at the latest, so no block is missed). From then on the allocator's
 * blocks are recorded as blocks (MT_API_BLOCK), its segments as segments, and the hooks
 * leave out the driver calls its code makes (mtp_torch_claims), which the tracker tells. */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "recorder/prim.h"
#include "recorder/hooks.h"
#include "recorder/allocator.h"
#include "recorder/torch_tracker.h"

/* c10::cuda::CUDACachingAllocator::allocator, exported by libc10_cuda.so since 2.0 */
#define ALLOCATOR "_ZN3c104cuda20CUDACachingAllocator9allocatorE"
#define NOT_TENSORS "it records torch's segments, not its tensors"

uintptr_t mtp_torch_lo, mtp_torch_span = MTP_TORCH_LOOKING;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *allocator;
static int (*attach)(void *, memtap_torch_fn);
static unsigned long long loads_seen;

/* On the allocating thread, under torch's lock for the device: store and return. */
static void torch_event(const struct memtap_torch_entry *t)
{
	uint8_t dev = t->device >= 0 && t->device < MT_NO_DEVICE ? (uint8_t)t->device : MT_NO_DEVICE;
	bool map = t->action == MEMTAP_TORCH_SEGMENT_MAP || t->action == MEMTAP_TORCH_SEGMENT_UNMAP;

	if (!mtp_enter()) {
		mtp_leave();
		return;
	}
	switch (t->action) {
	case MEMTAP_TORCH_ALLOC: /* the block's own size is torch's to know: left 0 */
		mtp_hook_made(MT_EV_ALLOC, MT_API_BLOCK, dev, t->addr, t->size, t->stream, 0);
		break;
	case MEMTAP_TORCH_FREE:
		mtp_hook_gone(MT_EV_FREE, t->addr, t->size, t->stream);
		break;
	case MEMTAP_TORCH_SEGMENT_ALLOC:
	case MEMTAP_TORCH_SEGMENT_MAP:
		mtp_hook_made(MT_EV_SEGMENT_ALLOC, map ? MT_SEG_MAPPED : 0, dev, t->addr, t->size, t->stream, 0);
		break;
	case MEMTAP_TORCH_SEGMENT_FREE:
	case MEMTAP_TORCH_SEGMENT_UNMAP: {
		struct mt_event e = {.kind = MT_EV_SEGMENT_FREE,
				     .flags = map ? MT_SEG_MAPPED : 0,
				     .device = dev,
				     .addr = t->addr,
				     .size = t->size};
		mtp_record(&e, false);
		break;
	}
	case MEMTAP_TORCH_OOM: /* what the job sees: the policies' on_oom run (torch raises all the same) */
		mtp_hook_failed(MT_EV_ALLOC_FAILED, MT_API_BLOCK, dev, t->size, CUDA_ERROR_OUT_OF_MEMORY, 0);
		break;
	}
	mtp_leave();
}

static int count_loads(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	*(unsigned long long *)arg = info->dlpi_adds;
	return 1;
}

/* torch loads it as a dependency of an extension (RTLD_LOCAL): found by name, not in the
 * global scope */
static int find_c10(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)size;
	if (strcmp(slash ? slash + 1 : info->dlpi_name ? info->dlpi_name : "", "libc10_cuda.so") != 0)
		return 0;
	*(const char **)arg = info->dlpi_name;
	return 1;
}

/* The allocator's address, if torch's CUDA library is loaded (its path in *name); the
 * library stays (NOLOAD holds a reference). */
static void *find_allocator(const char **name)
{
	void *h;

	*name = NULL;
	dl_iterate_phdr(find_c10, name);
	h = *name ? dlopen(*name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
	return h ? mtp_dlsym(h, ALLOCATOR) : NULL;
}

static bool same_file(const char *a, const char *b)
{
	struct stat x, y;

	return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Tracked from now on, in [lo, lo + span), or (span 0) never. */
static void done(uintptr_t lo, uintptr_t span)
{
	__atomic_store_n(&mtp_torch_lo, lo, __ATOMIC_RELAXED);
	__atomic_store_n(&mtp_torch_span, span, __ATOMIC_RELEASE);
}

/* Whether torch can be tracked at all in this process: said once, by the first look. */
static bool wanted(void)
{
	if (!mtp_opt.torch || !mtp_opt.torch_tracker[0] || mtp_allocator_on())
		return false;
	/* each tensor a cudaMalloc of its own, which the tracker does not see and the hooks do;
	   torch 2.2 to 2.5 take any value, even 0, for the variable being set */
	return !getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
}

/* The tracker, loaded: its frames are memtap's from now on. False (said) when it cannot
 * be loaded, or was built for another torch than the job's. */
static bool load_tracker(const char *c10)
{
	void *h = dlopen(mtp_opt.torch_tracker, RTLD_NOW | RTLD_LOCAL);
	const char *built_for = h ? dlsym(h, "memtap_torch_library") : NULL;
	uintptr_t lo, hi;

	attach = h ? (int (*)(void *, memtap_torch_fn))dlsym(h, "memtap_torch_attach") : NULL;
	if (!attach) {
		mtp_warn("cannot load its tracker of PyTorch's tensors (%s): " NOT_TENSORS,
			 h ? "no memtap_torch_attach" : dlerror());
		return false;
	}
	/* another torch's allocator has other virtual methods: never called */
	if (!same_file(built_for, c10)) {
		mtp_warn("the job's torch (%s) is not the one memtap run built its tracker for (%s): " NOT_TENSORS, c10,
			 built_for ? built_for : "?");
		return false;
	}
	if (mtp_module_of((void *)attach, &lo, &hi)) {
		__atomic_store_n(&mtp_tracker_lo, lo, __ATOMIC_RELAXED);
		__atomic_store_n(&mtp_tracker_span, hi - lo, __ATOMIC_RELEASE);
	}
	return true;
}

static void *look(void *arg)
{
	static bool checked;
	static uintptr_t c10_lo, c10_hi; /* torch's allocator's library: whose calls it claims */
	unsigned long long loads = 0;
	const char *c10;

	(void)arg;
	if (!checked && !(checked = true, wanted())) {
		done(0, 0);
		return NULL;
	}
	if (!allocator) { /* a new library since the last look: is it torch's? */
		dl_iterate_phdr(count_loads, &loads);
		if (loads == loads_seen || !(loads_seen = loads, allocator = find_allocator(&c10)))
			return NULL;
		if (!mtp_module_of(allocator, &c10_lo, &c10_hi) || !load_tracker(c10)) {
			done(0, 0);
			return NULL;
		}
	}
	switch (attach(allocator, torch_event)) {
	case MEMTAP_TORCH_NOT_YET: /* torch is loaded, CUDA not started: looked at again */
		return NULL;
	case MEMTAP_TORCH_ATTACHED:
		done(c10_lo, c10_hi - c10_lo);
		return NULL;
	default:
		mtp_warn("PyTorch's allocator here has no trace tracker (its cudaMallocAsync backend, or a "
			 "pluggable allocator): memtap records the device calls it makes");
		done(0, 0);
		return NULL;
	}
}

bool mtp_torch_owns(const void *caller)
{
	uintptr_t span = __atomic_load_n(&mtp_torch_span, __ATOMIC_ACQUIRE);

	/* a thread finding another one looking goes on: this call is not torch's yet */
	if (span == MTP_TORCH_LOOKING && pthread_mutex_trylock(&lock) == 0) {
		if (__atomic_load_n(&mtp_torch_span, __ATOMIC_RELAXED) == MTP_TORCH_LOOKING)
			mtp_slow_stack(look, NULL);
		pthread_mutex_unlock(&lock);
		span = __atomic_load_n(&mtp_torch_span, __ATOMIC_ACQUIRE);
	}
	return span != MTP_TORCH_LOOKING && (uintptr_t)caller - mtp_torch_lo < span;
}
