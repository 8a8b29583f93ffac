/* Reads hjson (src/plan/hjson.c) from a file and prints its value as JSON, or
 * "error LINE:COL: TEXT": tests/analyze/test_plan_upstream.py compares that with what
 * hjson-py reads from the same text (tests/analyze/upstream/hjson.json). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/hjson.h"

int main(int argc, char **argv)
{
	struct hjson_error err;
	static char text[1 << 20];
	size_t len;
	FILE *f = argc == 2 ? fopen(argv[1], "rb") : NULL;
	json_t *v;
	char *out;

	if (!f) {
		fprintf(stderr, "usage: hjson_dump FILE\n");
		return 2;
	}
	len = fread(text, 1, sizeof text, f);
	fclose(f);
	if (!(v = hjson_load(text, len, 1, &err))) {
		printf("error %d:%d: %s\n", err.line, err.column, err.text);
		return 1;
	}
	out = json_dumps(v, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(17));
	printf("%s\n", out);
	free(out);
	json_decref(v);
	return 0;
}
