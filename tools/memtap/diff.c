/* memtap diff A B: what changed between two runs, per category and per stack, at the
 * peak and at exit. Stacks are matched by their symbolized frames (function, file and
 * line, else module and offset), since addresses differ from run to run. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "memtap.h"
#include "util/units.h"

static const char diff_usage[] =
	"usage: memtap diff A B [--json] [--top N]\n"
	"Compares two traces: each device's peak, the composition at the peak, and the bytes\n"
	"live per stack at the peak and at exit, biggest changes first.\n";

struct side {
	struct mt_trace t;
	struct mt_report r;
	struct mt_symbols *sym;
};

struct row {
	char *key;        /* the stack's frames, one per line */
	int64_t bytes[2]; /* A, B */
};

struct table {
	struct row *rows;
	size_t n;
};

static char *stack_key(struct side *s, uint32_t stack)
{
	size_t cap = 256, len = 0;
	char *k = malloc(cap);

	if (!k)
		die(1, "out of memory");
	k[0] = '\0';
	for (uint32_t i = 0; stack && stack < s->t.nstacks && i < s->t.stacks[stack].depth; i++) {
		const struct mt_frame *f = mt_symbols_frame(s->sym, s->t.stacks[stack].frames[i]);
		char line[1024];
		int n;
		if (f->function && f->file)
			n = snprintf(line, sizeof line, "%s (%s:%d)\n", f->function, strrchr(f->file, '/') ? strrchr(f->file, '/') + 1 : f->file, f->line);
		else if (f->function)
			n = snprintf(line, sizeof line, "%s\n", f->function);
		else
			n = snprintf(line, sizeof line, "%s+0x%" PRIx64 "\n", f->module ? f->module : "?", f->offset);
		if (n < 0)
			continue;
		if (len + (size_t)n + 1 > cap) {
			cap = 2 * (len + (size_t)n + 1);
			k = realloc(k, cap);
			if (!k)
				die(1, "out of memory");
		}
		memcpy(k + len, line, (size_t)n + 1);
		len += (size_t)n;
	}
	return k;
}

static void add(struct table *tb, char *key, int side, uint64_t bytes)
{
	for (size_t i = 0; i < tb->n; i++) {
		if (strcmp(tb->rows[i].key, key) == 0) {
			tb->rows[i].bytes[side] += (int64_t)bytes;
			free(key);
			return;
		}
	}
	tb->rows = realloc(tb->rows, (tb->n + 1) * sizeof *tb->rows);
	if (!tb->rows)
		die(1, "out of memory");
	tb->rows[tb->n] = (struct row){key, {0, 0}};
	tb->rows[tb->n++].bytes[side] = (int64_t)bytes;
}

static int by_change(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	int64_t dx = llabs(x->bytes[1] - x->bytes[0]), dy = llabs(y->bytes[1] - y->bytes[0]);

	return dx < dy ? 1 : dx > dy ? -1 : strcmp(x->key, y->key);
}

static void fill(struct table *tb, struct side *s, int side, bool at_peak)
{
	if (at_peak) {
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			for (size_t i = 0; i < s->r.at_peak[d].n; i++)
				add(tb, stack_key(s, s->r.at_peak[d].items[i].stack), side, s->r.at_peak[d].items[i].bytes);
	} else {
		for (size_t i = 0; i < s->r.at_exit.n; i++)
			add(tb, stack_key(s, s->r.at_exit.items[i].stack), side, s->r.at_exit.items[i].bytes);
	}
	if (tb->n)
		qsort(tb->rows, tb->n, sizeof *tb->rows, by_change);
}

static const char *signed_size(int64_t v, char *buf)
{
	char sz[32];

	snprintf(buf, 40, "%s%s", v < 0 ? "-" : "+", mt_format_size((uint64_t)llabs(v), sz, sizeof sz));
	return buf;
}

static void table_text(const struct table *tb, size_t top, const char *title)
{
	char d[40], a[32], b[32];
	size_t shown = 0;

	printf("\n%s:\n", title);
	for (size_t i = 0; i < tb->n && shown < top; i++) {
		const struct row *r = &tb->rows[i];
		if (r->bytes[0] == r->bytes[1])
			continue;
		printf("  %s  (%s -> %s)\n", signed_size(r->bytes[1] - r->bytes[0], d),
		       mt_format_size((uint64_t)r->bytes[0], a, sizeof a), mt_format_size((uint64_t)r->bytes[1], b, sizeof b));
		for (const char *p = r->key; *p;) {
			const char *nl = strchr(p, '\n');
			printf("      %.*s\n", (int)(nl ? nl - p : (ptrdiff_t)strlen(p)), p);
			p = nl ? nl + 1 : p + strlen(p);
		}
		shown++;
	}
	if (!shown)
		printf("  no change\n");
}

static void table_json(const struct table *tb, size_t top)
{
	size_t shown = 0;

	putchar('[');
	for (size_t i = 0; i < tb->n && shown < top; i++) {
		const struct row *r = &tb->rows[i];
		if (r->bytes[0] == r->bytes[1])
			continue;
		printf("%s\n    {\"a_bytes\": %" PRId64 ", \"b_bytes\": %" PRId64 ", \"delta_bytes\": %" PRId64 ", \"frames\": [",
		       shown ? "," : "", r->bytes[0], r->bytes[1], r->bytes[1] - r->bytes[0]);
		for (const char *p = r->key, *first = p; *p;) {
			const char *nl = strchr(p, '\n');
			char frame[1024];
			snprintf(frame, sizeof frame, "%.*s", (int)(nl ? nl - p : (ptrdiff_t)strlen(p)), p);
			if (p != first)
				fputs(", ", stdout);
			mt_json_str(stdout, frame);
			p = nl ? nl + 1 : p + strlen(p);
		}
		fputs("]}", stdout);
		shown++;
	}
	putchar(']');
}

static void load(struct side *s, const char *path)
{
	if (mt_trace_read(path, &s->t))
		die(EXIT_USAGE, "%s", s->t.problem);
	if (s->t.problem[0])
		progress_clear(), fprintf(stderr, "memtap: %s: %s\n", path, s->t.problem);
	if (mt_report_build(&s->r, &s->t, NULL))
		die(1, "out of memory while reading %s", path);
	s->sym = mt_symbols_open(&s->t);
}

int cmd_diff(int argc, char **argv)
{
	static const struct option longopts[] = {{"json", 0, 0, 'j'}, {"top", 1, 0, 't'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	struct side s[2];
	struct table peak = {0}, exit_ = {0};
	bool json = false;
	size_t top = 10;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 't':
			top = strtoul(optarg, &end, 10);
			if (end == optarg || *end || !top)
				die(EXIT_USAGE, "--top needs a positive number, not '%s'", optarg);
			break;
		case 'h': fputs(diff_usage, stdout); return 0;
		default: fputs(diff_usage, stderr); return EXIT_USAGE;
		}
	}
	if (argc - optind != 2)
		die(EXIT_USAGE, "memtap diff takes two traces (see --help)");
	load(&s[0], argv[optind]);
	load(&s[1], argv[optind + 1]);
	for (int k = 0; k < 2; k++) {
		fill(&peak, &s[k], k, true);
		fill(&exit_, &s[k], k, false);
	}
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
			       ", \"delta_peak_bytes\": %" PRId64 ", \"composition_at_peak\": {",
			       n++ ? "," : "", d, a->peak, b->peak, (int64_t)b->peak - (int64_t)a->peak);
			for (int k = 1; k < MT_TAG_COUNT; k++)
				printf("%s\"%s\": {\"a\": %" PRIu64 ", \"b\": %" PRIu64 ", \"delta\": %" PRId64 "}", k > 1 ? ", " : "",
				       mt_tag_names[k], s[0].r.composition[d][k], s[1].r.composition[d][k],
				       (int64_t)s[1].r.composition[d][k] - (int64_t)s[0].r.composition[d][k]);
			printf("}}");
			continue;
		}
		printf("\ndevice %d: peak %s -> %s (%s)\n", d, mt_format_size(a->peak, x, sizeof x),
		       mt_format_size(b->peak, y, sizeof y), signed_size((int64_t)b->peak - (int64_t)a->peak, z));
		for (int k = 1; k < MT_TAG_COUNT; k++) {
			int64_t delta = (int64_t)s[1].r.composition[d][k] - (int64_t)s[0].r.composition[d][k];
			if (s[0].r.composition[d][k] || s[1].r.composition[d][k])
				printf("  %-12s %12s -> %-12s %s\n", mt_tag_names[k],
				       mt_format_size(s[0].r.composition[d][k], x, sizeof x),
				       mt_format_size(s[1].r.composition[d][k], y, sizeof y), signed_size(delta, z));
		}
	}
	if (json) {
		printf("],\n  \"at_peak\": ");
		table_json(&peak, top);
		printf(",\n  \"at_exit\": ");
		table_json(&exit_, top);
		printf("\n}\n");
	} else {
		table_text(&peak, top, "live at the peak, by stack, biggest changes first");
		table_text(&exit_, top, "live at exit, by stack, biggest changes first");
	}
	for (int k = 0; k < 2; k++) {
		mt_symbols_close(s[k].sym);
		mt_report_free(&s[k].r);
		mt_trace_free(&s[k].t);
	}
	for (size_t i = 0; i < peak.n; i++)
		free(peak.rows[i].key);
	for (size_t i = 0; i < exit_.n; i++)
		free(exit_.rows[i].key);
	free(peak.rows);
	free(exit_.rows);
	return 0;
}
