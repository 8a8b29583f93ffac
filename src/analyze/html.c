/* `memtap report --html`: one self-contained page. The data is the report's own JSON
 * (so the page and --json agree by construction) plus what only the page draws, each
 * bounded whatever the trace's length: the composition timeline, the blocks at each
 * peak, each device's biggest allocations, what was live by stack at the peak and at
 * each OOM, segment maps through the run, and those stacks; report.js draws it,
 * report.css styles it, both inlined. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "analyze/timeline.h"
#include "core/array.h"
#include "core/map.h"
#include "core/text.h"

extern const char mt_html_css[], mt_html_js[];

/* Text inside <script>: "</" never appears, so no string in the data can end it. */
static void script_text(FILE *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '<' && i + 1 < n && s[i + 1] == '/')
			fputs("<\\", out);
		else
			fputc(s[i], out);
	}
}

static void html_text(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", out);
		else if (*s == '&')
			fputs("&amp;", out);
		else
			fputc(*s, out);
	}
}

/* The allocations the page draws for a device, at most MT_HTML_ALLOCATIONS, so that the
 * page stays small at any length of trace: half its biggest (the earliest first among
 * equals), half the biggest made in each of MT_HTML_SPANS equal spans of the run, so that
 * a zoom into any part of a long run still finds its own. */
#define MT_HTML_ALLOCATIONS 1500
#define MT_HTML_SPANS 50
#define MT_HTML_BIGGEST (MT_HTML_ALLOCATIONS / 2)
#define MT_HTML_PER_SPAN ((MT_HTML_ALLOCATIONS - MT_HTML_BIGGEST) / MT_HTML_SPANS)

struct pick {
	struct mt_timeline_made made;
	size_t freed; /* its event's index, 0 while live at the end */
	uint64_t freed_time;
	size_t span; /* of the run, where it was made */
};

/* A device's picks: while picking, all[] holds heaps, its biggest first (n[0] of them),
 * then MT_HTML_PER_SPAN places for each span s (n[1 + s]); once picked, `count` of them
 * merged in the order made. While picking without the index, when a pick was freed:
 * made event -> its free's event and time. */
struct picks {
	struct pick all[MT_HTML_ALLOCATIONS];
	size_t n[1 + MT_HTML_SPANS], count;
	struct mt_map freed, freed_time;
};

static bool better(const struct pick *a, const struct pick *b)
{
	return a->made.size != b->made.size ? a->made.size > b->made.size : a->made.event < b->made.event;
}

/* A min-heap of at most cap picks: the worst at the root, replaced by a better one, which
 * goes into *out (true). */
static bool offer(struct pick *h, size_t *n, size_t cap, struct pick x, struct pick *out)
{
	size_t i = *n;

	if (*n == cap) {
		if (!better(&x, &h[0]))
			return false;
		*out = h[0];
		i = 0;
		for (size_t c; (c = 2 * i + 1) < *n; i = c) { /* sift the new root down */
			if (c + 1 < *n && better(&h[c], &h[c + 1]))
				c++;
			if (!better(&x, &h[c]))
				break;
			h[i] = h[c];
		}
		h[i] = x;
		return true;
	}
	for (; i && better(&h[(i - 1) / 2], &x); i = (i - 1) / 2) /* sift up */
		h[i] = h[(i - 1) / 2];
	h[i] = x;
	(*n)++;
	return false;
}

/* Whether x, offered to the heap, is in it still: the heap keeps the best of all offered,
 * the worst of them at its root. */
static bool kept(const struct pick *h, const struct mt_timeline_made *x)
{
	const struct pick p = {.made = *x};

	return h[0].made.event == x->event || better(&p, &h[0]);
}

static struct pick *span_heap(struct picks *p, size_t s)
{
	return p->all + MT_HTML_BIGGEST + s * MT_HTML_PER_SPAN;
}

/* Whether the allocation made at x, offered in span s, is among the picks. */
static bool picked_now(struct picks *p, const struct mt_timeline_made *x, size_t s)
{
	return kept(p->all, x) || kept(span_heap(p, s), x);
}

/* A pick put out of its heap: when it was freed is forgotten unless the other heap keeps it. */
static void put_out(struct picks *p, const struct pick *out)
{
	if (picked_now(p, &out->made, out->span))
		return;
	mt_map_del(&p->freed, out->made.event, NULL);
	mt_map_del(&p->freed_time, out->made.event, NULL);
}

/* x into the heaps. */
static void pick(struct picks *p, struct pick x)
{
	struct pick out;

	if (offer(p->all, &p->n[0], MT_HTML_BIGGEST, x, &out))
		put_out(p, &out);
	if (offer(span_heap(p, x.span), &p->n[1 + x.span], MT_HTML_PER_SPAN, x, &out))
		put_out(p, &out);
}

static int by_made(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;

	return (x->made.event > y->made.event) - (x->made.event < y->made.event);
}

/* The heaps into one list by when each was made, an allocation in two heaps once. */
static void merge(struct picks *p)
{
	size_t n = p->n[0];

	for (size_t s = 0; s < MT_HTML_SPANS; s++)
		for (size_t i = 0; i < p->n[1 + s]; i++)
			p->all[n++] = span_heap(p, s)[i];
	qsort(p->all, n, sizeof *p->all, by_made);
	p->count = 0;
	for (size_t i = 0; i < n; i++)
		if (!p->count || p->all[p->count - 1].made.event != p->all[i].made.event)
			p->all[p->count++] = p->all[i];
}

/* The span of [from, to] an allocation made at `at` falls in. */
static size_t span_of(uint64_t at, uint64_t from, uint64_t to)
{
	return mt_timeline_part(at > from ? at - from : 0, to - from, MT_HTML_SPANS);
}

/* The allocations to draw of those live in [from, to] (ns since the trace's start), the
 * spans cut from it, on every device or only one (-1: every), in one pass over the
 * events: with the index, which says when each was freed; without, with only what is live
 * and the picks in memory, noting when a pick is freed while it is one. */
static int pick_allocations(const struct mt_report *r, const struct mt_timeline_index *ix, int only, uint64_t from,
			    uint64_t to, struct picks **picks)
{
	const struct mt_trace *t = r->trace;
	struct mt_timeline_live live = {0};
	struct mt_timeline_change c;
	const struct mt_event *e;
	struct mt_walk *w = mt_walk_start(t);
	int err = w ? 0 : ENOMEM;

	for (size_t i = 0; !err && (e = mt_walk_one(w)); i++) {
		const uint64_t at = mt_report_since(r, e->time);
		if (at > to)
			break;
		if (ix ? !mt_timeline_index_step(ix, i, &c) : !mt_timeline_step(r, &live, e, i, &c))
			continue;
		const int d = c.made.device;
		struct picks *p = picks[d];
		if (only >= 0 && d != only)
			continue;
		if (c.delta <= 0) {
			size_t s = span_of(mt_report_since(r, c.made.time), from, to);
			if (c.delta < 0 && !ix && p && picked_now(p, &c.made, s) &&
			    (mt_map_put(&p->freed, c.made.event, i) ||
			     mt_map_put(&p->freed_time, c.made.event, e->time)))
				err = ENOMEM;
			continue;
		}
		struct pick x = {.made = c.made, .span = span_of(at, from, to)};
		if (ix && ix->link[i] != MT_TIMELINE_LIVE) {
			x.freed = ix->link[i];
			x.freed_time = t->events[x.freed].time;
			if (mt_report_since(r, x.freed_time) < from)
				continue;
		}
		if (!p && !(p = picks[d] = calloc(1, sizeof *p))) {
			err = ENOMEM;
			break;
		}
		pick(p, x);
	}
	mt_walk_end(w);
	mt_timeline_live_free(&live);
	for (int k = 0; k < MT_MAX_DEVICES; k++) {
		struct picks *p = picks[k];
		if (!p)
			continue;
		if (!err)
			merge(p);
		for (size_t j = 0; j < p->count && !ix; j++) {
			struct pick *x = &p->all[j];
			uint64_t freed = 0;
			if (mt_map_get(&p->freed, x->made.event, &freed)) {
				x->freed = freed;
				mt_map_get(&p->freed_time, x->made.event, &x->freed_time);
			}
		}
		mt_map_free(&p->freed);
		mt_map_free(&p->freed_time);
	}
	return err;
}

/* The stacks the page's data names, each once at the end. */
struct ids {
	uint32_t *v;
	size_t n, cap;
};

static int want(struct ids *ids, uint32_t stack)
{
	if (mt_grow((void **)&ids->v, &ids->cap, ids->n + 1, sizeof *ids->v))
		return ENOMEM;
	ids->v[ids->n++] = stack;
	return 0;
}

static int by_number(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* One device's picks: [[made, freed or -1, size, category, stack], ...] (times from the
 * trace's start, category as the timeline's columns). */
static int picked(FILE *out, const struct mt_report *r, const struct picks *p, struct ids *ids)
{
	int err = 0;

	fputs("[", out);
	for (size_t i = 0; p && i < p->count && !err; i++) {
		const struct mt_timeline_made *a = &p->all[i].made;
		fprintf(out, "%s[%" PRIu64 ",", i ? "," : "", mt_report_since(r, a->time));
		if (p->all[i].freed)
			fprintf(out, "%" PRIu64, mt_report_since(r, p->all[i].freed_time));
		else
			fputs("-1", out);
		fprintf(out, ",%" PRIu64 ",%d,%" PRIu32 "]", a->size, a->category - 1, a->stack);
		err = want(ids, a->stack);
	}
	fputs("]", out);
	return err;
}

/* "allocations": device -> its picks of the whole run. */
static int allocations(FILE *out, const struct mt_report *r, struct ids *ids)
{
	struct picks *picks[MT_MAX_DEVICES] = {0};
	bool first = true;
	int err = pick_allocations(r, NULL, -1, 0, mt_report_span(r), picks);

	fputs("\"allocations\": {", out);
	for (int d = 0; d < MT_MAX_DEVICES && !err; d++) {
		if (!picks[d])
			continue;
		fprintf(out, "%s\"%d\": ", first ? "" : ", ", d);
		first = false;
		err = picked(out, r, picks[d], ids);
	}
	fputs("}", out);
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		free(picks[d]);
	return err;
}

/* What is live by stack on each device, replayed to each OOM: bytes[(device << 32) | stack]
 * and the count likewise; at each OOM its device's rows [stack, bytes, count]. */
static int live_at_ooms(FILE *out, const struct mt_report *r, struct ids *ids)
{
	struct mt_timeline_live live = {0};
	struct mt_map bytes = {0}, count = {0};
	struct mt_timeline_change step;
	struct mt_walk *w = r->noom ? mt_walk_start(r->trace) : NULL;
	const struct mt_event *e;
	size_t k = 0;
	int err = r->noom && !w ? ENOMEM : 0;

	fputs("[", out);
	for (size_t i = 0; k < r->noom && !err && (e = mt_walk_one(w)); i++) {
		if (i == r->oom[k].event) {
			const int dev = e->device;
			bool first = true;
			fprintf(out, "%s[", k ? ", " : "");
			for (size_t s = 0; s < bytes.cap; s++) {
				uint64_t c = 0;
				if (bytes.used[s] != 1 || !bytes.vals[s] || (int)(bytes.keys[s] >> 32) != dev)
					continue;
				mt_map_get(&count, bytes.keys[s], &c);
				fprintf(out, "%s[%" PRIu32 ",%" PRIu64 ",%" PRIu64 "]", first ? "" : ",",
					(uint32_t)bytes.keys[s], bytes.vals[s], c);
				first = false;
				err = err ? err : want(ids, (uint32_t)bytes.keys[s]);
			}
			fputs("]", out);
			k++;
		}
		if (!mt_timeline_step(r, &live, e, i, &step))
			continue;
		uint64_t key = (uint64_t)step.made.device << 32 | step.made.stack, b = 0, c = 0;
		mt_map_get(&bytes, key, &b);
		mt_map_get(&count, key, &c);
		if (mt_map_put(&bytes, key, b + (uint64_t)step.delta) ||
		    mt_map_put(&count, key, step.delta > 0 ? c + 1 : c - 1))
			err = ENOMEM;
	}
	for (; k < r->noom; k++) /* an OOM past the events: none, as the report's own list */
		fprintf(out, "%s[]", k ? ", " : "");
	fputs("]", out);
	mt_walk_end(w);
	mt_timeline_live_free(&live);
	mt_map_free(&bytes);
	mt_map_free(&count);
	return err;
}

/* "live": {"peak": device -> rows (the report's own groups at the device's peak), "oom":
 * rows at each of the report's OOMs, in its order}: for the page's caller trees. */
static int live(FILE *out, const struct mt_report *r, struct ids *ids)
{
	bool first = true;
	int err = 0;

	fputs("\"live\": {\"peak\": {", out);
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		const struct mt_group_list *g = &r->at_peak[d];
		if (!g->n)
			continue;
		fprintf(out, "%s\"%d\": [", first ? "" : ", ", d);
		first = false;
		for (size_t i = 0; i < g->n && !err; i++) {
			fprintf(out, "%s[%" PRIu32 ",%" PRIu64 ",%" PRIu64 "]", i ? "," : "", g->items[i].stack,
				g->items[i].bytes, g->items[i].count);
			err = want(ids, g->items[i].stack);
		}
		fputs("]", out);
	}
	fputs("}, \"oom\": ", out);
	err = err ? err : live_at_ooms(out, r, ids);
	fputs("}", out);
	return err;
}

/* The segment maps the page steps through, where segments are known: each device's at
 * MT_HTML_MAPS equal steps of the run, at its peak and at each of its first OOMs, at most
 * MT_HTML_MAP_BLOCKS blocks each (the rest counted). */
#define MT_HTML_MAPS 48
#define MT_HTML_MAP_OOMS 16
#define MT_HTML_MAP_BLOCKS 4000

enum map_kind { MAP_STEP, MAP_PEAK, MAP_OOM };

/* [time, kind, [segment address, size, ...], [block address, size, ...], blocks left out] */
static int map(FILE *out, const struct mt_report *r, struct mt_fragment_scan *scan, int d, uint64_t time,
	       enum map_kind kind, bool *first)
{
	struct mt_frag_device m;
	size_t shown;
	int err = mt_fragment_map(scan, d, &m);

	if (!err && m.segments) {
		fprintf(out, "%s[%" PRIu64 ",%d,[", *first ? "" : ",", mt_report_since(r, time), kind);
		*first = false;
		for (size_t i = 0; i < m.nsegments; i++)
			fprintf(out, "%s%" PRIu64 ",%" PRIu64, i ? "," : "", m.segments[i].addr, m.segments[i].size);
		fputs("],[", out);
		shown = m.nblocks < MT_HTML_MAP_BLOCKS ? m.nblocks : MT_HTML_MAP_BLOCKS;
		for (size_t i = 0; i < shown; i++)
			fprintf(out, "%s%" PRIu64 ",%" PRIu64, i ? "," : "", m.blocks[i].addr, m.blocks[i].size);
		fprintf(out, "],%zu]", m.nblocks - shown);
	}
	free(m.segments);
	free(m.blocks);
	return err;
}

/* "maps": device -> the maps in time order, from a scan of its own over the events. */
static int maps(FILE *out, const struct mt_report *r)
{
	const struct mt_trace *t = r->trace;
	struct mt_fragment scratch;
	struct mt_fragment_scan *scan;
	uint64_t span = mt_report_span(r);
	int err = 0;

	fputs("\"maps\": {", out);
	for (int d = 0, devices = 0; d < MT_MAX_DEVICES && !err && r->frag.known; d++) {
		size_t step = 1, ooms = 0, i = 0;
		uint64_t last = 0; /* the time of the event before */
		const struct mt_event *e;
		struct mt_walk *w = NULL;
		bool first = true;
		if (!r->frag.dev[d].known)
			continue;
		fprintf(out, "%s\"%d\": [", devices++ ? ", " : "", d);
		err = mt_fragment_start(&scan, &scratch, t, &r->end, true);
		if (!err && !(w = mt_walk_start(t)))
			err = ENOMEM;
		for (; !err && (e = mt_walk_one(w)); last = e->time, i++) {
			uint64_t at = mt_report_since(r, e->time);
			if (step < MT_HTML_MAPS && mt_timeline_part(at, span, MT_HTML_MAPS) >= step && i) {
				/* once, however many steps it passed */
				err = map(out, r, scan, d, last, MAP_STEP, &first);
				step = mt_timeline_part(at, span, MT_HTML_MAPS) + 1;
			}
			err = err ? err : mt_fragment_step(scan, e, i);
			if (!err && r->end.dev[d].peak && r->end.dev[d].peak_event == i)
				err = map(out, r, scan, d, e->time, MAP_PEAK, &first);
			if (!err && e->kind == MT_EV_ALLOC_FAILED && e->device == d && ooms < MT_HTML_MAP_OOMS) {
				err = map(out, r, scan, d, e->time, MAP_OOM, &first);
				ooms++;
			}
		}
		if (!err && i)
			err = map(out, r, scan, d, last, MAP_STEP, &first);
		mt_walk_end(w);
		err = mt_fragment_finish(scan, err);
		mt_fragment_free(&scratch);
		fputs("]", out);
	}
	fputs("}", out);
	return err;
}

/* "actions": what memtap's policies did (the report's), for the charts' marks: [time, text]. */
static void actions(FILE *out, const struct mt_report *r)
{
	char buf[256];

	fputs("\"actions\": [", out);
	for (size_t i = 0; i < r->nactions; i++) {
		const struct mt_action *a = &r->actions[i];
		const char *s = mt_trace_string(r->trace, a->text);
		fprintf(out, "%s[%" PRIu64 ",", i ? "," : "", mt_report_since(r, a->time));
		if (a->snapshot) {
			snprintf(buf, sizeof buf, "snapshot %s", s);
			s = buf;
		}
		mt_json_str(out, mt_text_clip(s, buf, sizeof buf));
		fputs("]", out);
	}
	fputs("]", out);
}

/* "stacks": each stack named above, once, as --json's rows have them. */
static int stacks(FILE *out, const struct mt_report *r, struct mt_symbols *sym, struct ids *ids)
{
	struct mt_views *views = mt_views_open(r->trace, sym);
	struct mt_json_sink j;
	struct mt_emit e = mt_emit_json(&j, out);
	size_t n = 0;

	if (!views)
		return ENOMEM;
	if (ids->n)
		qsort(ids->v, ids->n, sizeof *ids->v, by_number);
	for (size_t i = 0; i < ids->n; i++)
		if (!n || ids->v[n - 1] != ids->v[i])
			ids->v[n++] = ids->v[i];
	fputs("\"stacks\": ", out);
	mt_report_stacks_emit(&e, out, r, sym, views, ids->v, n);
	mt_views_close(views);
	return 0;
}

/* Device d's points: [[time, bytes by category..., reserved], ...], times from the trace's start. */
static void points(FILE *out, const struct mt_report *r, const struct mt_timeline *tl, int d)
{
	fputs("[", out);
	for (size_t i = 0; i < tl->n[d]; i++) {
		const struct mt_timeline_point *p = &tl->points[d][i];
		fprintf(out, "%s[%" PRIu64, i ? "," : "", mt_report_since(r, p->time));
		for (int c = 1; c < MT_TAG_COUNT; c++)
			fprintf(out, ",%" PRIu64, p->bytes[c]);
		fprintf(out, ",%" PRIu64 "]", p->reserved);
	}
	fputs("]", out);
}

static int series(FILE *out, const struct mt_report *r, const struct mt_timeline *tl, struct mt_symbols *sym)
{
	struct ids ids = {0};
	bool first = true;
	int err;

	fprintf(out, "{\"served\": %s, \"timeline\": {", r->served ? "true" : "false");
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		if (!tl->n[d])
			continue;
		fprintf(out, "%s\"%d\": ", first ? "" : ", ", d);
		first = false;
		points(out, r, tl, d);
	}
	fputs("}, \"blocks\": {", out);
	first = true;
	for (int d = 0; d < MT_MAX_DEVICES && r->frag.dev; d++) {
		const struct mt_frag_device *f = &r->frag.dev[d];
		if (!f->known)
			continue;
		fprintf(out, "%s\"%d\": [", first ? "" : ", ", d);
		first = false;
		for (size_t i = 0; i < f->nblocks; i++)
			fprintf(out, "%s[%" PRIu64 ",%" PRIu64 "]", i ? "," : "", f->blocks[i].addr, f->blocks[i].size);
		fputs("]", out);
	}
	fputs("}, ", out);
	err = allocations(out, r, &ids);
	fputs(", ", out);
	err = err ? err : live(out, r, &ids);
	fputs(", ", out);
	err = err ? err : maps(out, r);
	fputs(", ", out);
	if (!err)
		actions(out, r);
	fputs(", ", out);
	err = err ? err : stacks(out, r, sym, &ids);
	fputs("}", out);
	free(ids.v);
	return err;
}

int mt_report_html(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top)
{
	struct mt_timeline tl;
	char *data = NULL;
	size_t len = 0;
	FILE *mem;
	int err;

	if ((err = mt_timeline_build(&tl, r)))
		return err;
	if (!(mem = open_memstream(&data, &len))) {
		mt_timeline_free(&tl);
		return ENOMEM;
	}
	/* the data, all of it passed through script_text: any string in it may be the job's */
	fputs("const REPORT = ", mem);
	mt_report_json(mem, r, sym, top);
	fputs(";\nconst SERIES = ", mem);
	err = series(mem, r, &tl, sym);
	mt_timeline_free(&tl);
	if (fclose(mem) && !err)
		err = ENOMEM;
	if (err) {
		free(data);
		return err;
	}
	fputs("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>memtap report: ", out);
	html_text(out, r->trace->path);
	fprintf(out, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<div id=\"report\"></div>\n<script>\n",
		mt_html_css);
	script_text(out, data, len);
	fputs(";\n</script>\n<script>\n", out);
	fputs(mt_html_js, out);
	fputs("</script>\n</body>\n</html>\n", out);
	free(data);
	return ferror(out) ? EIO : 0;
}

/* ---- what memtap report --serve answers the page ---- */

#define MT_HTML_RANGE_BUCKETS 2000 /* two points a pixel of the page's charts at most */

int mt_report_html_range(FILE *out, const struct mt_timeline_index *ix, struct mt_symbols *sym, int d, uint64_t from,
			 uint64_t to)
{
	const struct mt_report *r = ix->r;
	struct picks *picks[MT_MAX_DEVICES] = {0};
	struct mt_timeline tl;
	struct ids ids = {0};
	int err = mt_timeline_range(&tl, ix, from, to, MT_HTML_RANGE_BUCKETS);

	if (err)
		return err;
	fputs("{\"points\": ", out);
	points(out, r, &tl, d);
	mt_timeline_free(&tl);
	err = pick_allocations(r, ix, d, from, to, picks);
	fputs(", \"allocations\": ", out);
	err = err ? err : picked(out, r, picks[d], &ids);
	fputs(", ", out);
	err = err ? err : stacks(out, r, sym, &ids);
	fputs("}", out);
	free(picks[d]);
	free(ids.v);
	return err;
}

int mt_report_html_map(FILE *out, const struct mt_timeline_index *ix, struct mt_fragment_scan *scan, int d,
		       size_t event)
{
	const struct mt_report *r = ix->r;
	const struct mt_event *e = &r->trace->events[event];
	enum map_kind kind = e->kind == MT_EV_ALLOC_FAILED			       ? MAP_OOM
			     : r->end.dev[d].peak && r->end.dev[d].peak_event == event ? MAP_PEAK
										       : MAP_STEP;
	uint64_t size = e->size;
	bool first = true;
	struct mt_timeline_change c;

	if (mt_timeline_index_step(ix, event, &c))
		size = c.made.size;
	fprintf(out, "{\"event\": %zu, \"kind\": \"%s\", \"size\": %" PRIu64 ", \"map\": ", event,
		mt_kind_names[e->kind], size);
	int err = map(out, r, scan, d, e->time, kind, &first);
	fprintf(out, "%s}", first ? "null" : "");
	return err;
}
