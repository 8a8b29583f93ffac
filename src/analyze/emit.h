/* One document, several forms: the report says what it holds through these calls (objects,
 * arrays, keyed values) and a sink makes it into JSON text (here) or Lua tables
 * (src/script), so `memtap report --json` and a script's t:report() are one writer.
 * Keys are NULL inside arrays and for the outermost value. */
#ifndef MT_EMIT_H
#define MT_EMIT_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

enum mt_value_kind { MT_V_NULL, MT_V_BOOL, MT_V_INT, MT_V_UINT, MT_V_NUM, MT_V_STR };

struct mt_value {
	enum mt_value_kind kind;
	union {
		bool b;
		int64_t i;
		uint64_t u;
		const char *s; /* NULL: null */
		struct {
			double x;
			int decimals; /* as the JSON form writes it; a Lua sink reads the same digits */
		} num;
	};
};

struct mt_emit_sink {
	/* lines: items each on their own line, indented by two spaces times lines (0: on one line) */
	void (*open)(void *ctx, const char *key, bool array, int lines);
	void (*close)(void *ctx);
	void (*value)(void *ctx, const char *key, const struct mt_value *v);
};

struct mt_emit {
	const struct mt_emit_sink *sink;
	void *ctx;
};

static inline void mt_emit_open(struct mt_emit *e, const char *key, bool array, int lines)
{
	e->sink->open(e->ctx, key, array, lines);
}

static inline void mt_emit_close(struct mt_emit *e)
{
	e->sink->close(e->ctx);
}

void mt_emit_null(struct mt_emit *e, const char *key);
void mt_emit_bool(struct mt_emit *e, const char *key, bool b);
void mt_emit_int(struct mt_emit *e, const char *key, int64_t i);
void mt_emit_uint(struct mt_emit *e, const char *key, uint64_t u);
void mt_emit_num(struct mt_emit *e, const char *key, double x, int decimals);
void mt_emit_str(struct mt_emit *e, const char *key, const char *s); /* NULL: null */

/* The JSON sink, writing to out; containers nest at most MT_EMIT_DEPTH deep. */
#define MT_EMIT_DEPTH 16
struct mt_json_level {
	uint32_t count; /* members written */
	int lines;
	bool array;
};

struct mt_json_sink {
	FILE *out;
	int depth;
	struct mt_json_level level[MT_EMIT_DEPTH];
};

struct mt_emit mt_emit_json(struct mt_json_sink *j, FILE *out);
void mt_json_str(FILE *out, const char *s); /* a JSON string literal */

#endif
