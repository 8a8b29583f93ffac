/* A run directory's out-of-memory failures and every rank at each of them (job.h). The
 * moment is the failing rank's wall-clock time, which ranks on other hosts share, turned
 * into each trace's own monotonic clock by the pair of start times its INFO chunk holds.
 * A snapshot holds everything its rank recorded up to when it was taken, a little after
 * the OOM, so the rank's state at the OOM itself is replayed from it exactly. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyze/job.h"
#include "analyze/report.h"
#include "core/path.h"
#include "core/units.h"
#include "reader/file.h"

#define GONE_NS 3000000000ull /* a rank file not touched for this long before the OOM: gone */

/* A file of the run directory to read, NULL where there is none or it is not a regular
 * file: the ranks write regular files there, and a FIFO would wait for a writer. */
static FILE *open_file(const char *path)
{
	FILE *f = NULL;
	int fd;

	if (mt_file_open(path, &fd, NULL, NULL, 0) == 0 && !(f = fdopen(fd, "r")))
		close(fd);
	return f;
}

struct line {
	char kind[16], id[64], host[128], path[4200];
	int rank, pid;
	uint64_t realtime;
};

static size_t read_lines(const char *dir, struct line **out)
{
	char path[4200], buf[4800];
	size_t n = 0, cap = 0;
	FILE *f;

	mt_path_join(path, sizeof path, dir, ".memtap/events");
	*out = NULL;
	if (!(f = open_file(path)))
		return 0;
	while (fgets(buf, sizeof buf, f)) {
		struct line l = {.path = ""};
		unsigned long long rt;
		if (sscanf(buf, "%15s %63s %d %d %llu %127s %4199s", l.kind, l.id, &l.rank, &l.pid, &rt, l.host,
			   l.path) < 5)
			continue;
		l.realtime = rt;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			struct line *g = realloc(*out, cap * sizeof *g);
			if (!g)
				break;
			*out = g;
		}
		(*out)[n++] = l;
	}
	fclose(f);
	return n;
}

/* Bytes live on `device` at `realtime` in the trace at `path` (its end when it ended
 * before); false when the trace cannot be read or says nothing of the clock. `end` gets
 * the wall-clock time of its last event, `complete` whether it was closed cleanly. */
static bool live_at(const char *path, int device, uint64_t realtime, uint64_t *bytes, uint64_t *end, bool *complete)
{
	struct mt_trace t;
	struct mt_replay r;
	struct mt_walk *w;
	const struct mt_event *e;
	char a[32], b[32];
	uint64_t start_rt, start_mono, at;

	if (mt_trace_load(path, &t) != 0)
		return false;
	if (!mt_trace_info(&t, "start_realtime_ns", a, sizeof a) ||
	    !mt_trace_info(&t, "start_monotonic_ns", b, sizeof b) || mt_replay_init(&r) != 0) {
		mt_trace_free(&t);
		return false;
	}
	start_rt = strtoull(a, NULL, 10);
	start_mono = strtoull(b, NULL, 10);
	at = realtime > start_rt ? realtime - start_rt + start_mono : start_mono;
	if (!(w = mt_walk_start(&t))) {
		mt_replay_free(&r);
		mt_trace_free(&t);
		return false;
	}
	while ((e = mt_walk_one(w)) && e->time <= at)
		mt_replay_apply(&r, e);
	mt_walk_end(w);
	*bytes = device >= 0 && device < MT_MAX_DEVICES ? r.dev[device].current : 0;
	*end = t.nevents ? mt_trace_end(&t) - start_mono + start_rt : start_rt;
	*complete = t.complete;
	mt_replay_free(&r);
	mt_trace_free(&t);
	return true;
}

/* The rank file: "PID HOST STATE REALTIME" and when it was last touched. */
static bool rank_file(const char *dir, int rank, char *state, size_t len, uint64_t *said, uint64_t *touched)
{
	char path[4200], s[32] = "";
	unsigned long long rt = 0;
	struct stat st;
	FILE *f;
	int ok;

	mt_path_join(path, sizeof path, dir, ".memtap/rank-%d", rank);
	if (!(f = open_file(path)))
		return false;
	ok = fscanf(f, "%*d %*s %31s %llu", s, &rt) == 2;
	if (fstat(fileno(f), &st) == 0)
		*touched = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
	fclose(f);
	snprintf(state, len, "%s", s);
	*said = rt;
	return ok;
}

static double seconds(uint64_t a, uint64_t b)
{
	return a > b ? (double)(a - b) / 1e9 : -(double)(b - a) / 1e9;
}

static void judge(struct mt_job_at *at, const struct mt_job_oom *o, const struct mt_job_rank *rk, const char *dir,
		  const struct line *lines, size_t nl)
{
	uint64_t end = 0, said = 0, touched = 0;
	bool complete = false, read = false;
	char state[32];

	for (size_t i = 0; i < nl; i++)
		if (!strcmp(lines[i].kind, "took") && !strcmp(lines[i].id, o->id) && lines[i].rank == at->rank) {
			mt_path_join(at->snapshot, sizeof at->snapshot, dir, "%s", lines[i].path);
			at->after_ns = (int64_t)(lines[i].realtime - o->realtime);
		}
	if (!at->snapshot[0]) { /* taken, but its line was lost (a full disk, a mixed-up append) */
		struct stat st;
		mt_path_join(at->snapshot, sizeof at->snapshot, dir, "snapshots/%s/rank-%d.trace", o->id, at->rank);
		if (stat(at->snapshot, &st) == 0)
			at->after_ns = (int64_t)((uint64_t)st.st_mtim.tv_sec * 1000000000ull +
						 (uint64_t)st.st_mtim.tv_nsec - o->realtime);
		else
			at->snapshot[0] = '\0';
	}
	if (!rk) {
		at->state = "no trace";
		snprintf(at->why, sizeof at->why,
			 "no trace in the run directory: it never allocated device memory, "
			 "or died before its first write");
		return;
	}
	at->peak = rk->peak;
	if (at->snapshot[0])
		read = live_at(at->snapshot, rk->device, o->realtime, &at->allocated, &end, &complete);
	if (!read)
		read = live_at(rk->path, rk->device, o->realtime, &at->allocated, &end, &complete);
	at->known = read;
	if (at->rank == o->rank) {
		at->state = "out of memory";
		snprintf(at->why, sizeof at->why, "this rank's allocation failed");
	} else if (at->snapshot[0]) {
		at->state = "snapshot";
		snprintf(at->why, sizeof at->why, "taken %.0f ms after the OOM", (double)at->after_ns / 1e6);
	} else if (rank_file(dir, at->rank, state, sizeof state, &said, &touched) && !strcmp(state, "exited") &&
		   said < o->realtime) {
		at->state = "exited before";
		snprintf(at->why, sizeof at->why, "it had exited %.1f s before the OOM", seconds(o->realtime, said));
	} else if ((read && !complete && end < o->realtime) ||
		   (touched && !strcmp(state, "running") && touched + GONE_NS < o->realtime)) {
		at->state = "died before";
		snprintf(at->why, sizeof at->why,
			 "it died before the OOM: its trace ends %.1f s before it, with no end record (killed or "
			 "crashed)%s",
			 seconds(o->realtime, end), read ? "; bytes as it held them then" : "");
	} else {
		at->state = "no snapshot";
		snprintf(at->why, sizeof at->why,
			 "no snapshot: no policy asked (oom_snapshot), or it ended before its next look "
			 "at the run directory");
	}
}

int mt_job_read(struct mt_job *j, const char *dir, const struct mt_job_rank *ranks, size_t n, int world_size)
{
	struct line *lines;
	size_t nl = read_lines(dir, &lines);
	int top = world_size;

	memset(j, 0, sizeof *j);
	for (size_t i = 0; i < n; i++)
		if (ranks[i].rank + 1 > top)
			top = ranks[i].rank + 1;
	for (size_t i = 0; i < nl; i++) {
		struct mt_job_oom *o;
		if (strcmp(lines[i].kind, "oom"))
			continue;
		o = realloc(j->ooms, (j->n + 1) * sizeof *o);
		if (!o)
			break;
		j->ooms = o;
		o = &j->ooms[j->n++];
		memset(o, 0, sizeof *o);
		snprintf(o->id, sizeof o->id, "%s", lines[i].id);
		snprintf(o->host, sizeof o->host, "%s", lines[i].host);
		o->rank = lines[i].rank;
		o->pid = lines[i].pid;
		o->realtime = lines[i].realtime;
		o->at = calloc((size_t)(top > 0 ? top : 1), sizeof *o->at);
		if (!o->at) {
			j->n--;
			break;
		}
		for (int r = 0; r < top; r++) {
			const struct mt_job_rank *rk = NULL;
			for (size_t k = 0; k < n && !rk; k++)
				if (ranks[k].rank == r)
					rk = &ranks[k];
			o->at[r].rank = r;
			judge(&o->at[r], o, rk, dir, lines, nl);
		}
		o->n = (size_t)top;
	}
	free(lines);
	return 0;
}

void mt_job_free(struct mt_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		free(j->ooms[i].at);
	free(j->ooms);
	memset(j, 0, sizeof *j);
}

void mt_job_text(FILE *out, const struct mt_job *j)
{
	char a[32], b[32];

	for (size_t i = 0; i < j->n; i++) {
		const struct mt_job_oom *o = &j->ooms[i];
		fprintf(out, "\nrank %d ran out of memory (pid %d on %s, OOM %s); every rank at that moment:\n",
			o->rank, o->pid, o->host, o->id);
		fprintf(out, "%-6s %12s %12s  %-14s %s\n", "rank", "allocated", "own peak", "state", "");
		for (size_t r = 0; r < o->n; r++) {
			const struct mt_job_at *x = &o->at[r];
			fprintf(out, "%-6d %12s %12s  %-14s %s\n", x->rank,
				x->known ? mt_format_size(x->allocated, a, sizeof a) : "-",
				x->peak ? mt_format_size(x->peak, b, sizeof b) : "-", x->state, x->why);
		}
	}
}

void mt_job_json(FILE *out, const struct mt_job *j)
{
	fprintf(out, "\"ooms\": [");
	for (size_t i = 0; i < j->n; i++) {
		const struct mt_job_oom *o = &j->ooms[i];
		fprintf(out, "%s\n    {\"id\": ", i ? "," : "");
		mt_json_str(out, o->id);
		fprintf(out, ", \"rank\": %d, \"pid\": %d, \"host\": ", o->rank, o->pid);
		mt_json_str(out, o->host);
		fprintf(out, ", \"realtime_ns\": %" PRIu64 ", \"ranks\": [", o->realtime);
		for (size_t r = 0; r < o->n; r++) {
			const struct mt_job_at *x = &o->at[r];
			fprintf(out, "%s\n      {\"rank\": %d, \"state\": \"%s\", \"allocated_bytes\": ", r ? "," : "",
				x->rank, x->state);
			if (x->known)
				fprintf(out, "%" PRIu64, x->allocated);
			else
				fputs("null", out);
			fprintf(out, ", \"peak_allocated_bytes\": %" PRIu64 ", \"snapshot\": ", x->peak);
			if (x->snapshot[0])
				mt_json_str(out, x->snapshot);
			else
				fputs("null", out);
			if (x->snapshot[0])
				fprintf(out, ", \"snapshot_after_ns\": %" PRId64, x->after_ns);
			fputs(", \"why\": ", out);
			mt_json_str(out, x->why);
			fputc('}', out);
		}
		fputs("]}", out);
	}
	fputs("]", out);
}

static void html_text(FILE *out, const char *s)
{
	for (; s && *s; s++)
		if (*s == '<')
			fputs("&lt;", out);
		else if (*s == '>')
			fputs("&gt;", out);
		else if (*s == '&')
			fputs("&amp;", out);
		else if (*s == '"')
			fputs("&quot;", out);
		else
			fputc(*s, out);
}

/* A bar for `v` out of `max`, with the rank's own peak marked. */
static void bar(FILE *out, uint64_t v, uint64_t peak, uint64_t max, const char *cls)
{
	double w = max ? 100.0 * (double)v / (double)max : 0, p = max ? 100.0 * (double)peak / (double)max : 0;

	fprintf(out,
		"<div class=bar><div class='%s' style='width:%.1f%%'></div><div class=peak style='left:%.1f%%'>"
		"</div></div>",
		cls, w, p);
}

enum { W = 420, H = 90 }; /* each rank's chart over time */

static double x_at(double ns, double span)
{
	return W * ns / span;
}

static double y_at(uint64_t bytes, uint64_t max)
{
	return H - (max ? H * (double)bytes / (double)max : 0);
}

/* Each rank's memory over time side by side, on one scale and, where every trace knows
 * the wall clock, one clock: each rank's own failures a red line, each of the job's OOMs
 * a dashed line on every rank, the rank that failed outlined. */
static void ranks_over_time(FILE *out, const struct mt_job *j, const struct mt_job_rank *ranks, size_t n, uint64_t max)
{
	uint64_t t0 = UINT64_MAX, t1 = 0, longest = 1;
	bool clock = n > 0;
	char a[32];

	for (size_t i = 0; i < n; i++) {
		clock &= ranks[i].start_realtime > 0;
		if (ranks[i].span > longest)
			longest = ranks[i].span;
		if (ranks[i].start_realtime < t0)
			t0 = ranks[i].start_realtime;
		if (ranks[i].start_realtime + ranks[i].span > t1)
			t1 = ranks[i].start_realtime + ranks[i].span;
	}
	if (!clock)
		t0 = 0, t1 = longest;
	fprintf(out,
		"<h2>every rank over time</h2>\n<p>Allocated on each rank's peak device, on one scale (%s) and %s; "
		"a red line where the rank ran out of memory%s.</p>\n<div class=ranks>\n",
		mt_format_size(max, a, sizeof a),
		clock ? "one clock (from the first rank's start)"
		      : "each rank on its own clock (a trace without the "
			"wall clock's time)",
		clock && j->n ? ", a dashed line at each of the job's OOMs on every rank" : "");
	for (size_t i = 0; i < n; i++) {
		const struct mt_job_rank *rk = &ranks[i];
		bool failed = false;
		uint64_t start = clock ? rk->start_realtime - t0 : 0;
		double span = (double)(t1 - t0 ? t1 - t0 : 1);
		for (size_t k = 0; k < j->n; k++)
			failed |= j->ooms[k].rank == rk->rank;
		failed |= rk->nooms > 0;
		fprintf(out, "<figure class='rank%s' data-rank=%d data-peak=%" PRIu64 "><figcaption>rank %d",
			failed ? " failed" : "", rk->rank, rk->peak, rk->rank);
		if (rk->device >= 0)
			fprintf(out, ", device %d, peak %s", rk->device, mt_format_size(rk->peak, a, sizeof a));
		fputs(failed ? ": <b>ran out of memory</b>" : "", out);
		fprintf(out, "</figcaption><svg width=%d height=%d viewBox='0 0 %d %d'>", W, H + 2, W, H + 2);
		if (rk->line && rk->device >= 0) {
			fputs("<path class=line d='", out);
			for (int c = 0; c < MT_JOB_COLUMNS; c++) {
				double x0 = x_at(start + (double)rk->span * c / MT_JOB_COLUMNS, span),
				       x1 = x_at(start + (double)rk->span * (c + 1) / MT_JOB_COLUMNS, span);
				fprintf(out, "%s%.1f,%.1fL%.1f,%.1f", c ? "L" : "M", x0, y_at(rk->line[c], max), x1,
					y_at(rk->line[c], max));
			}
			fputs("'/>", out);
		}
		for (size_t k = 0; k < rk->nooms; k++)
			fprintf(out, "<line class=oom x1='%.1f' x2='%.1f' y1='0' y2='%d'/>",
				x_at(start + rk->ooms[k], span), x_at(start + rk->ooms[k], span), H);
		for (size_t k = 0; clock && k < j->n; k++)
			if (j->ooms[k].realtime >= t0)
				fprintf(out, "<line class=job-oom x1='%.1f' x2='%.1f' y1='0' y2='%d'/>",
					x_at(j->ooms[k].realtime - t0, span), x_at(j->ooms[k].realtime - t0, span), H);
		fputs("</svg></figure>\n", out);
	}
	fputs("</div>\n", out);
}

int mt_job_html(FILE *out, const struct mt_job *j, const struct mt_job_rank *ranks, size_t n, const char *dir)
{
	uint64_t max = 0;
	char a[32], b[32];

	for (size_t i = 0; i < n; i++)
		if (ranks[i].peak > max)
			max = ranks[i].peak;
	fputs("<!DOCTYPE html>\n<html><head><meta charset=utf-8><title>memtap: ", out);
	html_text(out, dir);
	fputs("</title><style>body{font:14px sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
	      "td,th{padding:3px 10px;text-align:left;border-bottom:1px solid #ddd}td.n{text-align:right;"
	      "font-family:monospace;white-space:nowrap}.bar{position:relative;width:320px;height:14px;background:#eee}"
	      ".bar div{position:absolute;top:0;height:14px}.now{background:#4a7fd0}.oom{background:#d04a4a}"
	      ".gone{background:#999}.peak{width:2px;background:#000;height:18px!important;top:-2px!important}"
	      ".state-out{color:#b00;font-weight:bold}.ranks{display:flex;flex-wrap:wrap;gap:12px}"
	      "figure{margin:0;padding:6px;border:1px solid #ddd}figure.failed{border:2px solid #d04a4a}"
	      "figcaption{font-size:13px}svg{display:block;background:#fafafa}path.line{fill:none;stroke:#4a7fd0;"
	      "stroke-width:1.5}line.oom{stroke:#d04a4a;stroke-width:2}line.job-oom{stroke:#000;stroke-dasharray:3 3}"
	      "</style></head><body>\n<h1>memtap: the whole job</h1>\n<p>",
	      out);
	html_text(out, dir);
	fprintf(out, ": %zu rank%s.</p>\n", n, n == 1 ? "" : "s");
	for (size_t i = 0; i < j->n; i++) {
		const struct mt_job_oom *o = &j->ooms[i];
		fprintf(out, "<h2>rank %d ran out of memory</h2>\n<p>pid %d on ", o->rank, o->pid);
		html_text(out, o->host);
		fputs("; every rank at that moment (bar) next to its own peak over the run (mark):</p>\n<table><tr>"
		      "<th>rank</th><th>at the OOM</th><th>own peak</th><th></th><th>state</th></tr>\n",
		      out);
		for (size_t r = 0; r < o->n; r++) {
			const struct mt_job_at *x = &o->at[r];
			fprintf(out, "<tr><td>%d</td><td class=n>%s</td><td class=n>%s</td><td>", x->rank,
				x->known ? mt_format_size(x->allocated, a, sizeof a) : "-",
				x->peak ? mt_format_size(x->peak, b, sizeof b) : "-");
			bar(out, x->known ? x->allocated : 0, x->peak, max,
			    x->rank == o->rank		    ? "oom"
			    : !strcmp(x->state, "snapshot") ? "now"
							    : "gone");
			fprintf(out, "</td><td class='%s'>", x->rank == o->rank ? "state-out" : "state");
			html_text(out, x->state);
			fputs(": ", out);
			html_text(out, x->why);
			if (x->snapshot[0]) {
				fputs("<br><code>", out);
				html_text(out, x->snapshot);
				fputs("</code>", out);
			}
			fputs("</td></tr>\n", out);
		}
		fputs("</table>\n", out);
	}
	if (!j->n)
		fputs("<p>No rank ran out of memory.</p>\n", out);
	ranks_over_time(out, j, ranks, n, max);
	fputs("<h2>each rank's peak</h2>\n<table><tr><th>rank</th><th>host</th><th>device</th><th>peak</th><th></th>"
	      "<th>trace</th></tr>\n",
	      out);
	for (size_t i = 0; i < n; i++) {
		fprintf(out, "<tr><td>%d</td><td>", ranks[i].rank);
		html_text(out, ranks[i].host);
		fprintf(out, "</td><td>%d</td><td class=n>%s</td><td>", ranks[i].device,
			mt_format_size(ranks[i].peak, a, sizeof a));
		bar(out, ranks[i].peak, ranks[i].peak, max, "now");
		fputs("</td><td><code>", out);
		html_text(out, ranks[i].path);
		fputs("</code></td></tr>\n", out);
	}
	fputs("</table>\n</body></html>\n", out);
	return ferror(out) ? EIO : 0;
}
