/* PyTorch memory snapshots (torch.cuda.memory._dump_snapshot) read into a trace:
 * device_traces become events (alloc, free_completed or the older free, segment
 * alloc/free/map/unmap, oom, snapshot), frames become named stacks, a trace entry's
 * category (from the profiler) becomes a tag. What was allocated before recording
 * began is rebuilt from the final `segments` and from frees without an alloc, as
 * PyTorch's own viewer does, and dated before the first event. The final segments also
 * give the exact size of each block still live. The oldest layout (a list of segments whose blocks
 * carry `history`) is read too. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reader/pickle.h"
#include "reader/reader.h"
#include "core/map.h"

#define MAX_DEVICES 255 /* 255 is MT_NO_DEVICE */
/* Times of what existed before recording began, until the first entry's time is known. */
#define BEFORE_SEGMENTS UINT64_MAX
#define BEFORE (UINT64_MAX - 1)
#define MAX_TIME_US (INT64_C(4) << 50) /* past 2100, far below BEFORE in ns */
/* A trace entry, segment or block takes more than this many bytes of pickle: a snapshot
 * that lists more of them repeats shared values (a list holding one list many times), and
 * reading on would take time and memory out of all proportion to the file. */
#define BYTES_PER_ITEM 4

struct importer {
	struct mt_trace *t;
	size_t budget;		/* entries, segments and blocks still allowed */
	char where[64];		/* the item being read, for messages */
	struct mt_map frames;	/* hash of (function, file, line) -> named index */
	struct mt_map frame_at; /* a frame dict's address -> named index: each is read once */
	struct mt_map stacks;	/* hash of a frame list -> stack id */
	struct mt_map list_at;	/* a frame list's address -> stack id: each is read once */
	struct mt_map names;	/* a string's address -> its copy in the trace, made once */
	struct mt_map live;	/* address -> its ALLOC's event index + 1 while allocated */
	struct mt_map segs;	/* segment address -> 1 while reserved */
	struct mt_map seen;	/* addresses allocated at least once in the trace */
	uint64_t first_time;
	uint8_t devices[MAX_DEVICES];
};

static int refuse(struct importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int refuse(struct importer *im, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(im->t->problem, sizeof im->t->problem, "PyTorch snapshot, %s: ", im->where);

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

/* The integer at key into *out, left alone when absent or None; anything else is refused. */
static int num(struct importer *im, const struct pk_value *d, const char *key, int64_t *out)
{
	const struct pk_value *v = pk_get(d, key);

	if (v && v->type != PK_NONE && !pk_int(v, out))
		return refuse(im, "'%s' is not a whole number of 64 bits", key);
	return 0;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	return (h ^ v) * 0x100000001b3ull;
}

/* A string's copy in the trace, made once however many frames share it. */
static const char *owned(struct importer *im, const struct pk_value *v, const char *absent)
{
	uint64_t at = (uint64_t)(uintptr_t)v, copy;
	const char *s = pk_str(v);
	char *c;

	if (!s)
		s = absent, v = NULL;
	else if (mt_map_get(&im->names, at, &copy))
		return (const char *)(uintptr_t)copy;
	if (!(c = mt_trace_own(im->t, strlen(s) + 1)))
		return NULL;
	strcpy(c, s);
	if (v && mt_map_put(&im->names, at, (uint64_t)(uintptr_t)c))
		return NULL;
	return c;
}

static uint32_t frame_of(struct importer *im, const struct pk_value *f)
{
	const struct pk_value *fn = pk_get(f, "name"), *file = pk_get(f, "filename");
	int64_t line = 0;
	uint64_t h = 0xcbf29ce484222325ull, id;
	const char *fs, *files;

	if (f && mt_map_get(&im->frame_at, (uint64_t)(uintptr_t)f, &id))
		return (uint32_t)id;
	pk_int(pk_get(f, "line"), &line);
	line = line < INT_MIN ? INT_MIN : line > INT_MAX ? INT_MAX : line;
	h = mix(h, pk_str(fn) ? fn->str.hash : 1);
	h = mix(h, pk_str(file) ? file->str.hash : 2);
	h = mix(h, (uint64_t)line);
	if (!mt_map_get(&im->frames, h, &id)) {
		if (!(fs = owned(im, fn, "?")) || !(files = owned(im, file, "")))
			return 0;
		id = mt_trace_add_named(im->t, fs, files, (int)line);
		if (!id || mt_map_put(&im->frames, h, id))
			return 0;
	}
	if (f && mt_map_put(&im->frame_at, (uint64_t)(uintptr_t)f, id))
		return 0;
	return (uint32_t)id;
}

/* A frame list's stack: 0 when it has no frames. Each list is read once: entries that
 * share one cost a lookup. ENOMEM through *r. */
static uint32_t stack_of(struct importer *im, const struct pk_value *frames, int *r)
{
	uint64_t ids[256], h = 0x9e3779b97f4a7c15ull, id;
	size_t n = pk_len(frames);

	if (n > 256)
		n = 256;
	if (!n)
		return 0;
	if (mt_map_get(&im->list_at, (uint64_t)(uintptr_t)frames, &id))
		return (uint32_t)id;
	for (size_t i = 0; i < n; i++) {
		if (!(ids[i] = frame_of(im, pk_at(frames, i)))) {
			*r = ENOMEM;
			return 0;
		}
		h = mix(h, ids[i]);
	}
	if (!mt_map_get(&im->stacks, h, &id) &&
	    (!(id = mt_trace_add_stack(im->t, ids, (uint32_t)n)) || mt_map_put(&im->stacks, h, id))) {
		*r = ENOMEM;
		return 0;
	}
	if (mt_map_put(&im->list_at, (uint64_t)(uintptr_t)frames, id))
		*r = ENOMEM;
	return (uint32_t)id;
}

static uint8_t category(const char *c)
{
	static const struct {
		const char *name;
		uint8_t tag;
	} map[] = {{"PARAMETER", MT_TAG_PARAMS},
		   {"GRADIENT", MT_TAG_GRADS},
		   {"OPTIMIZER_STATE", MT_TAG_OPTIMIZER},
		   {"ACTIVATION", MT_TAG_ACTIVATIONS},
		   {"TEMPORARY", MT_TAG_TEMPORARIES}};

	if (!c)
		return MT_TAG_NONE;
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (strcasecmp(c, map[i].name) == 0)
			return map[i].tag;
	return MT_TAG_OTHER;
}

/* Adds e (thread 1), announcing its device first; what the reader refuses in a memtap
 * trace (a size past the address space) is refused here too. */
static int add(struct importer *im, struct mt_event e)
{
	char why[160];

	e.thread = 1;
	if (mt_trace_check_event(im->t, &e, why, sizeof why))
		return refuse(im, "%s", why);
	if (!im->devices[e.device]) {
		char name[64];
		struct mt_event d = {.kind = MT_EV_DEVICE, .device = e.device, .thread = 1, .time = 0};
		snprintf(name, sizeof name, "cuda:%d (PyTorch snapshot)", e.device);
		if (!(d.aux = mt_trace_add_string(im->t, name)))
			return ENOMEM;
		im->devices[e.device] = 1;
		if (mt_trace_add_event(im->t, &d))
			return ENOMEM;
	}
	return mt_trace_add_event(im->t, &e);
}

/* A block handed out: remembered by address (event index + 1) while live. */
static int add_block(struct importer *im, uint8_t device, uint64_t time, uint64_t addr, uint64_t requested,
		     uint64_t size, uint64_t stream, uint32_t stack, uint8_t tag)
{
	int r = add(im, (struct mt_event){.kind = MT_EV_ALLOC,
					  .flags = MT_API_BLOCK,
					  .device = device,
					  .time = time,
					  .addr = addr,
					  .size = requested,
					  .aux = stream,
					  .aux2 = size,
					  .stack = stack,
					  .tag = tag});

	if (!r)
		r = mt_map_put(&im->live, addr, im->t->nevents);
	if (!r)
		r = mt_map_put(&im->seen, addr, 1);
	return r;
}

/* One device's trace entries, oldest first. */
static int read_trace(struct importer *im, uint8_t device, const struct pk_value *entries)
{
	for (size_t i = 0; i < pk_len(entries); i++) {
		const struct pk_value *e = pk_at(entries, i);
		const char *action = pk_str(pk_get(e, "action"));
		int64_t addr = 0, size = 0, stream = 0, time_us = 0, device_free = 0;
		uint64_t time;
		uint32_t stack;
		uint8_t tag;
		int r = 0;

		snprintf(im->where, sizeof im->where, "device_traces[%u][%zu]", device, i);
		if ((r = visit(im)))
			return r;
		if (!action)
			continue;
		if ((r = num(im, e, "addr", &addr)) || (r = num(im, e, "size", &size)) ||
		    (r = num(im, e, "stream", &stream)) || (r = num(im, e, "time_us", &time_us)) ||
		    (r = num(im, e, "device_free", &device_free)))
			return r;
		time_us = time_us < 0 ? 0 : time_us > MAX_TIME_US ? MAX_TIME_US : time_us;
		time = (uint64_t)time_us * 1000 + i; /* i keeps entries of one time in order */
		if (!im->first_time || time < im->first_time)
			im->first_time = time;
		stack = stack_of(im, pk_get(e, "frames"), &r);
		if (r)
			return r;
		tag = category(pk_str(pk_get(e, "category")));
		if (!strcmp(action, "alloc")) {
			r = add_block(im, device, time, (uint64_t)addr, (uint64_t)size, 0, (uint64_t)stream, stack,
				      tag);
		} else if (!strcmp(action, "free_completed") || !strcmp(action, "free")) {
			if (!mt_map_get(&im->seen, (uint64_t)addr, NULL)) /* allocated before recording began */
				r = add_block(im, device, BEFORE, (uint64_t)addr, (uint64_t)size, 0, (uint64_t)stream,
					      0, 0);
			mt_map_del(&im->live, (uint64_t)addr, NULL);
			if (!r)
				r = add(im, (struct mt_event){.kind = MT_EV_FREE,
							      .device = device,
							      .time = time,
							      .addr = (uint64_t)addr,
							      .aux = (uint64_t)stream});
		} else if (!strcmp(action, "segment_alloc") || !strcmp(action, "segment_map")) {
			r = add(im, (struct mt_event){.kind = MT_EV_SEGMENT_ALLOC,
						      .device = device,
						      .time = time,
						      .addr = (uint64_t)addr,
						      .size = (uint64_t)size,
						      .aux = (uint64_t)stream,
						      .stack = stack,
						      .flags = action[8] == 'm' ? MT_SEG_MAPPED : 0});
			if (!r)
				r = mt_map_put(&im->segs, (uint64_t)addr, (uint64_t)size);
		} else if (!strcmp(action, "segment_free") || !strcmp(action, "segment_unmap")) {
			uint8_t mapped = action[8] == 'u' ? MT_SEG_MAPPED : 0;
			if (!mt_map_del(&im->segs, (uint64_t)addr, NULL))
				r = add(im, (struct mt_event){.kind = MT_EV_SEGMENT_ALLOC,
							      .device = device,
							      .time = BEFORE_SEGMENTS,
							      .addr = (uint64_t)addr,
							      .size = (uint64_t)size,
							      .flags = mapped});
			if (!r)
				r = add(im, (struct mt_event){.kind = MT_EV_SEGMENT_FREE,
							      .device = device,
							      .time = time,
							      .addr = (uint64_t)addr,
							      .size = (uint64_t)size,
							      .flags = mapped});
		} else if (!strcmp(action, "oom")) {
			r = add(im, (struct mt_event){.kind = MT_EV_ALLOC_FAILED,
						      .device = device,
						      .time = time,
						      .size = (uint64_t)size,
						      .aux = (uint64_t)device_free,
						      .stack = stack,
						      .error = 2 /* CUDA_ERROR_OUT_OF_MEMORY */});
		} else if (!strcmp(action, "snapshot")) {
			r = add(im,
				(struct mt_event){
				    .kind = MT_EV_SNAPSHOT, .device = device, .time = time, .size = (uint64_t)size});
		}
		if (r)
			return r;
	}
	return 0;
}

/* The final segments: what was there before recording began, and the exact size of
 * each block still live (trace entries give only the request). Addresses are unsigned:
 * a block's default address, its segment's plus the blocks before it, may wrap. */
static int read_segments(struct importer *im, const struct pk_value *segments)
{
	for (size_t i = 0; i < pk_len(segments); i++) {
		const struct pk_value *s = pk_at(segments, i), *blocks = pk_get(s, "blocks");
		int64_t device = 0, address = 0, total = 0, stream = 0;
		uint64_t offset = 0, event;
		uint32_t stack;
		int r = 0;

		snprintf(im->where, sizeof im->where, "segments[%zu]", i);
		if ((r = visit(im)) || (r = num(im, s, "device", &device)) || (r = num(im, s, "address", &address)) ||
		    (r = num(im, s, "total_size", &total)) || (r = num(im, s, "stream", &stream)))
			return r;
		if (device < 0 || device >= MAX_DEVICES)
			return refuse(im, "device %lld is not a device number (0 to %d)", (long long)device,
				      MAX_DEVICES - 1);
		if (!mt_map_get(&im->segs, (uint64_t)address, NULL)) {
			stack = stack_of(im, pk_get(s, "frames"), &r);
			if (r || (r = add(im, (struct mt_event){.kind = MT_EV_SEGMENT_ALLOC,
								.device = (uint8_t)device,
								.time = BEFORE_SEGMENTS,
								.addr = (uint64_t)address,
								.size = (uint64_t)total,
								.aux = (uint64_t)stream,
								.stack = stack})))
				return r;
		}
		for (size_t k = 0; k < pk_len(blocks); k++) {
			const struct pk_value *b = pk_at(blocks, k), *history = pk_get(b, "history");
			const char *state = pk_str(pk_get(b, "state"));
			int64_t baddr = (int64_t)((uint64_t)address + offset), size = 0, requested = 0;
			const struct pk_value *frames = pk_get(b, "frames");

			snprintf(im->where, sizeof im->where, "segments[%zu].blocks[%zu]", i, k);
			if ((r = visit(im)) || (r = num(im, b, "address", &baddr)) || (r = num(im, b, "size", &size)) ||
			    (r = num(im, b, "requested_size", &requested)))
				return r;
			offset += (uint64_t)size;
			if (!state || strncmp(state, "active", 6) != 0)
				continue;
			if (pk_len(history)) { /* the oldest layout: the last handout says who and how much */
				const struct pk_value *last = pk_at(history, pk_len(history) - 1);
				if ((r = num(im, last, "real_size", &requested)))
					return r;
				frames = pk_get(last, "frames");
			}
			if (mt_map_get(&im->live, (uint64_t)baddr, &event)) {
				im->t->events[event - 1].aux2 = (uint64_t)size;
				continue;
			}
			stack = stack_of(im, frames, &r);
			if (r || (r = add_block(im, (uint8_t)device, BEFORE, (uint64_t)baddr,
						(uint64_t)(requested ? requested : size), (uint64_t)size,
						(uint64_t)stream, stack, 0)))
				return r;
		}
	}
	return 0;
}

int mt_trace_from_torch(const uint8_t *data, size_t size, struct mt_trace *t)
{
	struct pk_arena arena = {0};
	struct pk_value *root = NULL;
	struct importer im = {.t = t, .budget = size / BYTES_PER_ITEM + 1024, .where = "top"};
	const struct pk_value *segments, *traces;
	int r = pk_parse(data, size, &arena, &root, t->problem, sizeof t->problem);

	if (r)
		goto out;
	segments = root->type == PK_LIST ? root : pk_get(root, "segments");
	traces = root->type == PK_DICT ? pk_get(root, "device_traces") : NULL;
	if (!segments && !traces) {
		snprintf(t->problem, sizeof t->problem,
			 "a pickle, but not a PyTorch memory snapshot (no segments or device_traces)");
		r = EINVAL;
		goto out;
	}
	if (pk_len(traces) > MAX_DEVICES) {
		r = refuse(&im, "device_traces for %zu devices; memtap reads at most %d", pk_len(traces), MAX_DEVICES);
		goto out;
	}
	t->info = mt_trace_own(t, 96);
	if (!t->info) {
		r = ENOMEM;
		goto out;
	}
	for (size_t d = 0; d < pk_len(traces) && !r; d++)
		r = read_trace(&im, (uint8_t)d, pk_at(traces, d));
	if (!r)
		r = read_segments(&im, segments);
	if (!r) {
		/* what existed before is dated just before the first entry, segments first */
		uint64_t base = im.first_time >= 2 ? im.first_time - 2 : 0;
		snprintf(t->info, 96, "backend=pytorch-snapshot\nstart_monotonic_ns=%llu\n", (unsigned long long)base);
		for (size_t i = 0; i < t->nevents; i++)
			if (t->events[i].time >= BEFORE)
				t->events[i].time = base + (t->events[i].time == BEFORE);
		r = mt_trace_finish(t);
	}
	t->complete = r == 0;
	if (r == ENOMEM)
		snprintf(t->problem, sizeof t->problem, "out of memory importing the snapshot");
out:
	pk_arena_free(&arena);
	mt_map_free(&im.frames);
	mt_map_free(&im.frame_at);
	mt_map_free(&im.stacks);
	mt_map_free(&im.list_at);
	mt_map_free(&im.names);
	mt_map_free(&im.live);
	mt_map_free(&im.segs);
	mt_map_free(&im.seen);
	return r;
}
