/* memtap's caching allocator for one device: stream-ordered pools of blocks carved from
 * segments, over a backend that makes the segments (the CUDA driver inside a job, a
 * simulated device in `memtap replay`). One engine serves every policy: PyTorch's native
 * rules (`native`), memtap's (`memtap`, `memtap-vmm` with VMM stitching) and no caching
 * at all (`bump`); they differ only in struct mt_cache_config.
 *
 * Locking: each stream's pool has its own lock, so a cache hit (alloc or free) takes
 * that lock and one shard of the address table, never a device-wide one. Misses, segment
 * changes, cross-stream events, GC and release take the device lock first, then one pool
 * lock at a time. Blocks of a segment all belong to the segment's pool. */
#ifndef MT_CACHE_H
#define MT_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_CACHE_OOM 2 /* a backend's "out of memory" answer; other nonzero: failure */
#define MT_CACHE_MAX_STREAMS 1024
#define MT_CACHE_USES 4 /* streams a block may be recorded on before a free syncs the device */
/* More than any device holds (the largest, 2026: 288 GB): a request past it fails at
 * once, in every policy, before a segment or a table of its pages is made for it */
#define MT_CACHE_DEVICE_MAX (1ull << 40)

struct mt_cache_config {
	uint64_t min_block;	   /* every size rounds up to a multiple of this (512) */
	unsigned power2_divisions; /* roundup_power2_divisions (0 or 1: off) */
	uint64_t small_size;	   /* requests up to this use the small pool (1 MiB) */
	uint64_t small_segment;	   /* the small pool's segments (2 MiB) */
	uint64_t mid_segment;	   /* segments for requests below min_large (20 MiB; 0: none) */
	uint64_t min_large;	   /* (10 MiB) */
	uint64_t large_round;	   /* larger segments round up to this (2 MiB) */
	uint64_t max_split;	   /* blocks this large are never split (UINT64_MAX: no limit) */
	uint64_t split_remainder;  /* a large-pool block splits only when more than this remains */
	uint64_t oversize;	   /* past max_split, a cached block this much larger is not used */
	double gc_threshold;	   /* with a limit: free old cached segments past this fraction (0: never) */
	uint64_t limit;		   /* bytes this allocator may reserve (0: what the device has) */
	bool cache;		   /* false: every free goes back to the device at once (bump) */
	bool expandable;	   /* PyTorch's expandable segments: one growing range per pool */
	bool stitch;		   /* memtap-vmm: free physical granules mapped into new ranges */
	bool tag_pools;		   /* blocks of different tags never share a segment */
	bool trim;		   /* a new segment past the peak first frees cached ones unused for long */
	uint64_t granule;	   /* VMM page of stitched ranges (2 MiB) */
};

/* The policies by name: native, memtap, memtap-vmm, bump. 0 or EINVAL. */
int mt_cache_preset(struct mt_cache_config *c, const char *name);
/* PYTORCH_CUDA_ALLOC_CONF's syntax ("expandable_segments:True,max_split_size_mb:128,...")
 * and memtap's own keys (caching, stitch, tag_pools, granule_mb, limit_mb). 0, or EINVAL with
 * the offending key in *bad. */
int mt_cache_configure(struct mt_cache_config *c, const char *conf, const char **bad);
/* The knobs mt_cache_configure takes, in its syntax (it reads them back to the same
 * config, the fixed sizes aside); snprintf's return. */
int mt_cache_describe(const struct mt_cache_config *c, char *buf, size_t n);

/* What the engine did, for recording: a block handed out or given back (`requested` the
 * caller's size, `size` the block's), a segment (or VMM page) reserved or released. */
enum mt_cache_change { MT_CACHE_BLOCK_ALLOC, MT_CACHE_BLOCK_FREE, MT_CACHE_SEGMENT_ALLOC, MT_CACHE_SEGMENT_FREE };

struct mt_cache_backend {
	void *ctx;
	int (*seg_alloc)(void *ctx, int device, uint64_t size, uint64_t *addr);
	void (*seg_free)(void *ctx, int device, uint64_t addr, uint64_t size);
	/* VMM (needed by expandable and stitch) */
	int (*va_reserve)(void *ctx, int device, uint64_t size, uint64_t *addr);
	void (*va_free)(void *ctx, int device, uint64_t addr, uint64_t size);
	int (*phys_create)(void *ctx, int device, uint64_t size, uint64_t *handle);
	void (*phys_release)(void *ctx, int device, uint64_t handle);
	/* n consecutive pages of `page` bytes from addr, the i-th on handles[i] (one backend
	 * call for a run of pages: the driver's cuMemSetAccess covers the run at once); all of
	 * them mapped, or none */
	int (*map)(void *ctx, int device, uint64_t addr, uint64_t page, const uint64_t *handles, uint64_t n);
	void (*unmap)(void *ctx, int device, uint64_t addr, uint64_t page, uint64_t n); /* n pages mapped so */
	/* Cross-stream reuse: an event recorded on a stream (0: none could be made, and the
	 * stream is synchronized instead); whether it completed (then it is gone). */
	uint64_t (*event_record)(void *ctx, int device, uint64_t stream);
	bool (*event_done)(void *ctx, uint64_t event);
	void (*stream_sync)(void *ctx, int device, uint64_t stream); /* stream 0: the device */
	/* Optional: told every change, outside the pool locks. */
	void (*change)(void *ctx, int device, enum mt_cache_change what, uint64_t addr, uint64_t size,
		       uint64_t requested, uint64_t stream, bool mapped);
	/* The engine's own memory (zeroed), never the application's heap inside a job. */
	void *(*mem_alloc)(void *ctx, size_t bytes);
	void (*mem_free)(void *ctx, void *p, size_t bytes);
};

/* The pools' counters (allocated, requested, allocs, frees, hits) are kept per pool on
 * the hot path, with no shared atomic, and summed here; so peaks of the allocated and
 * requested bytes are the caller's to track (the recorder's trace has them exactly). */
struct mt_cache_stats {
	uint64_t reserved, allocated, requested; /* now */
	uint64_t peak_reserved;
	uint64_t segments, allocs, frees, hits, ooms, retries, stitched, released, gc_runs;
};

struct mt_cache;

/* 0, ENOMEM, or EINVAL when the config asks for VMM the backend lacks. */
int mt_cache_new(struct mt_cache **out, const struct mt_cache_config *c, const struct mt_cache_backend *b, int device);
/* Every segment back to the backend, then the engine's memory. */
void mt_cache_delete(struct mt_cache *m);
/* 0 and the block's address, or MT_CACHE_OOM (after releasing the cache and one retry;
 * at once for a request past MT_CACHE_DEVICE_MAX, which no release could make room for). */
int mt_cache_alloc(struct mt_cache *m, uint64_t size, uint64_t stream, uint8_t tag, uint64_t *addr);
/* 0, or ENOENT when addr is not a block this engine handed out. */
int mt_cache_free(struct mt_cache *m, uint64_t addr);
/* The block at addr is also used by `stream`: its memory is not reused before the work
 * that stream had queued at free time is done. 0 or ENOENT. */
int mt_cache_record_stream(struct mt_cache *m, uint64_t addr, uint64_t stream);
/* The requested and block size of a live block; false when addr is not one. */
bool mt_cache_block(struct mt_cache *m, uint64_t addr, uint64_t *requested, uint64_t *size);
/* Every cached segment (and pooled VMM page) with nothing live back to the backend. */
void mt_cache_release(struct mt_cache *m);
int mt_cache_set_limit(struct mt_cache *m, uint64_t limit); /* as mt_cache_reconfigure */
void mt_cache_stats(struct mt_cache *m, struct mt_cache_stats *s);
/* The largest free block now (bytes a single request could get without a new segment). */
uint64_t mt_cache_largest_free(struct mt_cache *m);
/* Knobs a policy may change while the job runs: rounding, split limit, GC threshold, VMM,
 * tag pools, limit. 0; EINVAL when `c` would turn caching on or off (bump), or asks for
 * VMM the backend lacks; ENOMEM. */
int mt_cache_reconfigure(struct mt_cache *m, const struct mt_cache_config *c);
/* the config in force */
void mt_cache_current(struct mt_cache *m, struct mt_cache_config *c);

/* size rounded as this config rounds a request (PyTorch's round_size) */
uint64_t mt_cache_round(const struct mt_cache_config *c, uint64_t size);

#endif
