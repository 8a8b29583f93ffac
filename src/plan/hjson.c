/* hjson as hjson-py 3.1 decodes it (hjson.h), step for step: the same lookahead for
 * comments, the same rule that a quoteless value is a number or keyword only when it
 * ends where one would (else a string to the end of the line), the same messages. The
 * text is first checked as UTF-8 and its newlines made '\n', as Python's open() does;
 * nesting stops at 490 levels, where Python's recursion limit stops hjson-py. */
#include "plan/hjson.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 490

struct reader {
	const char *s;
	size_t n;
	int depth;
	bool no_duplicates;
	struct hjson_error *err;
	bool failed;
};

static int at(const struct reader *r, size_t i)
{
	return i < r->n ? (unsigned char)r->s[i] : -1;
}

static json_t *fail(struct reader *r, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Records the first error, at pos: line and column in characters, as hjson-py counts */
static json_t *fail(struct reader *r, size_t pos, const char *fmt, ...)
{
	va_list ap;
	int line = 1, col = 1;

	if (r->failed)
		return NULL;
	r->failed = true;
	for (size_t i = 0; i < pos && i < r->n; i++) {
		if (r->s[i] == '\n')
			line++, col = 1;
		else if (((unsigned char)r->s[i] & 0xc0) != 0x80)
			col++;
	}
	r->err->line = line;
	r->err->column = col;
	va_start(ap, fmt);
	vsnprintf(r->err->text, sizeof r->err->text, fmt, ap);
	va_end(ap);
	return NULL;
}

static bool is_ws(int c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t eol(const struct reader *r, size_t i)
{
	while (at(r, i) >= 0 && at(r, i) != '\n' && at(r, i) != '\r')
		i++;
	return i;
}

/* Skips whitespace and comments: the next significant character's position */
static size_t next(struct reader *r, size_t i)
{
	for (;;) {
		while (is_ws(at(r, i)))
			i++;
		int c = at(r, i), c2 = at(r, i + 1);
		if (c == '#' || (c == '/' && c2 == '/')) {
			i = eol(r, i);
		} else if (c == '/' && c2 == '*') {
			size_t open = i;
			i += 2;
			while (at(r, i) >= 0 && !(at(r, i) == '*' && at(r, i + 1) == '/'))
				i++;
			if (at(r, i) < 0) { /* hjson-py runs off the end (IndexError) */
				fail(r, open, "a /* comment is never closed");
				return r->n;
			}
			i += 2;
		} else {
			return i;
		}
	}
}

static json_t *value(struct reader *r, size_t *i);

/* Appends code point u as UTF-8 */
static void put_utf8(char *out, size_t *k, unsigned u)
{
	if (u >= 0xd800 && u <= 0xdfff) /* an unpaired surrogate: Python keeps it, UTF-8 cannot */
		u = 0xfffd;
	if (u < 0x80) {
		out[(*k)++] = (char)u;
	} else if (u < 0x800) {
		out[(*k)++] = (char)(0xc0 | u >> 6);
		out[(*k)++] = (char)(0x80 | (u & 0x3f));
	} else if (u < 0x10000) {
		out[(*k)++] = (char)(0xe0 | u >> 12);
		out[(*k)++] = (char)(0x80 | (u >> 6 & 0x3f));
		out[(*k)++] = (char)(0x80 | (u & 0x3f));
	} else {
		out[(*k)++] = (char)(0xf0 | u >> 18);
		out[(*k)++] = (char)(0x80 | (u >> 12 & 0x3f));
		out[(*k)++] = (char)(0x80 | (u >> 6 & 0x3f));
		out[(*k)++] = (char)(0x80 | (u & 0x3f));
	}
}

static int hex4(const struct reader *r, size_t i)
{
	int v = 0;

	for (int j = 0; j < 4; j++) {
		int c = at(r, i + (size_t)j), d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* A quoted string; *i is just past the opening quote. The result is malloc'd (with its
 * length: NUL may be in it). */
static char *quoted(struct reader *r, size_t *i, size_t *len)
{
	size_t begin = *i - 1, k = 0;
	int quote = at(r, begin);
	char *out = malloc(r->n - *i + 1);

	if (!out) {
		fail(r, begin, "out of memory");
		return NULL;
	}
	for (;;) {
		int c = at(r, *i);
		if (c < 0) {
			fail(r, begin, "Unterminated string starting at");
			break;
		}
		(*i)++;
		if (c == quote) {
			*len = k;
			out[k] = '\0';
			return out;
		}
		if (c < 0x20) {
			fail(r, *i, "Invalid control character 0x%02x in a string", c);
			break;
		}
		if (c != '\\') {
			out[k++] = (char)c;
			continue;
		}
		int e = at(r, *i);
		const char *from = "\"'\\/bfnrt", *to = "\"'\\/\b\f\n\r\t", *p;
		if (e < 0) {
			fail(r, begin, "Unterminated string starting at");
			break;
		}
		if (e != 'u') {
			if (!(p = strchr(from, e)) || !e) {
				fail(r, *i, "Invalid \\X escape sequence '%c'", e >= 0x20 && e < 0x7f ? e : '?');
				break;
			}
			out[k++] = to[p - from];
			(*i)++;
			continue;
		}
		int u = hex4(r, *i + 1);
		if (u < 0) {
			fail(r, *i - 1, "Invalid \\uXXXX escape sequence");
			break;
		}
		*i += 5;
		if ((u & 0xfc00) == 0xd800 && at(r, *i) == '\\' && at(r, *i + 1) == 'u') {
			int lo = hex4(r, *i + 2);
			if (lo >= 0 && (lo & 0xfc00) == 0xdc00) {
				u = 0x10000 + (((u - 0xd800) << 10) | (lo - 0xdc00));
				*i += 6;
			}
		}
		put_utf8(out, &k, (unsigned)u);
	}
	free(out);
	return NULL;
}

/* A '''multi-line''' string, its common indentation removed */
static json_t *multiline(struct reader *r, size_t *i)
{
	size_t indent = 0, k = 0, triple = 0;
	char *out = malloc(r->n + 1);
	json_t *v;

	if (!out)
		return fail(r, *i, "out of memory");
	while (indent < *i && r->s[*i - indent - 1] != '\n')
		indent++;
	*i += 3;
	while (at(r, *i) == ' ' || at(r, *i) == '\t' || at(r, *i) == '\r')
		(*i)++;
	if (at(r, *i) == '\n') {
		(*i)++;
		for (size_t n = indent; n > 0 && (at(r, *i) == ' ' || at(r, *i) == '\t' || at(r, *i) == '\r'); n--)
			(*i)++;
	}
	for (;;) {
		int c = at(r, *i);
		if (c < 0) {
			free(out);
			return fail(r, *i, "Bad multiline string");
		}
		if (c == '\'') {
			triple++;
			(*i)++;
			if (triple == 3) {
				if (k && out[k - 1] == '\n')
					k--;
				v = json_stringn(out, k);
				free(out);
				return v ? v : fail(r, *i, "a multi-line string that is not UTF-8");
			}
			continue;
		}
		for (; triple > 0; triple--)
			out[k++] = '\'';
		if (c == '\n') {
			out[k++] = '\n';
			(*i)++;
			for (size_t n = indent; n > 0 && (at(r, *i) == ' ' || at(r, *i) == '\t' || at(r, *i) == '\r');
			     n--)
				(*i)++;
		} else {
			if (c != '\r')
				out[k++] = (char)c;
			(*i)++;
		}
	}
}

/* A number as hjson-py's NUMBER_RE takes it: [\t ]*-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?[\t ]*
 * from begin, ending exactly at end; NULL when it is not one (then a string) */
static json_t *number(struct reader *r, size_t begin, size_t end, bool *is_number)
{
	size_t i = begin, digits;
	bool fraction = false, exponent = false;
	char buf[512];

	*is_number = false;
	while (at(r, i) == ' ' || at(r, i) == '\t')
		i++;
	size_t start = i;
	if (at(r, i) == '-')
		i++;
	if (at(r, i) == '0')
		i++;
	else if (at(r, i) >= '1' && at(r, i) <= '9')
		while (at(r, i) >= '0' && at(r, i) <= '9')
			i++;
	else
		return NULL;
	if (at(r, i) == '.' && at(r, i + 1) >= '0' && at(r, i + 1) <= '9') {
		fraction = true;
		for (i++; at(r, i) >= '0' && at(r, i) <= '9';)
			i++;
	}
	if (at(r, i) == 'e' || at(r, i) == 'E') {
		size_t j = i + 1;
		if (at(r, j) == '+' || at(r, j) == '-')
			j++;
		if (at(r, j) >= '0' && at(r, j) <= '9') {
			exponent = true;
			for (i = j; at(r, i) >= '0' && at(r, i) <= '9';)
				i++;
		}
	}
	digits = i - start;
	while (at(r, i) == ' ' || at(r, i) == '\t')
		i++;
	if (i != end)
		return NULL;
	*is_number = true;
	if (digits >= sizeof buf)
		return fail(r, start, "a number of more than %zu characters", sizeof buf - 1);
	memcpy(buf, r->s + start, digits);
	buf[digits] = '\0';
	errno = 0;
	if (!fraction && !exponent) {
		long long v = strtoll(buf, NULL, 10);
		if (errno != ERANGE)
			return json_integer(v);
		return json_real(strtod(buf, NULL)); /* Python's ints have no bound */
	}
	double v = strtod(buf, NULL);
	if (isinf(v)) /* hjson-py: int(inf) raises OverflowError */
		return fail(r, start, "a number too large for a float (%s)", buf);
	if (v == floor(v) && fabs(v) < 1e10)
		return json_integer((long long)v);
	return json_real(v);
}

/* Trailing whitespace, as Python's str.strip() sees it at the end of a quoteless string */
static size_t rstrip(const struct reader *r, size_t begin, size_t end)
{
	while (end > begin) {
		int c = at(r, end - 1);
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
		    (c >= 0x1c && c <= 0x1f))
			end--;
		else
			break;
	}
	return end;
}

static bool word(const struct reader *r, size_t begin, size_t end, const char *w)
{
	size_t n = strlen(w);

	return end - begin == n && !memcmp(r->s + begin, w, n);
}

/* A quoteless value: a number, true, false, null, or a string to the end of the line */
static json_t *quoteless(struct reader *r, size_t *i)
{
	size_t begin = next(r, *i), end = begin;
	int first = at(r, begin);

	if (r->failed)
		return NULL;
	if (first < 0)
		return fail(r, begin, "Expecting value");
	if (strchr("{}[],:", first))
		return fail(r, begin,
			    "Found a punctuator character when expecting a quoteless string (check your syntax)");
	for (;; end++) {
		int c = at(r, end), c2 = at(r, end + 1);
		bool is_eol = c < 0 || c == '\n' || c == '\r';
		if (!(is_eol || c == ',' || c == '}' || c == ']' || c == '#' || (c == '/' && (c2 == '/' || c2 == '*'))))
			continue;
		size_t stop = rstrip(r, begin, end);
		bool is_number;
		json_t *v;
		if (first == 'n' && word(r, begin, stop, "null"))
			v = json_null();
		else if (first == 't' && word(r, begin, stop, "true"))
			v = json_true();
		else if (first == 'f' && word(r, begin, stop, "false"))
			v = json_false();
		else if ((first == '-' || (first >= '0' && first <= '9')) &&
			 (v = number(r, begin, end, &is_number), is_number))
			;
		else if (is_eol)
			v = json_stringn(r->s + begin, stop - begin);
		else
			continue;
		*i = end;
		return v || r->failed ? v : fail(r, begin, "a string that is not UTF-8");
	}
}

/* A key: quoted, or quoteless up to ':' without whitespace inside */
static char *key(struct reader *r, size_t *i, size_t *len)
{
	size_t begin = next(r, *i), end, space = (size_t)-1;
	int c = at(r, begin);
	char *k;

	if (r->failed)
		return NULL;
	if (c == '"' || c == '\'') {
		*i = begin + 1;
		return quoted(r, i, len);
	}
	for (end = begin;; end++) {
		c = at(r, end);
		if (c < 0) {
			fail(r, end,
			     "Bad key name (eof) (a quoteless value runs to the end of its line, '}' and ',' "
			     "included)");
			return NULL;
		}
		if (c == ':') {
			if (begin == end) {
				fail(r, begin, "Found ':' but no key name (for an empty key name use quotes)");
				return NULL;
			}
			if (space != (size_t)-1 && space != end - 1) {
				fail(r, space, "Found whitespace in your key name (use quotes to include)");
				return NULL;
			}
			*len = rstrip(r, begin, end) - begin;
			if (!(k = malloc(*len + 1))) {
				fail(r, begin, "out of memory");
				return NULL;
			}
			memcpy(k, r->s + begin, *len);
			k[*len] = '\0';
			*i = end;
			return k;
		}
		if (is_ws(c)) {
			if (space == (size_t)-1 || space == end - 1)
				space = end;
		} else if (strchr("{}[],", c)) {
			fail(
			    r, begin,
			    "Found '%c' where a key name was expected (check your syntax or use quotes if the key name "
			    "includes {}[],: or whitespace)",
			    c);
			return NULL;
		}
	}
}

/* Adds key=v to obj; DeepSpeed's hook refuses a key given twice */
static bool put(struct reader *r, json_t *obj, const char *k, size_t len, json_t *v, size_t pos)
{
	if (r->no_duplicates && json_object_getn(obj, k, len)) {
		char shown[128];
		snprintf(shown, sizeof shown, "%.*s", (int)(len < 100 ? len : 100), k);
		for (char *p = shown; *p; p++)
			if ((unsigned char)*p < 0x20)
				*p = '?';
		json_decref(v);
		fail(r, pos, "Duplicate keys in DeepSpeed config: ['%s']", shown);
		return false;
	}
	if (json_object_setn_new(obj, k, len, v)) {
		fail(r, pos, "a key that is not UTF-8");
		return false;
	}
	return true;
}

/* An object; *i is past '{', or at the first key of a root without braces */
static json_t *object(struct reader *r, size_t *i, bool braces)
{
	json_t *obj = json_object();

	if (!obj)
		return fail(r, *i, "out of memory");
	*i = next(r, *i);
	if (braces && at(r, *i) == '}') {
		(*i)++;
		return obj;
	}
	while (!r->failed) {
		size_t len, kpos = next(r, *i);
		char *k = key(r, i, &len);
		json_t *v;
		if (!k)
			break;
		*i = next(r, *i);
		if (at(r, *i) != ':') {
			free(k);
			fail(r, *i, "Expecting ':' delimiter");
			break;
		}
		*i = next(r, *i + 1);
		v = value(r, i);
		if (!v || !put(r, obj, k, len, v, kpos)) {
			free(k);
			break;
		}
		free(k);
		*i = next(r, *i);
		if (at(r, *i) == ',')
			*i = next(r, *i + 1);
		if (!braces && at(r, *i) < 0)
			return obj;
		if (braces && at(r, *i) == '}') {
			(*i)++;
			return obj;
		}
		*i = next(r, *i);
	}
	json_decref(obj);
	return NULL;
}

static json_t *array(struct reader *r, size_t *i)
{
	json_t *arr = json_array(), *v;

	if (!arr)
		return fail(r, *i, "out of memory");
	*i = next(r, *i);
	if (at(r, *i) == ']') {
		(*i)++;
		return arr;
	}
	if (at(r, *i) < 0) {
		json_decref(arr);
		return fail(r, *i, "End of input while parsing an array (did you forget a closing ']'?)");
	}
	while (!r->failed) {
		if (!(v = value(r, i)) || json_array_append_new(arr, v))
			break;
		*i = next(r, *i);
		if (at(r, *i) == ',')
			*i = next(r, *i + 1);
		if (at(r, *i) == ']') {
			(*i)++;
			return arr;
		}
		*i = next(r, *i);
	}
	json_decref(arr);
	return NULL;
}

static json_t *value(struct reader *r, size_t *i)
{
	int c = at(r, *i);
	json_t *v;

	if (r->failed)
		return NULL;
	if (c < 0)
		return fail(r, *i, "Expecting value");
	if (c == '"' || c == '\'') {
		if (c == '\'' && at(r, *i + 1) == '\'' && at(r, *i + 2) == '\'')
			return multiline(r, i);
		size_t len;
		char *s;
		(*i)++;
		if (!(s = quoted(r, i, &len)))
			return NULL;
		v = json_stringn(s, len);
		free(s);
		return v ? v : fail(r, *i, "a string that is not UTF-8");
	}
	if (c == '{' || c == '[') {
		if (++r->depth > MAX_DEPTH)
			return fail(r, *i,
				    "nested deeper than %d levels (Python's recursion limit stops DeepSpeed's hjson "
				    "reader near 500)",
				    MAX_DEPTH);
		(*i)++;
		v = c == '{' ? object(r, i, true) : array(r, i);
		r->depth--;
		return v;
	}
	return quoteless(r, i);
}

/* Where UTF-8 goes wrong in s, or n */
static size_t bad_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t len = c < 0x80		  ? 1
			     : (c & 0xe0) == 0xc0 ? 2
			     : (c & 0xf0) == 0xe0 ? 3
			     : (c & 0xf8) == 0xf0 ? 4
						  : 0;
		unsigned u;
		if (!len || i + len > n)
			return i;
		u = len == 1 ? c : c & (0x7f >> len);
		for (size_t j = 1; j < len; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return i;
			u = u << 6 | (s[i + j] & 0x3f);
		}
		if ((len == 2 && u < 0x80) || (len == 3 && u < 0x800) || (len == 4 && (u < 0x10000 || u > 0x10ffff)) ||
		    (u >= 0xd800 && u <= 0xdfff))
			return i;
		i += len;
	}
	return n;
}

json_t *hjson_load(const char *text, size_t len, bool no_duplicates, struct hjson_error *err)
{
	struct reader r = {.no_duplicates = no_duplicates, .err = err};
	size_t bad = bad_utf8((const unsigned char *)text, len), i = 0, k = 0;
	char *s;
	json_t *v;

	memset(err, 0, sizeof *err);
	if (bad < len) {
		snprintf(err->text, sizeof err->text, "'utf-8' codec can't decode byte 0x%02x in position %zu",
			 (unsigned char)text[bad], bad);
		return NULL;
	}
	/* Python's text mode: \r\n and \r read as \n */
	if (!(s = malloc(len + 1))) {
		snprintf(err->text, sizeof err->text, "out of memory");
		return NULL;
	}
	for (size_t j = 0; j < len; j++) {
		if (text[j] == '\r') {
			s[k++] = '\n';
			if (j + 1 < len && text[j + 1] == '\n')
				j++;
		} else {
			s[k++] = text[j];
		}
	}
	r.s = s;
	r.n = k;
	if (k >= 3 && !memcmp(s, "\xef\xbb\xbf", 3)) /* a byte-order mark */
		i = 3;
	size_t start = i;
	i = next(&r, i);
	if (r.failed) {
		free(s);
		return NULL;
	}
	if (at(&r, i) < 0 && start == 0) { /* empty, or comments only: an empty object */
		free(s);
		return json_object();
	}
	if (at(&r, i) == '{' || at(&r, i) == '[') {
		v = value(&r, &i);
	} else {
		/* a root object without braces, else a single value */
		size_t j = i;
		struct hjson_error first;
		v = object(&r, &j, false);
		if (!v) {
			first = *err;
			r.failed = false;
			j = i;
			v = value(&r, &j);
			if (!v) {
				*err = first;
				r.failed = true;
			}
		}
		i = j;
	}
	if (v) {
		i = next(&r, i);
		if (!r.failed && i != r.n) {
			json_decref(v);
			v = fail(&r, i, "Extra data");
		} else if (r.failed) {
			json_decref(v);
			v = NULL;
		}
	}
	free(s);
	return v;
}
