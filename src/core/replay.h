/* Replaying a trace's events into state: what is live, per device and kind, at any
 * event. One replay serves every analysis, so the numbers agree wherever shown.
 * Device bytes are what the driver handed out: plain, pitched and stream-ordered
 * allocations at their requested size, plus VMM physical memory from cuMemCreate
 * until its handle is released and its last mapping is gone. Managed and pinned host
 * memory are kept apart. */
#ifndef MT_REPLAY_H
#define MT_REPLAY_H

#include "core/format.h"
#include "core/map.h"
#include "core/array.h"
#include "core/ordered.h"

#define MT_MAX_DEVICES 256

enum mt_live_kind { MT_LIVE_DEVICE, MT_LIVE_VMM, MT_LIVE_MANAGED, MT_LIVE_HOST, MT_LIVE_KINDS };
extern const char *const mt_live_kind_names[MT_LIVE_KINDS];

struct mt_live {
	uint64_t addr, size, time;
	size_t event; /* index of the event that made it */
	uint32_t stack, phase;
	uint8_t device, kind, tag;
	uint8_t flags; /* the making event's (an ALLOC's API, MT_ALLOC_UNSEEN) */
	bool in_use;
	bool block;	    /* a caching allocator's block (MT_API_BLOCK), inside its segments */
	bool released;	    /* VMM: its handle released */
	uint64_t aux, aux2; /* the making event's: an ALLOC's stream; a block's rounded size */
	/* VMM: the handle and its references (itself and each mapping) */
	uint64_t handle;
	uint32_t refs;
	uint32_t kept_gen; /* its device's mt_peak_keep.gen when kept as it was at the peak */
};

/* Whether a live entry is in its device's bytes: device memory, or VMM physical memory. */
static inline bool mt_live_on_device(const struct mt_live *l)
{
	return l->kind == MT_LIVE_DEVICE || l->kind == MT_LIVE_VMM;
}

struct mt_device_state {
	uint64_t current, peak, peak_time;
	uint64_t reserved, reserved_at_peak; /* a caching allocator's segments, when the trace has them */
	uint64_t peak_reserved;		     /* ... the most they held at once */
	uint64_t blocks;		     /* of current, the allocator's blocks: inside its segments */
	size_t peak_event;		     /* index of the event that made the peak */
	bool seen;
	uint64_t capacity;     /* what the job may use: a policy's cap when it set one (DEVICE aux2) */
	uint64_t device_bytes; /* the device's own size */
	uint32_t name;	       /* string id */
};

/* What a device had live at its peak, kept as the replay goes past it: each entry live then
 * as it was before its first change since, with its slot. A new peak starts it afresh, so
 * the copies held are never more than what was live at the last peak. */
struct mt_kept {
	size_t slot;
	struct mt_live was;
};
struct mt_peak_keep {
	struct mt_kept *items;
	size_t n, cap;
	uint32_t gen; /* entries stamped with it (mt_live.kept_gen) are in items */
	bool lost;    /* out of memory: items is incomplete until the next peak */
};

struct mt_replay {
	struct mt_live *live; /* live[0 .. slots.n), those in_use alive */
	struct mt_slots slots;
	struct mt_map by_addr;	 /* device, managed, host allocations: address -> index + 1 */
	struct mt_map by_handle; /* VMM handle -> index + 1 */
	struct mt_map mappings;	 /* mapped address -> size << 0 (handle kept in a parallel map) */
	struct mt_map map_handle;
	struct mt_ordered mapped; /* the mapped addresses in order: an unmap finds those in its range */
	struct mt_device_state dev[MT_MAX_DEVICES];
	uint64_t managed, host, host_peak;
	uint64_t allocs, frees, failed, unmatched_frees;
	size_t index;	 /* events applied so far */
	bool track;	 /* note `touched` (the leak scan follows it; the policy engine does not) */
	size_t *touched; /* live slots the last event made, dropped or re-attributed */
	size_t ntouched, cap_touched;
	struct mt_peak_keep *kept; /* MT_MAX_DEVICES, after mt_replay_keep_peaks */
};

int mt_replay_init(struct mt_replay *r);
void mt_replay_apply(struct mt_replay *r, const struct mt_event *e); /* the next event */
void mt_replay_free(struct mt_replay *r);
/* Keep what each device has live at its peak, so that mt_replay_at_peak can give it at the
 * end without a second replay; before the first event. 0, ENOMEM, or EINVAL after it. */
int mt_replay_keep_peaks(struct mt_replay *r);
/* Device d's device and VMM entries live at its peak, as a replay stopped at the peak's
 * event would hold them, in the order of its slots: a copy into *out, which the caller
 * frees with mt_free (NULL when there are none). 0; ENOMEM, also when keeping them ran
 * out; EINVAL without mt_replay_keep_peaks. */
int mt_replay_at_peak(struct mt_replay *r, int d, struct mt_live **out, size_t *n);

#endif
