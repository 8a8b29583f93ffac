/* memtap: where a GPU training job's memory goes.
 *
 * The application-side API. Include this header and call the functions whether or
 * not the job runs under memtap: each call looks memtap up at run time (dlsym) and
 * does nothing, returning ENOSYS, when memtap is not loaded. No link flag is needed.
 * memtap's own sources define MEMTAP_BUILDING to get the plain declarations.
 * Every function returns 0 or an errno-style code; memtap_active returns 1 or 0. */
#ifndef MEMTAP_H
#define MEMTAP_H

#include <errno.h>
#include <stddef.h>

/* ---- version ---- */
#define MEMTAP_VERSION_MAJOR 0
#define MEMTAP_VERSION_MINOR 1

/* ---- categories for tagging ---- */
enum memtap_category {
	MEMTAP_PARAMS = 1,
	MEMTAP_GRADS = 2,
	MEMTAP_OPTIMIZER = 3,
	MEMTAP_ACTIVATIONS = 4,
	MEMTAP_TEMPORARIES = 5,
	MEMTAP_OTHER = 6
};

#ifdef MEMTAP_BUILDING
#define MEMTAP_API_OR(ret, name, params, args, absent) ret name params;
#else
#include <dlfcn.h>
/* Looks the function up once per translation unit; RTLD_DEFAULT is a null handle on
 * Linux. dlsym's object pointer becomes a function pointer through a union, which ISO C
 * and C++ compilers accept with -pedantic (a cast between the two they warn about).
 * absent: what the call returns when memtap is not loaded. */
#define MEMTAP_API_OR(ret, name, params, args, absent)                                                                 \
	static inline ret name params                                                                                  \
	{                                                                                                              \
		static union {                                                                                         \
			void *object;                                                                                  \
			ret(*fn) params;                                                                               \
		} found;                                                                                               \
		static int looked;                                                                                     \
		if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {                                                     \
			found.object = dlsym(0, #name);                                                                \
			__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);                                                \
		}                                                                                                      \
		return found.object ? found.fn args : (absent);                                                        \
	}
#endif
#define MEMTAP_API(ret, name, params, args) MEMTAP_API_OR(ret, name, params, args, ENOSYS)

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tagging: say what memory is for ---- */
/* Allocations this thread makes until the matching pop carry the category. */
MEMTAP_API(int, memtap_tag_push, (int category), (category))
MEMTAP_API(int, memtap_tag_pop, (void), ())
/* Memory already allocated (or a part of it) carries the category from now on. */
MEMTAP_API(int, memtap_tag_range, (const void *ptr, size_t size, int category), (ptr, size, category))

/* ---- marks and control ---- */
/* An iteration boundary (or any named point) in the trace. */
MEMTAP_API(int, memtap_mark, (const char *name), (name))
/* Writes the trace recorded so far, closed, to path: `memtap report path` reads it. */
MEMTAP_API(int, memtap_snapshot, (const char *path), (path))
/* 1 when this process is being recorded, else 0 (also when memtap is not loaded). */
MEMTAP_API_OR(int, memtap_active, (void), (), 0)

/* ---- the caching allocator (docs/ALLOCATOR.md) ----
 * PyTorch's pluggable-allocator signatures, for
 * torch.cuda.memory.CUDAPluggableAllocator(libmemtap.so, "memtap_alloc", "memtap_free")
 * in a job run under memtap, and its optional hooks (set_init_fn, set_reset_fn,
 * set_memory_fraction_fn, set_record_stream_fn). The stream is a cudaStream_t. These are
 * not looked up at run time: call them only where libmemtap.so is loaded. */
struct CUstream_st;
void *memtap_alloc(size_t size, int device, struct CUstream_st *stream);
void memtap_free(void *ptr, size_t size, int device, struct CUstream_st *stream);
void memtap_init(int device_count);
void memtap_reset(void);
void memtap_memory_fraction(double fraction, int device);
void memtap_record_stream(void *ptr, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#undef MEMTAP_API
#undef MEMTAP_API_OR
#endif
