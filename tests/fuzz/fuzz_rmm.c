/* Fuzz target for the RAPIDS RMM log reader (reader/rmm.c): any text after the log's
 * header gives a trace or one line naming the bad row, never a float-to-integer or
 * signed overflow (UBSan watches) or a crash. Inputs without the header get it, so
 * most mutations exercise the rows. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "reader/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char header[] = "Thread,Time,Action,Pointer,Size,Stream\n";
	uint8_t *log = malloc(sizeof header + size);
	struct mt_trace t;
	struct mt_report r;

	size_t skip = mt_is_rmm_log(data, size) ? 0 : sizeof header - 1;

	if (!log)
		return 0;
	memcpy(log, header, skip);
	memcpy(log + skip, data, size);
	memset(&t, 0, sizeof t);
	if (mt_trace_from_rmm(log, skip + size, &t) == 0) {
		if (mt_report_build(&r, &t, NULL) == 0)
			mt_report_free(&r);
	} else if (!t.problem[0] || strchr(t.problem, '\n')) {
		__builtin_trap(); /* a refusal is one line, never none */
	}
	mt_trace_free(&t);
	free(log);
	return 0;
}
