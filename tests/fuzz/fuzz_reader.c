/* Fuzz target for the trace reader and the analyses behind memtap report, export and
 * replay: any bytes must read to a trace (maybe empty, maybe with a problem noted) or a
 * clean error, never a crash, a leak or unbounded work. A memtap trace is read twice: as
 * it is, and with every chunk's checksum made right, so that mutations reach the decoder
 * and the analyses instead of stopping at the CRC (a hostile file has valid checksums).
 * Built for libFuzzer by `make fuzz`; run over seeds and mutations by `make check`
 * (tests/fuzz/standalone.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/simulate.h"
#include "analyze/export.h"
#include "analyze/report.h"
#include "checksums.h"
#include "reader/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
	if (mt_trace_parse(data, size, "fuzz", &t) == 0 && mt_report_build(&r, &t, NULL) == 0) {
		mt_report_text(null, &r, NULL, 5);
		mt_report_json(null, &r, NULL, 5);
		mt_report_html(null, &r, NULL, 5);
		mt_export_folded(null, &r, NULL, MT_FOLDED_PEAK);
		mt_export_folded(null, &r, NULL, MT_FOLDED_LEAKS);
		mt_export_perfetto(null, &r);
		mt_export_memviz(null, &r, NULL);
		if (mt_sim_input(&t, 0, &in) == 0) {
			if (mt_cache_preset(&cfg, "native") == 0)
				mt_sim_run(&in, &cfg, 1ull << 30, &sim);
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
