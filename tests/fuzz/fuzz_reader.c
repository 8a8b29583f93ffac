/* Fuzz target for the trace reader: any bytes must parse to a trace (maybe empty,
 * maybe with a problem noted) or a clean error, never a crash or a leak; and the
 * analyses must take whatever the reader returns. Built for libFuzzer by `make fuzz`
 * and run over seeds and mutations by `make check` (tests/fuzz/standalone.c). */
#include <stddef.h>
#include <stdint.h>

#include "analyze/report.h"
#include "format/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mt_trace t;
	struct mt_report r;

	if (mt_trace_parse(data, size, "fuzz", &t) == 0 && mt_report_build(&r, &t, NULL) == 0) {
		FILE *null = fopen("/dev/null", "w");
		if (null) {
			mt_report_json(null, &r, NULL, 5);
			fclose(null);
		}
		mt_report_free(&r);
	}
	mt_trace_free(&t);
	return 0;
}
