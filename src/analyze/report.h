/* `memtap report`: per device the peak and when, the stacks and the libraries live at
 * the peak, the driver's own count beside memtap's, what is live at exit grouped by
 * stack, OOM events with their stacks, and event counts, as text or as the stable JSON
 * documented in docs/REPORT.md. */
#ifndef MT_REPORT_H
#define MT_REPORT_H

#include <stdio.h>

#include "analyze/composition.h"
#include "analyze/emit.h"
#include "analyze/fragment.h"
#include "analyze/leaks.h"
#include "core/plan.h"
#include "core/replay.h"
#include "reader/reader.h"
#include "analyze/stacks.h"
#include "analyze/symbols.h"

struct mt_group {
	uint32_t stack;
	uint8_t device, kind;
	uint8_t before; /* made before the recording began (imported snapshots): 1 + what the
			 * composition read it as (MT_TAG_*); 0: made while recording */
	uint64_t bytes, count;
};

struct mt_group_list {
	struct mt_group *items;
	size_t n, cap;
};

/* Device bytes of one library: the first module of a stack that is not CUDA's runtime,
 * driver or memtap (the module's file name; "(no stack)", "(unknown)" outside every module). */
struct mt_library {
	const char *name;
	uint64_t bytes;
};

struct mt_library_list {
	struct mt_library *items; /* biggest first */
	size_t n, cap;
};

/* The driver's own count at the last cuMemGetInfo of a device (a MEMINFO event), beside
 * what memtap saw live there: used - recorded is memory no hook could see. */
/* Where a driver's count came from, least telling first: memtap's own readings (the
 * device's first use, the exit), then the job's cuMemGetInfo or an out-of-memory failure. */
enum mt_reading { MT_READING_FIRST_USE = 1, MT_READING_EXIT, MT_READING_JOB, MT_READING_OOM };

struct mt_driver_count {
	bool known;
	uint8_t reading; /* enum mt_reading */
	uint64_t time, used, recorded;
};

/* A failed allocation, and what was live on its device when it failed. */
struct mt_oom {
	size_t event;			    /* its index */
	struct mt_event ev;		    /* the failure itself */
	uint64_t allocated;		    /* live on its device then */
	uint64_t composition[MT_TAG_COUNT]; /* ... by what it was for ([0] unused) */
	size_t iterations;		    /* iteration boundaries passed before it (0: none, or none known) */
	uint64_t loaded;		    /* ... live then from a checkpoint's loading (torch.load) */
	uint32_t loaded_stack;		    /* ... the stack that loaded the most of it */
	uint64_t graphs;		    /* ... live then in CUDA graphs' memory nodes */
	/* the peak on its device before the last of those boundaries: the steps before its own */
	size_t before_event;
	uint64_t before;			   /* 0: none */
	uint64_t before_composition[MT_TAG_COUNT]; /* ... by what it was for */
};

/* Whether a whole step ran before the failure: the optimizer's state was live, or two
 * iteration boundaries had passed. */
static inline bool mt_oom_after_a_step(const struct mt_oom *o)
{
	return o->composition[MT_TAG_OPTIMIZER] > 0 || o->iterations >= 2;
}

/* What memtap's policies did, for the page's marks: a snapshot a policy (or memtap_snapshot)
 * took, or one of memtap's own notes (an NVTX mark "memtap.*": caps, allocator changes,
 * capture ranges); the first MT_REPORT_ACTIONS. */
#define MT_REPORT_ACTIONS 200
struct mt_action {
	uint64_t time;
	uint64_t text; /* string id: the snapshot's path, or the mark */
	bool snapshot;
};

struct mt_report {
	const struct mt_trace *trace;
	struct mt_replay end;				   /* state after the last event */
	struct mt_group_list at_peak[MT_MAX_DEVICES];	   /* per device, biggest first */
	struct mt_group_list at_exit;			   /* every kind, biggest first */
	struct mt_library_list by_library[MT_MAX_DEVICES]; /* at each device's peak */
	struct mt_driver_count driver[MT_MAX_DEVICES];	   /* its most telling last reading */
	uint64_t kinds[MT_EV_COUNT];			   /* events by kind */
	uint64_t early, early_bytes; /* allocations made before memtap's constructor ran (MT_ALLOC_EARLY) */
	struct mt_oom *oom;	     /* failed allocations, in order */
	size_t noom, cap_oom;
	struct mt_composition comp;			    /* category of every allocation */
	uint64_t composition[MT_MAX_DEVICES][MT_TAG_COUNT]; /* at each device's peak; [0] unused */
	uint64_t blocks_at_peak[MT_MAX_DEVICES];	 /* a caching allocator's blocks live at the peak (tensors) */
	uint8_t sources[MT_MAX_DEVICES][MT_TAG_COUNT];	 /* bit (1 << enum mt_source) per category */
	uint64_t evidence[MT_MAX_DEVICES][MT_TAG_COUNT]; /* bytes times their evidence (0 to 2) */
	struct mt_fragment frag;			 /* where segments are known */
	struct mt_leaks leaks;				 /* growth across iterations */
	struct mt_action actions[MT_REPORT_ACTIONS];
	size_t nactions;
	uint64_t start;			   /* trace start, monotonic ns */
	bool order;			   /* the trace has no times: they are entries' places */
	bool untraced;			   /* a snapshot with no entries: one moment */
	bool one_moment;		   /* untraced, or a snapshot whose entries all fall in one microsecond (one
					      entry, or state-mode recording's one per device): no time axis */
	bool block_history;		   /* ...whose blocks made while memory history was on kept their frames */
	const struct mt_plan_config *plan; /* the run's setup, checked: adds a capacity plan */
	uint64_t target;		   /* a capacity the peak must fit in (report --gpu-mem); 0: none */
	bool all_frames;		   /* text: every frame of every stack, unshortened */
	bool served;			   /* html: the page asks memtap report --serve for detail */
};

struct mt_report_options {
	const char *iteration;	  /* mark or NVTX range name for iteration boundaries; NULL: choose */
	unsigned leak_iterations; /* growths in a row that make a leak; 0: 3 */
};

int mt_report_build(struct mt_report *r, const struct mt_trace *t, const struct mt_report_options *o);
/* A moment as the reports give it: ns since the trace's start (0 for an earlier one). */
static inline uint64_t mt_report_since(const struct mt_report *r, uint64_t time)
{
	return time > r->start ? time - r->start : 0;
}
/* The run's length: its last event's moment (0 without events). */
static inline uint64_t mt_report_span(const struct mt_report *r)
{
	return r->trace->nevents ? mt_report_since(r, mt_trace_end(r->trace)) : 0;
}
/* A block made before recording (an mt_group's `before`, nonzero) in words: what the
 * composition read it as, or that the snapshot had no history at all. */
const char *mt_report_before_text(const struct mt_report *r, uint8_t before);
/* stacks[0..n) as one JSON object, number -> {frames, depth, where, view, calls}: --json's
 * rows bounded for a page whatever the trace holds, and the view's frames in call order,
 * the outermost first; out: the stream e writes to, for the bound on the whole */
void mt_report_stacks_emit(struct mt_emit *e, FILE *out, const struct mt_report *r, struct mt_symbols *sym,
			   struct mt_views *views, const uint32_t *stacks, size_t n);
void mt_report_free(struct mt_report *r);
/* The job's waits for memtap's writer to make room, in words; "" when it never waited. */
const char *mt_report_waits_text(const struct mt_trace *t, char *buf, size_t len);
/* The composition at device d's peak (d < 0: the highest peak) as plan components and
 * the rest; returns the device, or -1 when it was not used or nothing at its peak is
 * known as a component (no tags or NVTX phases). */
int mt_report_measured(const struct mt_report *r, int d, double measured[MT_PLAN_COMPONENTS], double *other);
/* A step that had not finished when it was measured (a failure in the first): what it had
 * not made yet, measured below the model's estimate, is left to the model (set to 0). */
void mt_report_unfinished(const struct mt_plan *model, double measured[MT_PLAN_COMPONENTS]);
/* The same of any moment's composition and total; false when no component is known. */
bool mt_report_components(const uint64_t composition[MT_TAG_COUNT], uint64_t total, double measured[MT_PLAN_COMPONENTS],
			  double *other);
/* The caching allocator's reserve at device d's peak that holds no tensor: its cache. */
uint64_t mt_report_cache(const struct mt_report *r, int d);
void mt_report_text(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top);
/* A device's capacity in words: its size; under a policy's cap, the cap and the device's
 * own size; "capacity unknown". */
const char *mt_capacity_text(const struct mt_device_state *s, char *buf, size_t n);
/* The first failed allocation in one line after `prefix` (memtap run's summary): out of
 * memory or the error, the request, device, time, range, the first user frame, the free
 * and total bytes and under which limit; nothing when no allocation failed. */
void mt_report_oom_summary(FILE *out, const struct mt_report *r, struct mt_symbols *sym, const char *prefix);
void mt_report_json(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top);
/* The JSON's document through any sink (analyze/emit.h): Lua's t:report() builds tables.
 * views: the stacks' views, the caller's (made as they are needed; NULL: none). */
void mt_report_emit(struct mt_emit *e, const struct mt_report *r, struct mt_symbols *sym, struct mt_views *views,
		    size_t top);
/* One self-contained HTML page (html.c): charts, tables and the JSON's numbers. 0 or errno. */
int mt_report_html(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top);
/* What memtap report --serve answers a served page (r->served), from the events' index:
 * device d's composition and allocations over [from, to] (ns since the trace's start) as
 * {"points", "allocations", "stacks"}, each as the page's own; and its segment map as the
 * scan stands after event i (the scan stepped through it), with what the event did. */
struct mt_timeline_index;
struct mt_fragment_scan;
int mt_report_html_range(FILE *out, const struct mt_timeline_index *ix, struct mt_symbols *sym, int d, uint64_t from,
			 uint64_t to);
int mt_report_html_map(FILE *out, const struct mt_timeline_index *ix, struct mt_fragment_scan *scan, int d, size_t i);

#endif
