/* What PyTorch's allocator trace tracker hands memtap: one entry per action of its CUDA
 * caching allocator, copied out of its TraceEntry by torch_tracker.cc (built by memtap run
 * against the job's own torch headers) and recorded by torch.c. C and C++ both read it. */
#ifndef MEMTAP_TORCH_TRACKER_H
#define MEMTAP_TORCH_TRACKER_H

#include <stdint.h>

enum memtap_torch_action {
	MEMTAP_TORCH_ALLOC = 1,	    /* a tensor's block: size the size asked for */
	MEMTAP_TORCH_FREE,	    /* a block back in the cache (its streams done) */
	MEMTAP_TORCH_SEGMENT_ALLOC, /* cudaMalloc'ed for the cache */
	MEMTAP_TORCH_SEGMENT_FREE,  /* given back (before its cudaFree) */
	MEMTAP_TORCH_SEGMENT_MAP,   /* an expandable segment grew */
	MEMTAP_TORCH_SEGMENT_UNMAP, /* and shrank */
	MEMTAP_TORCH_OOM	    /* the allocator gave up: addr the driver's free bytes, size the request */
};

struct memtap_torch_entry {
	int action; /* enum memtap_torch_action */
	int device;
	uint64_t addr, size, stream;
};

typedef void (*memtap_torch_fn)(const struct memtap_torch_entry *e);

/* memtap_torch_attach's answers */
enum { MEMTAP_TORCH_ATTACHED, MEMTAP_TORCH_NOT_YET, MEMTAP_TORCH_REFUSED };

#endif
