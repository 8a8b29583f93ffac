/* Folded stacks and Chrome trace-event JSON, built from a report. */
#include "analyze/export.h"
#include "analyze/stacks.h"
#include "analyze/timeline.h"

#include "core/array.h"
#include "core/map.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* One frame as a flame-graph label, as the report reads it (function (file:line), a C++
 * name shortened): no ';' (the separator) and no newline. */
static void label(FILE *out, const struct mt_frame *f)
{
	char buf[4096];

	for (const char *s = mt_frame_text(f, false, buf, sizeof buf); *s; s++)
		fputc(*s == ';' ? ':' : *s == '\n' ? ' ' : *s, out);
}

/* A stack root first, as its view reads (stacks.h): the Python frames outermost first,
 * then the native frames under the innermost one; every frame where the view keeps none. */
static void folded_line(FILE *out, const struct mt_report *r, struct mt_symbols *sym, struct mt_views *views,
			uint32_t stack, bool before, uint64_t bytes)
{
	const struct mt_trace *t = r->trace;
	uint32_t depth = stack && stack < t->nstacks ? t->stacks[stack].depth : 0;
	const struct mt_view *v = mt_view(views, stack);
	uint32_t npy = 0, n = 0;

	if (!bytes)
		return;
	if (before)
		fputs(depth ? "[allocated before recording];" : "[allocated before recording]", out);
	else if (!depth)
		fputs("[no stack]", out);
	if (!v->nshown) {
		for (uint32_t i = depth; i-- > 0;) {
			label(out, mt_symbols_frame(sym, t->stacks[stack].frames[i]));
			fputs(i ? ";" : "", out);
		}
	} else {
		while (npy < v->nshown &&
		       mt_frame_is_python(mt_symbols_frame(sym, t->stacks[stack].frames[v->shown[npy]])))
			npy++;
		for (uint32_t k = npy; k-- > 0;) /* Python, outermost first */
			fputs(n++ ? ";" : "", out),
			    label(out, mt_symbols_frame(sym, t->stacks[stack].frames[v->shown[k]]));
		for (uint32_t k = v->nshown; k-- > npy;) /* native, outermost first */
			fputs(n++ ? ";" : "", out),
			    label(out, mt_symbols_frame(sym, t->stacks[stack].frames[v->shown[k]]));
	}
	fprintf(out, " %" PRIu64 "\n", bytes);
}

int mt_export_folded(FILE *out, const struct mt_report *r, struct mt_symbols *sym, enum mt_folded_what what)
{
	struct mt_views *views = mt_views_open(r->trace, sym);

	if (!views)
		return ENOMEM;
	if (what == MT_FOLDED_LEAKS) {
		for (size_t i = 0; i < r->leaks.n; i++)
			folded_line(out, r, sym, views, r->leaks.items[i].stack, false, r->leaks.items[i].growth);
	} else if (what == MT_FOLDED_EXIT) {
		for (size_t i = 0; i < r->at_exit.n; i++)
			folded_line(out, r, sym, views, r->at_exit.items[i].stack, r->at_exit.items[i].before,
				    r->at_exit.items[i].bytes);
	} else {
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			for (size_t i = 0; i < r->at_peak[d].n; i++)
				folded_line(out, r, sym, views, r->at_peak[d].items[i].stack,
					    r->at_peak[d].items[i].before, r->at_peak[d].items[i].bytes);
	}
	mt_views_close(views);
	return ferror(out) ? EIO : 0;
}

/* ---- Chrome trace-event JSON ---- */

struct counters {
	uint64_t bytes[MT_MAX_DEVICES][MT_TAG_COUNT];
	uint64_t last_time[MT_MAX_DEVICES];
	bool dirty[MT_MAX_DEVICES];
};

static void counter(FILE *out, const struct mt_report *r, struct counters *c, int d, uint64_t time, bool *first)
{
	fprintf(out, "%s\n{\"name\": \"device %d\", \"ph\": \"C\", \"pid\": 1, \"ts\": %.3f, \"args\": {",
		*first ? "" : ",", d, (double)(time - r->start) / 1000.0);
	for (int k = 1; k < MT_TAG_COUNT; k++)
		fprintf(out, "%s\"%s\": %" PRIu64, k > 1 ? ", " : "", mt_tag_names[k], c->bytes[d][k]);
	fputs("}}", out);
	*first = false;
	c->last_time[d] = time;
	c->dirty[d] = false;
}

int mt_export_perfetto(FILE *out, const struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	struct counters *c = calloc(1, sizeof *c);
	struct mt_timeline_live live = {0};
	struct mt_walk *w = mt_walk_start(t);
	const struct mt_event *e;
	/* a sample at every change of a device's bytes; a long trace at most ~20000 a device
	   (from the trace's start: events before it, a snapshot's, are at its start) */
	uint64_t last = mt_trace_end(t);
	uint64_t step = t->nevents <= 200000 || last <= r->start ? 0 : (last - r->start) / 20000;
	char cmd[512] = "memtap trace";
	bool first = true;
	struct {
		uint32_t tid;
		uint64_t name;
	} *open = NULL; /* pushed ranges, innermost last: an E event is named as its B */
	size_t nopen = 0, capopen = 0;

	if (!c || !w) {
		free(c);
		mt_walk_end(w);
		return ENOMEM;
	}
	mt_trace_info(t, "cmdline", cmd, sizeof cmd);
	fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", out);
	fprintf(out, "\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": ");
	mt_json_str(out, cmd);
	fputs("}}", out);
	first = false;
	for (size_t i = 0; (e = mt_walk_one(w)); i++) {
		double ts = e->time > r->start ? (double)(e->time - r->start) / 1000.0 : 0.0;
		uint32_t tid = mt_trace_thread(t, e->thread);
		struct mt_timeline_change change;
		int d = -1;

		if (mt_timeline_step(r, &live, e, i, &change)) {
			d = change.made.device;
			c->bytes[d][change.made.category] += (uint64_t)change.delta;
		}
		switch (e->kind) {
		case MT_EV_ALLOC_FAILED:
			fprintf(out,
				",\n{\"name\": \"%s: %" PRIu64
				" bytes on device %d\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 1, "
				"\"tid\": %u, \"ts\": %.3f}",
				e->error == 2 ? "out of memory" : "allocation failed", e->size,
				e->device == MT_NO_DEVICE ? -1 : e->device, tid, ts);
			break;
		case MT_EV_RANGE_PUSH:
			fputs(",\n{\"name\": ", out);
			mt_json_str(out, mt_trace_string(t, e->aux));
			fprintf(out, ", \"cat\": \"nvtx\", \"ph\": \"B\", \"pid\": 1, \"tid\": %u, \"ts\": %.3f}", tid,
				ts);
			if (!mt_grow((void **)&open, &capopen, nopen, sizeof *open)) {
				open[nopen].tid = tid;
				open[nopen++].name = e->aux;
			}
			break;
		case MT_EV_RANGE_POP: { /* named, so speedscope closes the slice it opened */
			uint64_t name = 0;
			for (size_t k = nopen; k-- > 0;)
				if (open[k].tid == tid) {
					name = open[k].name;
					memmove(&open[k], &open[k + 1], (nopen - k - 1) * sizeof *open);
					nopen--;
					break;
				}
			fputs(",\n{\"name\": ", out);
			mt_json_str(out, mt_trace_string(t, name));
			fprintf(out, ", \"cat\": \"nvtx\", \"ph\": \"E\", \"pid\": 1, \"tid\": %u, \"ts\": %.3f}", tid,
				ts);
			break;
		}
		case MT_EV_RANGE_START:
		case MT_EV_RANGE_END:
			fputs(",\n{\"name\": ", out);
			mt_json_str(out, mt_trace_string(t, e->aux));
			fprintf(out,
				", \"cat\": \"nvtx\", \"ph\": \"%s\", \"id\": %" PRIu64
				", \"pid\": 1, \"tid\": %u, \"ts\": %.3f}",
				e->kind == MT_EV_RANGE_START ? "b" : "e", e->aux2, tid, ts);
			break;
		case MT_EV_MARK:
		case MT_EV_NVTX_MARK:
			fputs(",\n{\"name\": ", out);
			mt_json_str(out, mt_trace_string(t, e->aux));
			fprintf(out, ", \"ph\": \"i\", \"s\": \"t\", \"pid\": 1, \"tid\": %u, \"ts\": %.3f}", tid, ts);
			break;
		default:
			break;
		}
		if (d < 0)
			continue;
		c->dirty[d] = true;
		/* every peak exactly */
		if (e->time - c->last_time[d] >= step || r->end.dev[d].peak_event == i)
			counter(out, r, c, d, e->time, &first);
	}
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (c->dirty[d])
			counter(out, r, c, d, last, &first);
	fputs("\n]}\n", out);
	mt_walk_end(w);
	mt_timeline_live_free(&live);
	free(c);
	free(open);
	return ferror(out) ? EIO : 0;
}
