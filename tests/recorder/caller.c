/* A library that uses the CUDA runtime without linking it: it finds cudaMalloc with
 * dlsym(RTLD_DEFAULT), as some plugins do (tests/recorder/reload.c). */
#include <dlfcn.h>
#include <stddef.h>

int plugin_malloc(size_t size)
{
	int (*m)(void **, size_t) = (int (*)(void **, size_t))dlsym(RTLD_DEFAULT, "cudaMalloc");
	int (*f)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "cudaFree");
	void *p;
	int r;

	if (!m || !f)
		return -1;
	r = m(&p, size);
	return r ? r : f(p);
}
