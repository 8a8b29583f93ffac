/* memtap's import of one input (a PyTorch snapshot, a trace, an RMM log) alone: the
 * reader, nothing after it. Prints one JSON line: seconds, this program's own peak
 * resident memory (VmHWM: getrusage's also counts the process it was forked from, before
 * the exec), events, stacks and the pickle reader's own peak of held values (0 for other
 * inputs).
 *   bench/import_bench FILE */
#include <stdio.h>
#include <time.h>

#include "reader/reader.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The peak resident memory of this program since its exec, in KiB (0: unknown). */
static long peak_kib(void)
{
	char line[256];
	long kib = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

int main(int argc, char **argv)
{
	struct mt_trace t;
	double start;
	int r;

	if (argc != 2) {
		fputs("usage: bench/import_bench FILE\n", stderr);
		return 2;
	}
	start = now();
	r = mt_trace_read(argv[1], &t);
	if (r) {
		fprintf(stderr, "import_bench: %s\n", t.problem);
		return 1;
	}
	printf("{\"seconds\": %.4f, \"max_rss_kib\": %ld, \"events\": %zu, \"stacks\": %zu, \"held_peak\": %zu}\n",
	       now() - start, peak_kib(), t.nevents, t.nstacks, t.held_peak);
	mt_trace_free(&t);
	return 0;
}
