/* memtap diff A B: what changed between two runs, per category and per stack, at the
 * peak and at exit. Stacks are matched by their symbolized frames (function, file and
 * line, else module and offset), since addresses differ from run to run; byte counts
 * stay unsigned, their differences are printed with a sign, never computed signed. The
 * text shows a stack as the report does (its view: the user's frames first, the plumbing
 * left out), every frame with --frames=all; --json has every frame. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "analyze/stacks.h"
#include "cli.h"
#include "core/map.h"
#include "core/units.h"

const char diff_usage[] = "usage: memtap diff A B [--json] [--top N] [--frames=all]\n"
			  "Compares two traces: each device's peak, the composition at the peak, and the bytes\n"
			  "live per stack at the peak and at exit, biggest changes first. A stack reads as in\n"
			  "memtap report: the user's Python frames first, the plumbing left out, long C++ names\n"
			  "shortened; --frames=all prints every frame in full (--json always has them all).\n"
			  "Exit status: 0, or 3 when a trace was cut short or damaged (what it held is compared).\n";

struct side {
	struct mt_trace t;
	struct mt_report r;
	struct mt_symbols *sym;
	struct mt_views *views;	  /* how each stack reads */
	struct mt_map frame_hash; /* a frame's address -> the hash of its text */
	struct mt_map text_hash;  /* a string's address -> its hash: a name shared by frames is hashed once */
	bool damaged;		  /* said when read; a walk's problem is said at the end */
};

/* Stacks of the two runs meet by the hash of their frames' text; the text itself is made
 * only for the rows shown, so a trace of long names or many stacks costs time and memory
 * in proportion to it. */
struct row {
	uint64_t key; /* hash of the stack's frames */
	int side;     /* where the stack was first seen, to print it */
	uint32_t stack;
	uint8_t before;	   /* blocks made before recording, without frames: 1 + what they were read as */
	uint64_t bytes[2]; /* A, B */
};

struct table {
	struct row *rows;
	size_t n, cap;
	struct mt_map index; /* key -> row + 1 */
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++, v >>= 8)
		h = (h ^ (v & 0xff)) * 0x100000001b3ull;
	return h;
}

static uint64_t text_hash(struct side *s, const char *p)
{
	uint64_t h = 0xcbf29ce484222325ull;

	if (!p)
		return 0;
	if (mt_map_get(&s->text_hash, (uint64_t)(uintptr_t)p, &h))
		return h;
	for (const char *c = p; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
	if (mt_map_put(&s->text_hash, (uint64_t)(uintptr_t)p, h))
		die(1, "out of memory");
	return h;
}

/* What stack_key prints for the frame, hashed: function, file name and line, else module
 * and offset. */
static uint64_t frame_hash(struct side *s, uint64_t addr)
{
	const struct mt_frame *f;
	uint64_t h;

	if (mt_map_get(&s->frame_hash, addr, &h))
		return h;
	f = mt_symbols_frame(s->sym, addr);
	if (f->function)
		h = mix(mix(mix(1, text_hash(s, f->function)),
			    text_hash(s, f->file && strrchr(f->file, '/') ? strrchr(f->file, '/') + 1 : f->file)),
			f->file ? (uint64_t)f->line : 0);
	else
		h = mix(mix(2, text_hash(s, f->module ? f->module : "?")), f->offset);
	if (mt_map_put(&s->frame_hash, addr, h))
		die(1, "out of memory");
	return h;
}

static char *stack_key(struct side *s, uint32_t stack)
{
	size_t cap = 256, len = 0;
	char *k = malloc(cap);

	if (!k)
		die(1, "out of memory");
	k[0] = '\0';
	for (uint32_t i = 0; stack && stack < s->t.nstacks && i < s->t.stacks[stack].depth; i++) {
		const struct mt_frame *f = mt_symbols_frame(s->sym, s->t.stacks[stack].frames[i]);
		const char *file = f->file && strrchr(f->file, '/') ? strrchr(f->file, '/') + 1 : f->file;
		int n;
		/* printed in place, the buffer grown to fit: a name can be any length */
		for (;;) {
			if (f->function && f->file)
				n = snprintf(k + len, cap - len, "%s (%s:%d)\n", f->function, file, f->line);
			else if (f->function)
				n = snprintf(k + len, cap - len, "%s\n", f->function);
			else
				n = snprintf(k + len, cap - len, "%s+0x%" PRIx64 "\n", f->module ? f->module : "?",
					     f->offset);
			if (n < 0 || (size_t)n < cap - len)
				break;
			cap = 2 * (len + (size_t)n + 1);
			if (!(k = realloc(k, cap)))
				die(1, "out of memory");
		}
		if (n > 0)
			len += (size_t)n;
		k[len] = '\0';
	}
	return k;
}

static void add(struct table *tb, struct side *s, int side, uint32_t stack, uint8_t before, uint64_t bytes)
{
	uint64_t key = 0x9e3779b97f4a7c15ull, i;
	bool framed = stack && stack < s->t.nstacks && s->t.stacks[stack].depth;

	for (uint32_t f = 0; framed && f < s->t.stacks[stack].depth; f++)
		key = mix(key, frame_hash(s, s->t.stacks[stack].frames[f]));
	if (framed)
		before = 0;
	else /* made before recording: apart by what each was read as, as the report's rows */
		key = mix(key, before);
	if (mt_map_get(&tb->index, key, &i)) {
		tb->rows[i - 1].bytes[side] += bytes; /* sums of unsigned sizes: a wrap is defined, never a trap */
		return;
	}
	if (tb->n == tb->cap) {
		tb->cap = tb->cap ? 2 * tb->cap : 64;
		if (!(tb->rows = realloc(tb->rows, tb->cap * sizeof *tb->rows)))
			die(1, "out of memory");
	}
	tb->rows[tb->n] = (struct row){key, side, stack, before, {0, 0}};
	tb->rows[tb->n++].bytes[side] = bytes;
	if (mt_map_put(&tb->index, key, tb->n))
		die(1, "out of memory");
}

/* |b - a| of two unsigned counts, and whether b is the smaller: no signed overflow. */
static uint64_t change(uint64_t a, uint64_t b, bool *less)
{
	*less = b < a;
	return b < a ? a - b : b - a;
}

/* The difference as a JSON number, written exactly. */
static const char *json_delta(uint64_t a, uint64_t b, char *buf)
{
	bool less;
	uint64_t m = change(a, b, &less);

	snprintf(buf, 24, "%s%" PRIu64, less ? "-" : "", m);
	return buf;
}

static int by_change(const void *x_, const void *y_)
{
	const struct row *x = x_, *y = y_;
	bool lx, ly;
	uint64_t dx = change(x->bytes[0], x->bytes[1], &lx), dy = change(y->bytes[0], y->bytes[1], &ly);

	return dx < dy ? 1 : dx > dy ? -1 : x->key < y->key ? -1 : x->key > y->key;
}

static void fill(struct table *tb, struct side *s, int side, bool at_peak)
{
	if (at_peak) {
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			for (size_t i = 0; i < s->r.at_peak[d].n; i++)
				add(tb, s, side, s->r.at_peak[d].items[i].stack, s->r.at_peak[d].items[i].before,
				    s->r.at_peak[d].items[i].bytes);
	} else {
		for (size_t i = 0; i < s->r.at_exit.n; i++)
			add(tb, s, side, s->r.at_exit.items[i].stack, s->r.at_exit.items[i].before,
			    s->r.at_exit.items[i].bytes);
	}
}

static const char *signed_size(uint64_t a, uint64_t b, char *buf)
{
	char sz[32];
	bool less;
	uint64_t m = change(a, b, &less);

	snprintf(buf, 40, "%s%s", less ? "-" : "+", mt_format_size(m, sz, sizeof sz));
	return buf;
}

/* A stack as the report reads it: its view, then how many frames it leaves out; blocks
 * made before recording say so. */
static void view_text(struct side *s, uint32_t stack, uint8_t before)
{
	const struct mt_view *v = mt_view(s->views, stack);
	char buf[4096];

	if (!v->depth) {
		printf("      %s\n", before ? mt_report_before_text(&s->r, before) : "(no frames)");
		return;
	}
	for (uint32_t k = 0; k < v->nshown; k++)
		printf("      %s\n", mt_frame_text(mt_symbols_frame(s->sym, s->t.stacks[stack].frames[v->shown[k]]),
						   false, buf, sizeof buf));
	if (v->depth > v->nshown)
		printf("      + %u frames of the allocator, PyTorch, the interpreter or memtap (--frames=all)\n",
		       v->depth - v->nshown);
}

static void table_text(const struct table *tb, struct side *s, size_t top, bool all, const char *title)
{
	char d[40], a[32], b[32];
	size_t shown = 0;

	printf("\n%s:\n", title);
	for (size_t i = 0; i < tb->n && shown < top; i++) {
		const struct row *r = &tb->rows[i];
		char *key;
		if (r->bytes[0] == r->bytes[1])
			continue;
		printf("  %s  (%s -> %s)\n", signed_size(r->bytes[0], r->bytes[1], d),
		       mt_format_size(r->bytes[0], a, sizeof a), mt_format_size(r->bytes[1], b, sizeof b));
		shown++;
		if (!all || r->before) {
			view_text(&s[r->side], r->stack, r->before);
			continue;
		}
		key = stack_key(&s[r->side], r->stack);
		for (const char *p = key; *p;) {
			const char *nl = strchr(p, '\n');
			printf("      %.*s\n", (int)(nl ? nl - p : (ptrdiff_t)strlen(p)), p);
			p = nl ? nl + 1 : p + strlen(p);
		}
		free(key);
	}
	if (!shown)
		printf("  no change\n");
}

static void table_json(const struct table *tb, struct side *s, size_t top)
{
	size_t shown = 0;
	char delta[24];

	putchar('[');
	for (size_t i = 0; i < tb->n && shown < top; i++) {
		const struct row *r = &tb->rows[i];
		char *key;
		if (r->bytes[0] == r->bytes[1])
			continue;
		printf("%s\n    {\"a_bytes\": %" PRIu64 ", \"b_bytes\": %" PRIu64
		       ", \"delta_bytes\": %s, \"frames\": [",
		       shown ? "," : "", r->bytes[0], r->bytes[1], json_delta(r->bytes[0], r->bytes[1], delta));
		key = stack_key(&s[r->side], r->stack);
		for (const char *p = key, *first = p; *p;) {
			const char *nl = strchr(p, '\n');
			char frame[1024];
			snprintf(frame, sizeof frame, "%.*s", (int)(nl ? nl - p : (ptrdiff_t)strlen(p)), p);
			if (p != first)
				fputs(", ", stdout);
			mt_json_str(stdout, frame);
			p = nl ? nl + 1 : p + strlen(p);
		}
		free(key);
		putchar(']');
		if (r->before) {
			fputs(", \"before_recording\": ", stdout);
			mt_json_str(stdout, mt_report_before_text(&s[r->side].r, r->before));
		}
		putchar('}');
		shown++;
	}
	putchar(']');
}

static void load(struct side *s, const char *path)
{
	s->damaged = load_trace(path, &s->t);
	if (mt_report_build(&s->r, &s->t, NULL))
		die(1, "out of memory while reading %s", path);
	s->sym = mt_symbols_open(&s->t);
	if (!(s->views = mt_views_open(&s->t, s->sym)))
		die(1, "out of memory while reading %s", path);
}

int cmd_diff(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"json", 0, 0, 'j'}, {"top", 1, 0, 't'}, {"frames", 1, 0, 'f'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	struct side s[2];
	struct table peak = {0}, exit_ = {0};
	bool json = false, all = false;
	int status = 0;
	size_t top = 10;
	char *end;
	int c;

	while ((c = next_option(argc, argv, "h", longopts, "diff")) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 't':
			top = strtoul(optarg, &end, 10);
			if (end == optarg || *end || !top)
				die(EXIT_USAGE, "--top needs a positive number, not '%s'", optarg);
			break;
		case 'f':
			all = choose("diff", "--frames", optarg, frame_views) == 0;
			break;
		case 'h':
			fputs(diff_usage, stdout);
			return 0;
		}
	}
	if (argc - optind != 2)
		die(EXIT_USAGE, "memtap diff takes two traces (see --help)");
	memset(s, 0, sizeof s);
	load(&s[0], argv[optind]);
	load(&s[1], argv[optind + 1]);
	for (int k = 0; k < 2; k++) {
		fill(&peak, &s[k], k, true);
		fill(&exit_, &s[k], k, false);
	}
	if (peak.n)
		qsort(peak.rows, peak.n, sizeof *peak.rows, by_change);
	if (exit_.n)
		qsort(exit_.rows, exit_.n, sizeof *exit_.rows, by_change);
	progress_end();
	if (json) {
		printf("{\n  \"memtap_diff\": 1,\n  \"a\": ");
		mt_json_str(stdout, argv[optind]);
		printf(",\n  \"b\": ");
		mt_json_str(stdout, argv[optind + 1]);
		printf(",\n  \"devices\": [");
	} else {
		printf("memtap diff: A %s, B %s\n", argv[optind], argv[optind + 1]);
	}
	for (int d = 0, n = 0; d < MT_MAX_DEVICES; d++) {
		const struct mt_device_state *a = &s[0].r.end.dev[d], *b = &s[1].r.end.dev[d];
		char x[32], y[32], z[40];
		if (!a->seen && !b->seen)
			continue;
		if (json) {
			printf("%s\n    {\"device\": %d, \"a_peak_bytes\": %" PRIu64 ", \"b_peak_bytes\": %" PRIu64
			       ", \"delta_peak_bytes\": %s, \"composition_at_peak\": {",
			       n++ ? "," : "", d, a->peak, b->peak, json_delta(a->peak, b->peak, z));
			for (int k = 1; k < MT_TAG_COUNT; k++)
				printf("%s\"%s\": {\"a\": %" PRIu64 ", \"b\": %" PRIu64 ", \"delta\": %s}",
				       k > 1 ? ", " : "", mt_tag_names[k], s[0].r.composition[d][k],
				       s[1].r.composition[d][k],
				       json_delta(s[0].r.composition[d][k], s[1].r.composition[d][k], z));
			printf("}}");
			continue;
		}
		printf("\ndevice %d: peak %s -> %s (%s)\n", d, mt_format_size(a->peak, x, sizeof x),
		       mt_format_size(b->peak, y, sizeof y), signed_size(a->peak, b->peak, z));
		for (int k = 1; k < MT_TAG_COUNT; k++)
			if (s[0].r.composition[d][k] || s[1].r.composition[d][k])
				printf("  %-12s %12s -> %-12s %s\n", mt_tag_names[k],
				       mt_format_size(s[0].r.composition[d][k], x, sizeof x),
				       mt_format_size(s[1].r.composition[d][k], y, sizeof y),
				       signed_size(s[0].r.composition[d][k], s[1].r.composition[d][k], z));
	}
	if (json) {
		printf("],\n  \"at_peak\": ");
		table_json(&peak, s, top);
		printf(",\n  \"at_exit\": ");
		table_json(&exit_, s, top);
		printf("\n}\n");
	} else {
		table_text(&peak, s, top, all, "live at the peak, by stack, biggest changes first");
		table_text(&exit_, s, top, all, "live at exit, by stack, biggest changes first");
	}
	for (int k = 0; k < 2; k++) {
		status = walked_status(&s[k].t, s[k].damaged) ? EXIT_DAMAGED : status;
		mt_views_close(s[k].views);
		mt_symbols_close(s[k].sym);
		mt_map_free(&s[k].frame_hash);
		mt_map_free(&s[k].text_hash);
		mt_report_free(&s[k].r);
		mt_trace_free(&s[k].t);
	}
	mt_map_free(&peak.index);
	mt_map_free(&exit_.index);
	free(peak.rows);
	free(exit_.rows);
	return status;
}
