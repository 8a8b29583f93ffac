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

/* A copy whose chunks, as far as their headers hold together, carry their right CRC. */
static uint8_t *with_checksums(const uint8_t *data, size_t size)
{
	uint8_t *copy;
	size_t off = 16;

	if (size < 16 || memcmp(data, MT_FILE_MAGIC, 8) != 0 || !(copy = malloc(size)))
		return NULL;
	memcpy(copy, data, size);
	while (size - off >= sizeof(struct mt_chunk_header)) {
		struct mt_chunk_header h;
		memcpy(&h, copy + off, sizeof h);
		if (h.length > size - off - sizeof h)
			break;
		h.crc = mt_crc32(0, copy + off + sizeof h, h.length);
		memcpy(copy + off, &h, sizeof h);
		off += sizeof h + h.length;
	}
	return copy;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *fixed = with_checksums(data, size);

	analyse(data, size);
	if (fixed) {
		analyse(fixed, size);
		free(fixed);
	}
	return 0;
}
