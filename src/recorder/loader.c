/* memtap beside the dynamic loader, so that interposing CUDA names changes nothing about
 * when a library is unloaded, and no pointer into an unloaded library is ever called.
 * - dlclose: after glibc's, the runtime's, the driver's and Python's pointers are
 *   forgotten if their library went (looked up again at their next use).
 * - dlsym(RTLD_DEFAULT, "cudaMalloc") answers memtap's hook where glibc would answer the
 *   runtime's function; glibc then ties the runtime's lifetime to the caller (marks it
 *   NODELETE when the caller cannot be unloaded, else keeps it while the caller is
 *   loaded). memtap does the same for the runtime (dlsym_x86_64.S calls mt_dlsym_default).
 * A relocation that binds a dlopen'ed library's undefined cuda* name to memtap's hook
 * is not seen here: glibc would have tied that library to the runtime (docs/RECORDER.md). */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include "recorder/prim.h"
#include "recorder/hooks.h"

static int (*next_dlclose)(void *);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the holds below; taken outside glibc's locks */
/* the loaded objects up to this one were there at start: glibc never unloads them */
static struct link_map *last_initial;
bool mt_dlsym_watch; /* read by dlsym_x86_64.S: mt_dlsym_default is ready */

/* A reference memtap holds on a runtime for a caller that may be unloaded, released when
 * the caller is (glibc's l_reldeps). */
static struct hold {
	void *handle; /* the runtime, opened RTLD_NOLOAD */
	const struct link_map *caller;
	uintptr_t caller_addr; /* its l_addr, and its bounds: the same object, not a new one at that link_map */
	uintptr_t lo, hi;
	const struct link_map *held;
} holds[64];
static unsigned nholds;

int mtp_dlclose_next(void *handle)
{
	int (*fn)(void *) = __atomic_load_n(&next_dlclose, __ATOMIC_RELAXED);

	if (!fn) {
		fn = (int (*)(void *))mt_dlsym_resolve()(RTLD_NEXT, "dlclose");
		__atomic_store_n(&next_dlclose, fn, __ATOMIC_RELAXED);
	}
	return fn ? fn(handle) : -1;
}

static bool initial(const struct link_map *m)
{
	for (const struct link_map *l = last_initial; l; l = l->l_prev)
		if (l == m)
			return true;
	return false;
}

static bool nodelete(const struct link_map *m)
{
	for (const ElfW(Dyn) *d = m->l_ld; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_FLAGS_1)
			return d->d_un.d_val & DF_1_NODELETE;
	return false;
}

/* Releases the holds of callers that were unloaded; each release may unload a runtime. */
static bool release_gone(void)
{
	bool any = false;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nholds;) {
		if (mtp_module_loaded(holds[i].lo, holds[i].hi)) {
			i++;
			continue;
		}
		void *h = holds[i].handle;
		holds[i] = holds[--nholds];
		pthread_mutex_unlock(&lock);
		mtp_dlclose_next(h);
		any = true;
		pthread_mutex_lock(&lock);
	}
	pthread_mutex_unlock(&lock);
	return any;
}

MTP_EXPORT int dlclose(void *handle)
{
	int r = mtp_dlclose_next(handle);

	while (release_gone())
		;
	mtp_rt_forget();
	if (mtp_driver_forget())
		mtp_driver_hooks_forget();
	mtp_layers_forget();
	mtp_python_forget();
	return r;
}

/* dlsym(RTLD_DEFAULT, name) from `caller`, before glibc answers it with memtap's hook. */
void mt_dlsym_default(const char *name, const void *caller)
{
	struct link_map *from = NULL, *to = NULL;
	Dl_info info;
	void *real, *h;

	if (!name || strncmp(name, "cuda", 4) != 0 || !mtp_rt_hooked(name))
		return;
	/* what glibc would have answered: the next definition after memtap (RTLD_NEXT adds no dependency) */
	real = mt_dlsym_resolve()(RTLD_NEXT, name);
	if (!real || !dladdr1(caller, &info, (void **)&from, RTLD_DL_LINKMAP) || !from ||
	    !dladdr1(real, &info, (void **)&to, RTLD_DL_LINKMAP) || !to || from == to || initial(to))
		return;
	if (initial(from) || nodelete(from)) {
		/* the caller stays forever: so does the runtime */
		if ((h = dlopen(to->l_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)))
			mtp_dlclose_next(h);
		return;
	}
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nholds; i++)
		if (holds[i].caller == from && holds[i].held == to && holds[i].caller_addr == from->l_addr) {
			pthread_mutex_unlock(&lock);
			return;
		}
	if (nholds < sizeof holds / sizeof holds[0] && (h = dlopen(to->l_name, RTLD_LAZY | RTLD_NOLOAD))) {
		struct hold *k = &holds[nholds];
		if (mtp_module_of(caller, &k->lo, &k->hi)) {
			k->handle = h;
			k->caller = from;
			k->caller_addr = from->l_addr;
			k->held = to;
			nholds++;
		} else {
			mtp_dlclose_next(h);
		}
	}
	pthread_mutex_unlock(&lock);
}

__attribute__((constructor)) static void loader_init(void)
{
	struct link_map *m = NULL;
	void *self = dlopen(NULL, RTLD_LAZY);

	if (self && dlinfo(self, RTLD_DI_LINKMAP, &m) == 0)
		for (; m; m = m->l_next)
			last_initial = m;
	__atomic_store_n(&mt_dlsym_watch, last_initial != NULL, __ATOMIC_RELEASE);
}
