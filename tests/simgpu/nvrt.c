/* Test helper for test_nvrt.py, which runs NVIDIA's libcudart.so.13 on simgpu's driver.
 * nvrt run LIBCUDART: dlopens that runtime and calls cudaGetDeviceCount; prints the
 * result. nvrt replay FILE: makes the cuGetProcAddress lookups listed in FILE ("NAME
 * VERSION FLAGS" a line) as that runtime does (the first three through the dlsym'd
 * cuGetProcAddress_v2, the rest through the pointer returned for cuGetProcAddress at
 * 12000) and prints "NAME VERSION FLAGS RESULT STATUS SYMBOL FILE POINTER" for each, where
 * SYMBOL and FILE are what dladdr says of the pointer (memtap's wrapper or the driver's). */
#define _GNU_SOURCE
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int run(const char *path)
{
	void *rt = dlopen(path, RTLD_NOW);
	int (*count)(int *);
	int n = -1, e;

	if (!rt) {
		fprintf(stderr, "nvrt: %s\n", dlerror());
		return 2;
	}
	*(void **)&count = dlsym(rt, "cudaGetDeviceCount");
	if (!count)
		return 2;
	e = count(&n);
	printf("cudaGetDeviceCount %d %d\n", e, n);
	return 0;
}

static int replay(const char *path)
{
	void *drv = dlopen("libcuda.so.1", RTLD_NOW);
	PFN_cuGetProcAddress_v12000 gpa, self = NULL;
	char name[256], line[512];
	FILE *f = fopen(path, "r");
	int i = 0;

	if (!drv || !f) {
		fprintf(stderr, "nvrt: cannot open libcuda.so.1 or %s\n", path);
		return 2;
	}
	*(void **)&gpa = dlsym(drv, "cuGetProcAddress_v2");
	if (!gpa)
		return 2;
	while (fgets(line, sizeof line, f)) {
		unsigned long long flags;
		CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
		void *fn = NULL;
		Dl_info info;
		int version;
		CUresult r;

		if (sscanf(line, "%255s %d %llu", name, &version, &flags) != 3)
			continue;
		r = (i++ < 3 || !self ? gpa : self)(name, &fn, version, flags, &st);
		if (r == CUDA_SUCCESS && strcmp(name, "cuGetProcAddress") == 0 && version == 12000)
			self = (PFN_cuGetProcAddress_v12000)fn;
		memset(&info, 0, sizeof info);
		if (fn)
			dladdr(fn, &info);
		printf("%s %d %llu %d %d %s %s %p\n", name, version, flags, (int)r, (int)st,
		       info.dli_sname && info.dli_saddr == fn ? info.dli_sname : "-",
		       info.dli_fname ? strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname
				      : "-",
		       fn);
	}
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "run") == 0)
		return run(argv[2]);
	if (argc == 3 && strcmp(argv[1], "replay") == 0)
		return replay(argv[2]);
	fprintf(stderr, "usage: nvrt run LIBCUDART | nvrt replay FILE\n");
	return 2;
}
