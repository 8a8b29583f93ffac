/* Fuzz target for memtap's data-only pickle reader (reader/pickle.c) and the PyTorch
 * snapshot importer on top of it (reader/torch.c): any bytes give a value tree or one
 * line of error, in time linear in the input and memory a fixed multiple of it. Every
 * lookup the importer makes is made again here over whatever came back. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "analyze/report.h"
#include "reader/pickle.h"
#include "reader/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Walks a few levels the way a reader of the result would. */
static void walk(const struct pk_value *v, int depth)
{
	static const char *const keys[] = {"segments", "device_traces", "action", "addr",    "size",  "frames", "name",
					   "filename", "line",		"blocks", "history", "state", NULL};
	int64_t i;

	if (!v || depth > 4)
		return;
	pk_int(v, &i);
	(void)pk_str(v);
	for (int k = 0; keys[k]; k++)
		walk(pk_get(v, keys[k]), depth + 1);
	for (size_t k = 0; k < pk_len(v) && k < 8; k++)
		walk(pk_at(v, k), depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pk_arena arena = {0};
	struct pk_value *root = NULL;
	struct mt_trace t;
	struct mt_report r;
	char err[256];

	if (pk_parse(data, size, &arena, &root, err, sizeof err) == 0)
		walk(root, 0);
	else if (!err[0] || strchr(err, '\n'))
		__builtin_trap(); /* an error is one line, never none */
	pk_arena_free(&arena);
	memset(&t, 0, sizeof t);
	if (mt_trace_from_torch(data, size, &t) == 0 && mt_report_build(&r, &t, NULL) == 0)
		mt_report_free(&r);
	mt_trace_free(&t);
	return 0;
}
