/* The emitter's values and its JSON sink. The sink's layout is the report's: members of
 * a container with lines each on a line of their own, an object with lines closing on
 * its own line, everything else on one line with ", " and ": ". */
#include "analyze/emit.h"

#include "core/assert.h"
#include "core/text.h"

static void emit(struct mt_emit *e, const char *key, struct mt_value v)
{
	e->sink->value(e->ctx, key, &v);
}

void mt_emit_null(struct mt_emit *e, const char *key)
{
	emit(e, key, (struct mt_value){.kind = MT_V_NULL});
}

void mt_emit_bool(struct mt_emit *e, const char *key, bool b)
{
	emit(e, key, (struct mt_value){.kind = MT_V_BOOL, .b = b});
}

void mt_emit_int(struct mt_emit *e, const char *key, int64_t i)
{
	emit(e, key, (struct mt_value){.kind = MT_V_INT, .i = i});
}

void mt_emit_uint(struct mt_emit *e, const char *key, uint64_t u)
{
	emit(e, key, (struct mt_value){.kind = MT_V_UINT, .u = u});
}

void mt_emit_num(struct mt_emit *e, const char *key, double x, int decimals)
{
	emit(e, key, (struct mt_value){.kind = MT_V_NUM, .num = {x, decimals}});
}

void mt_emit_str(struct mt_emit *e, const char *key, const char *s)
{
	emit(e, key, (struct mt_value){.kind = MT_V_STR, .s = s});
}

/* ---- JSON ---- */

void mt_json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		size_t n;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else if (c < 0x80)
			fputc(c, out);
		else if ((n = mt_utf8_char(s)))
			fwrite(s, 1, n, out), s += n - 1;
		else /* JSON is UTF-8: a byte of none (a name cut mid-character, a file's own) as U+FFFD */
			fputs("\\ufffd", out);
	}
	fputc('"', out);
}

static void indent(FILE *out, int lines)
{
	fputc('\n', out);
	for (int i = 0; i < lines; i++)
		fputs("  ", out);
}

/* What goes before a member: the separator, its line, its key. */
static void member(struct mt_json_sink *j, const char *key)
{
	if (j->depth > 0) {
		struct mt_json_level *l = &j->level[j->depth - 1];
		if (l->count++)
			fputc(',', j->out);
		if (l->lines)
			indent(j->out, l->lines);
		else if (l->count > 1)
			fputc(' ', j->out);
	}
	if (key) {
		mt_json_str(j->out, key);
		fputs(": ", j->out);
	}
}

static void json_open(void *ctx, const char *key, bool array, int lines)
{
	struct mt_json_sink *j = ctx;

	mt_assert(j->depth < MT_EMIT_DEPTH);
	member(j, key);
	fputc(array ? '[' : '{', j->out);
	j->level[j->depth].count = 0;
	j->level[j->depth].lines = lines;
	j->level[j->depth].array = array;
	j->depth++;
}

static void json_close(void *ctx)
{
	struct mt_json_sink *j = ctx;
	struct mt_json_level *l = &j->level[--j->depth];

	if (l->lines && !l->array)
		indent(j->out, l->lines - 1);
	fputc(l->array ? ']' : '}', j->out);
	if (!j->depth)
		fputc('\n', j->out);
}

static void json_value(void *ctx, const char *key, const struct mt_value *v)
{
	struct mt_json_sink *j = ctx;

	member(j, key);
	switch (v->kind) {
	case MT_V_NULL:
		fputs("null", j->out);
		break;
	case MT_V_BOOL:
		fputs(v->b ? "true" : "false", j->out);
		break;
	case MT_V_INT:
		fprintf(j->out, "%" PRId64, v->i);
		break;
	case MT_V_UINT:
		fprintf(j->out, "%" PRIu64, v->u);
		break;
	case MT_V_NUM:
		fprintf(j->out, "%.*f", v->num.decimals, v->num.x);
		break;
	case MT_V_STR:
		if (v->s)
			mt_json_str(j->out, v->s);
		else
			fputs("null", j->out);
		break;
	}
}

struct mt_emit mt_emit_json(struct mt_json_sink *j, FILE *out)
{
	static const struct mt_emit_sink sink = {json_open, json_close, json_value};

	*j = (struct mt_json_sink){.out = out};
	return (struct mt_emit){&sink, j};
}
