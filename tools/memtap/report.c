/* memtap report and memtap dump: read a trace (all of what survived, if it was cut
 * short), then print. A damaged trace still reports; the exit status says it was. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "memtap.h"

static const char report_usage[] =
	"usage: memtap report TRACE [--json] [--top N] [--iteration NAME] [--leak-iterations K]\n"
	"Per device: the peak of allocated device memory and when it happened, the stacks live at\n"
	"the peak; what was live at exit, grouped by stack; out-of-memory events with their stacks.\n"
	"  --json    the stable JSON form (docs/REPORT.md)\n"
	"  --top N   stacks shown per list (default 10)\n"
	"  --iteration NAME        iteration boundaries: memtap_mark NAME or NVTX range NAME (default:\n"
	"                          every memtap_mark, else the range repeating at the top of a thread)\n"
	"  --leak-iterations K     a leak grows at K boundaries in a row (default 3)\n"
	"Exit status: 0, or 3 when the trace was cut short or damaged (what it held is reported).\n";

static const char dump_usage[] =
	"usage: memtap dump TRACE [--json]\n"
	"Every event in time order: time (ns since start), thread, kind, device, address, size,\n"
	"aux, aux2, stack, phase, tag, error. --json writes one JSON object per line, with the\n"
	"function names of the event's stack.\n";

/* Reads the trace or exits; a damaged trace is said once on stderr. */
static void load(const char *path, struct mt_trace *t)
{
	int r = mt_trace_read(path, t);

	if (r)
		die(EXIT_USAGE, "%s", t->problem);
	if (t->problem[0])
		fprintf(stderr, "memtap: %s: %s; reporting the %zu events before it\n", path, t->problem, t->nevents);
}

static struct mt_report_options ropt;

static int parse_common(int argc, char **argv, const char *usage, bool *json, size_t *top)
{
	static const struct option longopts[] = {{"json", 0, 0, 'j'}, {"top", 1, 0, 't'}, {"help", 0, 0, 'h'},
						 {"iteration", 1, 0, 'i'}, {"leak-iterations", 1, 0, 'k'}, {0, 0, 0, 0}};
	int c;
	char *end;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': *json = true; break;
		case 't':
			*top = strtoul(optarg, &end, 10);
			if (end == optarg || *end || *top == 0)
				die(EXIT_USAGE, "--top needs a positive number, not '%s'", optarg);
			break;
		case 'i': ropt.iteration = optarg; break;
		case 'k':
			ropt.leak_iterations = (unsigned)strtoul(optarg, &end, 10);
			if (end == optarg || *end || ropt.leak_iterations == 0 || ropt.leak_iterations > 1000)
				die(EXIT_USAGE, "--leak-iterations needs a number from 1 to 1000, not '%s'", optarg);
			break;
		case 'h': fputs(usage, stdout); exit(0);
		default: fputs(usage, stderr); exit(EXIT_USAGE);
		}
	}
	if (optind + 1 != argc)
		die(EXIT_USAGE, "%s", optind >= argc ? "which trace? (see --help)" : "one trace at a time (see --help)");
	return optind;
}

int cmd_report(int argc, char **argv)
{
	bool json = false;
	size_t top = 10;
	int i = parse_common(argc, argv, report_usage, &json, &top);
	struct mt_trace t;
	struct mt_report r;
	struct mt_symbols *sym;

	load(argv[i], &t);
	if (mt_report_build(&r, &t, &ropt))
		die(1, "out of memory while reading %s", argv[i]);
	sym = mt_symbols_open(&t);
	if (json)
		mt_report_json(stdout, &r, sym, top);
	else
		mt_report_text(stdout, &r, sym, top);
	mt_symbols_close(sym);
	mt_report_free(&r);
	i = t.problem[0] ? EXIT_DAMAGED : 0;
	mt_trace_free(&t);
	return i;
}

int cmd_dump(int argc, char **argv)
{
	bool json = false;
	size_t top = 0;
	int i = parse_common(argc, argv, dump_usage, &json, &top);
	struct mt_trace t;
	struct mt_symbols *sym;
	uint64_t start;

	load(argv[i], &t);
	start = mt_trace_start(&t);
	sym = json ? mt_symbols_open(&t) : NULL;
	for (size_t k = 0; k < t.nevents; k++) {
		const struct mt_event *e = &t.events[k];
		uint64_t at = e->time > start ? e->time - start : 0;
		if (!json) {
			printf("%12" PRIu64 " %3u %-14s %3d 0x%-14" PRIx64 " %12" PRIu64 " %" PRIx64 " %" PRIx64
			       " %u %s %s %d\n",
			       at, e->thread, mt_kind_names[e->kind], e->device == MT_NO_DEVICE ? -1 : e->device, e->addr,
			       e->size, e->aux, e->aux2, e->stack, mt_trace_string(&t, e->phase), mt_tag_names[e->tag],
			       e->error);
			continue;
		}
		printf("{\"time_ns\": %" PRIu64 ", \"thread\": %u, \"kind\": \"%s\", \"device\": %d, \"addr\": %" PRIu64
		       ", \"size\": %" PRIu64 ", \"aux\": %" PRIu64 ", \"aux2\": %" PRIu64 ", \"stack\": %u, \"phase\": ",
		       at, e->thread, mt_kind_names[e->kind], e->device == MT_NO_DEVICE ? -1 : e->device, e->addr, e->size,
		       e->aux, e->aux2, e->stack);
		mt_json_str(stdout, mt_trace_string(&t, e->phase));
		printf(", \"tag\": \"%s\", \"flags\": %u, \"error\": %d, \"functions\": [", mt_tag_names[e->tag],
		       e->flags, e->error);
		for (uint32_t f = 0; e->stack < t.nstacks && f < t.stacks[e->stack].depth; f++) {
			const struct mt_frame *fr = mt_symbols_frame(sym, t.stacks[e->stack].frames[f]);
			if (f)
				fputs(", ", stdout);
			mt_json_str(stdout, fr->function ? fr->function : "?");
		}
		puts("]}");
	}
	mt_symbols_close(sym);
	i = t.problem[0] ? EXIT_DAMAGED : 0;
	mt_trace_free(&t);
	return i;
}
