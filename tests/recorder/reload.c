/* Loading and unloading the CUDA runtime while memtap interposes its names: `reload MODE
 * RUNTIME COPY LIB` prints what a program can see (CUDA results, whether the runtime is
 * still loaded after dlclose); the test compares that, line by line, with the same run
 * without memtap. Once the runtime is unloaded its old address is blocked, so the next
 * load lands elsewhere: a pointer kept into the first one would crash.
 *   default   RUNTIME opened RTLD_GLOBAL, its functions from dlsym(RTLD_DEFAULT): glibc
 *             then keeps it loaded for good
 *   handle    RTLD_GLOBAL, dlsym(handle): glibc unloads it
 *   local     RTLD_LOCAL, dlsym(handle)
 *   plugin    LIB (libplugin.so, linked with the runtime) opened RTLD_LOCAL, closed, again
 *   caller    RUNTIME RTLD_GLOBAL, then LIB (libcaller.so, not linked with it), which asks
 *             dlsym(RTLD_DEFAULT): the runtime stays while LIB is loaded
 * COPY is the same runtime under another name, opened the second time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*call_fn)(size_t);

static int loaded(const char *path)
{
	void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);

	if (h)
		dlclose(h);
	return h != NULL;
}

/* The runtime's first page, seen through a handle that reaches it. */
static void *base_of(void *h)
{
	Dl_info info;
	void *f = h ? dlsym(h, "cudaGetLastError") : NULL;

	return f && dladdr(f, &info) ? info.dli_fbase : NULL;
}

/* The runtime is gone: nothing may be mapped where it was. */
static void keep_out(const char *rt, void *base)
{
	if (base && !loaded(rt))
		mmap(base, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
}

static void alloc(const char *how, void *scope, size_t size)
{
	malloc_fn m = (malloc_fn)dlsym(scope, "cudaMalloc");
	free_fn f = (free_fn)dlsym(scope, "cudaFree");
	void *p = NULL;
	int a = m ? m(&p, size) : -1, b = m && a == 0 ? f(p) : -1;

	printf("%s: cudaMalloc %d cudaFree %d\n", how, a, b);
}

static void call(const char *how, void *lib, size_t size)
{
	call_fn c = lib ? (call_fn)dlsym(lib, "plugin_malloc") : NULL;

	printf("%s: %d\n", how, c ? c(size) : -1);
}

int main(int argc, char **argv)
{
	const char *mode = argv[1], *rt = argv[2], *copy = argv[3], *lib = argv[4];
	void *h, *l, *base;

	if (argc < 5)
		return 2;
	if (!strcmp(mode, "plugin")) {
		l = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		call("first", l, 1000);
		base = base_of(l);
		dlclose(l);
		printf("closed: runtime loaded %d\n", loaded(rt));
		keep_out(rt, base);
		l = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		call("again", l, 2000);
		return 0;
	}
	if (!strcmp(mode, "caller")) {
		h = dlopen(rt, RTLD_NOW | RTLD_GLOBAL);
		l = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		call("first", l, 1000);
		base = base_of(h);
		dlclose(h);
		printf("runtime closed: loaded %d\n", loaded(rt));
		dlclose(l);
		printf("caller closed: runtime loaded %d\n", loaded(rt));
		keep_out(rt, base);
		h = dlopen(copy, RTLD_NOW | RTLD_GLOBAL);
		l = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		call("again", l, 2000);
		return 0;
	}
	int flags = strcmp(mode, "local") ? RTLD_GLOBAL : RTLD_LOCAL;
	h = dlopen(rt, RTLD_NOW | flags);
	alloc("first", strcmp(mode, "default") ? h : RTLD_DEFAULT, 1000);
	base = base_of(h);
	dlclose(h);
	printf("closed: loaded %d\n", loaded(rt));
	keep_out(rt, base);
	h = dlopen(copy, RTLD_NOW | flags);
	alloc("again", flags == RTLD_GLOBAL ? RTLD_DEFAULT : h, 2000);
	return 0;
}
