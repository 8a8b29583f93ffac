/* simgpu modules, libraries, functions and launches. Kernels are never executed: a
 * launch is checked (a live function of the current device, grid and block within the
 * device's limits, shared memory within the function's) and counted, and $SIMGPU_LOG
 * gets a "launch" line. An image in PTX text (the documented format) is read for its
 * .entry names and its .global/.const variables, which get device memory, charged to
 * the device like a real module's; any other image (cubin, fatbinary) is opaque: every
 * function name is found and no variable is. simgpu's runtime describes the kernels and
 * variables nvcc registered as PTX, so its programs get both. */
#include "sim.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct var {
	char *name;
	size_t size;
};

struct image {
	bool known; /* PTX: the names below are all there is */
	char **entries;
	size_t nentries;
	struct var *vars;
	size_t nvars;
};

struct CUmod_st {
	int device;
	struct image own, *img; /* a library's module shares the library's image */
	uintptr_t *addr;	/* each variable's device address (0: none) */
	struct CUfunc_st *funcs;
	struct CUlib_st *lib;
};

struct CUfunc_st {
	struct CUmod_st *mod;
	char *name;
	int max_dyn_smem, carveout;
	struct CUfunc_st *next;
};

struct CUlib_st {
	struct image img;
	struct CUmod_st *mods[SIM_MAX_DEVICES];
	struct CUkern_st *kerns;
};

struct CUkern_st {
	struct CUlib_st *lib;
	char *name;
	int max_dyn_smem[SIM_MAX_DEVICES];
	struct CUkern_st *next;
};

#define STATIC_SMEM 49152 /* shared memory a launch may use without opting in */

/* ---- reading PTX ------------------------------------------------------------------------ */

static size_t type_size(const char *t)
{
	static const struct {
		const char *name;
		size_t size;
	} types[] = {{".b8", 1},    {".s8", 1},	    {".u8", 1},	    {".b16", 2},  {".s16", 2}, {".u16", 2},
		     {".f16", 2},   {".bf16", 2},   {".b32", 4},    {".s32", 4},  {".u32", 4}, {".f32", 4},
		     {".f16x2", 4}, {".bf16x2", 4}, {".b64", 8},    {".s64", 8},  {".u64", 8}, {".f64", 8},
		     {".b128", 16}, {".e4m3x2", 2}, {".e5m2x2", 2}, {".tf32", 4}, {".pred", 1}};

	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strcmp(t, types[i].name) == 0)
			return types[i].size;
	return 0;
}

static int add_name(char ***list, size_t *n, const char *name, size_t len)
{
	char **l = realloc(*list, (*n + 1) * sizeof *l);

	if (!l)
		return -1;
	*list = l;
	if (!(l[*n] = strndup(name, len)))
		return -1;
	(*n)++;
	return 0;
}

#define MAXTOK 64

/* Splits a declaration into tokens: words, and the punctuation ( ) [ ] , = as their own. */
static int tokens(const char *s, size_t len, char tok[MAXTOK][128])
{
	int n = 0;

	for (size_t i = 0; i < len && n < MAXTOK;) {
		if (isspace((unsigned char)s[i])) {
			i++;
		} else if (strchr("()[],=<>", s[i])) {
			tok[n][0] = s[i++];
			tok[n++][1] = '\0';
		} else {
			size_t k = 0;
			while (i < len && !isspace((unsigned char)s[i]) && !strchr("()[],=<>", s[i]) && k < 127)
				tok[n][k++] = s[i++];
			tok[n++][k] = '\0';
		}
	}
	return n;
}

/* One module-level declaration (text before a ';' or a body's '{'). */
static int declaration(struct image *img, const char *s, size_t len)
{
	char tok[MAXTOK][128];
	int n = tokens(s, len, tok), i;
	bool global = false, ext = false;
	size_t elem = 0, count = 1;

	for (i = 0; i < n; i++) {
		if (strcmp(tok[i], ".entry") == 0)
			return i + 1 < n ? add_name(&img->entries, &img->nentries, tok[i + 1], strlen(tok[i + 1])) : 0;
		if (strcmp(tok[i], ".global") == 0 || strcmp(tok[i], ".const") == 0)
			global = true;
		if (strcmp(tok[i], ".extern") == 0)
			ext = true;
	}
	if (!global || ext)
		return 0;
	for (i = 0; i < n && !elem; i++)
		elem = type_size(tok[i]);
	for (int k = 0; k < n; k++)
		if (strcmp(tok[k], ".v2") == 0 || strcmp(tok[k], ".v4") == 0 || strcmp(tok[k], ".v8") == 0)
			count *= (size_t)(tok[k][2] - '0');
	if (!elem || i >= n)
		return 0;
	const char *name = tok[i++];
	for (; i + 2 < n && tok[i][0] == '[' && tok[i + 2][0] == ']'; i += 3)
		count *= strtoull(tok[i + 1], NULL, 0);
	if (i < n && tok[i][0] == '[')
		return 0; /* [] with no size: nothing to allocate */
	struct var *v = realloc(img->vars, (img->nvars + 1) * sizeof *v);
	if (!v)
		return -1;
	img->vars = v;
	if (!(v[img->nvars].name = strdup(name)))
		return -1;
	v[img->nvars++].size = elem * count;
	return 0;
}

/* Reads a PTX module's top level: declarations end at ';', entries and functions at their
 * body, whose braces (and an initializer's) are skipped. */
static int read_ptx(struct image *img, const char *s)
{
	const char *start = s;
	int depth = 0;
	bool init = false;

	img->known = true;
	for (const char *p = s; *p; p++) {
		if (p[0] == '/' && p[1] == '/') {
			while (*p && *p != '\n')
				p++;
			if (!*p)
				break;
		} else if (p[0] == '/' && p[1] == '*') {
			const char *e = strstr(p + 2, "*/");
			if (!e)
				break;
			p = e + 1;
		} else if (*p == '{') {
			if (depth++ == 0 && !init && declaration(img, start, (size_t)(p - start)))
				return -1;
		} else if (*p == '}') {
			if (depth > 0 && --depth == 0 && !init)
				start = p + 1;
		} else if (*p == '=' && depth == 0) {
			init = true; /* an initializer's braces are not a body */
		} else if (*p == ';' && depth == 0) {
			if (declaration(img, start, (size_t)(p - start)))
				return -1;
			start = p + 1;
			init = false;
		}
	}
	return 0;
}

static void image_free(struct image *img)
{
	for (size_t i = 0; i < img->nentries; i++)
		free(img->entries[i]);
	for (size_t i = 0; i < img->nvars; i++)
		free(img->vars[i].name);
	free(img->entries);
	free(img->vars);
	memset(img, 0, sizeof *img);
}

/* PTX is NUL-terminated text; anything else (ELF cubins, fatbinaries) stays opaque. */
static CUresult image_read(struct image *img, const void *code)
{
	const unsigned char *c = code;

	memset(img, 0, sizeof *img);
	if (!code)
		return CUDA_ERROR_INVALID_VALUE;
	if (c[0] == 0x7f || (!isprint(c[0]) && !isspace(c[0])))
		return CUDA_SUCCESS;
	if (!strstr((const char *)c, ".version") || !strstr((const char *)c, ".target"))
		return CUDA_ERROR_INVALID_IMAGE;
	if (read_ptx(img, (const char *)c)) {
		image_free(img);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

static bool has_entry(const struct image *img, const char *name)
{
	if (!img->known)
		return true;
	for (size_t i = 0; i < img->nentries; i++)
		if (strcmp(img->entries[i], name) == 0)
			return true;
	return false;
}

/* ---- modules ------------------------------------------------------------------------------ */

static size_t footprint(size_t n)
{
	return (n + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
}

static void release_globals(struct CUmod_st *m)
{
	struct sim_device *d = &sim.dev[m->device];

	for (size_t i = 0; m->addr && i < m->img->nvars; i++) {
		if (!m->addr[i])
			continue;
		sim_extent_del(m->addr[i]);
		sim_space_free(&d->space, m->addr[i], footprint(m->img->vars[i].size));
		d->used -= footprint(m->img->vars[i].size);
	}
	free(m->addr);
	m->addr = NULL;
}

/* Places the image's variables in the device's memory, charged like any allocation. */
static CUresult place_globals(struct CUmod_st *m)
{
	struct sim_device *d = &sim.dev[m->device];

	if (!m->img->nvars)
		return CUDA_SUCCESS;
	if (!(m->addr = calloc(m->img->nvars, sizeof *m->addr)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < m->img->nvars; i++) {
		size_t f = footprint(m->img->vars[i].size);
		if (!f)
			continue;
		if (f > d->capacity - d->used || sim_space_alloc(&d->space, f, SIM_ALIGN, 0, &m->addr[i])) {
			m->addr[i] = 0;
			release_globals(m);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (sim_extent_add(m->addr[i], m->img->vars[i].size, SIM_EXT_GLOBAL, m->device, m)) {
			sim_space_free(&d->space, m->addr[i], f);
			m->addr[i] = 0;
			release_globals(m);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		d->used += f;
	}
	return CUDA_SUCCESS;
}

static void module_free(struct CUmod_st *m)
{
	release_globals(m);
	for (struct CUfunc_st *f = m->funcs, *next; f; f = next) {
		next = f->next;
		sim_obj_del(f);
		free(f->name);
		free(f);
	}
	sim_obj_del(m);
	image_free(&m->own);
	free(m);
}

/* A module on dev of a library's image (shared), or of its own (own, taken over). Under
 * the lock; on failure own is left to the caller. */
static CUresult module_new(int dev, struct image *shared, struct image *own, struct CUlib_st *lib,
			   struct CUmod_st **out)
{
	struct CUmod_st *m = calloc(1, sizeof *m);
	CUresult r;

	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->device = dev;
	m->lib = lib;
	if (own)
		m->own = *own;
	m->img = shared ? shared : &m->own;
	r = place_globals(m);
	if (r == CUDA_SUCCESS && sim_obj_add(m, SIM_OBJ_MODULE))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r != CUDA_SUCCESS) {
		release_globals(m);
		free(m);
		return r;
	}
	*out = m;
	return CUDA_SUCCESS;
}

static CUresult load(CUmodule *module, const void *image)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct image img;
	struct CUmod_st *m;

	if (r != CUDA_SUCCESS)
		return r;
	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	r = image_read(&img, image);
	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	r = module_new(dev, NULL, &img, NULL, &m);
	sim_unlock();
	if (r != CUDA_SUCCESS)
		image_free(&img);
	if (r == CUDA_SUCCESS)
		*module = m;
	return r;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	return load(module, image);
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
				    void **optionValues)
{
	if (numOptions && (!options || !optionValues))
		return CUDA_ERROR_INVALID_VALUE;
	return load(module, image); /* JIT options change nothing: nothing is compiled */
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return load(module, fatCubin);
}

/* Reads a file whole, NUL-terminated so PTX text ends. */
static CUresult read_file(const char *path, char **out)
{
	FILE *f = path ? fopen(path, "rb") : NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return path ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
	do {
		if (len + 4096 + 1 > cap) {
			char *b = realloc(buf, cap = 2 * cap + 8192);
			if (!b) {
				free(buf);
				fclose(f);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			buf = b;
		}
		n = fread(buf + len, 1, 4096, f);
		len += n;
	} while (n > 0);
	fclose(f);
	if (len == 0) {
		free(buf);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	buf[len] = '\0';
	*out = buf;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
	char *buf;
	CUresult r = sim_check_init();

	if (r == CUDA_SUCCESS)
		r = read_file(fname, &buf);
	if (r != CUDA_SUCCESS)
		return r;
	r = load(module, buf);
	free(buf);
	return r;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_obj_is(hmod, SIM_OBJ_MODULE) || hmod->lib)
		r = CUDA_ERROR_INVALID_HANDLE; /* a library's modules go with the library */
	else
		module_free(hmod);
	sim_unlock();
	return r;
}

/* The module's function of that name, made once. Under the lock. */
static CUresult module_function(struct CUmod_st *m, const char *name, CUfunction *out)
{
	struct CUfunc_st *f;

	if (!has_entry(m->img, name))
		return CUDA_ERROR_NOT_FOUND;
	for (f = m->funcs; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			break;
	if (!f) {
		if (!(f = calloc(1, sizeof *f)) || !(f->name = strdup(name)) || sim_obj_add(f, SIM_OBJ_FUNCTION)) {
			if (f)
				free(f->name);
			free(f);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		f->mod = m;
		f->max_dyn_smem = STATIC_SMEM;
		f->carveout = -1;
		f->next = m->funcs;
		m->funcs = f;
	}
	*out = f;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_obj_is(hmod, SIM_OBJ_MODULE) ? module_function(hmod, name, hfunc) : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

static CUresult module_global(struct CUmod_st *m, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
	for (size_t i = 0; i < m->img->nvars; i++) {
		if (strcmp(m->img->vars[i].name, name) != 0)
			continue;
		if (dptr)
			*dptr = m->addr ? m->addr[i] : 0;
		if (bytes)
			*bytes = m->img->vars[i].size;
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!name || (!dptr && !bytes))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_obj_is(hmod, SIM_OBJ_MODULE) ? module_global(hmod, name, dptr, bytes) : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (sim_obj_is(hmod, SIM_OBJ_MODULE))
		*count = (unsigned)hmod->img->nentries;
	else
		r = CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

/* Lazy loading, as CUDA 12.2 and later default to (CUDA_MODULE_LOADING=EAGER says otherwise). */
CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	const char *v = getenv("CUDA_MODULE_LOADING");

	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = v && strcmp(v, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}

/* ---- libraries: one image, a module per device made when first used ------------------------ */

static CUresult library_load(CUlibrary *library, const void *code, unsigned int njit, unsigned int nopt)
{
	CUresult r = sim_check_init();
	struct CUlib_st *l;

	(void)njit;
	(void)nopt;
	if (r != CUDA_SUCCESS)
		return r;
	if (!library)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(l = calloc(1, sizeof *l)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = image_read(&l->img, code);
	if (r == CUDA_SUCCESS) {
		sim_lock();
		if (sim_obj_add(l, SIM_OBJ_LIBRARY))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		sim_unlock();
	}
	if (r != CUDA_SUCCESS) {
		image_free(&l->img);
		free(l);
		return r;
	}
	*library = l;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				   void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
				   void **libraryOptionValues, unsigned int numLibraryOptions)
{
	(void)jitOptions;
	(void)jitOptionsValues;
	(void)libraryOptions;
	(void)libraryOptionValues;
	return library_load(library, code, numJitOptions, numLibraryOptions);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
				       void **jitOptionsValues, unsigned int numJitOptions,
				       CUlibraryOption *libraryOptions, void **libraryOptionValues,
				       unsigned int numLibraryOptions)
{
	char *buf;
	CUresult r = sim_check_init();

	(void)jitOptions;
	(void)jitOptionsValues;
	(void)libraryOptions;
	(void)libraryOptionValues;
	if (r == CUDA_SUCCESS)
		r = read_file(fileName, &buf);
	if (r != CUDA_SUCCESS)
		return r;
	r = library_load(library, buf, numJitOptions, numLibraryOptions);
	free(buf);
	return r;
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	if (!sim_obj_is(library, SIM_OBJ_LIBRARY)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		for (int i = 0; i < SIM_MAX_DEVICES; i++)
			if (library->mods[i])
				module_free(library->mods[i]);
		for (struct CUkern_st *k = library->kerns, *next; k; k = next) {
			next = k->next;
			sim_obj_del(k);
			free(k->name);
			free(k);
		}
		sim_obj_del(library);
		image_free(&library->img);
		free(library);
	}
	sim_unlock();
	return r;
}

/* The library's module on device dev, loaded on first use. Under the lock. */
static CUresult library_module(struct CUlib_st *l, int dev, struct CUmod_st **out)
{
	CUresult r = CUDA_SUCCESS;

	if (!l->mods[dev])
		r = module_new(dev, &l->img, NULL, l, &l->mods[dev]);
	if (r == CUDA_SUCCESS)
		*out = l->mods[dev];
	return r;
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pMod)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_obj_is(library, SIM_OBJ_LIBRARY) ? library_module(library, dev, pMod) : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	CUresult r = sim_check_init();
	struct CUkern_st *k;

	if (r != CUDA_SUCCESS)
		return r;
	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(library, SIM_OBJ_LIBRARY)) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (!has_entry(&library->img, name)) {
		r = CUDA_ERROR_NOT_FOUND;
	} else {
		for (k = library->kerns; k; k = k->next)
			if (strcmp(k->name, name) == 0)
				break;
		if (!k) {
			if (!(k = calloc(1, sizeof *k)) || !(k->name = strdup(name)) ||
			    sim_obj_add(k, SIM_OBJ_KERNEL)) {
				if (k)
					free(k->name);
				free(k);
				r = CUDA_ERROR_OUT_OF_MEMORY;
			} else {
				k->lib = library;
				for (int i = 0; i < SIM_MAX_DEVICES; i++)
					k->max_dyn_smem[i] = STATIC_SMEM;
				k->next = library->kerns;
				library->kerns = k;
			}
		}
		if (r == CUDA_SUCCESS)
			*pKernel = k;
	}
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (sim_obj_is(lib, SIM_OBJ_LIBRARY))
		*count = (unsigned)lib->img.nentries;
	else
		r = CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	struct CUmod_st *m;

	if (r != CUDA_SUCCESS)
		return r;
	if (!name || (!dptr && !bytes))
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (!sim_obj_is(library, SIM_OBJ_LIBRARY))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if ((r = library_module(library, dev, &m)) == CUDA_SUCCESS)
		r = module_global(m, name, dptr, bytes);
	sim_unlock();
	return r;
}

/* The kernel's function in the current device's module. Under the lock. */
static CUresult kernel_function(struct CUkern_st *k, int dev, CUfunction *out)
{
	struct CUmod_st *m;
	CUresult r = library_module(k->lib, dev, &m);

	if (r == CUDA_SUCCESS)
		r = module_function(m, k->name, out);
	if (r == CUDA_SUCCESS)
		(*out)->max_dyn_smem = k->max_dyn_smem[dev];
	return r;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	int dev;
	CUresult r = sim_current_device(&dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_obj_is(kernel, SIM_OBJ_KERNEL) ? kernel_function(kernel, dev, pFunc) : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!pLib)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (sim_obj_is(kernel, SIM_OBJ_KERNEL))
		*pLib = kernel->lib;
	else
		r = CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	if (sim_obj_is(hfunc, SIM_OBJ_KERNEL))
		*name = hfunc->name;
	else
		r = CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

/* ---- function attributes ------------------------------------------------------------------- */

static CUresult func_attribute(int *pi, CUfunction_attribute attrib, int max_dyn_smem, int carveout)
{
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*pi = 1024;
		break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		*pi = 0;
		break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS:
		*pi = 32;
		break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
		*pi = 90;
		break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		*pi = max_dyn_smem;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		*pi = carveout;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* The settable attributes: dynamic shared memory (up to the opt-in maximum) and carveout. */
static CUresult func_set(CUfunction_attribute attrib, int value, int *max_dyn_smem, int *carveout, int dev)
{
	if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
		if (value < 0 || value > sim_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev))
			return CUDA_ERROR_INVALID_VALUE;
		*max_dyn_smem = value;
	} else if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
		if (value < -1 || value > 100)
			return CUDA_ERROR_INVALID_VALUE;
		*carveout = value;
	} else if (attrib == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH ||
		   attrib == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT ||
		   attrib == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH ||
		   attrib == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED ||
		   attrib == CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) {
		/* accepted: clusters shape nothing that is simulated */
	} else {
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_obj_is(hfunc, SIM_OBJ_FUNCTION) ? func_attribute(pi, attrib, hfunc->max_dyn_smem, hfunc->carveout)
						: CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	CUresult r = sim_check_init();

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	r = sim_obj_is(hfunc, SIM_OBJ_FUNCTION)
		? func_set(attrib, value, &hfunc->max_dyn_smem, &hfunc->carveout, hfunc->mod->device)
		: CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	sim_lock();
	r = sim_obj_is(kernel, SIM_OBJ_KERNEL) ? func_attribute(pi, attrib, kernel->max_dyn_smem[dev], -1)
					       : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	CUresult r = sim_check_device(dev);
	int carveout = -1;

	if (r != CUDA_SUCCESS)
		return r;
	sim_lock();
	r = sim_obj_is(kernel, SIM_OBJ_KERNEL) ? func_set(attrib, val, &kernel->max_dyn_smem[dev], &carveout, dev)
					       : CUDA_ERROR_INVALID_HANDLE;
	sim_unlock();
	return r;
}

static CUresult check_function(CUfunction f)
{
	CUresult r = sim_check_init();

	if (r == CUDA_SUCCESS) {
		sim_lock();
		if (!sim_obj_is(f, SIM_OBJ_FUNCTION))
			r = CUDA_ERROR_INVALID_HANDLE;
		sim_unlock();
	}
	return r;
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	CUresult r = check_function(hfunc);
	return r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : r;
}

CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	CUresult r = sim_check_device(dev);

	if (r == CUDA_SUCCESS) {
		sim_lock();
		if (!sim_obj_is(kernel, SIM_OBJ_KERNEL))
			r = CUDA_ERROR_INVALID_HANDLE;
		sim_unlock();
	}
	return r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : r;
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
	CUresult r = check_function(hfunc);

	if (r == CUDA_SUCCESS && !name)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*name = hfunc->name;
	return r;
}

CUresult CUDAAPI cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	CUresult r = check_function(hfunc);

	if (r == CUDA_SUCCESS && !hmod)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*hmod = hfunc->mod;
	return r;
}

CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction hfunc)
{
	CUresult r = check_function(hfunc);

	if (r == CUDA_SUCCESS && !state)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*state = CU_FUNCTION_LOADING_STATE_LOADED;
	return r;
}

CUresult CUDAAPI cuFuncLoad(CUfunction hfunc)
{
	return check_function(hfunc);
}

/* ---- occupancy: threads, blocks and shared memory per multiprocessor -------------------------- */

static int blocks_per_sm(int dev, int block, size_t smem)
{
	int by_threads = sim_attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) / block;
	int by_blocks = sim_attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev);
	size_t per_block = smem + (size_t)sim_attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev);
	int by_smem =
	    (int)((size_t)sim_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev) / per_block);
	int n = by_threads < by_blocks ? by_threads : by_blocks;

	return n < by_smem ? n : by_smem;
}

static CUresult occupancy(int *numBlocks, CUfunction func, int blockSize, size_t smem)
{
	CUresult r = check_function(func);

	if (r != CUDA_SUCCESS)
		return r;
	if (!numBlocks || blockSize <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	*numBlocks = blockSize > 1024 ? 0 : blocks_per_sm(func->mod->device, blockSize, smem);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
							     size_t dynamicSMemSize)
{
	return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
								      size_t dynamicSMemSize, unsigned int flags)
{
	(void)flags;
	return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

static CUresult potential_block(int *minGrid, int *blockSize, CUfunction func, CUoccupancyB2DSize smemOf, size_t smem,
				int limit)
{
	CUresult r = check_function(func);
	int best = 0, best_block = 0;

	if (r != CUDA_SUCCESS)
		return r;
	if (!minGrid || !blockSize)
		return CUDA_ERROR_INVALID_VALUE;
	if (limit <= 0 || limit > 1024)
		limit = 1024;
	for (int b = 32; b <= limit; b += 32) {
		int n = blocks_per_sm(func->mod->device, b, smemOf ? smemOf(b) : smem) * b;
		if (n > best) {
			best = n;
			best_block = b;
		}
	}
	*blockSize = best_block;
	*minGrid = best_block
		       ? best / best_block * sim_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, func->mod->device)
		       : 0;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
						  CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
						  int blockSizeLimit)
{
	return potential_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
			       blockSizeLimit);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
							   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
							   size_t dynamicSMemSize, int blockSizeLimit,
							   unsigned int flags)
{
	(void)flags;
	return potential_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
			       blockSizeLimit);
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
							 int blockSize)
{
	CUresult r = check_function(func);
	int dev;

	if (r != CUDA_SUCCESS)
		return r;
	if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	dev = func->mod->device;
	*dynamicSmemSize =
	    (size_t)sim_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev) / (size_t)numBlocks -
	    (size_t)sim_attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev);
	return CUDA_SUCCESS;
}

/* ---- launches --------------------------------------------------------------------------------- */

CUresult sim_launch_check(CUfunction f, int dev, const unsigned grid[3], const unsigned block[3], unsigned smem,
			  CUfunction *resolved)
{
	static const CUdevice_attribute gmax[3] = {
	    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
	static const CUdevice_attribute bmax[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
						   CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
						   CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
	unsigned long long threads = 1;
	CUresult r;

	if (sim_obj_is(f, SIM_OBJ_KERNEL)) {
		r = kernel_function((struct CUkern_st *)(void *)f, dev, &f);
		if (r != CUDA_SUCCESS)
			return r;
	} else if (!sim_obj_is(f, SIM_OBJ_FUNCTION)) {
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (f->mod->device != dev)
		return CUDA_ERROR_INVALID_HANDLE; /* a function of another device's context */
	for (int i = 0; i < 3; i++) {
		if (grid[i] == 0 || block[i] == 0 || grid[i] > (unsigned)sim_attribute(gmax[i], dev) ||
		    block[i] > (unsigned)sim_attribute(bmax[i], dev))
			return CUDA_ERROR_INVALID_VALUE;
		threads *= block[i];
	}
	if (threads > (unsigned)sim_attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev))
		return CUDA_ERROR_INVALID_VALUE;
	if (smem > (unsigned)f->max_dyn_smem)
		return CUDA_ERROR_INVALID_VALUE;
	*resolved = f;
	return CUDA_SUCCESS;
}

void sim_launched(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem)
{
	__atomic_add_fetch(&sim.launches, 1, __ATOMIC_RELAXED);
	sim_log("launch %s %u %u %u %u %u %u %u", f->name, grid[0], grid[1], grid[2], block[0], block[1], block[2],
		smem);
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem, CUstream s,
		       void **params, void **extra, bool cooperative)
{
	int dev;
	CUresult r = sim_current_device(&dev);
	CUgraphNode n;

	if (r != CUDA_SUCCESS)
		return r;
	if (params && extra)
		return CUDA_ERROR_INVALID_VALUE; /* arguments come one way or the other */
	sim_lock();
	if (!sim_valid_stream(s))
		r = CUDA_ERROR_INVALID_HANDLE;
	else
		r = sim_launch_check(f, dev, grid, block, smem, &f);
	if (r == CUDA_SUCCESS && cooperative &&
	    (unsigned long long)grid[0] * grid[1] * grid[2] >
		(unsigned long long)blocks_per_sm(dev, (int)(block[0] * block[1] * block[2]), smem) *
		    (unsigned)sim_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
		r = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
	if (r == CUDA_SUCCESS && sim_capturing(s)) {
		r = sim_capture_add(s, CU_GRAPH_NODE_TYPE_KERNEL, &n);
		if (r == CUDA_SUCCESS)
			sim_node_kernel(n, f, grid, block, smem);
	} else if (r == CUDA_SUCCESS) {
		sim_launched(f, grid, block, smem);
	}
	sim_unlock();
	return r;
}

#define DIMS(x, y, z) ((const unsigned[3]){x, y, z})

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
				void **extra)
{
	return launch(f, DIMS(gx, gy, gz), DIMS(bx, by, bz), smem, s, params, extra, false);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				     unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
				     void **extra)
{
	return launch(f, DIMS(gx, gy, gz), DIMS(bx, by, bz), smem, s ? s : CU_STREAM_PER_THREAD, params, extra, false);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					   unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
					   CUstream s, void **params)
{
	return launch(f, DIMS(gx, gy, gz), DIMS(bx, by, bz), smem, s, params, NULL, true);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
						unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
						CUstream s, void **params)
{
	return launch(f, DIMS(gx, gy, gz), DIMS(bx, by, bz), smem, s ? s : CU_STREAM_PER_THREAD, params, NULL, true);
}

/* Launch attributes (clusters, priorities, ...) are accepted and change nothing simulated. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra, bool per_thread)
{
	if (!c || (c->numAttrs && !c->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, DIMS(c->gridDimX, c->gridDimY, c->gridDimZ), DIMS(c->blockDimX, c->blockDimY, c->blockDimZ),
		      c->sharedMemBytes, per_thread && !c->hStream ? CU_STREAM_PER_THREAD : c->hStream, params, extra,
		      false);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	return launch_ex(config, f, params, extra, false);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	return launch_ex(config, f, params, extra, true);
}
