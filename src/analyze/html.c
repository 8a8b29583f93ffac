/* `memtap report --html`: one self-contained page. The data is the report's own JSON
 * (so the page and --json agree by construction) plus the composition timeline and the
 * blocks at each peak; report.js draws it, report.css styles it, both inlined. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "analyze/timeline.h"

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

static void series(FILE *out, const struct mt_report *r, const struct mt_timeline *tl)
{
	bool first = true;

	fputs("{\"timeline\": {", out);
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		if (!tl->n[d])
			continue;
		fprintf(out, "%s\"%d\": [", first ? "" : ", ", d);
		first = false;
		for (size_t i = 0; i < tl->n[d]; i++) {
			const struct mt_timeline_point *p = &tl->points[d][i];
			fprintf(out, "%s[%" PRIu64, i ? "," : "", p->time > r->start ? p->time - r->start : 0);
			for (int c = 1; c < MT_TAG_COUNT; c++)
				fprintf(out, ",%" PRIu64, p->bytes[c]);
			fprintf(out, ",%" PRIu64 "]", p->reserved);
		}
		fputs("]", out);
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
	fputs("}}", out);
}

int mt_report_html(FILE *out, const struct mt_report *r, struct mt_symbols *sym, size_t top)
{
	struct mt_timeline tl;
	char *json = NULL;
	size_t len = 0;
	FILE *mem;
	int err;

	if ((err = mt_timeline_build(&tl, r)))
		return err;
	if (!(mem = open_memstream(&json, &len))) {
		mt_timeline_free(&tl);
		return ENOMEM;
	}
	mt_report_json(mem, r, sym, top);
	if (fclose(mem)) {
		free(json);
		mt_timeline_free(&tl);
		return ENOMEM;
	}
	fputs("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>memtap report: ", out);
	html_text(out, r->trace->path);
	fprintf(out,
		"</title>\n<style>\n%s</style>\n</head>\n<body>\n<div id=\"report\"></div>\n<script>\nconst REPORT = ",
		mt_html_css);
	script_text(out, json, len);
	fputs(";\nconst SERIES = ", out);
	series(out, r, &tl);
	fputs(";\n</script>\n<script>\n", out);
	fputs(mt_html_js, out);
	fputs("</script>\n</body>\n</html>\n", out);
	free(json);
	mt_timeline_free(&tl);
	return ferror(out) ? EIO : 0;
}
