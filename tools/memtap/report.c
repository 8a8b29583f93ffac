/* memtap report and memtap dump: read a trace (all of what survived, if it was cut
 * short), then print. A damaged trace still reports; the exit status says it was. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/job.h"
#include "analyze/diagnose.h"
#include "analyze/report.h"
#include "analyze/timeline.h"
#include "cli.h"
#include "core/path.h"
#include "core/units.h"

const char report_usage[] =
    "usage: memtap report TRACE [--json] [--html FILE | --serve[=PORT]] [--top N] [--frames=all]\n"
    "                    [--iteration NAME] [--leak-iterations K] [--plan 'SETUP'] [--gpu-mem SIZE|GPU]\n"
    "       memtap report TRACE TRACE... | DIRECTORY [--json] [--html FILE]   one row per rank, and the\n"
    "                 imbalance (a directory's .trace files, else its PyTorch snapshots, .pickle or\n"
    "                 .pkl: a rank from a file name such as rank3_memory_snapshot.pickle where the\n"
    "                 trace names none); for a job's run directory (memtap run --dir), every rank at the\n"
    "                 moment of each out-of-memory failure next to its own peak, from the snapshots\n"
    "                 the ranks took of it, and which ranks had exited or died before\n"
    "Per device: the peak of allocated device memory and when it happened, the stacks live at\n"
    "the peak; what was live at exit, grouped by where in the code (the first frame of the\n"
    "user's own code); out-of-memory events with their stacks, and for each what to change so\n"
    "that it fits: its cause, and changes with the peak each predicts. A stack reads as PyTorch's\n"
    "viewer shows it, less the plumbing: the Python frames first (innermost first, with\n"
    "file:line), then the operation; the recorder's, allocator's, dispatcher's and\n"
    "interpreter's frames are left out and long C++ names shortened.\n"
    "  --json    the stable JSON form (docs/REPORT.md)\n"
    "  --html FILE  one self-contained page: composition over time with the OOMs and the cap,\n"
    "               the biggest allocations (hover for the stack), callers at the peak and\n"
    "               at each OOM, leaks and a map of the segments; zoom by dragging, keys\n"
    "               work too (opens offline in any browser);\n"
    "               with --json as well, the page goes to FILE and the JSON to stdout\n"
    "  --serve[=PORT]  the same page on http://127.0.0.1:PORT/ (default: a free port, said on\n"
    "               stdout) until stopped, and, as it zooms and steps, the detail of the part\n"
    "               of the run in view: every change of memory and every allocator event,\n"
    "               however long the run\n"
    "  --top N   stacks shown per list (default 10)\n"
    "  --frames=all  every frame of every stack, names in full, each stack of a group\n"
    "  --iteration NAME        iteration boundaries: memtap_mark NAME or NVTX range NAME (default:\n"
    "                          every memtap_mark, else the range repeating at the top of a thread)\n"
    "  --leak-iterations K     a leak grows at K boundaries in a row (default 3)\n"
    "  --plan 'SETUP'          add a capacity plan: the run's model and setup as memtap plan's\n"
    "                          options; the composition at the peak calibrates it (docs/PLAN.md),\n"
    "                          and what to change is then predicted for micro-batch, recomputation,\n"
    "                          precision, offload, ZeRO and GPUs too (the GPUs, where it names none,\n"
    "                          from the trace's world_size)\n"
    "  --gpu-mem SIZE|GPU      also what to change where a device's peak is over this capacity\n"
    "Exit status: 0, or 3 when the trace was cut short or damaged (what it held is reported).\n";

const char dump_usage[] = "usage: memtap dump TRACE [--json]\n"
			  "Every event in time order: time (ns since start), thread, kind, device, address, size,\n"
			  "aux, aux2, stack, phase, tag, error. --json writes one JSON object per line, with the\n"
			  "function names of the event's stack and the libraries they are in.\n";

/* r from reading path into t: a refusal ends the command; damage is said. */
static bool said(int r, const char *path, struct mt_trace *t)
{
	if (r)
		die(EXIT_USAGE, "%s", t->problem);
	if (t->problem[0])
		progress_clear(),
		    fprintf(stderr, "memtap: %s: %s; reading the %zu events before it\n", path, t->problem, t->nevents);
	return t->problem[0] != 0;
}

int walked_status(const struct mt_trace *t, bool damaged)
{
	if (t->problem[0] && !damaged)
		progress_clear(), fprintf(stderr, "memtap: %s: %s\n", t->path, t->problem);
	return t->problem[0] ? EXIT_DAMAGED : 0;
}

bool read_trace(const char *path, struct mt_trace *t)
{
	return said(mt_trace_read(path, t), path, t);
}

bool load_trace(const char *path, struct mt_trace *t)
{
	return said(mt_trace_load(path, t), path, t);
}

const char *const frame_views[] = {"all", "view", NULL};

static struct mt_report_options ropt;
static const char *html_path, *plan_setup;
static uint64_t target; /* --gpu-mem */
static bool serve;	/* --serve */
static unsigned long port;
static bool all_frames;

static int parse_common(int argc, char **argv, const char *usage, bool *json, size_t *top)
{
	static const struct option longopts[] = {{"json", 0, 0, 'j'},
						 {"top", 1, 0, 't'},
						 {"help", 0, 0, 'h'},
						 {"iteration", 1, 0, 'i'},
						 {"leak-iterations", 1, 0, 'k'},
						 {"html", 1, 0, 'H'},
						 {"serve", 2, 0, 'S'},
						 {"plan", 1, 0, 'P'},
						 {"gpu-mem", 1, 0, 'G'},
						 {"frames", 1, 0, 'F'},
						 {0, 0, 0, 0}};
	int c;
	char *end;

	while ((c = next_option(argc, argv, "h", longopts, argv[0])) != -1) {
		switch (c) {
		case 'j':
			*json = true;
			break;
		case 't':
			*top = strtoul(optarg, &end, 10);
			if (end == optarg || *end || *top == 0)
				die(EXIT_USAGE, "--top needs a positive number, not '%s'", optarg);
			break;
		case 'i':
			ropt.iteration = optarg;
			break;
		case 'H':
			html_path = optarg;
			break;
		case 'S':
			serve = true;
			port = optarg ? strtoul(optarg, &end, 10) : 0;
			if (optarg && (end == optarg || *end || port > 65535))
				die(EXIT_USAGE, "--serve takes a port from 0 to 65535, not '%s'", optarg);
			break;
		case 'P':
			plan_setup = optarg;
			break;
		case 'G':
			target = plan_gpu_mem(optarg);
			break;
		case 'F':
			all_frames = choose(argv[0], "--frames", optarg, frame_views) == 0;
			break;
		case 'k':
			ropt.leak_iterations = (unsigned)strtoul(optarg, &end, 10);
			if (end == optarg || *end || ropt.leak_iterations == 0 || ropt.leak_iterations > 1000)
				die(EXIT_USAGE, "--leak-iterations needs a number from 1 to 1000, not '%s'", optarg);
			break;
		case 'h':
			fputs(usage, stdout);
			exit(0);
		}
	}
	if (optind >= argc)
		die(EXIT_USAGE, "which trace? (see --help)");
	return optind;
}

/* ---- several ranks: one row each, and how unequal their peaks are ---- */

struct rank_row {
	char path[4096], rank[32], host[256], world[32];
	char process[128]; /* pid, start time and rank: a snapshot its process took has the same */
	int device;
	uint64_t peak, composition[MT_TAG_COUNT], dropped;
	size_t nevents;
	struct mt_frag_state frag; /* at the peak */
	size_t leaks;
	bool complete, frag_known;
	int cause;	/* its first out-of-memory failure's (analyze/diagnose.h), -1: none */
	int oom_device; /* ... on this device */
	/* its peak on each device but its own, and whether loading a checkpoint made some of it
	 * (torch.load without map_location puts each tensor where it was saved from) */
	uint64_t elsewhere[MT_MAX_DEVICES];
	bool loaded[MT_MAX_DEVICES];
	/* its peak device's allocated bytes over time, for the page (struct mt_job_rank) */
	uint64_t line[MT_JOB_COLUMNS], start_realtime, span, ooms[MT_JOB_OOMS];
	size_t nooms;
};

/* The rank's peak device over its run: the highest allocated in each of MT_JOB_COLUMNS
 * equal spans (a span with no change holds what the one before ended with), and when it
 * ran out of memory there. */
static int over_time(struct rank_row *w, const struct mt_report *r, const struct mt_trace *t)
{
	struct mt_timeline tl;
	uint64_t held = 0;
	char a[32];
	int err;

	w->span = mt_report_span(r);
	w->start_realtime = mt_trace_info(t, "start_realtime_ns", a, sizeof a) ? strtoull(a, NULL, 10) : 0;
	for (size_t k = 0; k < r->noom && w->nooms < MT_JOB_OOMS; k++) {
		const struct mt_event *e = &r->oom[k].ev;
		if (e->device == w->device)
			w->ooms[w->nooms++] = mt_report_since(r, e->time);
	}
	if ((err = mt_timeline_build(&tl, r)))
		return err;
	for (size_t i = 0, c = 0; c < MT_JOB_COLUMNS; c++) {
		w->line[c] = held;
		for (; i < tl.n[w->device]; i++) {
			const struct mt_timeline_point *p = &tl.points[w->device][i];
			uint64_t bytes = 0;
			if (mt_timeline_part(mt_report_since(r, p->time), w->span, MT_JOB_COLUMNS) > c)
				break;
			for (int k = 1; k < MT_TAG_COUNT; k++)
				bytes += p->bytes[k];
			held = bytes;
			if (bytes > w->line[c])
				w->line[c] = bytes;
		}
	}
	mt_timeline_free(&tl);
	return 0;
}

static int rows_by_rank(const void *a, const void *b)
{
	const struct rank_row *x = a, *y = b;
	long rx = strtol(x->rank, NULL, 10), ry = strtol(y->rank, NULL, 10);

	return rx != ry ? (rx < ry ? -1 : 1) : strcmp(x->path, y->path);
}

static bool ends_with(const char *s, const char *end)
{
	size_t n = strlen(s), k = strlen(end);

	return n > k && strcmp(s + n - k, end) == 0;
}

static int by_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory's .trace files, else its PyTorch snapshots (.pickle, .pkl: torchtitan and
 * others write one per rank into a folder), in name order; any other argument as given. */
static void add_paths(const char *arg, char ***paths, size_t *n)
{
	size_t first = *n;

	for (int pass = 0; pass < 2 && *n == first; pass++) {
		DIR *dir = opendir(arg);
		struct dirent *de;

		if (!dir) {
			*paths = realloc(*paths, (*n + 1) * sizeof **paths);
			(*paths)[(*n)++] = strdup(arg);
			return;
		}
		while ((de = readdir(dir))) {
			char path[PATH_MAX], *p;
			if (pass == 0 ? !ends_with(de->d_name, ".trace")
				      : !ends_with(de->d_name, ".pickle") && !ends_with(de->d_name, ".pkl"))
				continue;
			if (mt_path_join(path, sizeof path, arg, "%s", de->d_name) >= (int)sizeof path)
				die(EXIT_USAGE, "a path in %s is too long", arg);
			if (!(p = strdup(path)) || !(*paths = realloc(*paths, (*n + 1) * sizeof **paths)))
				die(1, "out of memory");
			(*paths)[(*n)++] = p;
		}
		closedir(dir);
	}
	if (*n == first)
		die(EXIT_USAGE, "no .trace files or PyTorch snapshots (.pickle, .pkl) in %s", arg);
	qsort(*paths + first, *n - first, sizeof **paths, by_path);
}

/* The rank a file's name gives ("rank3_memory_snapshot.pickle", "rank-3/", "rank_3"): the
 * last "rank" followed by digits in the path, as torchtitan and others name a rank's
 * snapshot. False where none does. */
static bool rank_in_name(const char *path, char *out, size_t n)
{
	bool found = false;

	for (const char *p = path; (p = strstr(p, "rank")); p += 4) {
		const char *d = p + 4 + (p[4] == '_' || p[4] == '-');
		size_t k = strspn(d, "0123456789");
		if (k && k < 10 && (p == path || !isalpha((unsigned char)p[-1]))) { /* not "frank3" */
			snprintf(out, n, "%.*s", (int)k, d);
			found = true;
		}
	}
	return found;
}

/* Whether row `a` is a snapshot taken in the process that wrote row `b` (what oom_snapshot
 * and memtap_snapshot write beside the trace): the same host, pid, start and rank, and
 * fewer events, the trace so far; of two equal, the later name is the copy. */
static bool snapshot_of(const struct rank_row *a, const struct rank_row *b)
{
	if (a == b || !a->process[0] || strcmp(a->process, b->process) || strcmp(a->host, b->host))
		return false;
	return a->nevents < b->nevents || (a->nevents == b->nevents && strcmp(a->path, b->path) > 0);
}

/* Takes the snapshots out of the rows, saying of each whose trace it belongs to: a line
 * on stderr, or (notes not NULL) an entry of --json's "snapshots"; returns the rows left. */
static size_t drop_snapshots(struct rank_row *rows, size_t n, FILE *notes)
{
	size_t kept = 0, said = 0;

	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		while (j < n && !snapshot_of(&rows[i], &rows[j]))
			j++;
		if (j == n) {
			if (kept != i)
				rows[kept] = rows[i];
			kept++;
		} else if (notes) {
			fprintf(notes, "%s\n    {\"trace\": ", said++ ? "," : "");
			mt_json_str(notes, rows[i].path);
			fprintf(notes, ", \"snapshot_of\": ");
			mt_json_str(notes, rows[j].path);
			fprintf(notes, "}");
		} else {
			fprintf(stderr,
				"memtap: %s is a snapshot taken in the process that wrote %s, not a rank of its own\n",
				rows[i].path, rows[j].path);
		}
	}
	return kept;
}

/* The cause of a rank's first out-of-memory failure (-1 when none failed), and its device. */
static int first_cause(const struct mt_report *r, int *device)
{
	struct mt_diagnosis *g;
	size_t n;
	int cause = -1;

	if (mt_diagnose(r, &g, &n))
		die(1, "out of memory");
	for (size_t i = 0; i < n && cause < 0; i++)
		if (!g[i].peak)
			cause = (int)g[i].cause, *device = g[i].device;
	free(g);
	return cause;
}

/* What a rank held on the devices other than its own, and where loading made it. */
static void elsewhere(struct rank_row *w, const struct mt_report *r, const struct mt_trace *t)
{
	struct mt_walk *walk = mt_walk_start(t);
	const struct mt_event *e;

	if (!walk)
		die(1, "out of memory");
	for (int d = 0; d < MT_MAX_DEVICES; d++)
		if (d != w->device && r->end.dev[d].seen)
			w->elsewhere[d] = r->end.dev[d].peak;
	while ((e = mt_walk_one(walk))) {
		if (e->kind == MT_EV_ALLOC && e->device != w->device && e->device != MT_NO_DEVICE &&
		    !w->loaded[e->device] && mt_composition_loads(t, e->stack))
			w->loaded[e->device] = true;
	}
	mt_walk_end(walk);
}

/* The other ranks of failed rank i's host that held memory on the device it failed on:
 * each as a JSON entry, or in a line. */
static void others_there(const struct rank_row *rows, size_t n, size_t i, bool json)
{
	const struct rank_row *f = &rows[i];
	uint64_t sum = 0;
	size_t said = 0;
	bool loaded = false;
	char sz[32];

	for (size_t k = 0; k < n; k++) {
		const struct rank_row *w = &rows[k];
		if (k == i || strcmp(w->host, f->host) || !w->elsewhere[f->oom_device])
			continue;
		if (json) {
			printf("%s{\"rank\": ", said ? ", " : "");
			mt_json_str(stdout, w->rank);
			printf(", \"bytes\": %" PRIu64 ", \"loaded\": %s}", w->elsewhere[f->oom_device],
			       w->loaded[f->oom_device] ? "true" : "false");
		} else {
			printf("%s rank %s %s", said ? "," : "  other ranks held memory on its device too:", w->rank,
			       mt_format_size(w->elsewhere[f->oom_device], sz, sizeof sz));
		}
		said++, sum += w->elsewhere[f->oom_device], loaded |= w->loaded[f->oom_device];
	}
	if (!json && said)
		printf("; %s in all at their peaks (device %d as each process numbers it)%s\n",
		       mt_format_size(sum, sz, sizeof sz), f->oom_device,
		       loaded ? "; loading a checkpoint made some of it: torch.load puts each tensor on the device it "
				"was saved from, so every rank loaded a copy onto this one (load with "
				"map_location='cpu', or each rank's own device)"
			      : "");
}

static int report_ranks(char **paths, size_t n, bool json, const char *dir)
{
	struct mt_job job = {0};
	struct mt_job_rank *jr = calloc(n, sizeof *jr);
	int world = 0;
	struct rank_row *rows = calloc(n, sizeof *rows);
	uint64_t max = 0, min = UINT64_MAX, sum = 0;
	size_t imax = 0, noted_len = 0;
	int status = 0;
	char a[32], b[32], c[32], *noted = NULL;
	FILE *notes = NULL;

	for (size_t i = 0; i < n; i++) {
		struct mt_trace t;
		struct mt_report r;
		struct rank_row *w = &rows[i];

		bool damaged = load_trace(paths[i], &t);
		if (mt_report_build(&r, &t, &ropt))
			die(1, "out of memory while reading %s", paths[i]);
		snprintf(w->path, sizeof w->path, "%s", paths[i]);
		if (mt_trace_info(&t, "pid", a, sizeof a) && mt_trace_info(&t, "start_realtime_ns", b, sizeof b))
			snprintf(w->process, sizeof w->process, "%s %s %s", a, b,
				 mt_trace_info(&t, "rank", c, sizeof c) ? c : "-");
		if (!mt_trace_info(&t, "rank", w->rank, sizeof w->rank) &&
		    !rank_in_name(paths[i], w->rank, sizeof w->rank))
			w->rank[0] = '\0'; /* the order given, once snapshots are out */
		if (!mt_trace_info(&t, "world_size", w->world, sizeof w->world))
			w->world[0] = '\0';
		if (!mt_trace_info(&t, "host", w->host, sizeof w->host))
			snprintf(w->host, sizeof w->host, "?");
		w->nevents = t.nevents;
		w->device = -1;
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			if (r.end.dev[d].seen && (w->device < 0 || r.end.dev[d].peak > w->peak)) {
				w->device = d;
				w->peak = r.end.dev[d].peak;
			}
		if (w->device >= 0) {
			memcpy(w->composition, r.composition[w->device], sizeof w->composition);
			w->frag_known = r.frag.known && r.frag.dev[w->device].known;
			if (w->frag_known)
				w->frag = r.frag.dev[w->device].at_peak;
		}
		if (html_path && w->device >= 0 && over_time(w, &r, &t)) /* the page's charts only */
			die(1, "out of memory while reading %s", paths[i]);
		w->leaks = r.leaks.n;
		w->cause = first_cause(&r, &w->oom_device);
		elsewhere(w, &r, &t);
		w->dropped = t.dropped;
		w->complete = t.complete;
		if (walked_status(&t, damaged))
			status = EXIT_DAMAGED;
		mt_report_free(&r);
		mt_trace_free(&t);
	}
	progress_end();
	if (json && !(notes = open_memstream(&noted, &noted_len)))
		die(1, "out of memory");
	n = drop_snapshots(rows, n, notes);
	if (notes && fclose(notes))
		die(1, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (!rows[i].rank[0])
			snprintf(rows[i].rank, sizeof rows[i].rank, "%zu", i);
	qsort(rows, n, sizeof *rows, rows_by_rank);
	if (!jr)
		die(1, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct rank_row *w = &rows[i];
		jr[i] = (struct mt_job_rank){atoi(w->rank), w->path,	       w->host, w->device, w->peak,
					     w->line,	    w->start_realtime, w->span, w->ooms,   w->nooms};
		if (atoi(rows[i].world) > world)
			world = atoi(rows[i].world);
	}
	if (dir && mt_job_read(&job, dir, jr, n, world))
		die(1, "out of memory while reading %s", dir);
	if (html_path) {
		FILE *out = fopen(html_path, "w");
		int err = out ? mt_job_html(out, &job, jr, n, dir ? dir : "these traces") : errno;
		if (out && fclose(out) && !err)
			err = errno;
		if (err)
			status = 1, fprintf(stderr, "memtap: cannot write %s: %s\n", html_path, strerror(err));
		else
			fprintf(stderr, "memtap: wrote %s\n", html_path);
	}
	if (html_path && !json) {
		mt_job_free(&job);
		free(noted);
		free(jr);
		free(rows);
		return status;
	}
	for (size_t i = 0; i < n; i++) {
		sum += rows[i].peak;
		if (rows[i].peak > max) {
			max = rows[i].peak;
			imax = i;
		}
		if (rows[i].peak < min)
			min = rows[i].peak;
	}
	if (json) {
		printf("{\n  \"memtap_report\": 1,\n  \"ranks\": [");
		for (size_t i = 0; i < n; i++) {
			const struct rank_row *w = &rows[i];
			printf("%s\n    {\"rank\": ", i ? "," : "");
			mt_json_str(stdout, w->rank);
			printf(", \"trace\": ");
			mt_json_str(stdout, w->path);
			printf(", \"host\": ");
			mt_json_str(stdout, w->host);
			printf(", \"device\": %d, \"peak_allocated_bytes\": %" PRIu64 ", \"composition_at_peak\": {",
			       w->device, w->peak);
			for (int c = 1; c < MT_TAG_COUNT; c++)
				printf("%s\"%s\": %" PRIu64, c > 1 ? ", " : "", mt_tag_names[c], w->composition[c]);
			if (w->frag_known)
				printf("}, \"fragmentation_at_peak\": {\"reserved_bytes\": %" PRIu64
				       ", \"external_bytes\": %" PRIu64 ", \"largest_free_block_bytes\": %" PRIu64 "}",
				       w->frag.reserved, w->frag.reserved - w->frag.allocated, w->frag.largest_free);
			else
				printf("}, \"fragmentation_at_peak\": null");
			printf(", \"leaks\": %zu, \"dropped\": %" PRIu64 ", \"complete\": %s, \"oom_cause\": ",
			       w->leaks, w->dropped, w->complete ? "true" : "false");
			if (w->cause < 0) {
				printf("null}");
				continue;
			}
			mt_json_str(stdout, mt_cause_names[w->cause]);
			printf(", \"oom_device\": %d, \"others_on_oom_device\": [", w->oom_device);
			others_there(rows, n, i, true);
			printf("]}");
		}
		printf("],\n  \"imbalance\": {\"max_peak_bytes\": %" PRIu64 ", \"min_peak_bytes\": %" PRIu64
		       ", \"mean_peak_bytes\": %" PRIu64 ", \"spread\": %.4f, \"max_rank\": ",
		       max, min, sum / n, sum ? (double)(max - min) / ((double)sum / (double)n) : 0.0);
		mt_json_str(stdout, rows[imax].rank);
		printf("},\n  \"snapshots\": [%s%s]", noted, *noted ? "\n  " : "");
		if (dir) {
			printf(",\n  ");
			mt_job_json(stdout, &job);
		}
		printf("\n}\n");
	} else {
		printf("%-6s %-16s %-3s %12s", "rank", "host", "dev", "peak");
		for (int c = 1; c < MT_TAG_COUNT; c++)
			printf(" %12s", mt_tag_names[c]);
		printf(" %12s %5s  %s\n", "frag", "leaks", "trace");
		for (size_t i = 0; i < n; i++) {
			const struct rank_row *w = &rows[i];
			printf("%-6s %-16.16s %-3d %12s", w->rank, w->host, w->device,
			       mt_format_size(w->peak, a, sizeof a));
			for (int c = 1; c < MT_TAG_COUNT; c++)
				printf(" %12s", mt_format_size(w->composition[c], b, sizeof b));
			printf(" %12s %5zu  %s%s\n",
			       w->frag_known ? mt_format_size(w->frag.reserved - w->frag.allocated, b, sizeof b) : "-",
			       w->leaks, w->path, w->complete ? "" : " (cut short)");
		}
		if (n > 1)
			printf(
			    "imbalance: peaks from %s to %s (mean %s), spread %.1f%% of the mean; the largest is rank "
			    "%s\n",
			    mt_format_size(min, a, sizeof a), mt_format_size(max, b, sizeof b),
			    mt_format_size(sum / n, c, sizeof c),
			    sum ? 100.0 * (double)(max - min) / ((double)sum / (double)n) : 0.0, rows[imax].rank);
		for (size_t i = 0; i < n; i++)
			if (rows[i].cause >= 0) {
				printf("rank %s ran out of memory: %s (what to change: memtap report %s)\n",
				       rows[i].rank, mt_cause_words[rows[i].cause], rows[i].path);
				others_there(rows, n, i, false);
			}
		mt_job_text(stdout, &job);
	}
	mt_job_free(&job);
	free(noted);
	free(jr);
	free(rows);
	return status;
}

/* The GPUs of a rank's job, where --plan names none: the trace's world_size, said in a line. */
static void plan_world(const char *setup, const struct mt_trace *t, struct mt_plan_config *plan)
{
	char world[32];
	struct mt_plan_config c = *plan;
	long n;

	if (strstr(setup, "--gpus-per-node") || strstr(setup, "--nodes") || strstr(setup, "--deepspeed") ||
	    !mt_trace_info(t, "world_size", world, sizeof world) || (n = atol(world)) < 2 || n > 65536)
		return;
	c.nodes = 1, c.gpus_per_node = (uint64_t)n;
	if (mt_plan_check(&c))
		return; /* tp x pp that do not divide it: the plan as given */
	*plan = c;
	fprintf(stderr, "memtap: --plan: %ld GPUs, the trace's world_size (--gpus-per-node says otherwise)\n", n);
}

int cmd_report(int argc, char **argv)
{
	bool json = false;
	size_t top = 10;
	int i = parse_common(argc, argv, report_usage, &json, &top);
	struct mt_trace t;
	struct mt_report r;
	struct mt_symbols *sym;
	struct mt_plan_config plan;
	struct stat st;
	int status, unwritten = 0; /* the page's errno */

	if (argc - i > 1 || (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))) {
		char **paths = NULL;

		if (plan_setup || target || serve)
			die(EXIT_USAGE, "--plan, --gpu-mem and --serve take one trace");
		size_t n = 0;
		int status;
		for (int k = i; k < argc; k++)
			add_paths(argv[k], &paths, &n);
		status = report_ranks(paths, n, json, argc - i == 1 ? argv[i] : NULL);
		for (size_t k = 0; k < n; k++)
			free(paths[k]);
		free(paths);
		return status;
	}
	if (serve && (html_path || json))
		die(EXIT_USAGE, "--serve is the page itself: not with --html or --json");
	if (plan_setup)
		plan_setup_from_text(plan_setup, &plan);
	/* the text, the JSON, the page, --plan and --gpu-mem walk a long trace from its file;
	   --serve reads it whole */
	bool damaged = serve ? read_trace(argv[i], &t) : load_trace(argv[i], &t);
	if (plan_setup)
		plan_world(plan_setup, &t, &plan);
	if (mt_report_build(&r, &t, &ropt))
		die(1, "out of memory while reading %s", argv[i]);
	r.plan = plan_setup ? &plan : NULL;
	r.target = target;
	r.all_frames = all_frames;
	sym = mt_symbols_open(&t);
	if (serve)
		serve_report(&r, sym, top, (unsigned)port);
	if (html_path) {
		FILE *out = fopen(html_path, "w");
		unwritten = out ? mt_report_html(out, &r, sym, top) : errno;
		if (out && fclose(out) && !unwritten)
			unwritten = errno;
		progress_end();
		if (unwritten)
			fprintf(stderr, "memtap: cannot write %s: %s\n", html_path, strerror(unwritten));
		else if (!t.problem[0]) /* a damaged trace's one line already said what the page holds */
			fprintf(stderr, "memtap: wrote %s\n", html_path);
	}
	progress_end();
	if (json) /* with --html too: the page in its file, the JSON on stdout */
		mt_report_json(stdout, &r, sym, top);
	else if (!html_path)
		mt_report_text(stdout, &r, sym, top);
	mt_symbols_close(sym);
	status = walked_status(&t, damaged);
	status = unwritten ? 1 : status;
	mt_report_free(&r);
	mt_trace_free(&t);
	return status;
}

/* One event of memtap dump, as a line of text or of JSON. */
static void dump_event(const struct mt_trace *t, struct mt_symbols *sym, uint64_t start, const struct mt_event *e,
		       bool json)
{
	uint64_t at = e->time > start ? e->time - start : 0;
	if (!json) {
		printf("%12" PRIu64 " %3u %-14s %3d 0x%-14" PRIx64 " %12" PRIu64 " %" PRIx64 " %" PRIx64
		       " %u %s %s %d\n",
		       at, mt_trace_thread(t, e->thread), mt_kind_names[e->kind],
		       e->device == MT_NO_DEVICE ? -1 : e->device, e->addr, e->size, e->aux, e->aux2, e->stack,
		       mt_trace_string(t, e->phase), mt_tag_names[e->tag], e->error);
		return;
	}
	printf("{\"time_ns\": %" PRIu64 ", \"thread\": %u, \"kind\": \"%s\", \"device\": %d, \"addr\": %" PRIu64
	       ", \"size\": %" PRIu64 ", \"aux\": %" PRIu64 ", \"aux2\": %" PRIu64 ", \"stack\": %u, \"phase\": ",
	       at, mt_trace_thread(t, e->thread), mt_kind_names[e->kind], e->device == MT_NO_DEVICE ? -1 : e->device,
	       e->addr, e->size, e->aux, e->aux2, e->stack);
	mt_json_str(stdout, mt_trace_string(t, e->phase));
	printf(", \"tag\": \"%s\", \"flags\": %u, \"error\": %d, \"functions\": [", mt_tag_names[e->tag], e->flags,
	       e->error);
	for (uint32_t f = 0; e->stack < t->nstacks && f < t->stacks[e->stack].depth; f++) {
		const struct mt_frame *fr = mt_symbols_frame(sym, t->stacks[e->stack].frames[f]);
		if (f)
			fputs(", ", stdout);
		mt_json_str(stdout, fr->function ? fr->function : "?");
	}
	fputs("], \"modules\": [", stdout);
	for (uint32_t f = 0; e->stack < t->nstacks && f < t->stacks[e->stack].depth; f++) {
		const struct mt_frame *fr = mt_symbols_frame(sym, t->stacks[e->stack].frames[f]);
		if (f)
			fputs(", ", stdout);
		mt_json_str(stdout, fr->module ? fr->module : "?");
	}
	puts("]}");
}

int cmd_dump(int argc, char **argv)
{
	bool json = false;
	size_t top = 0;
	int i = parse_common(argc, argv, dump_usage, &json, &top);

	if (html_path || plan_setup || target || serve)
		die(EXIT_USAGE, "--html, --serve, --plan and --gpu-mem are for memtap report");

	if (argc - i != 1)
		die(EXIT_USAGE, "one trace at a time (see --help)");
	struct mt_trace t;
	struct mt_symbols *sym;
	struct mt_walk *walk;
	const struct mt_event *batch;
	size_t n;
	uint64_t start;
	bool damaged = load_trace(argv[i], &t);

	start = mt_trace_start(&t);
	sym = json ? mt_symbols_open(&t) : NULL;
	if (!(walk = mt_walk_start(&t)))
		die(1, "out of memory while reading %s", argv[i]);
	while ((n = mt_walk_next(walk, &batch)) != 0)
		for (size_t k = 0; k < n; k++)
			dump_event(&t, sym, start, &batch[k], json);
	mt_walk_end(walk);
	mt_symbols_close(sym);
	i = walked_status(&t, damaged);
	mt_trace_free(&t);
	return i;
}
