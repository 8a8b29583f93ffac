/* Fuzz target for the trace reader and the analyses behind memtap report, export and
 * replay: any bytes must read to a trace (maybe empty, maybe with a problem noted) or a
 * clean error, never a crash, a leak or unbounded work. A memtap trace is read twice: as
 * it is, and with every chunk's checksum made right, so that mutations reach the decoder
 * and the analyses instead of stopping at the CRC (a hostile file has valid checksums).
 * Each is also opened from a file (mt_trace_open), and its walk must give the events the
 * reading in memory gave, in the same order, with the same problem; the text and JSON
 * report are made from it too, walking the file.
 * Built for libFuzzer by `make fuzz`; run over seeds and mutations by `make check`
 * (tests/fuzz/standalone.c). */
#define _GNU_SOURCE /* memfd_create */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "analyze/simulate.h"
#include "analyze/export.h"
#include "analyze/report.h"
#include "../same_event.h"
#include "checksums.h"
#include "reader/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bytes opened as a file and walked give what t, read from them in memory, holds. */
static void opened_as_parsed(const uint8_t *data, size_t size, const struct mt_trace *t, FILE *null)
{
	struct mt_report r;
	int fd = memfd_create("fuzz", 0);
	char path[64];
	struct mt_trace o;
	struct mt_walk *w;
	const struct mt_event *batch;
	size_t at = 0, n;

	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	if (mt_trace_open(path, &o) != 0 || o.nevents != t->nevents || o.nthreads != t->nthreads ||
	    strcmp(o.problem, t->problem) || !(w = mt_walk_start(&o)))
		abort();
	while ((n = mt_walk_next(w, &batch)) != 0)
		for (size_t i = 0; i < n; i++, at++)
			if (at >= t->nevents || !same_event(&batch[i], &t->events[at]))
				abort();
	if (at != t->nevents)
		abort();
	mt_walk_end(w);
	if (mt_report_build(&r, &o, NULL) == 0) {
		mt_report_text(null, &r, NULL, 5);
		mt_report_json(null, &r, NULL, 5);
		mt_report_free(&r);
	}
	mt_trace_free(&o);
	close(fd);
}

static void analyse(const uint8_t *data, size_t size)
{
	static FILE *null;
	struct mt_trace t;
	struct mt_report r;
	struct mt_sim_input in;
	struct mt_cache_config cfg;
	struct mt_sim_result sim;

	if (!null && !(null = fopen("/dev/null", "w")))
		abort();
	bool read = mt_trace_parse(data, size, "fuzz", &t) == 0;

	if (read && size >= 8 && memcmp(data, MT_FILE_MAGIC, 8) == 0)
		opened_as_parsed(data, size, &t, null);
	if (read && mt_report_build(&r, &t, NULL) == 0) {
		mt_report_text(null, &r, NULL, 5);
		mt_report_json(null, &r, NULL, 5);
		mt_report_html(null, &r, NULL, 5);
		mt_export_folded(null, &r, NULL, MT_FOLDED_PEAK);
		mt_export_folded(null, &r, NULL, MT_FOLDED_LEAKS);
		mt_export_perfetto(null, &r);
		mt_export_memviz(null, &r, NULL);
		if (mt_sim_input(&t, 0, NULL, &in) == 0) {
			if (mt_cache_preset(&cfg, "native") == 0)
				mt_sim_run(&in, &cfg, 1ull << 30, false, &sim);
			mt_sim_input_free(&in);
		}
		mt_report_free(&r);
	}
	mt_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	as_is_and_checksummed(data, size, analyse);
	return 0;
}
