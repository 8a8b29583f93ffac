/* memtap top: a running job's memory, live, from the trace its recorder is writing (the
 * job does nothing more for it). Each refresh reads what the traces gained
 * (reader/follow.c), applies it to the live state (analyze/now.c) and draws one frame:
 * on a terminal with ncurses, else as plain lines, or as one JSON object a line. A frame
 * is made as lines first, so every form shows the same thing. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <ncurses.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "analyze/now.h"
#include "analyze/report.h"
#include "analyze/stacks.h"
#include "analyze/symbols.h"
#include "cli.h"
#include "core/path.h"
#include "gpus.h"
#include "core/units.h"
#include "reader/follow.h"

const char top_usage[] =
    "usage: memtap top [TRACE | DIRECTORY | PID] [--once] [--json] [--interval SECONDS] [--top N]\n"
    "A running job's device memory, live, refreshed every second like nvtop: per device the\n"
    "allocated, reserved and capacity bytes as bars; what is live now by tag and by NVTX\n"
    "phase; the stacks holding the most now, each with its first line of the user's code\n"
    "(the Python line where there is one); what each grew over the last iteration; the last\n"
    "OOM and the policies' marks, snapshots and notes. It reads the trace the recorder is\n"
    "writing (flushed at least every flush_ms, 100 ms by default), so the job pays nothing.\n"
    "  TRACE      a trace being written (or a finished one)\n"
    "  DIRECTORY  every .trace file in it, one row per rank with the spread between them\n"
    "  PID        the traces that process and its children have open (memtap run's, or the\n"
    "             job's own pid; a launcher's gives every rank)\n"
    "  (none)     every GPU as the driver counts it (NVML) with the processes on it, and\n"
    "             every job under memtap that this user can see, one row each\n"
    "  --once     one frame of what the traces hold now, then exit\n"
    "  --json     one JSON object a frame, a line each (docs/TOP.md has its fields)\n"
    "  --interval SECONDS  time between frames (default 1)\n"
    "  --top N    stacks shown (default 10)\n"
    "Keys: s sorts the stacks (by live bytes, growth, count), up/down (j/k) choose a stack,\n"
    "Enter or e expands it, Tab shows the next rank, p or space pauses, q quits.\n"
    "When standard output is not a terminal, each frame is printed as plain lines, and top\n"
    "ends when every trace it follows is closed.\n"
    "Exit status: 0, or 2 when the input is not a trace or a PID has none.\n";

/* How long an event waits before it is shown: longer than the writer's pause between
 * drains, so another thread's earlier event, still in its ring, is not overtaken. */
#define HOLD_NS 300000000ull
#define MAX_SOURCES 4096

struct source {
	char path[PATH_MAX];
	struct mt_follow f;
	struct mt_now now;
	struct mt_symbols *sym;
	struct mt_views *views;
	size_t sym_modules, views_stacks;
	char rank[32], host[256];
	long pid;	/* the recorder's process, from the trace */
	uint64_t start; /* of the recording, monotonic ns */
	bool have_info, local;
	uint64_t peak[MT_MAX_DEVICES];
};

enum sort { SORT_BYTES, SORT_GROWTH, SORT_COUNT, SORTS };
static const char *const sort_names[SORTS] = {"live bytes", "growth", "count"};

static struct {
	struct source *src[MAX_SOURCES];
	size_t n;
	const char *dir;  /* following a directory: new traces join */
	long pid;	  /* following a process */
	bool all;	  /* following every job under memtap, and the GPUs */
	uint64_t scanned; /* ... when /proc was last read */
	struct mt_gpus gpus;
	size_t top;	   /* stacks shown */
	unsigned interval; /* ms */
	bool once, json, tty;
	/* the terminal view's state */
	enum sort sort;
	size_t selected, shown_rank;
	bool expanded, paused;
	uint64_t expanded_key;
	char host[256];
} top = {.top = 10, .interval = 1000};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the traces ---- */

static bool is_trace_file(const char *path)
{
	char magic[8];
	FILE *f = fopen(path, "rb");
	bool yes = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, MT_FILE_MAGIC, 8);

	if (f)
		fclose(f);
	return yes;
}

static bool have_source(const char *path)
{
	for (size_t i = 0; i < top.n; i++)
		if (!strcmp(top.src[i]->path, path))
			return true;
	return false;
}

/* Follows path; a bad file is one line and exit 2 when named, skipped when found. */
static void add_source(const char *path, bool named)
{
	struct source *s;
	int r;

	if (have_source(path) || top.n == MAX_SOURCES)
		return;
	if (!(s = calloc(1, sizeof *s)))
		die(1, "out of memory");
	snprintf(s->path, sizeof s->path, "%s", path);
	snprintf(s->rank, sizeof s->rank, "-");
	snprintf(s->host, sizeof s->host, "?");
	r = mt_follow_open(&s->f, s->path);
	if (r == ENOMEM)
		die(1, "out of memory while reading %s", path);
	if (r) {
		char why[sizeof s->f.t.problem];
		memcpy(why, s->f.t.problem, sizeof why);
		mt_follow_close(&s->f);
		free(s);
		if (named)
			die(EXIT_USAGE, "%s", why);
		return;
	}
	if (mt_now_init(&s->now, &s->f.t))
		die(1, "out of memory");
	top.src[top.n++] = s;
}

/* The .trace files of a directory, in name order; ranks that start later join. */
static void scan_dir(const char *dir, bool first)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);

	if (n < 0) {
		if (first)
			die(EXIT_USAGE, "cannot read %s: %s", dir, strerror(errno));
		return;
	}
	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]->d_name);
		char path[PATH_MAX];
		if (len > 6 && !strcmp(names[i]->d_name + len - 6, ".trace") &&
		    mt_path_join(path, sizeof path, dir, "%s", names[i]->d_name) < (int)sizeof path)
			add_source(path, false);
		free(names[i]);
	}
	free(names);
	if (first && !top.n)
		die(EXIT_USAGE, "no .trace files in %s", dir);
}

/* Whether descriptor `name` of table `dir` (.../fd) was opened for writing, as a recorder
 * opens its trace: a reader's (memtap report walking a trace keeps it open) is read-only.
 * True when its fdinfo cannot tell. */
static bool writing(const char *dir, const char *name)
{
	char path[PATH_MAX], line[128];
	unsigned long flags = O_WRONLY;
	FILE *f;

	snprintf(path, sizeof path, "%.*sinfo/%s", (int)strlen(dir), dir, name);
	if (!(f = fopen(path, "r")))
		return true;
	while (fgets(line, sizeof line, f) && sscanf(line, "flags: %lo", &flags) != 1)
		;
	fclose(f);
	return (flags & O_ACCMODE) != O_RDONLY;
}

/* The memtap traces open for writing in one descriptor table (/proc/PID/task/TID/fd):
 * each entry that is a file starting with a trace's header (whatever its name: output=
 * may be anything). False when the table cannot be read. */
static bool scan_fds(const char *dir)
{
	char target[PATH_MAX];
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return false;
	while ((de = readdir(d))) {
		char fd[PATH_MAX];
		ssize_t n;
		struct stat st;
		if (de->d_name[0] == '.')
			continue;
		snprintf(fd, sizeof fd, "%s/%s", dir, de->d_name);
		n = readlink(fd, target, sizeof target - 1);
		if (n <= 0 || target[0] != '/')
			continue;
		target[n] = '\0';
		if (stat(target, &st) == 0 && S_ISREG(st.st_mode) && writing(dir, de->d_name) && is_trace_file(target))
			add_source(target, false);
	}
	closedir(d);
	return true;
}

/* The memtap traces a process has open, in the tables of all its threads (memtap's writer
 * has one of its own), then its children's, recursively (memtap run, a launcher, a shell). */
static void scan_pid(long pid, int depth)
{
	char path[64];
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof path, "/proc/%ld/task", pid);
	if (!(d = opendir(path)))
		return;
	while ((de = readdir(d))) {
		char sub[400];
		FILE *kids;
		long kid;
		if (de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof sub, "%s/%s/fd", path, de->d_name);
		if (!scan_fds(sub) && depth == 0 && errno == EACCES)
			die(EXIT_USAGE, "cannot see the files process %ld has open: it is another user's", pid);
		snprintf(sub, sizeof sub, "%s/%s/children", path, de->d_name);
		if (depth >= 8 || !(kids = fopen(sub, "r")))
			continue;
		while (fscanf(kids, "%ld", &kid) == 1)
			scan_pid(kid, depth + 1);
		fclose(kids);
	}
	closedir(d);
}

/* Every process this user may look into: the jobs under memtap (their traces open) */
static void scan_all(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d)))
		if (isdigit((unsigned char)de->d_name[0]) && strtol(de->d_name, NULL, 10) != (long)getpid())
			scan_pid(strtol(de->d_name, NULL, 10), 8); /* no children: every process is read */
	if (d)
		closedir(d);
	top.scanned = now_ns();
	mt_gpus_read(&top.gpus);
}

static bool process_alive(long pid)
{
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* The trace's process is this machine's and still there; or the trace has no INFO
 * chunk yet (a recorder that is starting) to tell. */
static bool running(const struct source *s)
{
	if (!s->have_info)
		return !s->f.damaged;
	return !s->f.t.complete && s->local && process_alive(s->pid);
}

static void refresh_symbols(struct source *s)
{
	const struct mt_trace *t = &s->f.t;

	if (!s->sym || s->sym_modules != t->nmodules) {
		mt_views_close(s->views);
		s->views = NULL;
		mt_symbols_close(s->sym);
		s->sym = mt_symbols_open(t);
		s->sym_modules = t->nmodules;
	}
	if (!s->views || s->views_stacks != t->nstacks) {
		mt_views_close(s->views);
		s->views = mt_views_open(t, s->sym);
		s->views_stacks = t->nstacks;
	}
}

/* Reads what a trace gained, a window at a time, and applies what is ready. */
static void follow(struct source *s, uint64_t now, bool all)
{
	char buf[32];

	do {
		size_t ready;
		if (mt_follow_poll(&s->f) == ENOMEM)
			die(1, "out of memory while reading %s", s->path);
		if (!s->have_info && s->f.t.info) {
			s->have_info = true;
			if (!mt_trace_info(&s->f.t, "rank", s->rank, sizeof s->rank))
				snprintf(s->rank, sizeof s->rank, "-");
			if (!mt_trace_info(&s->f.t, "host", s->host, sizeof s->host))
				snprintf(s->host, sizeof s->host, "?");
			s->pid = mt_trace_info(&s->f.t, "pid", buf, sizeof buf) ? strtol(buf, NULL, 10) : 0;
			s->local = !strcmp(s->host, top.host);
		}
		ready = mt_follow_ready(&s->f, now, HOLD_NS, all || !running(s));
		if (!s->start)
			s->start = mt_trace_start(&s->f.t);
		if (mt_now_apply(&s->now, ready))
			die(1, "out of memory while reading %s", s->path);
		/* applied: the live state holds what they did; a long job's events do not pile up */
		mt_follow_drop(&s->f, ready);
		s->now.applied = 0;
	} while (s->f.more);
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (s->now.rp.dev[d].peak > s->peak[d])
			s->peak[d] = s->now.rp.dev[d].peak;
}

/* Reads what each trace gained and applies what is ready. */
static void poll_sources(bool all)
{
	uint64_t now = now_ns();

	if (top.dir)
		scan_dir(top.dir, false);
	else if (top.pid)
		scan_pid(top.pid, 0);
	else if (top.all && now - top.scanned >= 2000000000ull)
		scan_all();
	for (size_t i = 0; i < top.n; i++)
		follow(top.src[i], now, all);
}

static uint64_t allocated(const struct source *s, int *device)
{
	uint64_t sum = 0;

	*device = -1;
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (s->now.rp.dev[d].seen) {
			if (*device < 0 || s->now.rp.dev[d].current > s->now.rp.dev[*device].current)
				*device = d;
			sum += s->now.rp.dev[d].current;
		}
	return sum;
}

/* Reserved: a caching allocator's segments where the trace has them, else what the
 * driver handed out (no caching allocator between: allocated is reserved). */
static uint64_t reserved(const struct mt_device_state *d)
{
	return d->reserved > d->current ? d->reserved : d->current;
}

/* The source whose details are shown: Tab's choice, else the one holding the most. */
static struct source *detailed(void)
{
	size_t best = 0;
	uint64_t most = 0;
	int d;

	if (top.shown_rank)
		return top.src[(top.shown_rank - 1) % top.n];
	for (size_t i = 0; i < top.n; i++) {
		uint64_t a = allocated(top.src[i], &d);
		if (a > most)
			most = a, best = i;
	}
	return top.src[best];
}

static const char *state(const struct source *s)
{
	if (!s->f.t.info)
		return "starting";
	if (s->f.damaged)
		return "damaged";
	if (s->f.t.complete)
		return "finished";
	if (!s->local)
		return "another host";
	return process_alive(s->pid) ? "running" : "ended (not closed)";
}

static double seconds(const struct source *s, uint64_t time)
{
	uint64_t start = s->start;

	return time > start ? (double)(time - start) / 1e9 : 0.0;
}

/* ---- a frame as lines ---- */

enum line_kind { L_TEXT, L_HEAD, L_BAR, L_SEL, L_DIM };

struct line {
	enum line_kind kind;
	char text[512];
};

static struct line *lines;
static size_t nlines, cap_lines;

static void put(enum line_kind kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(enum line_kind kind, const char *fmt, ...)
{
	va_list ap;

	if (nlines == cap_lines) {
		cap_lines = cap_lines ? cap_lines * 2 : 128;
		if (!(lines = realloc(lines, cap_lines * sizeof *lines)))
			die(1, "out of memory");
	}
	lines[nlines].kind = kind;
	va_start(ap, fmt);
	vsnprintf(lines[nlines].text, sizeof lines[nlines].text, fmt, ap);
	va_end(ap);
	nlines++;
}

static const char *sz(uint64_t bytes, char buf[32])
{
	return mt_format_size(bytes, buf, 32);
}

/* [|||||:::   ]: allocated as |, reserved beyond it as :, of the capacity */
static void bar(char *out, size_t width, uint64_t alloc, uint64_t resv, uint64_t cap)
{
	size_t a = cap ? (size_t)((double)alloc / (double)cap * (double)width + 0.5) : 0;
	size_t r = cap ? (size_t)((double)resv / (double)cap * (double)width + 0.5) : 0;

	out[0] = '[';
	for (size_t i = 0; i < width; i++)
		out[1 + i] = i < a ? '|' : i < r ? ':' : ' ';
	out[width + 1] = ']';
	out[width + 2] = '\0';
}

/* Where in the code a stack was: its first user frame, and the function that called it
 * (stacks often share their first user frame: a helper that allocates). */
static const char *where_text(struct source *s, uint32_t stack, char *buf, size_t n)
{
	const struct mt_view *v = mt_view(s->views, stack);
	const uint64_t *frames;
	size_t used;
	char name[256];

	if (!stack || stack >= s->f.t.nstacks || v->where == MT_NO_FRAME)
		return "(no stack)";
	frames = s->f.t.stacks[stack].frames;
	mt_frame_text(mt_symbols_frame(s->sym, frames[v->where]), false, buf, n);
	for (uint32_t k = 0; k + 1 < v->nshown; k++)
		if (v->shown[k] == v->where) {
			const struct mt_frame *f = mt_symbols_frame(s->sym, frames[v->shown[k + 1]]);
			used = strlen(buf);
			if (f->function && used + 8 < n)
				snprintf(buf + used, n - used, " < %s", mt_frame_name(f->function, name, sizeof name));
			break;
		}
	return buf;
}

static int by_growth(const void *a, const void *b)
{
	const struct mt_now_stack *x = a, *y = b;

	return x->grew != y->grew ? (x->grew > y->grew ? -1 : 1) : (x->bytes < y->bytes) - (x->bytes > y->bytes);
}

static int by_count(const void *a, const void *b)
{
	const struct mt_now_stack *x = a, *y = b;

	return x->count != y->count ? (x->count > y->count ? -1 : 1) : (x->bytes < y->bytes) - (x->bytes > y->bytes);
}

static const char *grew_text(int64_t grew, char buf[32])
{
	char s[32];

	if (!grew)
		return "0";
	snprintf(buf, 32, "%c%s", grew > 0 ? '+' : '-', sz(grew > 0 ? (uint64_t)grew : (uint64_t) - (grew + 1) + 1, s));
	return buf;
}

static void note_text(struct source *s, const struct mt_now_note *w, char *buf, size_t n)
{
	char a[32], where[1024];

	if (w->kind == MT_EV_ALLOC_FAILED)
		snprintf(buf, n, "%8.1fs  OOM       device %d, %s requested at %s", seconds(s, w->time),
			 w->device == MT_NO_DEVICE ? -1 : w->device, sz(w->size, a),
			 where_text(s, w->stack, where, sizeof where));
	else
		snprintf(buf, n, "%8.1fs  %-9s %s", seconds(s, w->time),
			 w->kind == MT_EV_MARK	     ? "mark"
			 : w->kind == MT_EV_SNAPSHOT ? "snapshot"
						     : "note",
			 mt_trace_string(&s->f.t, w->text));
}

struct phase_row {
	uint32_t phase;
	uint64_t bytes;
};

static int by_phase_bytes(const void *a, const void *b)
{
	const struct phase_row *x = a, *y = b;

	return x->bytes != y->bytes ? (x->bytes > y->bytes ? -1 : 1) : (x->phase > y->phase) - (x->phase < y->phase);
}

/* One device's composition now: by tag, then the phases holding the most. */
static void composition_lines(struct source *s, int d)
{
	uint64_t tags[MT_TAG_COUNT];
	struct mt_map phases = {0};
	struct phase_row rows[6];
	size_t nrows = 0;
	char line[512], a[32];
	int used;

	if (mt_now_composition(&s->now, d, tags, &phases))
		die(1, "out of memory");
	used = snprintf(line, sizeof line, "  tags   ");
	for (int c = 1; c <= MT_TAG_COUNT; c++) {
		int k = c % MT_TAG_COUNT; /* untagged last */
		if (tags[k] && used < (int)sizeof line)
			used += snprintf(line + used, sizeof line - (size_t)used, "  %s %s",
					 k ? mt_tag_names[k] : "untagged", sz(tags[k], a));
	}
	put(L_TEXT, "%s", line);
	for (size_t i = 0; i < phases.cap; i++) {
		struct phase_row w = {(uint32_t)phases.keys[i], phases.vals[i]};
		if (phases.used[i] != 1)
			continue;
		if (nrows < 6)
			rows[nrows++] = w;
		else if (w.bytes > rows[5].bytes)
			rows[5] = w;
		qsort(rows, nrows, sizeof *rows, by_phase_bytes);
	}
	mt_map_free(&phases);
	used = snprintf(line, sizeof line, "  phases ");
	for (size_t i = 0; i < nrows && used < (int)sizeof line; i++)
		used +=
		    snprintf(line + used, sizeof line - (size_t)used, "  %s %s",
			     rows[i].phase ? mt_trace_string(&s->f.t, rows[i].phase) : "(none)", sz(rows[i].bytes, a));
	put(L_TEXT, "%s", line);
}

static void rank_lines(void)
{
	uint64_t max = 0, min = UINT64_MAX, sum = 0;
	size_t imax = 0;
	char a[32], b[32], c[32], e[32];
	int d;

	put(L_HEAD, "%-6s %-16s %-3s %12s %12s %12s %12s  %s", top.all ? "pid" : "rank", "host", "dev", "allocated",
	    "reserved", "peak", "capacity", "state");
	for (size_t i = 0; i < top.n; i++) {
		struct source *s = top.src[i];
		uint64_t now = allocated(s, &d);
		const struct mt_device_state *ds = d >= 0 ? &s->now.rp.dev[d] : NULL;
		char who[32];
		snprintf(who, sizeof who, "%s", s->rank);
		if (top.all)
			snprintf(who, sizeof who, "%ld", s->pid);
		put(s == detailed() ? L_SEL : L_TEXT, "%-6s %-16.16s %-3d %12s %12s %12s %12s  %s", who, s->host, d,
		    sz(now, a), sz(ds ? reserved(ds) : 0, b), sz(d >= 0 ? s->peak[d] : 0, c),
		    ds && ds->capacity ? sz(ds->capacity, e) : "?", state(s));
		sum += now;
		if (i == 0 || now > max) {
			max = now;
			imax = i;
		}
		if (now < min)
			min = now;
	}
	if (!top.all) /* ranks of one job; not unrelated jobs */
		put(L_TEXT, "spread: allocated now from %s to %s (mean %s), %.1f%% of the mean; the most is rank %s",
		    sz(min, a), sz(max, b), sz(sum / top.n, c),
		    sum ? 100.0 * (double)(max - min) / ((double)sum / (double)top.n) : 0.0, top.src[imax]->rank);
	put(L_TEXT, "%s", "");
}

static void stack_lines(struct source *s, struct mt_now_stack *v, size_t nv)
{
	char a[32], b[32], where[1024];
	size_t shown = nv < top.top ? nv : top.top;

	put(L_HEAD, "%-4s %12s %8s %12s  %s   (sort: %s)", "dev", "live", "count", "grew/iter", "where in the code",
	    sort_names[top.sort]);
	if (top.selected >= shown)
		top.selected = shown ? shown - 1 : 0;
	for (size_t i = 0; i < shown; i++) {
		uint64_t key = (uint64_t)v[i].stack << 8 | v[i].device;
		bool sel = top.tty && i == top.selected;
		put(sel ? L_SEL : L_TEXT, "%-4d %12s %8" PRIu64 " %12s  %s", v[i].device, sz(v[i].bytes, a), v[i].count,
		    s->now.iterations >= 2 ? grew_text(v[i].grew, b) : "-",
		    where_text(s, v[i].stack, where, sizeof where));
		if (sel)
			top.expanded_key = top.expanded ? top.expanded_key : key;
		if (top.expanded && top.expanded_key == key && v[i].stack && v[i].stack < s->f.t.nstacks) {
			const struct mt_view *w = mt_view(s->views, v[i].stack);
			const struct mt_stack *st = &s->f.t.stacks[v[i].stack];
			for (uint32_t k = 0; k < w->nshown; k++)
				put(L_DIM, "        %s",
				    mt_frame_text(mt_symbols_frame(s->sym, st->frames[w->shown[k]]), false, where,
						  sizeof where));
			if (w->depth > w->nshown)
				put(L_DIM, "        + %u frames of the allocator, the runtime or memtap",
				    w->depth - w->nshown);
		}
	}
	if (!nv)
		put(L_DIM, "     (nothing live on a device)");
}

/* The source that process's trace is, NULL when none */
static struct source *source_of(long pid)
{
	for (size_t i = 0; i < top.n; i++)
		if (top.src[i]->pid == pid)
			return top.src[i];
	return NULL;
}

/* Every GPU as the driver counts it, and the processes on it: those under memtap by
 * their trace, the others by what the driver says */
static void machine_lines(void)
{
	char a[32], b[32], barbuf[64], comm[64], path[64];

	if (top.gpus.why[0])
		put(L_DIM, "%s: each GPU's use and the processes not under memtap need it", top.gpus.why);
	for (size_t i = 0; i < top.gpus.n; i++) {
		const struct mt_gpu *g = &top.gpus.gpu[i];
		bar(barbuf, 40, g->used, g->used, g->total);
		put(L_BAR, "GPU%-2d %-18.18s %s", g->index, g->name, barbuf);
		put(L_TEXT, "      used %s of %s (the driver's count)%s", sz(g->used, a), sz(g->total, b),
		    g->procs_known ? "" : "; its processes not listed by the driver");
		for (size_t k = 0; k < g->nprocs; k++) {
			const struct source *s = source_of(g->proc[k].pid);
			FILE *f;
			snprintf(path, sizeof path, "/proc/%ld/comm", g->proc[k].pid);
			if (!(f = fopen(path, "r")) || !fgets(comm, sizeof comm, f))
				snprintf(comm, sizeof comm, "?");
			if (f)
				fclose(f);
			comm[strcspn(comm, "\n")] = '\0';
			if (s)
				put(L_TEXT, "      pid %-7ld %-16.16s %s, under memtap: %s", g->proc[k].pid, comm,
				    g->proc[k].used ? sz(g->proc[k].used, a) : "?", s->path);
			else
				put(L_TEXT,
				    "      pid %-7ld %-16.16s %s, not under memtap (memtap run -- COMMAND records it)",
				    g->proc[k].pid, comm, g->proc[k].used ? sz(g->proc[k].used, a) : "?");
		}
	}
	if (!top.n)
		put(L_TEXT, "no job under memtap that this user can see is running (memtap run -- COMMAND starts one)");
	put(L_TEXT, "%s", "");
}

static void make_frame(void)
{
	struct source *s;
	struct mt_now_stack *v;
	size_t nv;
	char a[32], b[32], c[32], e[32], name[64], barbuf[64], line[512];

	nlines = 0;
	if (top.all)
		machine_lines();
	if (!top.n)
		return;
	s = detailed();
	if (top.n > 1)
		rank_lines();
	refresh_symbols(s);
	put(L_HEAD, "memtap top: %s  rank %s  pid %ld  %s  %.1fs  %zu events  iteration %zu%s", s->path, s->rank,
	    s->pid, state(s), seconds(s, s->now.last_time), s->now.rp.index, s->now.iterations,
	    top.paused ? "  (paused)" : "");
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		const struct mt_device_state *ds = &s->now.rp.dev[d];
		if (!ds->seen)
			continue;
		snprintf(name, sizeof name, "%s", ds->name ? mt_trace_string(&s->f.t, ds->name) : "");
		bar(barbuf, 40, ds->current, reserved(ds), ds->capacity);
		put(L_BAR, "GPU%-2d %-18.18s %s", d, name, barbuf);
		put(L_TEXT, "      allocated %s  reserved %s  capacity %s%s  peak %s", sz(ds->current, a),
		    sz(reserved(ds), b), ds->capacity ? sz(ds->capacity, c) : "?",
		    ds->device_bytes > ds->capacity ? " (a policy's cap)" : "", sz(s->peak[d], e));
		composition_lines(s, d);
	}
	put(L_TEXT, "%s", "");
	if (mt_now_stacks(&s->now, &v, &nv))
		die(1, "out of memory");
	if (top.sort == SORT_GROWTH)
		qsort(v, nv, sizeof *v, by_growth);
	else if (top.sort == SORT_COUNT)
		qsort(v, nv, sizeof *v, by_count);
	stack_lines(s, v, nv);
	free(v);
	put(L_TEXT, "%s", "");
	if (s->now.ooms) {
		const struct mt_now_note *o = &s->now.oom;
		put(L_HEAD, "OOMs: %" PRIu64 "; the last at %.1fs: device %d, %s requested at %s", s->now.ooms,
		    seconds(s, o->time), o->device == MT_NO_DEVICE ? -1 : o->device, sz(o->size, a),
		    where_text(s, o->stack, line, sizeof line));
	} else {
		put(L_HEAD, "no OOM");
	}
	for (size_t i = 0; i < s->now.nnotes; i++) {
		note_text(s, &s->now.notes[i], line, sizeof line);
		put(L_TEXT, "%s", line);
	}
	if (top.tty)
		put(L_DIM, "s sort  up/down choose  Enter expand  Tab next rank  p pause  q quit");
}

/* ---- JSON: one object a frame ---- */

static void json_source(struct source *s)
{
	struct mt_now_stack *v;
	size_t nv;
	char where[1024];
	bool first = true;

	refresh_symbols(s);
	printf("{\"trace\": ");
	mt_json_str(stdout, s->path);
	printf(", \"rank\": ");
	mt_json_str(stdout, s->rank);
	printf(", \"host\": ");
	mt_json_str(stdout, s->host);
	printf(", \"pid\": %ld, \"state\": \"%s\", \"seconds\": %.3f, \"events\": %zu, \"iterations\": %zu, "
	       "\"devices\": [",
	       s->pid, state(s), seconds(s, s->now.last_time), s->now.rp.index, s->now.iterations);
	for (int d = 0; d < MT_MAX_DEVICES; d++) {
		const struct mt_device_state *ds = &s->now.rp.dev[d];
		uint64_t tags[MT_TAG_COUNT];
		struct mt_map phases = {0};
		bool one = true;
		if (!ds->seen)
			continue;
		if (mt_now_composition(&s->now, d, tags, &phases))
			die(1, "out of memory");
		printf("%s{\"device\": %d, \"name\": ", first ? "" : ", ", d);
		mt_json_str(stdout, ds->name ? mt_trace_string(&s->f.t, ds->name) : "");
		printf(", \"allocated_bytes\": %" PRIu64 ", \"reserved_bytes\": %" PRIu64
		       ", \"capacity_bytes\": %" PRIu64 ", \"device_bytes\": %" PRIu64 ", \"peak_bytes\": %" PRIu64
		       ", \"tags\": {",
		       ds->current, reserved(ds), ds->capacity, ds->device_bytes, s->peak[d]);
		for (int c = 0; c < MT_TAG_COUNT; c++)
			printf("%s\"%s\": %" PRIu64, c ? ", " : "", c ? mt_tag_names[c] : "untagged", tags[c]);
		printf("}, \"phases\": {");
		for (size_t i = 0; i < phases.cap; i++)
			if (phases.used[i] == 1) {
				printf("%s", one ? "" : ", ");
				mt_json_str(stdout, phases.keys[i] ? mt_trace_string(&s->f.t, phases.keys[i]) : "");
				printf(": %" PRIu64, phases.vals[i]);
				one = false;
			}
		printf("}}");
		mt_map_free(&phases);
		first = false;
	}
	if (mt_now_stacks(&s->now, &v, &nv))
		die(1, "out of memory");
	printf("], \"stacks\": [");
	for (size_t i = 0; i < nv && i < top.top; i++) {
		printf("%s{\"device\": %d, \"bytes\": %" PRIu64 ", \"count\": %" PRIu64 ", \"grew_bytes\": %" PRId64
		       ", \"where\": ",
		       i ? ", " : "", v[i].device, v[i].bytes, v[i].count, v[i].grew);
		mt_json_str(stdout, where_text(s, v[i].stack, where, sizeof where));
		printf("}");
	}
	free(v);
	printf("], \"ooms\": %" PRIu64 ", \"last_oom\": ", s->now.ooms);
	if (s->now.ooms)
		printf("{\"seconds\": %.3f, \"device\": %d, \"bytes\": %" PRIu64 ", \"where\": ",
		       seconds(s, s->now.oom.time), s->now.oom.device == MT_NO_DEVICE ? -1 : s->now.oom.device,
		       s->now.oom.size),
		    mt_json_str(stdout, where_text(s, s->now.oom.stack, where, sizeof where)), printf("}");
	else
		printf("null");
	printf(", \"recent_events\": [");
	for (size_t i = 0; i < s->now.nnotes; i++) {
		const struct mt_now_note *w = &s->now.notes[i];
		printf("%s{\"seconds\": %.3f, \"kind\": \"%s\", \"text\": ", i ? ", " : "", seconds(s, w->time),
		       w->kind == MT_EV_ALLOC_FAILED ? "oom"
		       : w->kind == MT_EV_MARK	     ? "mark"
		       : w->kind == MT_EV_SNAPSHOT   ? "snapshot"
						     : "note");
		mt_json_str(stdout, w->kind == MT_EV_ALLOC_FAILED ? "" : mt_trace_string(&s->f.t, w->text));
		printf("}");
	}
	printf("]}");
}

static void json_frame(void)
{
	uint64_t max = 0, min = UINT64_MAX, sum = 0;
	int d;

	printf("{\"memtap_top\": 1, \"ranks\": [");
	for (size_t i = 0; i < top.n; i++) {
		uint64_t a = allocated(top.src[i], &d);
		printf("%s", i ? ", " : "");
		json_source(top.src[i]);
		sum += a;
		max = a > max ? a : max;
		min = a < min ? a : min;
	}
	if (top.n)
		printf("], \"spread\": {\"max_allocated_bytes\": %" PRIu64 ", \"min_allocated_bytes\": %" PRIu64
		       ", \"mean_allocated_bytes\": %" PRIu64 ", \"spread\": %.4f}",
		       max, min, sum / top.n, sum ? (double)(max - min) / ((double)sum / (double)top.n) : 0.0);
	else
		printf("], \"spread\": null");
	if (top.all) {
		printf(", \"gpus\": [");
		for (size_t i = 0; i < top.gpus.n; i++) {
			const struct mt_gpu *g = &top.gpus.gpu[i];
			printf("%s{\"index\": %d, \"name\": ", i ? ", " : "", g->index);
			mt_json_str(stdout, g->name);
			printf(", \"total_bytes\": %" PRIu64 ", \"used_bytes\": %" PRIu64 ", \"processes\": [",
			       g->total, g->used);
			for (size_t k = 0; k < g->nprocs; k++) {
				const struct source *s = source_of(g->proc[k].pid);
				printf("%s{\"pid\": %ld, \"used_bytes\": %" PRIu64 ", \"trace\": ", k ? ", " : "",
				       g->proc[k].pid, g->proc[k].used);
				if (s)
					mt_json_str(stdout, s->path);
				else
					printf("null");
				printf("}");
			}
			printf("]}");
		}
		printf("], \"gpus_unknown\": ");
		if (top.gpus.why[0])
			mt_json_str(stdout, top.gpus.why);
		else
			printf("null");
	}
	printf("}\n");
	fflush(stdout);
}

/* ---- drawing ---- */

static void print_frame(void)
{
	for (size_t i = 0; i < nlines; i++)
		puts(lines[i].text);
	fflush(stdout);
}

static void draw(void)
{
	static const attr_t attrs[] = {[L_HEAD] = A_BOLD, [L_SEL] = A_REVERSE, [L_DIM] = A_DIM};
	int rows = LINES, cols = COLS;

	erase();
	for (size_t i = 0; i < nlines && (int)i < rows; i++) {
		const char *t = lines[i].text;
		switch (lines[i].kind) {
		case L_HEAD:
		case L_SEL:
		case L_DIM:
			attron(attrs[lines[i].kind]);
			mvaddnstr((int)i, 0, t, cols);
			attroff(attrs[lines[i].kind]);
			break;
		case L_BAR:
			move((int)i, 0);
			for (int k = 0; t[k] && k < cols; k++) {
				int pair = t[k] == '|' ? 1 : t[k] == ':' ? 2 : 0;
				if (pair && has_colors())
					attron(COLOR_PAIR(pair));
				addch((unsigned char)t[k]);
				if (pair && has_colors())
					attroff(COLOR_PAIR(pair));
			}
			break;
		default:
			mvaddnstr((int)i, 0, t, cols);
		}
	}
	refresh();
}

/* A key: true when it asks to quit. */
static bool key(int c)
{
	switch (c) {
	case 'q':
	case 'Q':
		return true;
	case 's':
		top.sort = (enum sort)((top.sort + 1) % SORTS);
		top.expanded = false;
		break;
	case 'p':
	case ' ':
		top.paused = !top.paused;
		break;
	case KEY_DOWN:
	case 'j':
		top.selected++;
		top.expanded = false;
		break;
	case KEY_UP:
	case 'k':
		if (top.selected)
			top.selected--;
		top.expanded = false;
		break;
	case '\n':
	case '\r':
	case KEY_ENTER:
	case 'e':
		top.expanded = !top.expanded;
		break;
	case '\t':
		top.shown_rank = top.shown_rank % top.n + 1;
		top.selected = 0;
		top.expanded = false;
		break;
	default:
		break;
	}
	return false;
}

static bool all_closed(void)
{
	for (size_t i = 0; i < top.n; i++)
		if (running(top.src[i]))
			return false;
	return true;
}

static int run_terminal(void)
{
	uint64_t next = 0;

	if (!initscr())
		die(1, "cannot start the terminal view (TERM=%s)", getenv("TERM") ? getenv("TERM") : "");
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	timeout(100);
	if (has_colors()) {
		start_color();
		use_default_colors();
		init_pair(1, COLOR_GREEN, -1);
		init_pair(2, COLOR_YELLOW, -1);
	}
	for (;;) {
		int c = getch();
		bool redraw = false;
		if (c != ERR) {
			if (key(c))
				break;
			redraw = true;
		}
		if (now_ns() >= next) {
			if (!top.paused)
				poll_sources(false);
			next = now_ns() + (uint64_t)top.interval * 1000000ull;
			redraw = true;
		}
		if (redraw) {
			make_frame();
			draw();
		}
	}
	endwin();
	return 0;
}

/* One frame on standard output, as JSON or as plain lines. */
static void show_frame(void)
{
	if (top.json) {
		json_frame();
	} else {
		make_frame();
		print_frame();
	}
}

static int run_plain(void)
{
	for (;;) {
		bool closed;
		poll_sources(false);
		closed = all_closed();
		if (closed) /* all of it, held back or not */
			poll_sources(true);
		show_frame();
		if (!top.json)
			putchar('\n');
		if (closed)
			return 0;
		usleep(top.interval * 1000u);
	}
}

static void close_sources(void)
{
	for (size_t i = 0; i < top.n; i++) {
		struct source *s = top.src[i];
		mt_views_close(s->views);
		mt_symbols_close(s->sym);
		mt_now_free(&s->now);
		mt_follow_close(&s->f);
		free(s);
	}
	top.n = 0;
	free(lines);
	lines = NULL;
	nlines = cap_lines = 0;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

int cmd_top(int argc, char **argv)
{
	static const struct option longopts[] = {{"once", 0, 0, 'o'}, {"json", 0, 0, 'j'}, {"interval", 1, 0, 'i'},
						 {"top", 1, 0, 't'},  {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	struct stat st;
	const char *what;
	char *end;
	double secs;
	int c;

	while ((c = next_option(argc, argv, "h", longopts, "top")) != -1) {
		switch (c) {
		case 'o':
			top.once = true;
			break;
		case 'j':
			top.json = true;
			break;
		case 'i':
			secs = strtod(optarg, &end);
			if (end == optarg || *end || !(secs >= 0.05 && secs <= 3600))
				die(EXIT_USAGE, "--interval needs seconds from 0.05 to 3600, not '%s'", optarg);
			top.interval = (unsigned)(secs * 1000);
			break;
		case 't':
			top.top = strtoul(optarg, &end, 10);
			if (end == optarg || *end || !top.top || top.top > 10000)
				die(EXIT_USAGE, "--top needs a number from 1 to 10000, not '%s'", optarg);
			break;
		case 'h':
			fputs(top_usage, stdout);
			return 0;
		}
	}
	if (argc - optind > 1)
		die(EXIT_USAGE, "one trace, directory or process at a time (see --help)");
	what = optind < argc ? argv[optind] : NULL;
	if (gethostname(top.host, sizeof top.host))
		top.host[0] = '\0';
	top.host[sizeof top.host - 1] = '\0';
	if (!what) {
		top.all = true;
		scan_all();
	} else if (stat(what, &st) == 0 && S_ISDIR(st.st_mode)) {
		top.dir = what;
		scan_dir(what, true);
	} else if (stat(what, &st) != 0 && all_digits(what)) {
		long pid = strtol(what, NULL, 10);
		char proc[64];
		snprintf(proc, sizeof proc, "/proc/%ld", pid);
		if (pid <= 0 || stat(proc, &st) != 0)
			die(EXIT_USAGE, "no process %s", what);
		top.pid = pid;
		scan_pid(pid, 0);
		if (!top.n)
			die(EXIT_USAGE,
			    "process %ld has no memtap trace open, nor have its children (is it running under memtap "
			    "run, and has it made a device allocation yet?)",
			    pid);
	} else {
		add_source(what, true);
	}
	/* the job first: where top and the job compete for a core, top waits */
	if (nice(10) == -1 && errno)
		errno = 0;
	setlocale(LC_ALL, "");
	top.tty = !top.once && !top.json && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
	if (top.once) {
		poll_sources(true);
		show_frame();
		c = 0;
	} else {
		c = top.tty ? run_terminal() : run_plain();
	}
	close_sources();
	return c;
}
