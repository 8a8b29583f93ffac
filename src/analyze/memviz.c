/* The memviz export: a pickle in PyTorch's current snapshot layout (segments,
 * device_traces, allocator_settings) that pytorch.org/memory_viz and
 * torch/cuda/_memory_viz.py read. Where the trace knows a caching allocator's segments
 * (memtap's allocator, an imported snapshot) they are written as they were: blocks with
 * their exact sizes inside them, free space as inactive blocks, a VMM range's mapped
 * pages as one expandable segment (segment_map/unmap in the trace). Any other device
 * allocation had no allocator in between, so it is its own segment holding one block
 * exactly as large as requested. Either way blocks tile segments, and replaying
 * device_traces (segment_alloc + alloc, free_requested + free_completed + segment_free;
 * segment_map and segment_unmap add and take away exactly their pages) gives the segments
 * at the end: as PyTorch reports expandable segments, one segment per run of mapped
 * pages, never overlapping. A free still waiting on other streams at the end (an
 * imported active_pending_free block) is a free_requested where it was asked, with no
 * free_completed, and its block stays active_pending_free; an imported snapshot entry
 * stays where it was; no entry is made up. Each trace entry carries its category in the
 * profiler's words (parameter, gradient, optimizer_state, activation, temporary),
 * anything else 'unknown' (segments, ooms and snapshot entries too): the viewer's
 * annotate_snapshot throws, leaving a blank page, when entries have categories and none
 * is 'unknown', so where every entry would name another, none carries a category. An
 * imported snapshot's allocator_settings and external_annotations are written back as
 * they were read (less the ranges the import left out, which ended before the first
 * entry); a snapshot without times gets none. Only opcodes the viewer's
 * JavaScript unpickler knows are written (protocol 4, integers of at most 8 bytes);
 * repeated strings and stacks are memoized. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/export.h"
#include "core/array.h"
#include "core/map.h"

/* memtap's categories as the profiler names them (torch/profiler/_memory_profiler.py's
 * Category, lowercased as torch/cuda/_memory_viz.py writes them); the reader maps them back */
static const char *const category_names[MT_TAG_COUNT] = {"unknown",    "parameter", "gradient", "optimizer_state",
							 "activation", "temporary", "unknown"};

struct writer {
	FILE *out;
	struct mt_map memo_stack; /* stack id -> memo index + 1 */
	struct mt_map memo_str;	  /* string hash -> memo index + 1 */
	uint32_t memo;		  /* next memo index */
	unsigned batch;		  /* entries since the device list's last MARK */
	bool dry;		  /* a first pass: only which categories entries say */
	bool unknown;		  /* an entry said category 'unknown' */
	bool named;		  /* an entry said another category */
	bool uncategorized;	  /* entries say no category (they would all be named) */
};

static void op(struct writer *w, uint8_t c)
{
	putc_unlocked(c, w->out);
}

static void u32(struct writer *w, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		putc_unlocked((int)(v >> (8 * i)) & 0xff, w->out);
}

static void memoize(struct writer *w)
{
	op(w, 0x94); /* MEMOIZE */
	w->memo++;
}

static void get(struct writer *w, uint32_t index)
{
	if (index < 256) {
		op(w, 'h'); /* BINGET */
		op(w, (uint8_t)index);
	} else {
		op(w, 'j'); /* LONG_BINGET */
		u32(w, index);
	}
}

static void integer(struct writer *w, int64_t v)
{
	if (v >= 0 && v < 256) {
		op(w, 'K');
		op(w, (uint8_t)v);
	} else if (v >= 0 && v < 65536) {
		op(w, 'M');
		op(w, (uint8_t)v);
		op(w, (uint8_t)(v >> 8));
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		op(w, 'J');
		u32(w, (uint32_t)v);
	} else {
		op(w, 0x8a); /* LONG1, 8 bytes two's complement */
		op(w, 8);
		for (int i = 0; i < 8; i++)
			fputc((int)((uint64_t)v >> (8 * i)) & 0xff, w->out);
	}
}

static void str(struct writer *w, const char *s, bool remember)
{
	size_t n = strlen(s);
	uint64_t h = 0xcbf29ce484222325ull, k;

	if (remember) {
		for (const char *p = s; *p; p++)
			h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
		if (mt_map_get(&w->memo_str, h, &k)) {
			get(w, (uint32_t)(k - 1));
			return;
		}
	}
	if (n < 256) {
		op(w, 0x8c); /* SHORT_BINUNICODE */
		op(w, (uint8_t)n);
	} else {
		op(w, 'X'); /* BINUNICODE */
		u32(w, (uint32_t)n);
	}
	fwrite(s, 1, n, w->out);
	if (remember) {
		mt_map_put(&w->memo_str, h, w->memo + 1);
		memoize(w);
	}
}

static void key(struct writer *w, const char *k)
{
	str(w, k, true);
}

static void int_item(struct writer *w, const char *k, int64_t v)
{
	key(w, k);
	integer(w, v);
}

/* A stack as PyTorch writes it: [{"filename", "line", "name"}, ...], innermost first. */
static void frames(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, uint32_t stack)
{
	const struct mt_trace *t = r->trace;
	uint64_t k;

	if (stack && mt_map_get(&w->memo_stack, stack, &k)) {
		get(w, (uint32_t)(k - 1));
		return;
	}
	op(w, ']'); /* EMPTY_LIST */
	if (stack && stack < t->nstacks && t->stacks[stack].depth) {
		op(w, '('); /* MARK */
		for (uint32_t i = 0; i < t->stacks[stack].depth; i++) {
			const struct mt_frame *f = mt_symbols_frame(sym, t->stacks[stack].frames[i]);
			char name[512];
			if (!f->function)
				snprintf(name, sizeof name, "%s+0x%" PRIx64, f->module ? f->module : "??", f->offset);
			op(w, '}');
			op(w, '(');
			key(w, "filename"); /* an imported frame's as it was, '' too */
			str(w, f->file ? f->file : t->nnamed ? "" : f->module ? f->module : "??", true);
			int_item(w, "line", f->line);
			key(w, "name");
			str(w, f->function ? f->function : name, true);
			op(w, 'u'); /* SETITEMS */
		}
		op(w, 'e'); /* APPENDS */
	}
	if (stack) {
		mt_map_put(&w->memo_stack, stack, w->memo + 1);
		memoize(w);
	}
}

/* One trace entry; a snapshot entry has no frames, as PyTorch writes it. */
static void entry(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, const char *action,
		  uint64_t addr, uint64_t size, uint64_t stream, uint64_t time, uint32_t stack, uint8_t cat)
{
	cat = cat < MT_TAG_COUNT ? cat : 0;
	if (cat == MT_TAG_NONE || cat == MT_TAG_OTHER)
		w->unknown = true;
	else
		w->named = true;
	if (w->dry)
		return;
	op(w, '}');
	op(w, '(');
	key(w, "action");
	str(w, action, true);
	key(w, strcmp(action, "oom") ? "addr" : "device_free");
	integer(w, (int64_t)addr);
	int_item(w, "size", (int64_t)size);
	int_item(w, "stream", (int64_t)stream);
	if (!r->order)
		int_item(w, "time_us", (int64_t)(time / 1000));
	key(w, "compile_context");
	str(w, "", true);
	key(w, "user_metadata");
	str(w, "", true);
	if (!w->uncategorized) {
		key(w, "category");
		str(w, category_names[cat], true);
	}
	if (strcmp(action, "snapshot")) {
		key(w, "frames");
		frames(w, r, sym, stack);
	}
	op(w, 'u');
	if (++w->batch == 1000) { /* APPENDS in batches, as Python's pickler does: a reader's stack stays short */
		op(w, 'e');
		op(w, '(');
		w->batch = 0;
	}
}

/* A segment as it stands at the end: a caching allocator's (from SEGMENT events, mapped
 * pages of one range joined), or a plain allocation standing alone. */
struct seg {
	uint64_t addr, size, stream;
	uint64_t pool; /* segment_pool_id as a << 32 | b */
	uint32_t stack;
	bool expandable, small;
};

struct block {
	uint64_t addr, size, requested;
	uint32_t stack;
	bool pending; /* freed, the free waiting on other streams: active_pending_free */
};

/* An allocation as its entries, its block and its segment say it. */
struct made {
	uint64_t addr, size, stream;
	uint64_t rounded; /* its block's size in its segment: a caching allocator's rounding, else size */
	uint32_t stack;
	uint8_t api, category;
};

/* A free still pending at the end (MT_FREE_PENDING, imported): its free_requested is
 * written where it was asked for, with no free_completed; its block stays in its segment. */
struct pend {
	uint64_t asked; /* when its free was requested; UINT64_MAX: not in the trace */
	uint64_t addr, stream;
	size_t at;  /* its free's place in the trace: ties of asked keep the trace's order */
	bool freed; /* the device's trace reached its free: a is its allocation */
	struct made a;
	int device;
};

/* What the trace holds, before any entry is written: which devices have segments, whether
 * pages were mapped, and each device's frees pending at the end (pend[first[d]] on,
 * first[d + 1] - first[d] of them, in order of when they were asked for). */
struct survey {
	bool segments[MT_MAX_DEVICES], mapped;
	struct pend *pend;
	size_t first[MT_MAX_DEVICES + 1];
};

static int by_addr(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b; /* both structs start with addr */

	return x < y ? -1 : x > y;
}

static void block_dict(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, uint64_t addr,
		       uint64_t size, uint64_t requested, const char *state, uint32_t stack)
{
	op(w, '}');
	op(w, '(');
	int_item(w, "address", (int64_t)addr);
	int_item(w, "size", (int64_t)size);
	int_item(w, "requested_size", (int64_t)requested);
	key(w, "state");
	str(w, state, true);
	key(w, "frames");
	frames(w, r, sym, strcmp(state, "inactive") ? stack : 0);
	op(w, 'u');
	op(w, 'a');
}

/* One segment with its blocks (b: the active blocks from this segment on, by address);
 * free space between them is an inactive block, so blocks tile the segment. As PyTorch
 * counts them: allocated_size the allocated blocks, active_size and requested_size
 * those and the pending ones. Returns how many blocks it held. */
static size_t segment_dict(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, int device,
			   const struct seg *g, const struct block *b, size_t nb)
{
	uint64_t allocated = 0, active = 0, requested = 0, at = g->addr, end = g->addr + g->size;
	size_t n = 0;

	for (; n < nb && b[n].addr < end; n++) {
		allocated += b[n].pending ? 0 : b[n].size;
		active += b[n].size;
		requested += b[n].requested;
	}
	op(w, '}');
	op(w, '(');
	int_item(w, "device", device);
	int_item(w, "address", (int64_t)g->addr);
	int_item(w, "total_size", (int64_t)g->size);
	int_item(w, "allocated_size", (int64_t)allocated);
	int_item(w, "active_size", (int64_t)active);
	int_item(w, "requested_size", (int64_t)requested);
	int_item(w, "stream", (int64_t)g->stream);
	key(w, "segment_type");
	str(w, g->small || (g->size <= (2u << 20) && !g->expandable) ? "small" : "large", true);
	int_item(w, "segment_pool_id", (int64_t)(g->pool >> 32));
	integer(w, (int64_t)(g->pool & 0xffffffffu));
	op(w, 0x86); /* TUPLE2 */
	key(w, "is_expandable");
	op(w, g->expandable ? 0x88 : 0x89); /* NEWTRUE, NEWFALSE */
	key(w, "frames");
	frames(w, r, sym, g->stack);
	key(w, "blocks");
	op(w, ']');
	for (size_t i = 0; i < n; i++) {
		if (b[i].addr > at)
			block_dict(w, r, sym, at, b[i].addr - at, 0, "inactive", 0);
		block_dict(w, r, sym, b[i].addr, b[i].size, b[i].requested,
			   b[i].pending ? "active_pending_free" : "active_allocated", b[i].stack);
		at = b[i].addr + b[i].size;
	}
	if (at < end)
		block_dict(w, r, sym, at, end - at, 0, "inactive", 0);
	op(w, 'u');
	op(w, 'a'); /* the segment into segments */
	return n;
}

/* The device's segments at the end, by address: the caching allocator's (live SEGMENT
 * events) with the blocks inside them, and every other live allocation (or one whose
 * free is pending) as a segment of its own block. ENOMEM or 0. */
static int write_segments(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, int device,
			  const struct survey *s)
{
	const bool segless = !s->segments[device];
	const size_t npend = s->first[device + 1] - s->first[device];
	const struct pend *pend = npend ? s->pend + s->first[device] : NULL;
	struct seg *segs = NULL;
	struct block *blocks = NULL;
	struct mt_walk *walk = mt_walk_start(r->trace);
	const struct mt_event *e;
	size_t nsegs = 0, nblocks = 0, cap = 0, k;
	int err = 0;

	for (size_t i = 0; i < r->end.slots.n; i++)
		nblocks += r->end.live[i].in_use;
	nblocks += npend;
	if (!walk || !(blocks = calloc(nblocks + 1, sizeof *blocks))) {
		mt_walk_end(walk);
		return ENOMEM;
	}
	while (!err && (e = mt_walk_one(walk))) {
		if (e->device != device || e->error ||
		    (e->kind != MT_EV_SEGMENT_ALLOC && e->kind != MT_EV_SEGMENT_FREE))
			continue;
		if (e->kind == MT_EV_SEGMENT_ALLOC) {
			if ((err = mt_grow((void **)&segs, &cap, nsegs, sizeof *segs)))
				break;
			segs[nsegs++] = (struct seg){e->addr,
						     e->size,
						     e->aux,
						     e->aux2,
						     e->stack,
						     e->flags & MT_SEG_MAPPED,
						     e->flags & MT_SEG_SMALL};
		} else if (!(e->flags & MT_SEG_MAPPED)) {
			for (size_t j = nsegs; j-- > 0;)
				if (segs[j].addr == e->addr && !segs[j].expandable) {
					segs[j] = segs[--nsegs];
					break;
				}
		} else { /* unmapped pages: out of whatever mapped ranges hold them */
			uint64_t lo = e->addr, hi = e->addr + e->size;
			for (size_t j = nsegs; j-- > 0 && !err;) {
				struct seg *g = &segs[j];
				uint64_t end = g->addr + g->size;
				if (!g->expandable || end <= lo || g->addr >= hi)
					continue;
				if (g->addr < lo &&
				    end > hi) { /* a hole in the middle: the rest is a range of its own */
					if ((err = mt_grow((void **)&segs, &cap, nsegs, sizeof *segs)))
						break;
					g = &segs[j];
					segs[nsegs] = *g;
					segs[nsegs].addr = hi;
					segs[nsegs++].size = end - hi;
					g->size = lo - g->addr;
				} else if (g->addr < lo) {
					g->size = lo - g->addr;
				} else if (end > hi) {
					g->size = end - hi;
					g->addr = hi;
				} else {
					*g = segs[--nsegs];
				}
			}
		}
	}
	mt_walk_end(walk);
	if (err || (err = mt_grow((void **)&segs, &cap, nsegs + nblocks, sizeof *segs)))
		goto out;
	if (nsegs)
		qsort(segs, nsegs, sizeof *segs, by_addr);
	k = nblocks = 0;
	for (size_t i = 0; i < nsegs; i++) /* mapped pages of one range make one expandable segment */
		if (k && segs[k - 1].expandable && segs[i].expandable && segs[k - 1].stream == segs[i].stream &&
		    segs[k - 1].addr + segs[k - 1].size == segs[i].addr)
			segs[k - 1].size += segs[i].size;
		else
			segs[k++] = segs[i];
	nsegs = k;
	for (size_t i = 0; i < r->end.slots.n; i++) {
		const struct mt_live *l = &r->end.live[i];

		if (!l->in_use || l->kind != MT_LIVE_DEVICE || l->device != device)
			continue;
		blocks[nblocks++] =
		    (struct block){l->addr, l->block && l->aux2 ? l->aux2 : l->size, l->size, l->stack, false};
		if (!l->block || segless) /* no allocator in between (or none known): its own */
			segs[nsegs++] =
			    (struct seg){.addr = l->addr, .size = l->size, .stream = l->aux, .stack = l->stack};
	}
	for (size_t i = 0; i < npend; i++) {
		const struct made *a = &pend[i].a;

		if (!pend[i].freed)
			continue;
		blocks[nblocks++] = (struct block){a->addr, a->rounded, a->size, a->stack, true};
		if (a->api != MT_API_BLOCK || segless)
			segs[nsegs++] =
			    (struct seg){.addr = a->addr, .size = a->size, .stream = a->stream, .stack = a->stack};
	}
	if (nsegs)
		qsort(segs, nsegs, sizeof *segs, by_addr);
	if (nblocks)
		qsort(blocks, nblocks, sizeof *blocks, by_addr);
	k = 0;
	for (size_t i = 0; i < nsegs; i++) {
		while (k < nblocks && blocks[k].addr < segs[i].addr)
			k++; /* a block outside every segment: the trace lost its segment */
		k += segment_dict(w, r, sym, device, &segs[i], blocks + k, nblocks - k);
	}
out:
	free(segs);
	free(blocks);
	return err;
}

/* One allocator setting's value as the snapshot had it: a bool, an integer, a float or a
 * string (the importer's INFO line, torch.KEY=VALUE). */
static void setting(struct writer *w, const char *v)
{
	char *end;
	long long n;

	if (!strcmp(v, "True") || !strcmp(v, "False")) {
		op(w, v[0] == 'T' ? 0x88 : 0x89); /* NEWTRUE, NEWFALSE */
		return;
	}
	errno = 0;
	n = strtoll(v, &end, 10);
	if (*v && !*end && !errno) {
		integer(w, n);
		return;
	}
	double f = strtod(v, &end);
	if (*v && !*end && strpbrk(v, ".eE")) {
		uint64_t bits;
		memcpy(&bits, &f, sizeof bits);
		op(w, 'G'); /* BINFLOAT, big-endian */
		for (int i = 7; i >= 0; i--)
			op(w, (uint8_t)(bits >> (8 * i)));
		return;
	}
	str(w, v, false);
}

/* allocator_settings: an imported snapshot's as it had them (its torch.* INFO lines, a
 * dict's keys as torch.KEY.SUBKEY); else what memtap knows: expandable segments where
 * pages were mapped, and recorded_by "memtap": its segment frees are a recording's own
 * (cudaFree, memtap's allocator), not a caching allocator's releases (memtap replay). */
static void allocator_settings(struct writer *w, const struct mt_trace *t, bool mapped)
{
	char outer[1200] = "";
	bool any = false, inner = false;

	key(w, "allocator_settings");
	op(w, '}');
	op(w, '(');
	for (const char *p = t->info; p && *p;) {
		const char *eol = strchr(p, '\n'), *eq;
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char line[1200], *k, *dot;
		if (n > 6 && n < sizeof line && !strncmp(p, "torch.", 6) && (eq = memchr(p, '=', n))) {
			memcpy(line, p + 6, n - 6);
			line[n - 6] = '\0';
			k = line;
			line[eq - p - 6] = '\0';
			dot = strchr(k, '.');
			if (dot)
				*dot = '\0';
			if (inner && (!dot || strcmp(outer, k))) { /* the nested dict ends */
				op(w, 'u');
				inner = false;
			}
			if (dot && !inner) {
				key(w, k);
				op(w, '}');
				op(w, '(');
				snprintf(outer, sizeof outer, "%s", k);
				inner = true;
			}
			str(w, dot ? dot + 1 : k, true);
			setting(w, line + (eq - p - 6) + 1);
			any = true;
		}
		p = eol ? eol + 1 : p + n;
	}
	if (inner)
		op(w, 'u');
	if (!any) {
		key(w, "PYTORCH_CUDA_ALLOC_CONF");
		str(w, mapped ? "expandable_segments:True" : "", true);
		int_item(w, "max_split_size", -1);
		key(w, "expandable_segments");
		op(w, mapped ? 0x88 : 0x89);
		key(w, "recorded_by");
		str(w, "memtap", true);
	}
	op(w, 'u');
}

/* external_annotations: the start/end ranges (an imported snapshot's annotations, a
 * recording's NVTX start/end ranges) as PyTorch writes them. */
static int external_annotations(struct writer *w, const struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	struct mt_walk *walk = mt_walk_start(t);
	const struct mt_event *e;
	unsigned batch = 0;

	if (!walk)
		return ENOMEM;
	key(w, "external_annotations");
	op(w, ']');
	op(w, '(');
	while ((e = mt_walk_one(walk))) {
		if (e->kind != MT_EV_RANGE_START && e->kind != MT_EV_RANGE_END)
			continue;
		op(w, '}');
		op(w, '(');
		key(w, "stage");
		str(w, e->kind == MT_EV_RANGE_START ? "START" : "END", true);
		key(w, "name");
		str(w, mt_trace_string(t, e->aux), true);
		int_item(w, "device", e->device == MT_NO_DEVICE ? 0 : e->device);
		if (!r->order)
			int_item(w, "time_us", (int64_t)(e->time / 1000));
		op(w, 'u');
		if (++batch == 1000) {
			op(w, 'e');
			op(w, '(');
			batch = 0;
		}
	}
	op(w, 'e');
	mt_walk_end(walk);
	return 0;
}

static int by_asked(const void *a, const void *b)
{
	const struct pend *x = a, *y = b;

	if (x->asked != y->asked)
		return x->asked < y->asked ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* What is live on a device as its trace goes. */
struct lives {
	struct mt_map at; /* address -> slot in made + 1 */
	struct made *made;
	struct mt_slots slots;
};

/* Allocation e, the i-th event, made live (made again at an address still live, the first
 * one is forgotten); NULL when out of memory. */
static const struct made *make(struct lives *live, const struct mt_report *r, const struct mt_event *e, size_t i)
{
	const uint8_t cat = mt_composition_counted(&r->comp, i);
	uint64_t k;
	size_t slot;

	if (mt_map_get(&live->at, e->addr, &k))
		slot = k - 1;
	else if ((slot = mt_slot_take(&live->slots, (void **)&live->made, sizeof *live->made)) == SIZE_MAX ||
		 mt_map_put(&live->at, e->addr, slot + 1))
		return NULL;
	live->made[slot] =
	    (struct made){e->addr,  e->size,   e->aux, mt_api(e) == MT_API_BLOCK && e->aux2 ? e->aux2 : e->size,
			  e->stack, mt_api(e), cat};
	return &live->made[slot];
}

/* The free_requested of a free still pending at the end, where it was asked for. */
static void asked(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, const struct pend *p,
		  const struct lives *live)
{
	const struct made *a = &p->a; /* asked for at the trace's very end, after its free */
	uint64_t k;

	if (!p->freed) {
		if (!mt_map_get(&live->at, p->addr, &k))
			return;
		a = &live->made[k - 1];
	}
	entry(w, r, sym, "free_requested", a->addr, a->size, p->stream, p->asked, a->stack, a->category);
}

/* Device d's trace entries, in the trace's order; its frees still pending at the end, in
 * order of when they were asked for, get their allocations. ENOMEM or 0. */
static int device_trace(struct writer *w, const struct mt_report *r, struct mt_symbols *sym, int d, struct survey *s)
{
	const bool segless = !s->segments[d];
	const size_t npend = s->first[d + 1] - s->first[d];
	struct pend *pend = npend ? s->pend + s->first[d] : NULL;
	struct lives live = {0};
	struct mt_walk *walk = mt_walk_start(r->trace);
	const struct mt_event *e;
	size_t next = 0;
	int err = walk ? 0 : ENOMEM;

	for (size_t j = 0; j < npend; j++)
		pend[j].freed = false;
	for (size_t i = 0; !err && (e = mt_walk_one(walk)); i++) {
		uint64_t k;
		for (; next < npend && pend[next].asked < e->time; next++)
			asked(w, r, sym, &pend[next], &live);
		if (e->kind == MT_EV_ALLOC && !e->error && e->device == d) {
			const struct made *m = make(&live, r, e, i);
			err = m ? 0 : ENOMEM;
			if (!m || (e->flags & MT_ALLOC_UNSEEN))
				continue;
			if (m->api != MT_API_BLOCK || segless) /* no allocator in between: its own segment */
				entry(w, r, sym, "segment_alloc", e->addr, e->size, e->aux, e->time, e->stack, 0);
			entry(w, r, sym, "alloc", e->addr, e->size, e->aux, e->time, e->stack, m->category);
		} else if (e->kind == MT_EV_FREE && !e->error &&
			   mt_map_del(&live.at, e->addr, &k)) { /* this device's */
			const struct made a = live.made[k - 1];
			mt_slot_give(&live.slots, k - 1);
			if (e->flags & MT_FREE_PENDING) { /* its free_requested is written where it was asked */
				for (size_t j = 0; j < npend; j++)
					if (pend[j].addr == e->addr && !pend[j].freed) {
						pend[j].freed = true;
						pend[j].a = a;
						break;
					}
				continue;
			}
			entry(w, r, sym, "free_requested", a.addr, a.size, e->aux, e->time, a.stack, a.category);
			entry(w, r, sym, "free_completed", a.addr, a.size, e->aux, e->time, a.stack, a.category);
			if (a.api != MT_API_BLOCK || segless)
				entry(w, r, sym, "segment_free", a.addr, a.size, e->aux, e->time, a.stack, 0);
		} else if ((e->kind == MT_EV_SEGMENT_ALLOC || e->kind == MT_EV_SEGMENT_FREE) && e->device == d &&
			   !e->error && !(e->flags & MT_SEG_UNSEEN)) {
			bool mapped = (e->flags & MT_SEG_MAPPED);
			entry(w, r, sym,
			      e->kind == MT_EV_SEGMENT_ALLOC ? (mapped ? "segment_map" : "segment_alloc")
							     : (mapped ? "segment_unmap" : "segment_free"),
			      e->addr, e->size, e->aux, e->time, e->stack, 0);
		} else if (e->kind == MT_EV_ALLOC_FAILED && e->error == 2 && e->device == d) {
			entry(w, r, sym, "oom", e->aux, e->size, 0, e->time, e->stack, 0);
		} else if (e->kind == MT_EV_SNAPSHOT && e->device == d) { /* an imported snapshot entry */
			entry(w, r, sym, "snapshot", 0, e->size, 0, e->time, 0, 0);
		}
	}
	for (; next < npend && pend[next].asked != UINT64_MAX; next++)
		asked(w, r, sym, &pend[next], &live);
	mt_walk_end(walk);
	mt_map_free(&live.at);
	free(live.made);
	mt_slots_free(&live.slots);
	return err;
}

static int survey(struct survey *s, const struct mt_trace *t)
{
	struct mt_walk *walk = mt_walk_start(t);
	const struct mt_event *e;
	struct pend *all = NULL;
	size_t n = 0, cap = 0, at[MT_MAX_DEVICES] = {0};
	int err = walk ? 0 : ENOMEM;

	memset(s, 0, sizeof *s);
	for (size_t i = 0; !err && (e = mt_walk_one(walk)); i++) {
		if (e->kind == MT_EV_SEGMENT_ALLOC) {
			s->segments[e->device] = true;
			s->mapped |= (e->flags & MT_SEG_MAPPED) != 0;
		}
		if (e->kind != MT_EV_FREE || e->error || !(e->flags & MT_FREE_PENDING))
			continue;
		if (!(err = mt_grow((void **)&all, &cap, n, sizeof *all)))
			all[n++] = (struct pend){.asked = e->flags & MT_FREE_REQUESTED ? e->aux2 : UINT64_MAX,
						 .addr = e->addr,
						 .stream = e->aux,
						 .at = i,
						 .device = e->device};
	}
	mt_walk_end(walk);
	if (!err && n && !(s->pend = malloc(n * sizeof *s->pend)))
		err = ENOMEM;
	for (size_t i = 0; !err && i < n; i++) /* by device, each in the trace's order */
		s->first[all[i].device + 1]++;
	for (int d = 0; !err && d < MT_MAX_DEVICES; d++)
		s->first[d + 1] += s->first[d];
	for (size_t i = 0; !err && i < n; i++)
		s->pend[s->first[all[i].device] + at[all[i].device]++] = all[i];
	for (int d = 0; !err && d < MT_MAX_DEVICES; d++)
		if (s->first[d + 1] > s->first[d]) /* qsort takes no null base, even for nothing */
			qsort(s->pend + s->first[d], s->first[d + 1] - s->first[d], sizeof *s->pend, by_asked);
	free(all);
	return err;
}

int mt_export_memviz(FILE *out, const struct mt_report *r, struct mt_symbols *sym)
{
	const struct mt_trace *t = r->trace;
	struct writer w = {.out = out, .dry = true};
	struct survey s;
	int ndev = 0, err = survey(&s, t);

	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (r->end.dev[d].seen)
			ndev = d + 1;
	/* a first pass sees the categories: when entries have some and none is 'unknown', the
	   viewer's annotate_snapshot throws (a blank page), so then they say none */
	for (int d = 0; d < ndev && !err; d++)
		err = device_trace(&w, r, sym, d, &s);
	w.uncategorized = w.named && !w.unknown;
	w.dry = false;
	op(&w, 0x80);
	op(&w, 4);
	op(&w, '}');
	op(&w, '(');
	/* device_traces: one list per device ordinal; what was there before the trace began
	   (blocks, mapped pages) is in segments only, as in PyTorch's snapshots */
	key(&w, "device_traces");
	op(&w, ']');
	for (int d = 0; d < ndev && !err; d++) {
		op(&w, ']');
		op(&w, '(');
		w.batch = 0;
		err = device_trace(&w, r, sym, d, &s);
		op(&w, 'e');
		op(&w, 'a'); /* APPEND the device's list to device_traces */
	}
	key(&w, "segments");
	op(&w, ']');
	for (int d = 0; d < ndev && !err; d++)
		err = write_segments(&w, r, sym, d, &s);
	allocator_settings(&w, t, s.mapped);
	err = err ? err : external_annotations(&w, r);
	op(&w, 'u'); /* the top-level SETITEMS */
	op(&w, '.');
	mt_map_free(&w.memo_stack);
	mt_map_free(&w.memo_str);
	free(s.pend);
	return err ? err : ferror(out) ? EIO : 0;
}
