/* Fragmentation of a caching allocator's segments, wherever the trace knows them
 * (SEGMENT_ALLOC/FREE events: imported PyTorch snapshots, memtap's allocator): reserved
 * vs allocated vs requested, internal waste (blocks rounded up past the request) and
 * external waste (free space between live blocks), the largest free block per segment
 * and overall — at each device's peak, at each OOM, at the end and at evenly spaced
 * moments in between.
 *
 * A block's size is the event's aux2 when the trace gives it (a snapshot's final
 * segments, memtap's allocator); otherwise the request rounded up to PyTorch's 512-byte
 * block granule, and `estimated` says so. Segments mapped into an expandable segment
 * (flag MT_SEG_MAPPED) join their neighbours, so blocks may span pages. */
#ifndef MT_FRAGMENT_H
#define MT_FRAGMENT_H

#include "core/replay.h"
#include "reader/reader.h"

#define MT_FRAG_SAMPLES 256 /* buckets of the timeline, each sampled at its end */
#define MT_FRAG_GRANULE 512 /* PyTorch's kMinBlockSize */

struct mt_frag_state {
	uint64_t time;
	uint64_t segments, reserved, allocated, requested;
	uint64_t largest_free; /* internal = allocated - requested; external = reserved - allocated */
	uint64_t pools;	       /* of the reserved, in private pools (CUDA graphs, torch.cuda.MemPool) */
};

struct mt_frag_segment {
	uint64_t addr, size, allocated, requested, largest_free;
	uint32_t blocks, stack;
};

struct mt_frag_block {
	uint64_t addr, size;
};

struct mt_frag_device {
	bool known;
	struct mt_frag_state at_peak, at_end;
	struct mt_frag_segment *segments; /* at the peak, by address */
	size_t nsegments;
	struct mt_frag_block *blocks; /* live at the peak, by address */
	size_t nblocks;
	struct mt_frag_state *timeline; /* each bucket's end and the peak, in time order */
	size_t ntimeline;
};

struct mt_frag_oom {
	size_t event;
	struct mt_frag_state state;
	int fits; /* 1: it would have fit without fragmentation, 0: not, -1: unknown */
};

struct mt_fragment {
	bool known, estimated;
	struct mt_frag_device *dev; /* MT_MAX_DEVICES */
	struct mt_frag_oom *ooms;   /* every failed allocation, in order */
	size_t nooms, cap_ooms;
};

/* peaks: the replay at the end, for each device's peak event; segments: whether the trace
 * has any SEGMENT_ALLOC (when not, nothing is known and the events are not read). 0 or ENOMEM. */
int mt_fragment_build(struct mt_fragment *f, const struct mt_trace *t, const struct mt_replay *peaks, bool segments);
/* The same event by event, in order, inside another pass (start, a step per event, then
 * finish with the first error, which it returns; the scan is freed). */
struct mt_fragment_scan;
int mt_fragment_start(struct mt_fragment_scan **s, struct mt_fragment *f, const struct mt_trace *t,
		      const struct mt_replay *peaks, bool segments);
int mt_fragment_step(struct mt_fragment_scan *s, const struct mt_event *e, size_t i); /* e is event i */
int mt_fragment_finish(struct mt_fragment_scan *s, int err);
/* Device d's segments and live blocks as the scan stands, into out's segments and blocks
 * (the caller frees both; none where the device's segments are not known). 0 or ENOMEM. */
int mt_fragment_map(struct mt_fragment_scan *s, int device, struct mt_frag_device *out);
void mt_fragment_free(struct mt_fragment *f);
/* The OOM record of failed allocation event i, or NULL. */
const struct mt_frag_oom *mt_fragment_oom(const struct mt_fragment *f, size_t event);

#endif
