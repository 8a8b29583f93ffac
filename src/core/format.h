/* The memtap trace: events as both sides see them, and the file's building blocks.
 * The injected library fills struct mt_event on its hot path; the writer encodes
 * them into checksummed chunks; the reader decodes them back. Layout: docs/FORMAT.md. */
#ifndef MT_FORMAT_H
#define MT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_FORMAT_VERSION 1
#define MT_FILE_MAGIC "MEMTAP\0\x01"
#define MT_CHUNK_MAGIC 0x4b43544du /* "MTCK" little-endian */
#define MT_CHUNK_MAX (4u << 20)
/* No allocation, mapping or reservation is larger: above it a size is damage. 2^56 bytes is
 * all of a process's address space with five-level page tables. */
#define MT_MAX_SIZE (1ull << 56)
#define MT_MAX_DEPTH 4096 /* frames in a stack */

enum mt_kind {
#define EV(name, text, doc) MT_EV_##name,
#include "core/events.def"
#undef EV
	MT_EV_COUNT
};

extern const char *const mt_kind_names[MT_EV_COUNT];

/* How an allocation was asked for (flags of ALLOC). */
enum mt_api {
	MT_API_DRIVER = 1, /* cuMemAlloc */
	MT_API_RUNTIME,	   /* cudaMalloc */
	MT_API_PITCH,	   /* cuMemAllocPitch, cudaMallocPitch, cudaMalloc3D */
	MT_API_ASYNC,	   /* cuMemAllocAsync, cudaMallocAsync */
	MT_API_POOL,	   /* cuMemAllocFromPoolAsync, cudaMallocFromPoolAsync */
	MT_API_MANAGED,
	MT_API_HOST,
	MT_API_VMM,
	MT_API_BLOCK,	 /* a block of a caching allocator's segment (imported, memtap's allocator):
			  * size the request, aux2 the block's rounded size (0: unknown) */
	MT_API_ARRAY,	 /* cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate: addr the handle */
	MT_API_REGISTER, /* cuMemHostRegister (a host_alloc): the caller's pages, pinned */
	MT_API_IPC,	 /* cuIpcOpenMemHandle: another process's memory, on no device of this one's */
	MT_API_GRAPH,	 /* a graph's memory node (cuGraphAddMemAllocNode) */
};

/* VMM_CREATE aux2: cuMemImportFromShareableHandle's handle, another process's memory
 * (on no device of this one's, size 0: the mapping tells) */
#define MT_VMM_IMPORTED 1

/* ALLOC flags past the API (its low 6 bits): made before the recording began, known
 * only from the final state or a later free (imported snapshots); made before memtap's
 * own constructor ran, in the constructor of a library loaded after it, and recorded
 * from the call by a start that came early (ALLOC, HOST_ALLOC and MANAGED_ALLOC). */
#define MT_ALLOC_UNSEEN 0x40
#define MT_ALLOC_EARLY 0x80
#define MT_API_MASK 0x3f

/* FREE flags (imported snapshots): freed by the program, but the caching allocator's free
 * still waits on other streams' work (PyTorch's active_pending_free block at the end: a
 * free_requested without its free_completed), dated at the trace's end; with
 * MT_FREE_REQUESTED, aux2 is when the free was requested (its free_requested entry). */
#define MT_FREE_PENDING 1
#define MT_FREE_REQUESTED 2

/* MEMINFO flags: 0 the job's own cuMemGetInfo; memtap's readings, which the job did not
 * ask for, at a device's first use and at exit. */
#define MT_MEMINFO_FIRST_USE 1
#define MT_MEMINFO_EXIT 2

/* SEGMENT_ALLOC flags: pages mapped into an expandable segment, which join their
 * neighbours of the same pool and stream (PyTorch's segment_map); the small pool's
 * segment (PyTorch's segment_type "small"); reserved before the recording began. */
#define MT_SEG_MAPPED 1
#define MT_SEG_SMALL 2
#define MT_SEG_UNSEEN 0x40

/* Categories a user can tag memory with (memtap_tag_*). 0 is "not tagged". */
enum mt_tag {
	MT_TAG_NONE,
	MT_TAG_PARAMS,
	MT_TAG_GRADS,
	MT_TAG_OPTIMIZER,
	MT_TAG_ACTIVATIONS,
	MT_TAG_TEMPORARIES,
	MT_TAG_OTHER,
	MT_TAG_COUNT
};
extern const char *const mt_tag_names[MT_TAG_COUNT];

#define MT_NO_DEVICE 0xff
/* A stack entry that is a Python frame, not a return address: the low 32 bits are the
 * id of the string "function\tfile\tline". */
#define MT_PYFRAME (1ull << 63)

struct mt_event {
	uint8_t kind;
	uint8_t device; /* MT_NO_DEVICE when not known */
	uint8_t tag;
	uint8_t flags;
	uint32_t thread; /* index of the thread, in order of first event */
	uint64_t time;	 /* CLOCK_MONOTONIC nanoseconds */
	uint64_t addr, size, aux, aux2;
	uint32_t stack; /* interned stack id, 0 = none */
	uint32_t phase; /* string id of the innermost NVTX range, 0 = none */
	int32_t error;	/* CUresult of a failed call */
};

/* The API an ALLOC or ALLOC_FAILED names (enum mt_api), without the other flags. */
static inline unsigned mt_api(const struct mt_event *e)
{
	return e->flags & MT_API_MASK;
}

enum mt_chunk_type {
	MT_CHUNK_INFO = 1, /* "key=value\n" lines */
	MT_CHUNK_STRINGS,  /* id, length, bytes */
	MT_CHUNK_STACKS,   /* id, depth, frames */
	MT_CHUNK_MODULES,  /* path, build id, base, size */
	MT_CHUNK_EVENTS,   /* encoded events */
	MT_CHUNK_END,	   /* totals of a clean close */
	MT_CHUNK_DROPS,	   /* events dropped so far, by reason (written when a count changes) */
};

/* Why an event made in the job is not in the trace. The numbers are the file format
 * (END and DROPS chunks list the counts in this order): append, never reorder. */
#define MT_DROP_REASONS(X)                                                                                             \
	X(RING_FULL, "ring_full", "a thread's buffer stayed full for 10 ms: the writer did not keep up")               \
	X(MEMORY, "memory", "memtap's memory cap (max_memory) left no buffer for the thread")                          \
	X(WRITE, "write", "the trace file could not be created or written (a full disk, a size limit)")                \
	X(NESTED, "nested", "signal handlers nested inside memtap's recording more deeply than it holds")              \
	X(INVALID, "invalid", "an event no trace may hold (a size past any address space): refused, not written")
enum mt_drop {
#define X(name, text, doc) MT_DROP_##name,
	MT_DROP_REASONS(X)
#undef X
	    MT_DROP_COUNT
};
extern const char *const mt_drop_names[MT_DROP_COUNT];

struct mt_chunk_header {
	uint32_t magic;
	uint8_t type;
	uint8_t reserved[3];
	uint32_t length; /* payload bytes after this header */
	uint32_t crc;	 /* CRC-32C (Castagnoli) of the payload */
};

uint32_t mt_crc32(uint32_t crc, const void *data, size_t len);
/* The IEEE CRC-32 that memtap wrote before 2026-11-21, for reading those traces. */
uint32_t mt_crc32_ieee(uint32_t crc, const void *data, size_t len);

/* A growing byte buffer with varint writers; memory comes from the given allocator
 * so the injected library can keep it off the application's heap. */
struct mt_buf {
	uint8_t *data;
	size_t len, cap;
	void *(*grow)(void *old, size_t old_cap, size_t new_cap);
	int failed; /* a grow failed: the buffer stopped growing */
};

void mt_buf_bytes(struct mt_buf *b, const void *p, size_t n);
void mt_buf_u8(struct mt_buf *b, uint8_t v);
void mt_buf_varint(struct mt_buf *b, uint64_t v);
void mt_buf_zigzag(struct mt_buf *b, int64_t v);

/* Event encoding state: deltas are against the previous event of the same chunk. */
struct mt_encoder {
	uint64_t time, addr;
};

void mt_encode_event(struct mt_buf *b, struct mt_encoder *st, const struct mt_event *e);
/* What a valid event is, whatever its tables: a known kind and tag; a size no larger than
 * any address space unless it is the job's own number (a failed request, a pool's
 * attribute or bytes to keep may be anything the job passed); a range that does not run
 * past the end of the address space. The writer refuses an invalid event and counts it
 * (MT_DROP_INVALID); the reader rejects it. */
#define MT_KIND_BIT(name) (1ull << MT_EV_##name)
#define MT_ANY_SIZE_KINDS (MT_KIND_BIT(ALLOC_FAILED) | MT_KIND_BIT(POOL_ATTR) | MT_KIND_BIT(POOL_TRIM))
#define MT_RANGE_KINDS                                                                                                 \
	(MT_KIND_BIT(ALLOC) | MT_KIND_BIT(MANAGED_ALLOC) | MT_KIND_BIT(HOST_ALLOC) | MT_KIND_BIT(VMM_RESERVE) |        \
	 MT_KIND_BIT(VMM_ADDR_FREE) | MT_KIND_BIT(VMM_MAP) | MT_KIND_BIT(VMM_UNMAP) | MT_KIND_BIT(TAG_RANGE) |         \
	 MT_KIND_BIT(VMM_ACCESS) | MT_KIND_BIT(SEGMENT_ALLOC) | MT_KIND_BIT(SEGMENT_FREE))
_Static_assert(MT_EV_COUNT <= 64, "a kind's bit fits a 64-bit mask");

static inline uint64_t mt_kind_bit(uint8_t kind)
{
	return kind < MT_EV_COUNT ? 1ull << kind : 0;
}

static inline int mt_event_valid(const struct mt_event *e)
{
	uint64_t bit = mt_kind_bit(e->kind);

	return bit && e->tag < MT_TAG_COUNT && (e->size <= MT_MAX_SIZE || (bit & MT_ANY_SIZE_KINDS)) &&
	       (!(bit & MT_RANGE_KINDS) || e->addr + e->size >= e->addr);
}

/* Kinds whose aux is a string id. */
static inline bool mt_aux_is_string(uint8_t kind)
{
	return kind == MT_EV_RANGE_PUSH || kind == MT_EV_RANGE_START || kind == MT_EV_NVTX_MARK || kind == MT_EV_MARK ||
	       kind == MT_EV_SNAPSHOT || kind == MT_EV_DEVICE;
}

/* Why mt_event_valid says no, in buf (len > 0), or NULL when it says yes. */
const char *mt_event_invalid(const struct mt_event *e, char *buf, size_t len);

/* Decoding: a cursor over a payload; `bad` is set on malformed input. */
struct mt_cursor {
	const uint8_t *p, *end;
	int bad;
};

uint64_t mt_get_varint(struct mt_cursor *c);
int64_t mt_get_zigzag(struct mt_cursor *c);
int mt_decode_event(struct mt_cursor *c, struct mt_encoder *st, struct mt_event *e); /* 0, or -1 when bad */

/* Orders events by time, stably, at little cost when they come in long sorted runs
 * (core/sort.c, over core/alloc.h): 0 or ENOMEM. */
int mt_sort_events(struct mt_event *e, size_t n);

#endif
