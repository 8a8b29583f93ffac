/* memtap export: a trace in another tool's format, on standard output or into a file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze/export.h"
#include "cli.h"

const char export_usage[] =
    "usage: memtap export --format=FORMAT [--what peak|exit|leaks] [-o, --output FILE] TRACE\n"
    "  --format folded     folded stacks for flamegraph.pl and speedscope: the bytes each stack\n"
    "                      holds live at the peak (--what peak, the default), at exit (exit),\n"
    "                      or grows by per iteration (leaks); root first, frames as the report\n"
    "                      reads them (function (file:line), the plumbing left out)\n"
    "  --format perfetto   Chrome trace-event JSON for ui.perfetto.dev and chrome://tracing: a\n"
    "                      counter track per device split by category, OOMs, NVTX ranges\n"
    "  --format memviz     a pickle in PyTorch's snapshot layout for pytorch.org/memory_viz\n"
    "                      (each entry carries its category in the profiler's words, some\n"
    "                      'unknown' as the viewer needs; a snapshot's allocator_settings,\n"
    "                      external_annotations and private pools kept; binary: refused on a\n"
    "                      terminal, use -o FILE or redirect)\n";

const char *const export_formats[] = {"folded", "perfetto", "memviz", NULL};
const char *const export_whats[] = {"peak", "exit", "leaks", NULL}; /* in enum mt_folded_what's order */

int cmd_export(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"format", 1, 0, 'f'}, {"what", 1, 0, 'w'}, {"output", 1, 0, 'o'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const char *format = NULL, *output = NULL;
	enum mt_folded_what what = MT_FOLDED_PEAK;
	struct mt_trace t;
	struct mt_report r;
	struct mt_symbols *sym;
	FILE *out = stdout;
	int c, status;
	bool damaged;

	while ((c = next_option(argc, argv, "o:h", longopts, "export")) != -1) {
		switch (c) {
		case 'f':
			format = export_formats[choose("export", "--format", optarg, export_formats)];
			break;
		case 'o':
			output = optarg;
			break;
		case 'w':
			what = (enum mt_folded_what)choose("export", "--what", optarg, export_whats);
			break;
		case 'h':
			fputs(export_usage, stdout);
			return 0;
		}
	}
	if (!format)
		choose("export", "--format", NULL, export_formats);
	if (argc - optind != 1)
		die(EXIT_USAGE, "memtap export takes one trace (see --help)");
	if (!strcmp(format, "memviz") && !output && isatty(STDOUT_FILENO))
		die(EXIT_USAGE,
		    "--format memviz is a binary pickle, not for a terminal: use -o FILE or redirect the output");
	damaged = load_trace(argv[optind], &t);
	if (mt_report_build(&r, &t, NULL))
		die(1, "out of memory while reading %s", argv[optind]);
	if (output && !(out = fopen(output, "w")))
		die(EXIT_USAGE, "cannot write %s", output);
	sym = mt_symbols_open(&t);
	progress_end();
	if (!strcmp(format, "folded")	? mt_export_folded(out, &r, sym, what)
	    : !strcmp(format, "memviz") ? mt_export_memviz(out, &r, sym)
					: mt_export_perfetto(out, &r))
		die(1, "cannot write the export");
	mt_symbols_close(sym);
	if (out != stdout && fclose(out) != 0)
		die(1, "cannot write %s", output);
	status = walked_status(&t, damaged);
	mt_report_free(&r);
	mt_trace_free(&t);
	return status;
}
