/* simgpu's runtime: what nvcc's generated code calls. It registers each fatbinary's
 * kernels and variables (by their host stubs and shadows), and at the first use loads,
 * as a CUlibrary, a PTX text that declares them (an entry per kernel, a .global or
 * .const per variable): the driver gives variables device memory and finds kernels by
 * name, as a real module's would. The fatbinary itself is never read and no kernel runs:
 * a launch is checked and counted by the driver. Call configurations (<<<>>>) are a
 * per-thread stack; registration lists are guarded by one lock. */
#include "runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rt_var {
	const void *host;
	char *name;
	size_t size;
	bool constant;
	struct rt_var *next;
};

struct rt_func {
	const void *host;
	char *name;
	CUkernel kernel;
	struct rt_func *next;
};

/* The handle nvcc keeps: its first word is what __cudaRegisterFatBinary was given. */
struct rt_fatbin {
	void *image;
	bool loaded;
	CUresult load_error;
	CUlibrary lib;
	struct rt_func *funcs;
	struct rt_var *vars;
	struct rt_fatbin *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rt_fatbin *fatbins;

void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
	struct rt_fatbin *fb = calloc(1, sizeof *fb);

	if (!fb)
		return NULL;
	fb->image = fatCubin;
	pthread_mutex_lock(&reg_lock);
	fb->next = fatbins;
	fatbins = fb;
	pthread_mutex_unlock(&reg_lock);
	return &fb->image;
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void **handle)
{
	(void)handle; /* loaded at first use, when the driver is up */
}

void CUDARTAPI __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
				      int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct rt_fatbin *fb = (struct rt_fatbin *)handle;
	struct rt_func *f = calloc(1, sizeof *f);

	(void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
	if (!fb || !f || !(f->name = strdup(deviceName))) {
		free(f);
		return;
	}
	f->host = hostFun;
	pthread_mutex_lock(&reg_lock);
	f->next = fb->funcs;
	fb->funcs = f;
	pthread_mutex_unlock(&reg_lock);
}

void CUDARTAPI __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
				 size_t size, int constant, int global)
{
	struct rt_fatbin *fb = (struct rt_fatbin *)handle;
	struct rt_var *v = calloc(1, sizeof *v);

	(void)deviceAddress, (void)global;
	if (!fb || !v || ext || !(v->name = strdup(deviceName))) {
		free(v); /* an extern variable is defined in another image */
		return;
	}
	v->host = hostVar;
	v->size = size;
	v->constant = constant;
	pthread_mutex_lock(&reg_lock);
	v->next = fb->vars;
	fb->vars = v;
	pthread_mutex_unlock(&reg_lock);
}

/* Managed variables would need host-visible memory placed at load; simgpu refuses them
 * (docs/SIMGPU.md): the host pointer stays NULL. */
void CUDARTAPI __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
					const char *deviceName, int ext, size_t size, int constant, int global)
{
	(void)handle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName, (void)ext, (void)size,
	    (void)constant, (void)global;
}

/* The PTX that declares what was registered; the caller frees it. */
static char *describe(const struct rt_fatbin *fb)
{
	size_t cap = 256;
	char *s, *p;
	int n;

	for (const struct rt_func *f = fb->funcs; f; f = f->next)
		cap += strlen(f->name) + 48;
	for (const struct rt_var *v = fb->vars; v; v = v->next)
		cap += strlen(v->name) + 80;
	if (!(s = malloc(cap)))
		return NULL;
	p = s;
	n = snprintf(p, cap, ".version 8.0\n.target sm_90\n.address_size 64\n");
	p += n, cap -= (size_t)n;
	for (const struct rt_func *f = fb->funcs; f; f = f->next) {
		n = snprintf(p, cap, ".visible .entry %s()\n{\n\tret;\n}\n", f->name);
		p += n, cap -= (size_t)n;
	}
	for (const struct rt_var *v = fb->vars; v; v = v->next) {
		if (!v->size)
			continue;
		n = snprintf(p, cap, ".visible %s .align 8 .b8 %s[%zu];\n", v->constant ? ".const" : ".global", v->name,
			     v->size);
		p += n, cap -= (size_t)n;
	}
	return s;
}

/* Loads a fatbinary's library once; under reg_lock. */
static CUresult load(struct rt_fatbin *fb)
{
	char *ptx;

	if (fb->loaded)
		return fb->load_error;
	if (!(ptx = describe(fb)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	fb->load_error = DRV(cuLibraryLoadData, 12000)(&fb->lib, ptx, NULL, NULL, 0, NULL, NULL, 0);
	free(ptx);
	for (struct rt_func *f = fb->funcs; f && fb->load_error == CUDA_SUCCESS; f = f->next)
		fb->load_error = DRV(cuLibraryGetKernel, 12000)(&f->kernel, fb->lib, f->name);
	fb->loaded = true;
	return fb->load_error;
}

char CUDARTAPI __cudaInitModule(void **handle)
{
	struct rt_fatbin *fb = (struct rt_fatbin *)handle;
	CUresult r;

	if (!fb || rt_ready() != cudaSuccess)
		return 0;
	pthread_mutex_lock(&reg_lock);
	r = load(fb);
	pthread_mutex_unlock(&reg_lock);
	return r == CUDA_SUCCESS;
}

void CUDARTAPI __cudaUnregisterFatBinary(void **handle)
{
	struct rt_fatbin *fb = (struct rt_fatbin *)handle, **pp;

	if (!fb)
		return;
	pthread_mutex_lock(&reg_lock);
	for (pp = &fatbins; *pp && *pp != fb; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = fb->next;
	pthread_mutex_unlock(&reg_lock);
	/* its variables' device memory goes back with the library */
	if (fb->loaded && fb->load_error == CUDA_SUCCESS)
		DRV(cuLibraryUnload, 12000)(fb->lib);
	while (fb->funcs) {
		struct rt_func *f = fb->funcs;
		fb->funcs = f->next;
		free(f->name);
		free(f);
	}
	while (fb->vars) {
		struct rt_var *v = fb->vars;
		fb->vars = v->next;
		free(v->name);
		free(v);
	}
	free(fb);
}

/* The registered kernel whose host stub is hostFun, its library loaded. */
static cudaError_t find_kernel(const void *hostFun, CUkernel *out)
{
	cudaError_t e = cudaErrorInvalidDeviceFunction;

	READY();
	pthread_mutex_lock(&reg_lock);
	for (struct rt_fatbin *fb = fatbins; fb && e == cudaErrorInvalidDeviceFunction; fb = fb->next)
		for (struct rt_func *f = fb->funcs; f; f = f->next)
			if (f->host == hostFun) {
				CUresult r = load(fb);
				e = r == CUDA_SUCCESS ? cudaSuccess : rt_result(r);
				*out = f->kernel;
				break;
			}
	pthread_mutex_unlock(&reg_lock);
	return rt_note(e);
}

/* The registered variable whose host shadow is symbol: its device address and size on
 * the current device. */
static cudaError_t find_symbol(const void *symbol, CUdeviceptr *dptr, size_t *size)
{
	cudaError_t e = cudaErrorInvalidSymbol;

	READY();
	pthread_mutex_lock(&reg_lock);
	for (struct rt_fatbin *fb = fatbins; fb && e == cudaErrorInvalidSymbol; fb = fb->next)
		for (struct rt_var *v = fb->vars; v; v = v->next)
			if (v->host == symbol) {
				CUresult r = load(fb);
				if (r == CUDA_SUCCESS)
					r = DRV(cuLibraryGetGlobal, 12000)(dptr, size, fb->lib, v->name);
				e = r == CUDA_SUCCESS ? cudaSuccess : rt_result(r);
				break;
			}
	pthread_mutex_unlock(&reg_lock);
	return rt_note(e);
}

cudaError_t rt_function(const void *hostFun, CUfunction *out)
{
	CUkernel k = NULL;
	cudaError_t e = find_kernel(hostFun, &k);

	return e != cudaSuccess ? e : rt_result(DRV(cuKernelGetFunction, 12000)(out, k));
}

/* ---- call configuration and launches ------------------------------------------------------ */

#define MAX_CONFIG 16 /* nested <<<>>> in argument expressions */

static __thread struct config {
	dim3 grid, block;
	size_t smem;
	cudaStream_t stream;
} configs[MAX_CONFIG];
static __thread int nconfig;

unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
					       struct CUstream_st *stream)
{
	if (nconfig == MAX_CONFIG)
		return 1;
	configs[nconfig++] = (struct config){gridDim, blockDim, sharedMem, stream};
	return 0;
}

cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
	if (nconfig == 0)
		return rt_note(cudaErrorMissingConfiguration);
	nconfig--;
	*gridDim = configs[nconfig].grid;
	*blockDim = configs[nconfig].block;
	*sharedMem = configs[nconfig].smem;
	*(cudaStream_t *)stream = configs[nconfig].stream;
	return cudaSuccess;
}

cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	CUkernel k = NULL;
	cudaError_t e;

	if (!kernel)
		return rt_note(cudaErrorInvalidValue);
	e = find_kernel(hostFun, &k);
	*kernel = (cudaKernel_t)k;
	return e;
}

/* The driver's answer is the runtime's: a block of 2048 threads is cudaErrorInvalidValue
 * to CUDA 13's runtime on an H200 (2026-11-30), not a configuration error. */
static cudaError_t launch(CUfunction f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s, bool per_thread)
{
	CUresult r = (per_thread ? DRV_PT(cuLaunchKernel, 7000, 4000) : DRV(cuLaunchKernel, 4000))(
	    f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem, (CUstream)s, args, NULL);

	return rt_note(rt_result(r));
}

static cudaError_t launch_kernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s,
				 bool per_thread)
{
	CUfunction f;
	CUresult r;

	READY();
	if (!kernel)
		return rt_note(cudaErrorInvalidDeviceFunction);
	r = DRV(cuKernelGetFunction, 12000)(&f, (CUkernel)kernel);
	return r != CUDA_SUCCESS ? rt_result(r) : launch(f, g, b, args, smem, s, per_thread);
}

cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	return launch_kernel(kernel, gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					      size_t sharedMem, cudaStream_t stream)
{
	return launch_kernel(kernel, gridDim, blockDim, args, sharedMem, stream, true);
}

static cudaError_t launch_func(const void *func, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s,
			       bool per_thread)
{
	CUfunction f;
	cudaError_t e = rt_function(func, &f);

	return e != cudaSuccess ? e : launch(f, g, b, args, smem, s, per_thread);
}

cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
				       cudaStream_t stream)
{
	return launch_func(func, gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					    size_t sharedMem, cudaStream_t stream)
{
	return launch_func(func, gridDim, blockDim, args, sharedMem, stream, true);
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem,
						  cudaStream_t s)
{
	CUfunction f;
	cudaError_t e = rt_function(func, &f);

	if (e != cudaSuccess)
		return e;
	return rt_result(
	    DRV(cuLaunchCooperativeKernel, 9000)(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem, (CUstream)s, args));
}

/* ---- function attributes and occupancy ---------------------------------------------------- */

cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
	CUfunction f;
	cudaError_t e;
	int v;

	if (!attr)
		return rt_note(cudaErrorInvalidValue);
	if ((e = rt_function(func, &f)) != cudaSuccess)
		return e;
	memset(attr, 0, sizeof *attr);
#define GET(field, a)                                                                                                  \
	if (DRV(cuFuncGetAttribute, 2020)(&v, CU_FUNC_ATTRIBUTE_##a, f) == CUDA_SUCCESS)                               \
		attr->field = v;
	GET(sharedSizeBytes, SHARED_SIZE_BYTES)
	GET(constSizeBytes, CONST_SIZE_BYTES)
	GET(localSizeBytes, LOCAL_SIZE_BYTES)
	GET(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK)
	GET(numRegs, NUM_REGS)
	GET(ptxVersion, PTX_VERSION)
	GET(binaryVersion, BINARY_VERSION)
	GET(cacheModeCA, CACHE_MODE_CA)
	GET(maxDynamicSharedSizeBytes, MAX_DYNAMIC_SHARED_SIZE_BYTES)
	GET(preferredShmemCarveout, PREFERRED_SHARED_MEMORY_CARVEOUT)
#undef GET
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	CUfunction f;
	cudaError_t e = rt_function(func, &f);

	/* cudaFuncAttribute and CUfunction_attribute share the numbers of the settable ones */
	return e != cudaSuccess ? e : rt_result(DRV(cuFuncSetAttribute, 9000)(f, (CUfunction_attribute)attr, value));
}

cudaError_t CUDARTAPI cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
	CUfunction f;
	cudaError_t e = rt_function(func, &f);

	return e != cudaSuccess ? e : rt_result(DRV(cuFuncSetCacheConfig, 3000)(f, (CUfunc_cache)cacheConfig));
}

cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
									     int blockSize, size_t smem,
									     unsigned int flags)
{
	CUfunction f;
	cudaError_t e = rt_function(func, &f);

	return e != cudaSuccess ? e
				: rt_result(DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
						7000)(numBlocks, f, blockSize, smem, flags));
}

cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize,
								    size_t smem)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, smem, 0);
}

/* ---- symbols -------------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
	size_t size;

	if (!devPtr)
		return rt_note(cudaErrorInvalidValue);
	return find_symbol(symbol, (CUdeviceptr *)devPtr, &size);
}

cudaError_t CUDARTAPI cudaGetSymbolSize(size_t *size, const void *symbol)
{
	CUdeviceptr p;

	if (!size)
		return rt_note(cudaErrorInvalidValue);
	return find_symbol(symbol, &p, size);
}

/* The symbol's [offset, offset+count) on the current device. */
static cudaError_t symbol_range(const void *symbol, size_t count, size_t offset, CUdeviceptr *at)
{
	size_t size;
	cudaError_t e = find_symbol(symbol, at, &size);

	if (e != cudaSuccess)
		return e;
	if (offset > size || count > size - offset)
		return rt_note(cudaErrorInvalidValue);
	*at += offset;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
					 enum cudaMemcpyKind kind)
{
	CUdeviceptr at;
	cudaError_t e = symbol_range(symbol, count, offset, &at);

	(void)kind; /* unified addressing: the driver finds where src is */
	return e != cudaSuccess ? e : rt_result(DRV(cuMemcpy, 4000)(at, (CUdeviceptr)src, count));
}

cudaError_t CUDARTAPI cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
					   enum cudaMemcpyKind kind)
{
	CUdeviceptr at;
	cudaError_t e = symbol_range(symbol, count, offset, &at);

	(void)kind;
	return e != cudaSuccess ? e : rt_result(DRV(cuMemcpy, 4000)((CUdeviceptr)dst, at, count));
}

cudaError_t CUDARTAPI cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset,
					      enum cudaMemcpyKind kind, cudaStream_t stream)
{
	CUdeviceptr at;
	cudaError_t e = symbol_range(symbol, count, offset, &at);

	(void)kind;
	return e != cudaSuccess ? e
				: rt_result(DRV(cuMemcpyAsync, 4000)(at, (CUdeviceptr)src, count, (CUstream)stream));
}

cudaError_t CUDARTAPI cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset,
						enum cudaMemcpyKind kind, cudaStream_t stream)
{
	CUdeviceptr at;
	cudaError_t e = symbol_range(symbol, count, offset, &at);

	(void)kind;
	return e != cudaSuccess ? e
				: rt_result(DRV(cuMemcpyAsync, 4000)((CUdeviceptr)dst, at, count, (CUstream)stream));
}
