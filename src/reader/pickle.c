/* The data-only pickle interpreter: a value stack with marks, a memo, and a fixed set
 * of opcodes. Every length is checked against the input and no text argument is read
 * past its line; the stack is capped. The memo is a hash map, so an index costs memory
 * only when used; big dicts are sorted once at STOP, so a dict shared by many values is
 * not scanned again for each. */
#include "reader/pickle.h"
#include "core/map.h"
#include "reader/progress.h"
#include "core/text.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STACK (1u << 24)
#define MAX_MEMO UINT32_MAX /* LONG_BINPUT's largest; text PUT may say more */
#define MAX_TEXT 64	    /* digits of a protocol 0 number */
#define SORTED_FROM 16	    /* pairs from which a dict is sorted for lookups */

struct block {
	struct block *next;
	size_t size;
	max_align_t data[];
};

static void *alloc(struct pk_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (!a->blocks || a->used + n > a->cap) {
		size_t cap = n > (1u << 20) ? n : (1u << 20);
		struct block *b = malloc(sizeof *b + cap);
		if (!b)
			return NULL;
		b->next = a->blocks;
		b->size = cap;
		a->blocks = b;
		a->used = 0;
		a->cap = cap;
	}
	void *p = (char *)((struct block *)a->blocks)->data + a->used;
	a->used += n;
	return p;
}

void pk_arena_free(struct pk_arena *a)
{
	struct block *b = a->blocks;

	while (b) {
		struct block *next = b->next;
		free(b);
		b = next;
	}
	memset(a, 0, sizeof *a);
}

struct vm {
	const uint8_t *p, *end, *start;
	struct pk_arena *a;
	struct pk_value **stack;
	size_t n, cap;
	size_t *marks;
	size_t nmarks, capmarks;
	struct mt_map memo;	 /* index -> struct pk_value * */
	size_t memo_len;	 /* entries stored, as len(memo) in Python */
	struct pk_value **dicts; /* every dict made, sorted at STOP when big */
	size_t ndicts, capdicts;
	char *err;
	size_t errlen;
};

static int fail(struct vm *m, int code, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(m->err, m->errlen, "not a plain-data pickle at byte %zu: ", (size_t)(m->p - m->start));

	va_start(ap, fmt);
	if (k >= 0 && (size_t)k < m->errlen)
		vsnprintf(m->err + k, m->errlen - (size_t)k, fmt, ap);
	va_end(ap);
	return code;
}

static struct pk_value *value(struct vm *m, uint8_t type)
{
	struct pk_value *v = alloc(m->a, sizeof *v);

	if (v) {
		memset(v, 0, sizeof *v);
		v->type = type;
	}
	if (v && type == PK_DICT) {
		if (m->ndicts == m->capdicts) {
			size_t cap = m->capdicts ? 2 * m->capdicts : 64;
			struct pk_value **d = realloc(m->dicts, cap * sizeof *d);
			if (!d)
				return NULL;
			m->dicts = d;
			m->capdicts = cap;
		}
		m->dicts[m->ndicts++] = v;
	}
	return v;
}

static uint64_t hash(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
}

static int push(struct vm *m, struct pk_value *v)
{
	if (!v)
		return ENOMEM;
	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 256;
		struct pk_value **s;
		if (cap > MAX_STACK)
			return fail(m, EINVAL, "the value stack grows past %u entries", MAX_STACK);
		s = realloc(m->stack, cap * sizeof *s);
		if (!s)
			return ENOMEM;
		m->stack = s;
		m->cap = cap;
	}
	m->stack[m->n++] = v;
	return 0;
}

static int need(struct vm *m, size_t n)
{
	return (size_t)(m->end - m->p) >= n ? 0 : fail(m, EINVAL, "cut short");
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int seq_add(struct vm *m, struct pk_value *seq, struct pk_value *v)
{
	if (seq->seq.n == seq->seq.cap) {
		size_t cap = seq->seq.cap ? 2 * seq->seq.cap : 8;
		struct pk_value **items = alloc(m->a, cap * sizeof *items);
		if (!items)
			return ENOMEM;
		if (seq->seq.n)
			memcpy(items, seq->seq.items, seq->seq.n * sizeof *items);
		seq->seq.items = items;
		seq->seq.cap = cap;
	}
	seq->seq.items[seq->seq.n++] = v;
	return 0;
}

static size_t pop_mark(struct vm *m)
{
	return m->nmarks ? m->marks[--m->nmarks] : SIZE_MAX;
}

/* Items from the last mark to the top go into seq (a dict takes them in pairs). */
static int fill_from_mark(struct vm *m, struct pk_value *seq, size_t from)
{
	if (from == SIZE_MAX || from > m->n)
		return fail(m, EINVAL, "no mark to collect items from");
	if (seq->type == PK_DICT && (m->n - from) % 2)
		return fail(m, EINVAL, "an odd number of items for a dict");
	for (size_t i = from; i < m->n; i++) {
		int r = seq_add(m, seq, m->stack[i]);
		if (r)
			return r;
	}
	m->n = from;
	return 0;
}

/* A memo index can be any number: the map costs memory per entry stored, never per index. */
static int memo_put(struct vm *m, uint64_t index)
{
	if (!m->n)
		return fail(m, EINVAL, "memo store with an empty stack");
	if (index > MAX_MEMO)
		return fail(m, EINVAL, "memo index %" PRIu64 " too large", index);
	if (!mt_map_get(&m->memo, index, NULL))
		m->memo_len++;
	return mt_map_put(&m->memo, index, (uint64_t)(uintptr_t)m->stack[m->n - 1]);
}

static int memo_get(struct vm *m, uint64_t index)
{
	uint64_t v;

	if (!mt_map_get(&m->memo, index, &v))
		return fail(m, EINVAL, "memo entry %" PRIu64 " was never stored", index);
	return push(m, (struct pk_value *)(uintptr_t)v);
}

/* A protocol 0 number: the line's own bytes only (strtoll would read on past the newline
 * at the end of the input), all of them digits, in range. */
static int text_number(struct vm *m, const char *s, size_t len, bool is_float, int64_t *i, double *f)
{
	char buf[MAX_TEXT + 1], *end;

	if (len == 0 || len > MAX_TEXT)
		return fail(m, EINVAL, "a text number of %zu characters", len);
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (!is_float && buf[len - 1] == 'L') /* LONG's suffix */
		buf[--len] = '\0';
	errno = 0;
	if (is_float)
		*f = strtod(buf, &end);
	else
		*i = strtoll(buf, &end, 10);
	if (end == buf || *end || (!is_float && errno == ERANGE))
		return fail(m, EINVAL, "'%s' is not a%s number of 64 bits", mt_text_line(buf),
			    is_float ? " floating-point" : " whole");
	return 0;
}

static int text_index(struct vm *m, const char *s, size_t len, uint64_t *out)
{
	int64_t i = 0;
	int r = text_number(m, s, len, false, &i, NULL);

	if (!r && i < 0)
		r = fail(m, EINVAL, "memo index %" PRId64 " is negative", i);
	*out = (uint64_t)i;
	return r;
}

static int text_line(struct vm *m, const char **s, size_t *len)
{
	const uint8_t *nl = memchr(m->p, '\n', (size_t)(m->end - m->p));

	if (!nl)
		return fail(m, EINVAL, "cut short in a text argument");
	*s = (const char *)m->p;
	*len = (size_t)(nl - m->p);
	m->p = nl + 1;
	return 0;
}

static int string(struct vm *m, uint8_t type, size_t len)
{
	struct pk_value *v;
	char *s;

	if (need(m, len))
		return EINVAL;
	v = value(m, type);
	s = alloc(m->a, len + 1);
	if (!v || !s)
		return ENOMEM;
	memcpy(s, m->p, len);
	s[len] = '\0';
	v->str.s = s;
	v->str.len = len;
	v->str.hash = hash(s, len);
	m->p += len;
	return push(m, v);
}

static int integer(struct vm *m, int64_t i)
{
	struct pk_value *v = value(m, PK_INT);

	if (v)
		v->i = i;
	return push(m, v);
}

static int tuple_of(struct vm *m, size_t k)
{
	struct pk_value *t = value(m, PK_TUPLE);

	if (!t)
		return ENOMEM;
	if (m->n < k)
		return fail(m, EINVAL, "a tuple of %zu from a stack of %zu", k, m->n);
	return fill_from_mark(m, t, m->n - k) ? EINVAL : push(m, t);
}

static const char *refused(uint8_t op)
{
	switch (op) {
	case 'c':
		return "GLOBAL (imports a name)";
	case 0x93:
		return "STACK_GLOBAL (imports a name)";
	case 'R':
		return "REDUCE (calls a function)";
	case 'b':
		return "BUILD (sets object state)";
	case 'i':
		return "INST (makes an object)";
	case 'o':
		return "OBJ (makes an object)";
	case 0x81:
		return "NEWOBJ (makes an object)";
	case 0x92:
		return "NEWOBJ_EX (makes an object)";
	case 'P':
	case 'Q':
		return "a persistent id";
	case 0x82:
	case 0x83:
	case 0x84:
		return "an extension code (imports a name)";
	default:
		return NULL;
	}
}

static int step(struct vm *m, uint8_t op)
{
	const char *s = NULL;
	size_t len = 0;
	struct pk_value *v;
	int r;

	switch (op) {
	case 0x80: /* PROTO */
		if (need(m, 1))
			return EINVAL;
		if (*m->p > 5)
			return fail(m, EINVAL, "protocol %u is newer than 5", *m->p);
		m->p++;
		return 0;
	case 0x95: /* FRAME */
		if (need(m, 8))
			return EINVAL;
		m->p += 8;
		return 0;
	case '(': /* MARK */
		if (m->nmarks == m->capmarks) {
			size_t cap = m->capmarks ? 2 * m->capmarks : 64;
			size_t *k;
			if (cap > MAX_STACK)
				return fail(m, EINVAL, "more than %u marks", MAX_STACK);
			if (!(k = realloc(m->marks, cap * sizeof *k)))
				return ENOMEM;
			m->marks = k;
			m->capmarks = cap;
		}
		m->marks[m->nmarks++] = m->n;
		return 0;
	case '}':
		return push(m, value(m, PK_DICT));
	case ']':
		return push(m, value(m, PK_LIST));
	case ')':
		return push(m, value(m, PK_TUPLE));
	case 'd':
	case 'l':
	case 't':
		v = value(m, op == 'd' ? PK_DICT : op == 'l' ? PK_LIST : PK_TUPLE);
		if (!v)
			return ENOMEM;
		return (r = fill_from_mark(m, v, pop_mark(m))) ? r : push(m, v);
	case 0x85:
		return tuple_of(m, 1);
	case 0x86:
		return tuple_of(m, 2);
	case 0x87:
		return tuple_of(m, 3);
	case 'a': /* APPEND */
		if (m->n < 2 || m->stack[m->n - 2]->type != PK_LIST)
			return fail(m, EINVAL, "APPEND to something not a list");
		m->n--;
		return seq_add(m, m->stack[m->n - 1], m->stack[m->n]);
	case 'e':
	case 'u': { /* APPENDS, SETITEMS */
		size_t from = pop_mark(m);
		if (from == SIZE_MAX || from == 0 || from > m->n)
			return fail(m, EINVAL, "%s without a mark", op == 'e' ? "APPENDS" : "SETITEMS");
		v = m->stack[from - 1];
		if (v->type != (op == 'e' ? PK_LIST : PK_DICT))
			return fail(m, EINVAL, "%s to the wrong kind of value", op == 'e' ? "APPENDS" : "SETITEMS");
		return fill_from_mark(m, v, from);
	}
	case 's': /* SETITEM */
		if (m->n < 3 || m->stack[m->n - 3]->type != PK_DICT)
			return fail(m, EINVAL, "SETITEM to something not a dict");
		if ((r = seq_add(m, m->stack[m->n - 3], m->stack[m->n - 2])) ||
		    (r = seq_add(m, m->stack[m->n - 3], m->stack[m->n - 1])))
			return r;
		m->n -= 2;
		return 0;
	case 'J':
		if (need(m, 4))
			return EINVAL;
		m->p += 4;
		return integer(m, (int32_t)le(m->p - 4, 4));
	case 'K':
		if (need(m, 1))
			return EINVAL;
		return integer(m, *m->p++);
	case 'M':
		if (need(m, 2))
			return EINVAL;
		m->p += 2;
		return integer(m, (int64_t)le(m->p - 2, 2));
	case 0x8a:
	case 0x8b: { /* LONG1, LONG4 */
		size_t n;
		int shift;
		uint64_t u;
		if (need(m, op == 0x8a ? 1 : 4))
			return EINVAL;
		n = op == 0x8a ? *m->p : (size_t)le(m->p, 4);
		m->p += op == 0x8a ? 1 : 4;
		if (n > 8)
			return fail(m, EINVAL, "an integer of %zu bytes (at most 8 are read)", n);
		if (need(m, n))
			return EINVAL;
		u = le(m->p, (int)n);
		shift = 64 - 8 * (int)n;
		m->p += n;
		return integer(m, n ? (int64_t)(u << shift) >> shift : 0);
	}
	case 'I':
	case 'L': /* INT, LONG (text) */
		if ((r = text_line(m, &s, &len)))
			return r;
		if (op == 'I' && len == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1')) {
			v = value(m, PK_BOOL);
			if (v)
				v->b = s[1] == '1';
			return push(m, v);
		}
		{
			int64_t i;
			if ((r = text_number(m, s, len, false, &i, NULL)))
				return r;
			return integer(m, i);
		}
	case 0x88:
	case 0x89:
		v = value(m, PK_BOOL);
		if (v)
			v->b = op == 0x88;
		return push(m, v);
	case 'N':
		return push(m, value(m, PK_NONE));
	case 'G': { /* BINFLOAT, big-endian */
		uint64_t u = 0;
		double d;
		if (need(m, 8))
			return EINVAL;
		for (int i = 0; i < 8; i++)
			u = u << 8 | m->p[i];
		m->p += 8;
		memcpy(&d, &u, sizeof d);
		v = value(m, PK_FLOAT);
		if (v)
			v->f = d;
		return push(m, v);
	}
	case 'F': /* FLOAT (text) */
		if ((r = text_line(m, &s, &len)))
			return r;
		{
			double d;
			if ((r = text_number(m, s, len, true, NULL, &d)))
				return r;
			v = value(m, PK_FLOAT);
			if (v)
				v->f = d;
			return push(m, v);
		}
	case 0x8c:
	case 'U':
	case 'C': /* SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES */
		if (need(m, 1))
			return EINVAL;
		len = *m->p++;
		return string(m, op == 'C' ? PK_BYTES : PK_STR, len);
	case 'X':
	case 'T':
	case 'B': /* BINUNICODE, BINSTRING, BINBYTES */
		if (need(m, 4))
			return EINVAL;
		len = (size_t)le(m->p, 4);
		m->p += 4;
		return string(m, op == 'B' ? PK_BYTES : PK_STR, len);
	case 0x8d:
	case 0x8e: /* BINUNICODE8, BINBYTES8 */
		if (need(m, 8))
			return EINVAL;
		len = (size_t)le(m->p, 8);
		m->p += 8;
		if (len > (size_t)(m->end - m->p))
			return fail(m, EINVAL, "cut short");
		return string(m, op == 0x8e ? PK_BYTES : PK_STR, len);
	case 'V':
	case 'S': { /* UNICODE, STRING (protocol 0 text; escapes are kept as written) */
		struct pk_value *str;
		char *copy;
		if ((r = text_line(m, &s, &len)))
			return r;
		if (op == 'S' && len >= 2 && (s[0] == '\'' || s[0] == '"') && s[len - 1] == s[0]) {
			s++;
			len -= 2;
		}
		str = value(m, PK_STR);
		copy = alloc(m->a, len + 1);
		if (!str || !copy)
			return ENOMEM;
		memcpy(copy, s, len);
		copy[len] = '\0';
		str->str.s = copy;
		str->str.len = len;
		str->str.hash = hash(copy, len);
		return push(m, str);
	}
	case 'p': { /* PUT (text) */
		uint64_t index;
		if ((r = text_line(m, &s, &len)) || (r = text_index(m, s, len, &index)))
			return r;
		return memo_put(m, index);
	}
	case 'q':
		if (need(m, 1))
			return EINVAL;
		return memo_put(m, *m->p++);
	case 'r':
		if (need(m, 4))
			return EINVAL;
		m->p += 4;
		return memo_put(m, (size_t)le(m->p - 4, 4));
	case 0x94:
		return memo_put(m, m->memo_len);
	case 'g': {
		uint64_t index;
		if ((r = text_line(m, &s, &len)) || (r = text_index(m, s, len, &index)))
			return r;
		return memo_get(m, index);
	}
	case 'h':
		if (need(m, 1))
			return EINVAL;
		return memo_get(m, *m->p++);
	case 'j':
		if (need(m, 4))
			return EINVAL;
		m->p += 4;
		return memo_get(m, (size_t)le(m->p - 4, 4));
	case '0':
		if (!m->n)
			return fail(m, EINVAL, "POP from an empty stack");
		m->n--;
		return 0;
	case '1': {
		size_t from = pop_mark(m);
		if (from == SIZE_MAX || from > m->n)
			return fail(m, EINVAL, "POP_MARK without a mark");
		m->n = from;
		return 0;
	}
	case '2':
		if (!m->n)
			return fail(m, EINVAL, "DUP of an empty stack");
		return push(m, m->stack[m->n - 1]);
	default:
		if (refused(op))
			return fail(m, EPERM, "opcode %s: memtap reads plain data and never runs code", refused(op));
		return fail(m, EINVAL, "unknown opcode 0x%02x", op);
	}
}

/* Dict keys in order: strings by their bytes, then every other key (lookups are by string). */
struct pair {
	struct pk_value *key, *val;
	size_t at; /* position in the file's order: the last of equal keys wins */
};

static int key_cmp(const struct pk_value *a, const char *s, size_t len)
{
	int c;

	if (a->type != PK_STR)
		return 1;
	c = memcmp(a->str.s, s, a->str.len < len ? a->str.len : len);
	return c ? c : a->str.len < len ? -1 : a->str.len > len;
}

static int by_key(const void *x, const void *y)
{
	const struct pair *a = x, *b = y;
	int c;

	if (b->key->type != PK_STR)
		c = a->key->type == PK_STR ? -1 : 0;
	else
		c = key_cmp(a->key, b->key->str.s, b->key->str.len);
	return c ? c : a->at < b->at ? -1 : a->at > b->at;
}

/* O(n log n) once, so each lookup in a dict shared by many values is O(log n). */
static int sort_dict(struct pk_value *d)
{
	size_t n = d->seq.n / 2, k = 0;
	struct pair *p = malloc(n * sizeof *p);

	if (!p)
		return ENOMEM;
	for (size_t i = 0; i < n; i++)
		p[i] = (struct pair){d->seq.items[2 * i], d->seq.items[2 * i + 1], i};
	qsort(p, n, sizeof *p, by_key);
	for (size_t i = 0; i < n; i++) {
		bool same_as_next = i + 1 < n && p[i].key->type == PK_STR &&
				    key_cmp(p[i + 1].key, p[i].key->str.s, p[i].key->str.len) == 0;
		if (same_as_next)
			continue; /* a later value for the same key replaces it */
		d->seq.items[2 * k] = p[i].key;
		d->seq.items[2 * k + 1] = p[i].val;
		k++;
	}
	d->seq.n = 2 * k;
	d->sorted = true;
	free(p);
	return 0;
}

int pk_parse(const uint8_t *data, size_t size, struct pk_arena *arena, struct pk_value **out, char *err, size_t errlen)
{
	struct vm m = {.p = data, .end = data + size, .start = data, .a = arena, .err = err, .errlen = errlen};
	int r = 0;

	err[0] = '\0';
	for (size_t steps = 0; !r; steps++) {
		uint8_t op;
		if ((steps & 0xffff) == 0 && mt_progress_hook)
			mt_progress_hook("reading", (uint64_t)(m.p - data), size);
		if (m.p >= m.end) {
			r = fail(&m, EINVAL, "cut short (no STOP)");
			break;
		}
		op = *m.p++;
		if (op == '.') { /* STOP */
			if (m.n != 1)
				r = fail(&m, EINVAL, "%zu values left at STOP", m.n);
			for (size_t i = 0; i < m.ndicts && !r; i++)
				if (m.dicts[i]->seq.n / 2 >= SORTED_FROM)
					r = sort_dict(m.dicts[i]);
			if (!r)
				*out = m.stack[0];
			else if (r == ENOMEM)
				snprintf(err, errlen, "out of memory reading the pickle");
			break;
		}
		r = step(&m, op);
		if (r == ENOMEM)
			snprintf(err, errlen, "out of memory reading the pickle");
	}
	free(m.stack);
	free(m.marks);
	free(m.dicts);
	mt_map_free(&m.memo);
	return r;
}

const struct pk_value *pk_get(const struct pk_value *d, const char *key)
{
	size_t len = strlen(key), lo = 0, hi;

	if (!d || d->type != PK_DICT)
		return NULL;
	if (!d->sorted) { /* a few pairs: the last of equal keys is the one Python keeps */
		for (size_t i = d->seq.n / 2; i-- > 0;)
			if (key_cmp(d->seq.items[2 * i], key, len) == 0)
				return d->seq.items[2 * i + 1];
		return NULL;
	}
	for (hi = d->seq.n / 2; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;
		int c = key_cmp(d->seq.items[2 * mid], key, len);
		if (c == 0)
			return d->seq.items[2 * mid + 1];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

bool pk_int(const struct pk_value *v, int64_t *out)
{
	if (!v)
		return false;
	if (v->type == PK_INT)
		*out = v->i;
	else if (v->type == PK_BOOL)
		*out = v->b;
	else if (v->type == PK_FLOAT && v->f >= -0x1p63 && v->f < 0x1p63) /* NaN and the out of range are no integer */
		*out = (int64_t)v->f;
	else
		return false;
	return true;
}

const char *pk_str(const struct pk_value *v)
{
	return v && (v->type == PK_STR || v->type == PK_BYTES) ? v->str.s : NULL;
}

size_t pk_len(const struct pk_value *v)
{
	if (!v || (v->type != PK_LIST && v->type != PK_TUPLE && v->type != PK_DICT))
		return 0;
	return v->type == PK_DICT ? v->seq.n / 2 : v->seq.n;
}

const struct pk_value *pk_at(const struct pk_value *v, size_t i)
{
	return v && (v->type == PK_LIST || v->type == PK_TUPLE) && i < v->seq.n ? v->seq.items[i] : NULL;
}
