/* memtap's import of one input (a PyTorch snapshot, a trace, an RMM log) alone: the
 * reader, nothing after it. Prints one JSON line: seconds, the process's peak resident
 * memory, events, and the pickle reader's own peak of held values (0 for other inputs).
 *   bench/import_bench FILE */
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "reader/reader.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct mt_trace t;
	struct rusage ru;
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
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"seconds\": %.4f, \"max_rss_kib\": %ld, \"events\": %zu, \"stacks\": %zu}\n", now() - start,
	       ru.ru_maxrss, t.nevents, t.nstacks);
	mt_trace_free(&t);
	return 0;
}
