/* The hjson DeepSpeed reads its configs with (hjson-py's decoder, as DeepSpeedConfig
 * calls it): JSON plus comments (#, //, / * * /), optional and trailing commas, quoteless
 * keys and strings, '''multi-line''' strings, a root object without braces. Read into
 * jansson values, or refused with the line and column hjson-py would name. */
#ifndef MT_PLAN_HJSON_H
#define MT_PLAN_HJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct hjson_error {
	int line, column; /* 1-based; 0 when the error has no place (the file's encoding) */
	char text[256];
};

/* The value of text (len bytes, UTF-8, newlines as Python's text mode reads them), or
 * NULL and err. Duplicate keys are refused as DeepSpeed's object_pairs_hook refuses
 * them when no_duplicates is set; integers past 64 bits become reals. */
json_t *hjson_load(const char *text, size_t len, bool no_duplicates, struct hjson_error *err);

#endif
