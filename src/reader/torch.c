/* PyTorch memory snapshots (torch.cuda.memory._dump_snapshot) read into a trace, as the
 * pickle streams in: each batch of trace entries becomes events the moment the pickle
 * reader has it, and what it was made of goes back at once, so an import holds little
 * more than its events. device_traces become events (alloc, free_completed or the older
 * free, segment alloc/free/map/unmap, oom, snapshot), frames become named stacks (every
 * frame, however deep), a trace entry's category (the profiler's, or memtap's own from
 * an export) becomes a tag, external_annotations become start/end ranges, and the
 * allocator_settings become INFO lines. Which list a batch came from is known only at
 * the end, when the whole tree is there: events carry their list's number until then.
 *
 * What was allocated before recording began is rebuilt from the final `segments` and
 * from frees without an alloc, as PyTorch's own viewer does, dated before the first
 * event and flagged MT_ALLOC_UNSEEN. Expandable segments are ranges of pages mapped and
 * unmapped (segment_map/unmap); the final segments are the ranges mapped at the end.
 * Walking the trace back from them gives what was mapped before it, and walking forward
 * again turns each map and unmap into exactly the pages it changed, so reserved bytes
 * never exceed what is mapped and never go below zero. The final segments also give the
 * exact size of each block still live. The oldest layout (a list of segments whose
 * blocks carry `history`) is read too. Without time_us, an entry's time is its place in
 * its device's trace (INFO time=order). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array.h"
#include "core/map.h"
#include "core/ordered.h"
#include "reader/pickle.h"
#include "reader/reader.h"

#define MAX_DEVICES 255 /* 255 is MT_NO_DEVICE */
#define MAX_LISTS 255	/* lists of trace entries: device_traces and newer ones beside it (host_traces) */
/* Times of what existed before recording began, until the first entry's time is known. */
#define BEFORE_SEGMENTS UINT64_MAX
#define BEFORE (UINT64_MAX - 1)
#define MAX_TIME_US (INT64_C(4) << 50) /* past 2100, far below BEFORE in ns */
#define DROP 0xff		       /* kind of an event left out at the end */
/* A trace entry, segment or block takes more than this many bytes of pickle: a snapshot
 * that lists more of them repeats shared values (a list holding one list many times), and
 * reading on would take time and memory out of all proportion to the file. */
#define BYTES_PER_ITEM 4
#define TEXT_CHUNK (64u << 10)
#define PICKLER_BATCH 1000 /* Python's pickler sets a dict's pairs (appends a list's items) a thousand at a time */

/* What a value read became (pk_token): its payload is an event, a stack, a frame, a segment,
 * a block; a segment's list of blocks and pool id: the segment. */
enum { TOKEN_ENTRY = 1, TOKEN_NOTHING, TOKEN_STACK, TOKEN_FRAME, TOKEN_SEGMENT, TOKEN_BLOCK, TOKEN_BLOCKS, TOKEN_POOL };

enum block_state { INACTIVE, ALLOCATED, PENDING };

struct seg_rec {
	uint64_t addr, size, stream;
	uint64_t pool;	      /* segment_pool_id (a, b) as a << 32 | b: 0 the default pool */
	uint32_t stack, list; /* the list it came from (number + 1) */
	size_t first, n;      /* its blocks in blocks[] (n: what reading it again costs) */
	uint8_t device, flags;
};

struct blk_rec {
	uint64_t addr, size, requested;
	uint32_t stack;
	uint8_t state;
	bool placed; /* its dict gave its address (older ones: the segment's, plus the blocks before it) */
};

/* Ranges of an expandable segment's mapped pages: end -> start, ends in order. */
struct ranges {
	struct mt_ordered ends;
	struct mt_map start;
};

struct importer {
	struct mt_trace *t;
	const uint8_t *data;
	size_t budget;	   /* entries, segments and blocks still allowed */
	const char *where; /* the item being read, for messages: a format of where_at's */
	size_t where_at[2];
	int err;	      /* what a hook stopped with */
	struct mt_map names;  /* a string's hash -> its copy in the trace */
	struct mt_map frames; /* hash of (function, file, line) -> named index */
	struct mt_map stacks; /* hash of frame indices -> stack id */
	struct mt_map live;   /* (list, address) -> its ALLOC's event index + 1 while allocated */
	struct mt_map segs;   /* (list, address) -> 1 while a plain segment is reserved */
	struct mt_map seen;   /* (list, address) allocated at least once in the trace */
	struct mt_map asked;  /* (list, address) -> time a block's free was requested */
	struct mt_map lists;  /* a list's address -> its number + 1 */
	const void *list_at[MAX_LISTS + 2];
	size_t nlists;
	size_t entries[MAX_LISTS + 1];	   /* per list: entries read */
	uint64_t last_time[MAX_LISTS + 1]; /* per list: the last entry's time */
	struct mt_map open;		   /* annotation name's string id -> its open range's id */
	struct mt_map strings;		   /* a string's hash -> its id */
	uint64_t range_id;
	uint64_t first_time; /* the first entry's time (0: none yet) */
	uint64_t first_note; /* the first annotation's time (0: none) */
	bool timed, untimed;
	uint64_t *ids; /* frame indices of the stack being read */
	size_t cap_ids;
	char *text; /* copies of strings, in chunks the trace owns */
	size_t text_left;
	struct seg_rec *seg;
	size_t nseg, cap_seg;
	struct blk_rec *blk;
	size_t nblk, cap_blk;
	const struct pk_value *root;
};

static int refuse(struct importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The item being read, said only when a message needs it (formatting it for each entry
 * cost a tenth of the import). */
static void reading(struct importer *im, const char *where, size_t i, size_t j)
{
	im->where = where;
	im->where_at[0] = i;
	im->where_at[1] = j;
}

static int refuse(struct importer *im, const char *fmt, ...)
{
	va_list ap;
	char where[96];
	int n;

	snprintf(where, sizeof where, im->where, im->where_at[0], im->where_at[1]);
	n = snprintf(im->t->problem, sizeof im->t->problem, "PyTorch snapshot, %s: ", where);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof im->t->problem)
		vsnprintf(im->t->problem + n, sizeof im->t->problem - (size_t)n, fmt, ap);
	va_end(ap);
	return EINVAL;
}

/* One more entry, segment or block: refused past the budget the file's size allows. */
static int visit(struct importer *im)
{
	if (im->budget == 0)
		return refuse(im, "more entries than the file's size can hold (shared values repeated); refused");
	im->budget--;
	return 0;
}

/* The integer v into *out, left alone when absent or None; anything else is refused. */
static int num(struct importer *im, const struct pk_value *v, const char *key, int64_t *out)
{
	if (v && v->type != PK_NONE && !pk_int(v, out))
		return refuse(im, "'%s' is not a whole number of 64 bits", key);
	return 0;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	return (h ^ v) * 0x100000001b3ull;
}

static uint64_t key_of(uint32_t list, uint64_t addr)
{
	return addr ^ (uint64_t)list << 56;
}

static bool is_key(const struct pk_value *k, const char *s, size_t n)
{
	return k->type == PK_STR && k->str.len == n && memcmp(k->str.s, s, n) == 0;
}

#define KEY(k, lit) is_key(k, lit, sizeof lit - 1)

/* ---- names, frames and stacks ---- */

/* A copy of s in the trace, made once for each distinct string. */
static const char *copy_text(struct importer *im, const char *s, size_t len, uint64_t h)
{
	uint64_t at;
	char *c;

	if (mt_map_get(&im->names, h, &at) && !strcmp((const char *)(uintptr_t)at, s))
		return (const char *)(uintptr_t)at;
	if (len + 1 > im->text_left) {
		size_t n = len + 1 > TEXT_CHUNK ? len + 1 : TEXT_CHUNK;
		if (!(im->text = mt_trace_own(im->t, n)))
			return NULL;
		im->text_left = n;
	}
	c = im->text;
	memcpy(c, s, len + 1);
	im->text += len + 1;
	im->text_left -= len + 1;
	if (!mt_map_get(&im->names, h, NULL) && mt_map_put(&im->names, h, (uint64_t)(uintptr_t)c))
		return NULL;
	return c;
}

static const char *text_of(struct importer *im, const struct pk_value *v, const char *absent)
{
	if (v && (v->type == PK_STR || v->type == PK_BYTES))
		return copy_text(im, v->str.s, v->str.len, v->str.hash);
	return copy_text(im, absent, strlen(absent), mix(0, strlen(absent)));
}

/* A frame dict's named index (0: out of memory). Each dict is read once and becomes a
 * token: the many lists that share it cost a lookup. */
static uint32_t frame_of(struct importer *im, struct pk_reader *r, struct pk_value *f)
{
	const struct pk_value *fn = NULL, *file = NULL, *lv = NULL;
	int64_t line = 0;
	uint64_t h = 0xcbf29ce484222325ull, id;
	const char *fs, *files;

	if (f->type == PK_TOKEN && f->tag == TOKEN_FRAME)
		return (uint32_t)f->i;
	for (size_t i = 0; f->type == PK_DICT && i + 1 < f->seq.n; i += 2) {
		const struct pk_value *k = f->seq.items[i];
		if (KEY(k, "name"))
			fn = f->seq.items[i + 1];
		else if (KEY(k, "filename"))
			file = f->seq.items[i + 1];
		else if (KEY(k, "line"))
			lv = f->seq.items[i + 1];
	}
	pk_int(lv, &line);
	line = line < 0 ? 0 : line > INT_MAX ? INT_MAX : line; /* PyTorch writes -1 (as 2^64 - 1) for none */
	h = mix(h, pk_str(fn) ? fn->str.hash : 1);
	h = mix(h, pk_str(file) ? file->str.hash : 2);
	h = mix(h, (uint64_t)line);
	if (!(fs = text_of(im, fn, "?")) || !(files = text_of(im, file, "")))
		return 0;
	if (mt_map_get(&im->frames, h, &id)) {
		const struct mt_named_frame *n = &im->t->named[id - 1];
		if (n->line != line || strcmp(n->function, fs) || strcmp(n->file, files))
			id = 0; /* two frames of one hash: the second is its own */
	} else {
		id = 0;
	}
	if (!id) {
		bool put = !mt_map_get(&im->frames, h, NULL);
		id = mt_trace_add_named(im->t, fs, files, (int)line);
		if (!id || (put && mt_map_put(&im->frames, h, id)))
			return 0;
	}
	if (f->type == PK_DICT)
		pk_token(r, f, TOKEN_FRAME, (int64_t)id);
	return (uint32_t)id;
}

/* A frame list's stack: 0 when it has none. Each list becomes a token once read, so the
 * entries that share it cost nothing more. ENOMEM through *err. */
static uint32_t stack_of(struct importer *im, struct pk_reader *r, const struct pk_value *cframes, int *err)
{
	struct pk_value *frames = (struct pk_value *)cframes; /* it is ours to turn into a token */
	uint64_t h = 0x9e3779b97f4a7c15ull, id = 0;
	size_t n;

	if (!frames)
		return 0;
	if (frames->type == PK_TOKEN)
		return frames->tag == TOKEN_STACK ? (uint32_t)frames->i : 0;
	if (frames->type != PK_LIST && frames->type != PK_TUPLE)
		return 0;
	if (!(n = frames->seq.n) || n > UINT32_MAX)
		return 0;
	pk_hold(frames); /* a frame made a token may let go of the list (a dict that holds it) */
	if (n > im->cap_ids) {
		uint64_t *v = realloc(im->ids, n * sizeof *v);
		if (!v)
			goto nomem;
		im->ids = v;
		im->cap_ids = n;
	}
	for (size_t i = 0; i < n; i++) {
		struct pk_value *f = frames->seq.items[i];
		if (f == frames) { /* a list holding itself: a frame of no name */
			static struct pk_value none = {.type = PK_NONE};
			f = &none;
		}
		if (!(im->ids[i] = frame_of(im, r, f)))
			goto nomem;
		h = mix(h, im->ids[i]);
	}
	h = mix(h, n);
	if (mt_map_get(&im->stacks, h, &id)) {
		const struct mt_stack *s = &im->t->stacks[id];
		if (s->depth != n || memcmp(s->frames, im->ids, n * sizeof *im->ids))
			id = 0;
	}
	if (!id) {
		bool put = !mt_map_get(&im->stacks, h, NULL);
		if (!(id = mt_trace_add_stack(im->t, im->ids, (uint32_t)n)) || (put && mt_map_put(&im->stacks, h, id)))
			goto nomem;
	}
	pk_token(r, frames, TOKEN_STACK, (int64_t)id);
	pk_release(r, frames);
	return (uint32_t)id;
nomem:
	pk_release(r, frames);
	*err = ENOMEM;
	return 0;
}

/* The profiler's category names, and memtap's own (an export read back). */
static uint8_t category(const char *c)
{
	static const struct {
		const char *name;
		uint8_t tag;
	} map[] = {{"PARAMETER", MT_TAG_PARAMS},
		   {"GRADIENT", MT_TAG_GRADS},
		   {"OPTIMIZER_STATE", MT_TAG_OPTIMIZER},
		   {"ACTIVATION", MT_TAG_ACTIVATIONS},
		   {"TEMPORARY", MT_TAG_TEMPORARIES},
		   {"INPUT", MT_TAG_OTHER},
		   {"AUTOGRAD_DETAIL", MT_TAG_TEMPORARIES},
		   {"UNKNOWN", MT_TAG_NONE}};

	if (!c)
		return MT_TAG_NONE;
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (strcasecmp(c, map[i].name) == 0)
			return map[i].tag;
	for (int k = 1; k < MT_TAG_COUNT; k++)
		if (!strcmp(c, mt_tag_names[k]))
			return (uint8_t)k;
	return MT_TAG_OTHER;
}

/* ---- events ---- */

/* Adds e (thread 1); what the reader refuses in a memtap trace (a size past the address
 * space) is refused here too. Its index + 1 through *at. */
static int add(struct importer *im, struct mt_event e, size_t *at)
{
	char why[160];

	e.thread = 1;
	if (mt_trace_check_event(im->t, &e, why, sizeof why))
		return refuse(im, "%s", why);
	if (mt_trace_add_event(im->t, &e))
		return ENOMEM;
	if (at)
		*at = im->t->nevents;
	return 0;
}

/* A block handed out: remembered by (list, address) while live. */
static int add_block(struct importer *im, uint32_t list, uint64_t time, struct mt_event e, bool unseen, size_t *at)
{
	size_t i;
	int r;

	e.kind = MT_EV_ALLOC;
	e.flags = MT_API_BLOCK | (unseen ? MT_ALLOC_UNSEEN : 0);
	e.device = (uint8_t)list;
	e.time = time;
	if (unseen)
		e.stack = 0, e.tag = 0;
	if ((r = add(im, e, &i)) || (r = mt_map_put(&im->live, key_of(list, e.addr), i)) ||
	    (r = mt_map_put(&im->seen, key_of(list, e.addr), 1)))
		return r;
	if (at)
		*at = i;
	return 0;
}

/* What one trace entry does, given as the event it makes (the kind its action names):
 * also how an entry read again (one dict shared by several places) is made again. The
 * index + 1 of the event it made through *at (0: none). */
static int apply(struct importer *im, uint32_t list, struct mt_event e, bool segment_plain, size_t *at)
{
	uint64_t key = key_of(list, e.addr);
	int r = 0;

	*at = 0;
	e.device = (uint8_t)list;
	switch (e.kind) {
	case MT_EV_ALLOC:
		mt_map_del(&im->asked, key, NULL);
		return add_block(im, list, e.time, e, false, at);
	case MT_EV_FREE:
		mt_map_del(&im->asked, key, NULL);
		if (!mt_map_get(&im->seen, key, NULL)) /* allocated before recording began */
			r = add_block(im, list, BEFORE, (struct mt_event){.addr = e.addr, .size = e.size, .aux = e.aux},
				      true, NULL);
		mt_map_del(&im->live, key, NULL);
		return r ? r : add(im, e, at);
	case MT_EV_SEGMENT_ALLOC:
		if (!segment_plain) /* pages mapped: made exact at the end */
			return add(im, e, at);
		if ((r = add(im, e, at)))
			return r;
		return mt_map_put(&im->segs, key, im->t->nevents); /* its event + 1 */
	case MT_EV_SEGMENT_FREE:
		if (!segment_plain)
			return add(im, e, at);
		if (!mt_map_del(&im->segs, key, NULL))
			r = add(im,
				(struct mt_event){.kind = MT_EV_SEGMENT_ALLOC,
						  .device = e.device,
						  .time = BEFORE_SEGMENTS,
						  .addr = e.addr,
						  .size = e.size,
						  .aux = e.aux,
						  .flags = MT_SEG_UNSEEN},
				NULL);
		return r ? r : add(im, e, at);
	default:
		return add(im, e, at);
	}
}

/* One trace entry of list `list`, the i-th; it becomes a token for the event it made. */
static int entry(struct importer *im, struct pk_reader *r, uint32_t list, struct pk_value *d)
{
	const struct pk_value *action = NULL, *frames = NULL, *cat = NULL, *addr_v = NULL, *size_v = NULL,
			      *stream_v = NULL, *time_v = NULL, *free_v = NULL;
	int64_t addr = 0, size = 0, stream = 0, time_us = 0, device_free = 0;
	struct mt_event e = {0};
	const char *a;
	size_t at = 0;
	uint64_t time;
	int err = 0;

	reading(im, "trace entry %zu", im->entries[list], 0);
	if ((err = visit(im)))
		return err;
	if (d->type == PK_TOKEN && d->tag == TOKEN_ENTRY) { /* one entry in several places: made again */
		e = im->t->events[d->i];
		e.time = im->last_time[list];
		return apply(im, list, e, !(e.flags & MT_SEG_MAPPED), &at);
	}
	for (size_t i = 0; d->type == PK_DICT && i + 1 < d->seq.n; i += 2) {
		const struct pk_value *k = d->seq.items[i], *v = d->seq.items[i + 1];
		if (k->type != PK_STR)
			continue;
		if (KEY(k, "action"))
			action = v;
		else if (KEY(k, "addr"))
			addr_v = v;
		else if (KEY(k, "size"))
			size_v = v;
		else if (KEY(k, "stream"))
			stream_v = v;
		else if (KEY(k, "time_us"))
			time_v = v;
		else if (KEY(k, "device_free"))
			free_v = v;
		else if (KEY(k, "frames"))
			frames = v;
		else if (KEY(k, "category"))
			cat = v;
	}
	im->entries[list]++;
	if (!(a = pk_str(action))) {
		if (d->type == PK_DICT)
			pk_token(r, d, TOKEN_NOTHING, 0);
		return 0;
	}
	if ((err = num(im, addr_v, "addr", &addr)) || (err = num(im, size_v, "size", &size)) ||
	    (err = num(im, stream_v, "stream", &stream)) || (err = num(im, time_v, "time_us", &time_us)) ||
	    (err = num(im, free_v, "device_free", &device_free)))
		return err;
	if (time_v && time_v->type != PK_NONE) {
		time_us = time_us < 0 ? 0 : time_us > MAX_TIME_US ? MAX_TIME_US : time_us;
		time = (uint64_t)time_us * 1000;
		im->timed = true;
	} else {
		time = im->entries[list] + 1; /* its place: pre-recording things come at 0 and 1 */
		im->untimed = true;
	}
	if (time < im->last_time[list]) /* a clock step back: the trace's order is the truth */
		time = im->last_time[list];
	im->last_time[list] = time;
	if (!im->first_time || time < im->first_time)
		im->first_time = time;
	e = (struct mt_event){.time = time,
			      .addr = (uint64_t)addr,
			      .size = (uint64_t)size,
			      .aux = (uint64_t)stream,
			      .stack = stack_of(im, r, frames, &err),
			      .tag = category(pk_str(cat))};
	if (err)
		return err;
	if (!strcmp(a, "alloc")) {
		e.kind = MT_EV_ALLOC;
	} else if (!strcmp(a, "free_completed") || !strcmp(a, "free")) {
		e.kind = MT_EV_FREE;
	} else if (!strcmp(a, "segment_alloc") || !strcmp(a, "segment_map")) {
		e.kind = MT_EV_SEGMENT_ALLOC;
		e.flags = a[8] == 'm' ? MT_SEG_MAPPED : 0;
	} else if (!strcmp(a, "segment_free") || !strcmp(a, "segment_unmap")) {
		e.kind = MT_EV_SEGMENT_FREE;
		e.flags = a[8] == 'u' ? MT_SEG_MAPPED : 0;
	} else if (!strcmp(a, "oom")) {
		e = (struct mt_event){.kind = MT_EV_ALLOC_FAILED,
				      .flags = MT_API_BLOCK,
				      .time = time,
				      .size = (uint64_t)size,
				      .aux = (uint64_t)device_free,
				      .stack = e.stack,
				      .error = 2 /* CUDA_ERROR_OUT_OF_MEMORY */};
	} else if (!strcmp(a, "snapshot")) {
		e = (struct mt_event){.kind = MT_EV_SNAPSHOT, .time = time, .size = (uint64_t)size};
	} else { /* free_requested (its free_completed follows), user_defined, annotate ... */
		if (!strcmp(a, "free_requested") && mt_map_put(&im->asked, key_of(list, e.addr), time))
			return ENOMEM; /* when a free still pending at the end was asked for */
		pk_token(r, d, TOKEN_NOTHING, 0);
		return 0;
	}
	if (e.kind != MT_EV_ALLOC && e.kind != MT_EV_FREE)
		e.tag = 0;
	if ((err = apply(im, list, e, !(e.flags & MT_SEG_MAPPED), &at)))
		return err;
	if (d->type == PK_DICT)
		pk_token(r, d, at ? TOKEN_ENTRY : TOKEN_NOTHING, at ? (int64_t)at - 1 : 0);
	return 0;
}

/* ---- segments ---- */

/* An empty list of frames of a block or segment being read: the memo would keep it to
 * the end (not one a block's dict gave as it was read: the list may not be whole yet). */
static void drop_empty(struct pk_reader *r, const struct pk_value *frames)
{
	if (frames && frames->type == PK_LIST && !frames->seq.n)
		pk_token(r, (struct pk_value *)frames, TOKEN_STACK, 0);
}

/* A segment's block dict: its size, and what the report needs of a live one. */
static int block(struct importer *im, struct pk_reader *r, const struct pk_value *b, struct blk_rec *rec)
{
	const struct pk_value *history = NULL, *frames = NULL, *av = NULL, *sv = NULL, *rv = NULL;
	const char *state = NULL;
	int64_t addr = 0, size = 0, requested = 0;
	int err = 0;

	for (size_t i = 0; b->type == PK_DICT && i + 1 < b->seq.n; i += 2) {
		const struct pk_value *key = b->seq.items[i], *v = b->seq.items[i + 1];
		if (KEY(key, "address"))
			av = v;
		else if (KEY(key, "size"))
			sv = v;
		else if (KEY(key, "requested_size"))
			rv = v;
		else if (KEY(key, "state"))
			state = pk_str(v);
		else if (KEY(key, "frames"))
			frames = v;
		else if (KEY(key, "history"))
			history = v;
	}
	if ((err = num(im, av, "address", &addr)) || (err = num(im, sv, "size", &size)) ||
	    (err = num(im, rv, "requested_size", &requested)))
		return err;
	*rec = (struct blk_rec){.addr = (uint64_t)addr, .size = (uint64_t)size, .placed = av != NULL};
	drop_empty(r, frames);
	if (!state || strncmp(state, "active", 6) != 0)
		return 0;
	if (pk_len(history)) { /* the oldest layout: the newest handout, first (PyTorch puts
				* each at the front; _memory_viz.py reads history[0]) */
		const struct pk_value *now = pk_at(history, 0);
		if ((err = num(im, pk_get(now, "real_size"), "real_size", &requested)))
			return err;
		frames = pk_get(now, "frames");
	}
	rec->requested = (uint64_t)(requested ? requested : size);
	rec->stack = stack_of(im, r, frames, &err);
	rec->state = strcmp(state, "active_pending_free") ? ALLOCATED : PENDING;
	return err;
}

/* A segment's blocks, at the end of blocks[] (g->first on): from its list, or from the
 * segment that read that list first. */
static int blocks_of(struct importer *im, struct pk_reader *r, struct seg_rec *g, const struct pk_value *s,
		     const struct pk_value *blocks, uint64_t address)
{
	const struct seg_rec *same = NULL;
	uint64_t offset = 0;
	size_t n;
	int err = 0;

	if (blocks && blocks->type == PK_TOKEN && blocks->tag == TOKEN_BLOCKS)
		same = &im->seg[blocks->i]; /* one list of blocks in several segments */
	else if (blocks && blocks->type == PK_TOKEN)
		return refuse(im, "its list of blocks is also a block's list of frames");
	n = same ? same->n : pk_len(blocks);
	for (size_t k = 0; k < n; k++) {
		struct pk_value *b = same ? NULL : (struct pk_value *)pk_at(blocks, k); /* ours to turn into a token */
		struct blk_rec rec;

		reading(im, "segments[%zu].blocks[%zu]", im->nseg, k);
		if ((err = visit(im)))
			return err;
		if (same)
			rec = im->blk[same->first + k];
		else if (b->type == PK_TOKEN && b->tag == TOKEN_BLOCK)
			rec = im->blk[b->i]; /* one block in several places */
		else if ((err = block(im, r, b, &rec)))
			return err;
		if (!same && pk_len(blocks) != n) /* read as a block's frames: it is a stack now */
			return refuse(im, "its list of blocks is also a block's list of frames");
		if (!rec.placed)
			rec.addr = address + offset;
		offset += rec.size;
		if (mt_grow((void **)&im->blk, &im->cap_blk, im->nblk, sizeof *im->blk))
			return ENOMEM;
		im->blk[im->nblk++] = rec;
		if (b && b != s && b->type == PK_DICT) /* (a segment that is its own block stays one) */
			pk_token(r, b, TOKEN_BLOCK, (int64_t)im->nblk - 1);
	}
	g->n = n;
	return 0;
}

/* A segment of list `list` (its number + 1; 0: read as its dict was, the list not yet
 * known). It becomes a token for its record. */
static int segment(struct importer *im, struct pk_reader *r, uint32_t list, struct pk_value *s)
{
	const struct pk_value *frames = NULL, *dv = NULL, *av = NULL, *tv = NULL, *sv = NULL, *type = NULL,
			      *expandable = NULL;
	struct pk_value *blocks = NULL, *pool = NULL; /* become tokens once read */
	int64_t device = 0, address = 0, total = 0, stream = 0, pa = 0, pb = 0;
	struct seg_rec g = {.list = list};
	int err = 0;

	reading(im, "segments[%zu]", im->nseg, 0);
	if ((err = visit(im)))
		return err;
	if (s->type == PK_TOKEN) { /* one segment in several places: it costs what reading it did */
		if (s->tag != TOKEN_SEGMENT)
			return 0;
		if (!im->seg[s->i].list) { /* read as its dict was: now its list is known */
			im->seg[s->i].list = list;
			return 0;
		}
		for (size_t k = 0; k < im->seg[s->i].n; k++)
			if ((err = visit(im)))
				return err;
		if (mt_grow((void **)&im->seg, &im->cap_seg, im->nseg, sizeof *im->seg))
			return ENOMEM;
		im->seg[im->nseg] = im->seg[s->i];
		im->seg[im->nseg++].list = list;
		return 0;
	}
	for (size_t i = 0; s->type == PK_DICT && i + 1 < s->seq.n; i += 2) {
		struct pk_value *k = s->seq.items[i], *v = s->seq.items[i + 1];
		if (KEY(k, "blocks"))
			blocks = v;
		else if (KEY(k, "frames"))
			frames = v;
		else if (KEY(k, "device"))
			dv = v;
		else if (KEY(k, "address"))
			av = v;
		else if (KEY(k, "total_size"))
			tv = v;
		else if (KEY(k, "stream"))
			sv = v;
		else if (KEY(k, "segment_type"))
			type = v;
		else if (KEY(k, "is_expandable"))
			expandable = v;
		else if (KEY(k, "segment_pool_id"))
			pool = v;
	}
	if ((err = num(im, dv, "device", &device)) || (err = num(im, av, "address", &address)) ||
	    (err = num(im, tv, "total_size", &total)) || (err = num(im, sv, "stream", &stream)))
		return err;
	if (device < 0 || device >= MAX_DEVICES)
		return refuse(im, "device %lld is not a device number (0 to %d)", (long long)device, MAX_DEVICES - 1);
	g.device = (uint8_t)device;
	g.addr = (uint64_t)address;
	g.size = (uint64_t)total;
	g.stream = (uint64_t)stream;
	g.flags = (pk_str(type) && !strcmp(pk_str(type), "small") ? MT_SEG_SMALL : 0) |
		  (expandable && expandable->type == PK_BOOL && expandable->b ? MT_SEG_MAPPED : 0);
	/* a private pool's (CUDA graphs, torch.cuda.MemPool): the pair, each half 32 bits */
	if (pool && pool->type == PK_TOKEN && pool->tag == TOKEN_POOL)
		g.pool = im->seg[pool->i].pool;
	else if (pool && pool->type == PK_TUPLE && pk_len(pool) == 2 && pk_int(pk_at(pool, 0), &pa) &&
		 pk_int(pk_at(pool, 1), &pb))
		g.pool = (uint64_t)(uint32_t)pa << 32 | (uint32_t)pb;
	g.stack = stack_of(im, r, frames, &err);
	if (frames != blocks)
		drop_empty(r, frames);
	g.first = im->nblk;
	/* held while read: a block made a token may let go of what its segment held (a dict
	   that is its own block) */
	if (blocks)
		pk_hold(blocks);
	if (pool)
		pk_hold(pool);
	if (!err)
		err = blocks_of(im, r, &g, s, blocks, (uint64_t)address);
	if (!err && mt_grow((void **)&im->seg, &im->cap_seg, im->nseg, sizeof *im->seg))
		err = ENOMEM;
	if (!err) { /* the memo keeps every value of the file to its end: what was read of these, a token's room */
		im->seg[im->nseg++] = g;
		if (blocks && blocks->type == PK_LIST)
			pk_token(r, blocks, TOKEN_BLOCKS, (int64_t)im->nseg - 1);
		if (pool && pool->type == PK_TUPLE)
			pk_token(r, pool, TOKEN_POOL, (int64_t)im->nseg - 1);
	}
	if (blocks)
		pk_release(r, blocks);
	if (pool)
		pk_release(r, pool);
	if (!err && s->type == PK_DICT)
		pk_token(r, s, TOKEN_SEGMENT, (int64_t)im->nseg - 1);
	return err;
}

/* ---- external annotations: start/end ranges ---- */

/* The trace's string id for s, made once. 0: out of memory. */
static uint32_t string_id(struct importer *im, const char *s)
{
	uint64_t h = mix(0xcbf29ce484222325ull, strlen(s)), id;

	for (const char *p = s; *p; p++)
		h = mix(h, (uint8_t)*p);
	if (mt_map_get(&im->strings, h, &id) && !strcmp(mt_trace_string(im->t, id), s))
		return (uint32_t)id;
	if (!(id = mt_trace_add_string(im->t, s)) ||
	    (!mt_map_get(&im->strings, h, NULL) && mt_map_put(&im->strings, h, id)))
		return 0;
	return (uint32_t)id;
}

static int annotation(struct importer *im, struct pk_value *d)
{
	const struct pk_value *stage = pk_get(d, "stage"), *name = pk_get(d, "name");
	int64_t device = -1, time_us = -1;
	const char *s = pk_str(stage), *n = pk_str(name);
	uint64_t id;
	uint32_t str;
	int err;

	reading(im, "external_annotations", 0, 0);
	if ((err = visit(im)) || (err = num(im, pk_get(d, "device"), "device", &device)) ||
	    (err = num(im, pk_get(d, "time_us"), "time_us", &time_us)))
		return err;
	if (!s || !n || time_us < 0 || (strcmp(s, "START") && strcmp(s, "END")))
		return 0; /* a range needs its name and time */
	time_us = time_us > MAX_TIME_US ? MAX_TIME_US : time_us;
	if (!(str = string_id(im, n)))
		return ENOMEM;
	if (!strcmp(s, "START")) { /* one open range per name, as PyTorch makes them */
		id = ++im->range_id;
		if (mt_map_put(&im->open, str, id))
			return ENOMEM;
	} else if (!mt_map_del(&im->open, str, &id)) {
		return 0; /* an end whose start fell out of the ring buffer */
	}
	if (!im->first_note || (uint64_t)time_us * 1000 < im->first_note)
		im->first_note = (uint64_t)time_us * 1000;
	return add(im,
		   (struct mt_event){.kind = !strcmp(s, "START") ? MT_EV_RANGE_START : MT_EV_RANGE_END,
				     .device = device >= 0 && device < MAX_DEVICES ? (uint8_t)device : MT_NO_DEVICE,
				     .time = (uint64_t)time_us * 1000,
				     .aux = str,
				     .aux2 = id},
		   NULL);
}

/* Where the trace begins. With timed entries: at the first of them, and annotation
 * ranges that ended before it are left out. PyTorch keeps annotations in a ring buffer of
 * their own, which outlasts the entries' (a public training snapshot held ten optimizer
 * steps' ranges from 5.65 s before its 0.13 s of entries): they cover nothing the trace
 * holds, and were the time axis, drawn flat, and iteration boundaries with nothing
 * between them. A range still open at the first entry stays, and the trace begins at its
 * start. Without timed entries, the first annotation begins it. */
static int trace_begins(struct importer *im)
{
	struct mt_trace *t = im->t;
	struct mt_map early = {0}; /* ids of the ranges that ended before the first entry */
	int err = 0;

	if (!im->timed) {
		if (im->first_note && (!im->first_time || im->first_note < im->first_time))
			im->first_time = im->first_note;
		return 0;
	}
	for (size_t i = 0; i < t->nevents && !err; i++) {
		const struct mt_event *e = &t->events[i];
		if (e->kind == MT_EV_RANGE_END && e->time < im->first_time)
			err = mt_map_put(&early, e->aux2, 1);
	}
	for (size_t i = 0; i < t->nevents && !err; i++) {
		struct mt_event *e = &t->events[i];
		if (e->kind != MT_EV_RANGE_START && e->kind != MT_EV_RANGE_END)
			continue;
		if (mt_map_get(&early, e->aux2, NULL))
			e->kind = DROP;
		else if (e->time < im->first_time)
			im->first_time = e->time;
	}
	mt_map_free(&early);
	return err;
}

/* ---- the hook: batches of list items as the pickle reader appends them ---- */

static uint32_t list_number(struct importer *im, const void *list, int *err)
{
	uint64_t n;

	if (mt_map_get(&im->lists, (uint64_t)(uintptr_t)list, &n))
		return (uint32_t)n - 1;
	if (im->nlists >= MAX_LISTS) {
		*err = refuse(im, "trace entries in more than %d lists; memtap reads at most %d devices", MAX_LISTS,
			      MAX_DEVICES);
		return 0;
	}
	im->list_at[im->nlists] = list;
	if (mt_map_put(&im->lists, (uint64_t)(uintptr_t)list, ++im->nlists))
		*err = ENOMEM;
	return (uint32_t)im->nlists - 1;
}

enum kind { OTHER, ENTRY, SEGMENT, ANNOTATION };

static enum kind kind_of(const struct pk_value *v)
{
	if (v->type == PK_TOKEN)
		return v->tag == TOKEN_ENTRY || v->tag == TOKEN_NOTHING ? ENTRY
		       : v->tag == TOKEN_SEGMENT			? SEGMENT
									: OTHER;
	if (v->type != PK_DICT)
		return OTHER;
	for (size_t i = 0; i + 1 < v->seq.n; i += 2) {
		const struct pk_value *k = v->seq.items[i];
		if (KEY(k, "action"))
			return ENTRY;
		if (KEY(k, "blocks") || KEY(k, "total_size"))
			return SEGMENT;
		if (KEY(k, "stage"))
			return ANNOTATION;
	}
	return OTHER;
}

/* What a hook ends with: the read stops on an error, which the importer keeps (its
 * message already written, or out of memory). */
static int stop(struct importer *im, int err)
{
	if (err == ENOMEM)
		snprintf(im->t->problem, sizeof im->t->problem, "out of memory importing the snapshot");
	return im->err = err;
}

static int items(void *ctx, struct pk_reader *r, const struct pk_value *list, struct pk_value *const *v, size_t n,
		 bool *taken)
{
	struct importer *im = ctx;
	uint32_t number = 0;
	size_t k;
	int err = 0;

	for (k = 0; k < n && kind_of(v[k]) == OTHER; k++)
		;
	if (k == n)
		return 0; /* not ours: lists of lists, blocks, frames */
	*taken = true;
	if (kind_of(v[k]) != ANNOTATION)
		number = list_number(im, list, &err);
	for (k = 0; k < n && !err; k++) {
		switch (kind_of(v[k])) {
		case ENTRY:
			err = entry(im, r, number, v[k]);
			break;
		case SEGMENT:
			err = segment(im, r, number + 1, v[k]);
			break;
		case ANNOTATION:
			err = annotation(im, v[k]);
			break;
		default:
			break;
		}
	}
	return stop(im, err);
}

/* Trace entries of a list still being read (C++'s pickler writes a device's whole trace in
 * one APPENDS): those whole (up to the first that is not a trace entry, the top a dict
 * still being filled) are read now, as Python's batches of a thousand are, so that they
 * are not all held to the list's end. */
static int ahead(void *ctx, struct pk_reader *r, const struct pk_value *list, struct pk_value *const *v, size_t n,
		 size_t *used)
{
	bool taken = false;
	size_t k;
	int err;

	for (k = 0; k < n && kind_of(v[k]) == ENTRY; k++) /* a dict with an action, or an entry read already */
		;
	*used = 0;
	if (!k || (err = items(ctx, r, list, v, k, &taken)))
		return k ? err : 0;
	*used = taken ? k : 0;
	return 0;
}

/* A dict just read: its frames (a trace entry's, a block's, a legacy history entry's)
 * become a stack now, and a segment its record, not when its list's batch of up to a
 * thousand is read, so that a batch holds neither frame lists nor blocks (a thousand
 * segments of a real snapshot were 1 MB). Only the pairs just set are looked at (a dict
 * read in many batches is looked through once). */
static int dict_read(void *ctx, struct pk_reader *r, struct pk_value *d, size_t first)
{
	struct importer *im = ctx;
	unsigned keys = 0; /* 1 blocks, 2 total_size, 4 action */
	int err = 0;

	for (size_t i = first; i + 1 < d->seq.n && !err; i += 2) {
		const struct pk_value *k = d->seq.items[i];
		if (KEY(k, "frames"))
			stack_of(im, r, d->seq.items[i + 1], &err);
		else
			keys |= KEY(k, "blocks") ? 1 : KEY(k, "total_size") ? 2 : KEY(k, "action") ? 4 : 0;
	}
	if (!err && d->type != PK_DICT) { /* made a frame by its own frames: read as one, it would be lost */
		reading(im, "frames", 0, 0);
		return stop(im, refuse(im, "a dict that is one of its own frames"));
	}
	/* a segment, whole: its pairs set at once, fewer than the pickler's batch (a bigger dict
	   comes in several, read when its list is) */
	if (keys == 3 && !first && d->seq.n / 2 < PICKLER_BATCH && !err && (err = segment(im, r, 0, d)) != ENOMEM) {
		err = 0; /* said again if it is in a list of segments; a dict elsewhere is not one */
		im->t->problem[0] = '\0';
	}
	return stop(im, err);
}

/* ---- the end: lists named, pages made exact, what was there before ---- */

/* The ranges overlapping or touching [a, b), in order, through *ends (their ends). */
static bool first_range(const struct ranges *s, uint64_t a, uint64_t *end, uint64_t *start)
{
	uint64_t x;

	if (!mt_ordered_next(&s->ends, a, end))
		return false;
	mt_map_get(&s->start, *end, &x);
	*start = x;
	return true;
}

static int range_put(struct ranges *s, uint64_t a, uint64_t b)
{
	if (mt_ordered_add(&s->ends, b) || mt_map_put(&s->start, b, a))
		return ENOMEM;
	return 0;
}

static void range_del(struct ranges *s, uint64_t end)
{
	mt_ordered_del(&s->ends, end);
	mt_map_del(&s->start, end, NULL);
}

/* Adds [a, b) to s; each piece not there before goes to out (pairs), if given. */
static int ranges_add(struct ranges *s, uint64_t a, uint64_t b, uint64_t **out, size_t *nout, size_t *cap)
{
	uint64_t end, start, lo = a, hi = b, at = a;

	while (a < b && first_range(s, a, &end, &start) && start <= b) {
		if (out && start > at) {
			if (mt_grow((void **)out, cap, *nout + 1, sizeof **out))
				return ENOMEM;
			(*out)[(*nout)++] = at;
			(*out)[(*nout)++] = start;
		}
		if (end > at)
			at = end;
		lo = start < lo ? start : lo;
		hi = end > hi ? end : hi;
		range_del(s, end);
	}
	if (a >= b)
		return 0;
	if (out && at < b) {
		if (mt_grow((void **)out, cap, *nout + 1, sizeof **out))
			return ENOMEM;
		(*out)[(*nout)++] = at;
		(*out)[(*nout)++] = b;
	}
	return range_put(s, lo, hi);
}

/* Takes [a, b) out of s; each piece that was there goes to out (pairs), if given. */
static int ranges_sub(struct ranges *s, uint64_t a, uint64_t b, uint64_t **out, size_t *nout, size_t *cap)
{
	uint64_t end, start;

	while (a < b && first_range(s, a + 1, &end, &start) && start < b) {
		uint64_t x = start > a ? start : a, y = end < b ? end : b;
		if (out) {
			if (mt_grow((void **)out, cap, *nout + 1, sizeof **out))
				return ENOMEM;
			(*out)[(*nout)++] = x;
			(*out)[(*nout)++] = y;
		}
		range_del(s, end);
		if (start < a && range_put(s, start, a))
			return ENOMEM;
		if (end > b) {
			if (range_put(s, b, end))
				return ENOMEM;
			break;
		}
	}
	return 0;
}

static void ranges_free(struct ranges *s)
{
	mt_ordered_free(&s->ends);
	mt_map_free(&s->start);
}

/* The final segment of device d holding addr, or NULL. */
static const struct seg_rec *final_at(const struct importer *im, uint32_t segments, uint8_t d, uint64_t addr)
{
	for (size_t i = 0; i < im->nseg; i++) {
		const struct seg_rec *g = &im->seg[i];
		if (g->list == segments && g->device == d && addr - g->addr < g->size)
			return g;
	}
	return NULL;
}

/* Device d's expandable pages: what was mapped before the trace, and each map and unmap
 * made the exact pages it changed (several events, or none). */
static int pages(struct importer *im, uint32_t segments, uint8_t d, uint64_t *final_ranges, size_t nfinal)
{
	struct mt_trace *t = im->t;
	struct ranges s = {0};
	uint64_t *piece = NULL;
	size_t npiece = 0, cap = 0, n = t->nevents;
	int err = 0;

	for (size_t i = 0; i < nfinal && !err; i++) /* at the end: the final expandable segments */
		err = ranges_add(&s, final_ranges[2 * i], final_ranges[2 * i + 1], NULL, NULL, NULL);
	for (size_t i = n; i-- > 0 && !err;) { /* back to the start */
		const struct mt_event *e = &t->events[i];
		if (e->device != d || !(e->flags & MT_SEG_MAPPED) ||
		    (e->kind != MT_EV_SEGMENT_ALLOC && e->kind != MT_EV_SEGMENT_FREE))
			continue;
		err = e->kind == MT_EV_SEGMENT_ALLOC ? ranges_sub(&s, e->addr, e->addr + e->size, NULL, NULL, NULL)
						     : ranges_add(&s, e->addr, e->addr + e->size, NULL, NULL, NULL);
	}
	/* mapped before the trace began: split at the final segments, whose pool they are */
	for (uint64_t at = 0, end, start; !err && first_range(&s, at, &end, &start); at = end + 1) {
		for (uint64_t a = start; a < end && !err;) {
			const struct seg_rec *g = final_at(im, segments, d, a);
			uint64_t b = g && g->addr + g->size < end ? g->addr + g->size : end;
			err = add(im,
				  (struct mt_event){.kind = MT_EV_SEGMENT_ALLOC,
						    .device = d,
						    .time = BEFORE_SEGMENTS,
						    .addr = a,
						    .size = b - a,
						    .aux = g ? g->stream : 0,
						    .aux2 = g ? g->pool : 0,
						    .stack = g ? g->stack : 0,
						    .flags = MT_SEG_MAPPED | MT_SEG_UNSEEN |
							     (g ? g->flags & MT_SEG_SMALL : 0)},
				  NULL);
			a = b;
		}
	}
	for (size_t i = 0; i < n && !err; i++) { /* forward again: each event the pages it changed */
		struct mt_event *e = &t->events[i], copy;
		if (e->device != d || !(e->flags & MT_SEG_MAPPED) ||
		    (e->kind != MT_EV_SEGMENT_ALLOC && e->kind != MT_EV_SEGMENT_FREE))
			continue;
		npiece = 0;
		err = e->kind == MT_EV_SEGMENT_ALLOC
			  ? ranges_add(&s, e->addr, e->addr + e->size, &piece, &npiece, &cap)
			  : ranges_sub(&s, e->addr, e->addr + e->size, &piece, &npiece, &cap);
		copy = *e;
		if (!npiece)
			e->kind = DROP;
		for (size_t k = 0; k < npiece && !err; k += 2) {
			const struct seg_rec *g = final_at(im, segments, d, piece[k]);
			copy.addr = piece[k];
			copy.size = piece[k + 1] - piece[k];
			copy.flags = MT_SEG_MAPPED | (g ? g->flags & MT_SEG_SMALL : 0);
			if (k == 0)
				t->events[i] = copy;
			else
				err = add(im, copy, NULL); /* sorted into place with the rest */
		}
	}
	free(piece);
	ranges_free(&s);
	return err;
}

/* Blocks live at the end: the exact size of those the trace made, the rest were made
 * before it. A block freed but waiting on another stream (active_pending_free) was live
 * until the end, as the viewer's timeline draws it, and is free at the end, as PyTorch's
 * segsum counts it: its free is dated at the end and flagged pending, with when the free
 * was requested, so an export writes its free_requested alone, where it was. */
static int final_blocks(struct importer *im, const struct seg_rec *g, uint32_t list, uint64_t end)
{
	if (im->last_time[list] > end) /* the last entry made no event (a free_requested) */
		end = im->last_time[list];
	for (size_t k = g->first; k < g->first + g->n; k++) {
		const struct blk_rec *b = &im->blk[k];
		uint64_t event, asked = 0, size = b->requested;
		bool requested;
		int err = 0;
		if (b->state == INACTIVE)
			continue;
		requested = mt_map_get(&im->asked, key_of(list, b->addr), &asked);
		if (mt_map_get(&im->live, key_of(list, b->addr), &event)) {
			im->t->events[event - 1].aux2 = b->size;
			size = im->t->events[event - 1].size;
		} else if (b->state == PENDING && !requested) {
			continue; /* made before, its free asked where no entry says: free, as segsum counts it */
		} else {
			err = add(im,
				  (struct mt_event){.kind = MT_EV_ALLOC,
						    .flags = MT_API_BLOCK | MT_ALLOC_UNSEEN,
						    .device = g->device,
						    .time = BEFORE,
						    .addr = b->addr,
						    .size = size,
						    .aux = g->stream,
						    .aux2 = b->size,
						    .stack = b->stack},
				  NULL);
		}
		if (!err && b->state == PENDING)
			err = add(im,
				  (struct mt_event){.kind = MT_EV_FREE,
						    .device = g->device,
						    .flags = MT_FREE_PENDING | (requested ? MT_FREE_REQUESTED : 0),
						    .time = end,
						    .addr = b->addr,
						    .size = size,
						    .aux = g->stream,
						    .aux2 = asked},
				  NULL);
		if (err)
			return err;
	}
	return 0;
}

/* Whether a block live at the end has frames (memory history was on when it was made). */
static bool blocks_framed(const struct mt_trace *t)
{
	for (size_t i = 0; i < t->nevents; i++) {
		const struct mt_event *e = &t->events[i];
		if (e->kind == MT_EV_ALLOC && (e->flags & MT_ALLOC_UNSEEN) && e->stack && e->stack < t->nstacks &&
		    t->stacks[e->stack].depth)
			return true;
	}
	return false;
}

/* INFO lines from allocator_settings: torch.KEY=VALUE, a dict's keys as torch.KEY.SUBKEY. */
static void settings(FILE *info, const char *prefix, const struct pk_value *d, int depth)
{
	for (size_t i = 0; d && d->type == PK_DICT && i + 1 < d->seq.n; i += 2) {
		const struct pk_value *k = d->seq.items[i], *v = d->seq.items[i + 1];
		const char *key = pk_str(k);
		int64_t n;
		if (!key || strpbrk(key, "=\n") || strlen(key) > 64)
			continue;
		if (v->type == PK_DICT && depth == 0) {
			char p[96];
			snprintf(p, sizeof p, "%s%s.", prefix, key);
			settings(info, p, v, 1);
			continue;
		}
		if (v->type == PK_BOOL)
			fprintf(info, "%s%s=%s\n", prefix, key, v->b ? "True" : "False");
		else if (v->type == PK_FLOAT) {
			char f[40];
			snprintf(f, sizeof f, "%.17g", v->f);
			fprintf(info, "%s%s=%s%s\n", prefix, key, f,
				strpbrk(f, ".eEni") ? "" : ".0"); /* a float stays one */
		} else if (pk_int(v, &n))
			fprintf(info, "%s%s=%lld\n", prefix, key, (long long)n);
		else if (pk_str(v) && strlen(pk_str(v)) < 1024) {
			fprintf(info, "%s%s=", prefix, key);
			for (const char *s = pk_str(v); *s; s++)
				fputc(*s == '\n' ? ' ' : *s, info);
			fputc('\n', info);
		}
	}
}

static int finish(struct importer *im, const struct pk_value *root)
{
	struct mt_trace *t = im->t;
	const struct pk_value *traces = root->type == PK_DICT ? pk_get(root, "device_traces") : NULL;
	const struct pk_value *segments = root->type == PK_LIST ? root : pk_get(root, "segments");
	uint32_t device_of[MAX_LISTS + 1], list_of[MAX_DEVICES + 1], seglist = 0;
	uint64_t base, last = 0, number;
	bool devices[MAX_DEVICES + 1] = {0}, mapped[MAX_DEVICES + 1] = {0};
	char *info = NULL;
	size_t ninfo = 0, k;
	FILE *out;
	int err = 0;

	reading(im, "top", 0, 0);
	if (!segments && !traces) {
		snprintf(t->problem, sizeof t->problem,
			 "a pickle, but not a PyTorch memory snapshot (no segments or device_traces)");
		return EINVAL;
	}
	if (pk_len(traces) > MAX_DEVICES)
		return refuse(im, "device_traces for %zu devices; memtap reads at most %d", pk_len(traces),
			      MAX_DEVICES);
	for (k = 0; k <= MAX_LISTS; k++)
		device_of[k] = MT_NO_DEVICE;
	for (k = 0; k <= MAX_DEVICES; k++)
		list_of[k] = UINT32_MAX;
	for (size_t d = 0; d < pk_len(traces); d++) {
		const struct pk_value *l = pk_at(traces, d);
		if (!mt_map_get(&im->lists, (uint64_t)(uintptr_t)l, &number))
			continue; /* no entries */
		if (device_of[number - 1] != MT_NO_DEVICE)
			return refuse(im,
				      "more entries than the file's size can hold (shared values repeated); refused");
		device_of[number - 1] = (uint32_t)d;
		list_of[d] = (uint32_t)number - 1;
	}
	if (segments && mt_map_get(&im->lists, (uint64_t)(uintptr_t)segments, &number))
		seglist = (uint32_t)number;
	/* lists named: events take their device; those of other lists (host_traces) go */
	for (size_t i = 0; i < t->nevents; i++) {
		struct mt_event *e = &t->events[i];
		if (e->kind == MT_EV_RANGE_START || e->kind == MT_EV_RANGE_END)
			continue;
		if (device_of[e->device] == MT_NO_DEVICE) {
			e->kind = DROP;
			continue;
		}
		e->device = (uint8_t)device_of[e->device];
		devices[e->device] = true;
		mapped[e->device] |=
		    (e->kind == MT_EV_SEGMENT_ALLOC || e->kind == MT_EV_SEGMENT_FREE) && (e->flags & MT_SEG_MAPPED);
		if (e->time < BEFORE && e->time > last)
			last = e->time;
	}
	for (size_t i = 0; i < im->nseg; i++)
		if (im->seg[i].list == seglist && seglist)
			devices[im->seg[i].device] = true,
			mapped[im->seg[i].device] |= im->seg[i].flags & MT_SEG_MAPPED;
	/* per device: segments reserved before the trace, pages made exact, blocks */
	for (int d = 0; d < MAX_DEVICES && !err; d++) {
		uint64_t *fin = NULL;
		size_t nfin = 0, cap = 0;
		uint32_t list = list_of[d] == UINT32_MAX ? MAX_LISTS : list_of[d];
		if (!devices[d])
			continue;
		reading(im, "segments of device %zu", (size_t)d, 0);
		for (size_t i = 0; i < im->nseg && !err; i++) {
			const struct seg_rec *g = &im->seg[i];
			if (g->list != seglist || !seglist || g->device != d)
				continue;
			if (mapped[d] && (g->flags & MT_SEG_MAPPED)) {
				if (mt_grow((void **)&fin, &cap, 2 * nfin + 1, sizeof *fin))
					err = ENOMEM;
				else
					fin[2 * nfin] = g->addr, fin[2 * nfin + 1] = g->addr + g->size, nfin++;
			} else if (mt_map_get(&im->segs, key_of(list, g->addr), &number)) {
				im->t->events[number - 1].aux2 = g->pool; /* reserved in the trace */
			} else {
				err = add(
				    im,
				    (struct mt_event){.kind = MT_EV_SEGMENT_ALLOC,
						      .device = (uint8_t)d,
						      .time = BEFORE_SEGMENTS,
						      .addr = g->addr,
						      .size = g->size,
						      .aux = g->stream,
						      .aux2 = g->pool,
						      .stack = g->stack,
						      .flags = (uint8_t)((g->flags & MT_SEG_SMALL) | MT_SEG_UNSEEN)},
				    NULL);
			}
		}
		if (!err && mapped[d])
			err = pages(im, seglist, (uint8_t)d, fin, nfin);
		free(fin);
		for (size_t i = 0; i < im->nseg && !err; i++)
			if (im->seg[i].list == seglist && seglist && im->seg[i].device == d)
				err = final_blocks(im, &im->seg[i], list, last);
		if (!err) {
			char name[64];
			uint32_t s;
			snprintf(name, sizeof name, "cuda:%d (PyTorch snapshot)", d);
			if (!(s = string_id(im, name)))
				err = ENOMEM;
			else
				err = add(im, (struct mt_event){.kind = MT_EV_DEVICE, .device = (uint8_t)d, .aux = s},
					  NULL);
		}
	}
	if (err)
		return err;
	if ((err = trace_begins(im)))
		return err;
	/* the events of other lists go; what was there before is dated just before the first entry */
	base = im->first_time >= 2 ? im->first_time - 2 : 0;
	if (im->untimed && !im->timed)
		base = 0;
	for (size_t i = k = 0; i < t->nevents; i++) {
		struct mt_event e = t->events[i];
		if (e.kind == DROP)
			continue;
		if (e.kind == MT_EV_DEVICE)
			e.time = 0;
		else if (e.time >= BEFORE)
			e.time = base + (e.time == BEFORE);
		t->events[k++] = e;
	}
	t->nevents = k;
	if (!(out = open_memstream(&info, &ninfo)))
		return ENOMEM;
	fprintf(out, "backend=pytorch-snapshot\nstart_monotonic_ns=%llu\n",
		(unsigned long long)(im->untimed && !im->timed ? 1 : base));
	if (im->untimed && !im->timed)
		fputs("time=order\n", out);
	else if (!im->untimed && !im->timed) { /* no entries: taken without memory history */
		fputs("time=none\n", out);
		/* ...or a segments-only snapshot (torch.cuda.memory_snapshot(), the bare list)
		   taken with it on: blocks made while it was on kept their frames */
		if (blocks_framed(t))
			fputs("history=blocks\n", out);
	}
	if (root->type == PK_DICT)
		settings(out, "torch.", pk_get(root, "allocator_settings"), 0);
	if (fclose(out) || !(t->info = mt_trace_own(t, ninfo + 1))) {
		free(info);
		return ENOMEM;
	}
	memcpy(t->info, info, ninfo + 1);
	free(info);
	return 0;
}

int mt_trace_from_torch(const uint8_t *data, size_t size, struct mt_trace *t)
{
	struct pk_arena arena = {0};
	struct pk_value *root = NULL;
	struct importer im = {.t = t, .data = data, .budget = size / BYTES_PER_ITEM + 1024, .where = "top"};
	struct pk_hooks hooks = {.ctx = &im, .items = items, .dict = dict_read, .ahead = ahead, .mapped = t->mapped};
	int r = pk_stream(data, size, &arena, &hooks, &root, t->problem, sizeof t->problem);

	if (!r)
		r = finish(&im, root);
	t->held_peak = arena.peak;
	pk_arena_free(&arena); /* before the events are sorted: the import's peak is here */
	mt_map_free(&im.names);
	mt_map_free(&im.frames);
	mt_map_free(&im.stacks);
	mt_map_free(&im.live);
	mt_map_free(&im.segs);
	mt_map_free(&im.seen);
	mt_map_free(&im.asked);
	mt_map_free(&im.lists);
	mt_map_free(&im.open);
	mt_map_free(&im.strings);
	free(im.ids);
	free(im.seg);
	free(im.blk);
	if (!r)
		r = mt_trace_finish(t);
	t->complete = r == 0;
	if (r == ENOMEM)
		snprintf(t->problem, sizeof t->problem, "out of memory importing the snapshot");
	return r;
}
