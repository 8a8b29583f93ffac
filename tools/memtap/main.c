/* memtap: command-line entry. Subcommands live in their own files; bad input is one
 * line on stderr and exit status 2. A trace may also be a PyTorch memory snapshot. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: memtap COMMAND [ARGS]\n"
    "  run [options] -- COMMAND [ARGS]   record the GPU memory of COMMAND and its children\n"
    "  report TRACE... [--json]          the peak: what it was for and its stacks; growth per\n"
    "                                    iteration; live at exit; OOMs (several: one row per rank)\n"
    "  diff A B [--json]                 what changed between two traces, per category and stack\n"
    "  export --format=F TRACE           folded stacks, perfetto (Chrome JSON) or memviz (pickle)\n"
    "  dump TRACE [--json]               every recorded event, one per line\n"
    "  lua SCRIPT.lua TRACE... [-- ARGS] run a Lua script over traces (custom reports, CI checks)\n"
    "  plan MODEL SETUP [--gpu-mem SIZE] device memory per GPU of a training setup: ZeRO,\n"
    "                                    offload, recomputation, TP/PP/SP; will it fit\n"
    "  replay INPUT [--policy=P]         a trace's or snapshot's allocations through allocator\n"
    "                                    policies (native, memtap, memtap-vmm, bump), simulated\n"
    "  version                           print memtap's version\n"
    "`memtap COMMAND --help` describes a command.\n";

void die(int status, const char *fmt, ...)
{
	va_list ap;

	progress_end();
	fputs("memtap: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(argv[1], "report") == 0)
		return progress_start(), cmd_report(argc - 1, argv + 1);
	if (strcmp(argv[1], "diff") == 0)
		return progress_start(), cmd_diff(argc - 1, argv + 1);
	if (strcmp(argv[1], "export") == 0)
		return progress_start(), cmd_export(argc - 1, argv + 1);
	if (strcmp(argv[1], "lua") == 0)
		return cmd_lua(argc - 1, argv + 1);
	if (strcmp(argv[1], "plan") == 0)
		return cmd_plan(argc - 1, argv + 1);
	if (strcmp(argv[1], "replay") == 0)
		return cmd_replay(argc - 1, argv + 1);
	if (strcmp(argv[1], "dump") == 0)
		return cmd_dump(argc - 1, argv + 1);
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("memtap %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	die(EXIT_USAGE, "unknown command '%s' (see memtap --help)", argv[1]);
}
