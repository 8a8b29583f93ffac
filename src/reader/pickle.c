/* The data-only pickle interpreter: a value stack with marks, a memo, and a fixed set
 * of opcodes. Every length is checked against the input and no text argument is read
 * past its line; the stack is capped. Values are counted references: the stack, the
 * containers holding them and the memo each hold one, and a value nobody holds goes
 * back to the arena's free lists at once (children first, without recursion, so no
 * nesting depth can exhaust the C stack). The memo is an array indexed by memo index,
 * a hash map for indices far past the entries stored, so an index costs memory only
 * when used. Big dicts are sorted on their first lookup. */
#include "reader/pickle.h"
#include "core/map.h"
#include "reader/progress.h"
#include "core/text.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else /* a value given back is poisoned under AddressSanitizer: a use after it shows */
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

#define MAX_STACK (1u << 24)
#define MAX_MEMO UINT32_MAX /* LONG_BINPUT's largest; text PUT may say more */
#define MAX_TEXT 64	    /* digits of a protocol 0 number */
#define SORTED_FROM 16	    /* pairs from which a dict is sorted for lookups */
#define BLOCK (1u << 20)    /* the arena's blocks, and its largest size class */
#define DENSE_SLACK 4096    /* memo indices this far past twice the entries stored stay in the array */
#define MARK_PAYLOAD 55	    /* bits of a token's payload a memo entry holds */

/* ---- the arena: bump allocation from 1 MiB blocks, free lists by size class ---- */

struct block {
	struct block *next;
	size_t size;
	max_align_t data[];
};

struct large {
	struct large *next, *prev;
	size_t size;
	max_align_t data[];
};

/* The class of n bytes and its size; -1 past the largest class. */
static int class_of(size_t n, size_t *size)
{
	size_t s = 256;
	int c = 8;

	if (n <= 128) {
		size_t k = n ? (n + 15) / 16 : 1;
		*size = 16 * k;
		return (int)k - 1;
	}
	while (s < n && c < PK_CLASSES) {
		s <<= 1;
		c++;
	}
	*size = s;
	return c < PK_CLASSES ? c : -1;
}

static void *alloc(struct pk_arena *a, size_t n)
{
	size_t size;
	int c = class_of(n, &size);
	void *p;

	if (c < 0) {
		struct large *l = malloc(sizeof *l + n);
		if (!l)
			return NULL;
		*l = (struct large){.next = a->large, .size = n};
		if (a->large)
			((struct large *)a->large)->prev = l;
		a->large = l;
		size = n;
		p = l->data;
	} else if (a->free[c]) {
		p = a->free[c];
		ASAN_UNPOISON_MEMORY_REGION(p, size);
		memcpy(&a->free[c], p, sizeof(void *));
	} else {
		if (!a->blocks || a->used + size > a->cap) {
			struct block *b = malloc(sizeof *b + BLOCK);
			if (!b)
				return NULL;
			b->next = a->blocks;
			b->size = BLOCK;
			a->blocks = b;
			a->used = 0;
			a->cap = BLOCK;
		}
		p = (char *)((struct block *)a->blocks)->data + a->used;
		a->used += size;
	}
	a->bytes += size;
	if (a->bytes > a->peak)
		a->peak = a->bytes;
	return p;
}

static void give_back(struct pk_arena *a, void *p, size_t n)
{
	size_t size;
	int c = class_of(n, &size);

	if (!p)
		return;
	if (c < 0) {
		struct large *l = (struct large *)((char *)p - offsetof(struct large, data));
		if (l->prev)
			l->prev->next = l->next;
		else
			a->large = l->next;
		if (l->next)
			l->next->prev = l->prev;
		a->bytes -= l->size;
		free(l);
		return;
	}
	memcpy(p, &a->free[c], sizeof(void *));
	ASAN_POISON_MEMORY_REGION(p, size);
	a->free[c] = p;
	a->bytes -= size;
}

void pk_arena_free(struct pk_arena *a)
{
	for (struct block *b = a->blocks, *next; b; b = next) {
		next = b->next;
		free(b);
	}
	for (struct large *l = a->large, *next; l; l = next) {
		next = l->next;
		free(l);
	}
	memset(a, 0, sizeof *a);
}

/* ---- the machine ---- */

/* Values made for tokens the memo gives, kept by token: a frame fetched again shares one (a
 * real trace entry's stack fetches 100 frames from the memo: a new value for each, made
 * and given back, was a third of the import's instructions); at most TOKEN_CACHE kept. */
#define TOKEN_CACHE 4093
struct token_cache {
	uintptr_t slot[TOKEN_CACHE];
	struct pk_value *value[TOKEN_CACHE];
};

struct pk_reader {
	const uint8_t *p, *end, *start;
	struct pk_arena *a;
	const struct pk_hooks *hooks;
	struct pk_value **stack;
	size_t n, cap;
	size_t *marks;
	size_t *ahead; /* per mark: the stack's size when its items were last offered ahead */
	size_t nmarks, capmarks;
	size_t ahead_at;	/* the stack's size at which offer_ahead looks: the top mark's + AHEAD */
	uintptr_t *memo;	/* index -> a value, a token (odd: see mark_of), or 0 */
	size_t memo_cap;	/* of the array */
	struct mt_map far;	/* indices past it: the same encoding */
	size_t memo_len;	/* entries stored, as len(memo) in Python */
	struct pk_value **work; /* values being given back */
	size_t nwork, capwork;
	struct token_cache *tokens; /* values lately made for the memo's tokens */
	struct mt_map strings;	    /* a string's hash -> a live value of those bytes, shared by the next like it */
	char *err;
	size_t errlen;
};

static int fail(struct pk_reader *m, int code, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(m->err, m->errlen, "not a plain-data pickle at byte %zu: ", (size_t)(m->p - m->start));

	va_start(ap, fmt);
	if (k >= 0 && (size_t)k < m->errlen)
		vsnprintf(m->err + k, m->errlen - (size_t)k, fmt, ap);
	va_end(ap);
	return code;
}

static struct pk_value *value(struct pk_reader *m, uint8_t type)
{
	struct pk_value *v = alloc(m->a, sizeof *v);

	if (v) {
		memset(v, 0, sizeof *v);
		v->type = type;
	}
	return v;
}

static void ref(struct pk_value *v)
{
	if (v->refs != UINT32_MAX) /* saturated: kept until the arena goes */
		v->refs++;
}

/* What a value holds goes back to the arena; its children lose a reference. */
static void empty(struct pk_reader *m, struct pk_value *v);

/* One reference fewer: at none, the value and whatever only it held go back. When the
 * work list cannot grow, what is left stays in the arena until it goes. */
static void unref(struct pk_reader *m, struct pk_value *v)
{
	if (v->refs == UINT32_MAX || --v->refs)
		return;
	empty(m, v);
	give_back(m->a, v, sizeof *v);
	while (m->nwork) {
		struct pk_value *x = m->work[--m->nwork];
		empty(m, x);
		give_back(m->a, x, sizeof *x);
	}
}

static void empty(struct pk_reader *m, struct pk_value *v)
{
	if (v->type == PK_STR || v->type == PK_BYTES) {
		uint64_t shared;
		if (mt_map_get(&m->strings, v->str.hash, &shared) && shared == (uintptr_t)v)
			mt_map_del(&m->strings, v->str.hash, NULL);
		give_back(m->a, (void *)v->str.s, v->str.len + 1);
	} else if (v->type == PK_LIST || v->type == PK_TUPLE || v->type == PK_DICT) {
		struct pk_value **items = v->seq.items;
		size_t n = v->seq.n, cap = v->seq.cap;
		v->seq.items = NULL;
		v->seq.n = v->seq.cap = 0;
		for (size_t i = 0; i < n; i++) {
			struct pk_value *c = items[i];
			if (c->refs == UINT32_MAX || --c->refs)
				continue;
			if (m->nwork == m->capwork) {
				size_t k = m->capwork ? 2 * m->capwork : 256;
				struct pk_value **w = realloc(m->work, k * sizeof *w);
				if (!w)
					continue; /* kept until the arena goes */
				m->work = w;
				m->capwork = k;
			}
			m->work[m->nwork++] = c;
		}
		give_back(m->a, items, cap * sizeof *items);
	}
}

static int push(struct pk_reader *m, struct pk_value *v)
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
	ref(v);
	m->stack[m->n++] = v;
	return 0;
}

static int need(struct pk_reader *m, size_t n)
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

/* v goes into seq, taking over the reference its stack slot held. */
static int seq_add(struct pk_reader *m, struct pk_value *seq, struct pk_value *v)
{
	if (seq->seq.n == seq->seq.cap) {
		size_t cap = seq->seq.cap ? 2 * seq->seq.cap : 8;
		struct pk_value **items = alloc(m->a, cap * sizeof *items);
		if (!items)
			return ENOMEM;
		if (seq->seq.n)
			memcpy(items, seq->seq.items, seq->seq.n * sizeof *items);
		give_back(m->a, seq->seq.items, seq->seq.cap * sizeof *items);
		seq->seq.items = items;
		seq->seq.cap = cap;
	}
	seq->seq.items[seq->seq.n++] = v;
	if (seq->type == PK_DICT)
		seq->sorted = false; /* a pair came after the sort */
	return 0;
}

/* Items piling up above a mark right over a list are offered ahead of their APPENDS, a
 * thousand at a time (offer_ahead); ahead_at, kept with the marks, is when to look. */
#define AHEAD 1000
static void top_mark_moved(struct pk_reader *m)
{
	m->ahead_at = m->nmarks && m->hooks && m->hooks->ahead ? m->marks[m->nmarks - 1] + AHEAD : SIZE_MAX;
}

static size_t pop_mark(struct pk_reader *m)
{
	size_t mark;

	if (!m->nmarks)
		return SIZE_MAX;
	mark = m->marks[--m->nmarks];
	top_mark_moved(m);
	return mark;
}

/* The hook's say on items [from, n) bound for list: 1 when it took them (they leave the
 * stack), 0 when they go in, or an error. */
static int offer(struct pk_reader *m, struct pk_value *list, size_t from)
{
	bool taken = false;
	int r;

	if (!m->hooks || !m->hooks->items || from == m->n)
		return 0;
	if ((r = m->hooks->items(m->hooks->ctx, m, list, m->stack + from, m->n - from, &taken)))
		return -r;
	if (!taken)
		return 0;
	while (m->n > from)
		unref(m, m->stack[--m->n]);
	return 1;
}

/* Items from the last mark to the top go into seq (a dict takes them in pairs). */
static int fill_from_mark(struct pk_reader *m, struct pk_value *seq, size_t from)
{
	int r;

	if (from == SIZE_MAX || from > m->n)
		return fail(m, EINVAL, "no mark to collect items from");
	if (seq->type == PK_DICT && (m->n - from) % 2)
		return fail(m, EINVAL, "an odd number of items for a dict");
	if (seq->type == PK_LIST && (r = offer(m, seq, from)))
		return r < 0 ? -r : 0;
	size_t first = seq->seq.n;

	for (size_t i = from; i < m->n; i++)
		if ((r = seq_add(m, seq, m->stack[i])))
			return r;
	m->n = from;
	if (seq->type == PK_DICT && m->hooks && m->hooks->dict)
		return m->hooks->dict(m->hooks->ctx, m, seq, first);
	return 0;
}

/* Items for a value that cannot take them: said as such, or, for a list or dict a hook
 * already read (a token), that it changed after it looked complete. */
static int wrong_kind(struct pk_reader *m, const struct pk_value *v, const char *what)
{
	if (v && v->type == PK_TOKEN)
		return fail(m, EINVAL,
			    "a list or dict given more items after it was read (Python's pickler writes each "
			    "whole, once)");
	return fail(m, EINVAL, "%s", what);
}

/* ---- the memo ---- */

static bool is_mark(uintptr_t slot)
{
	return slot & 1;
}

static uintptr_t mark_of(uint8_t tag, int64_t payload)
{
	return (uintptr_t)payload << 9 | (uintptr_t)tag << 1 | 1;
}

static uintptr_t memo_slot(const struct pk_reader *m, uint64_t index)
{
	uint64_t v;

	if (index < m->memo_cap)
		return m->memo[index];
	return mt_map_get(&m->far, index, &v) ? (uintptr_t)v : 0;
}

/* Stores slot at index; the reference the old entry held is dropped. */
static int memo_set(struct pk_reader *m, uint64_t index, uintptr_t slot)
{
	uintptr_t old = memo_slot(m, index);

	if (index >= m->memo_cap && index < 2 * m->memo_len + DENSE_SLACK) {
		size_t cap = m->memo_cap ? 2 * m->memo_cap : DENSE_SLACK;
		uintptr_t *v;
		while (cap <= index)
			cap *= 2;
		if (!(v = realloc(m->memo, cap * sizeof *v)))
			return ENOMEM;
		memset(v + m->memo_cap, 0, (cap - m->memo_cap) * sizeof *v);
		for (size_t i = m->memo_cap; i < cap && m->far.count; i++) { /* far entries now inside */
			uint64_t x;
			if (mt_map_del(&m->far, i, &x))
				v[i] = (uintptr_t)x;
		}
		m->memo = v;
		m->memo_cap = cap;
	}
	if (index < m->memo_cap)
		m->memo[index] = slot;
	else if (mt_map_put(&m->far, index, slot))
		return ENOMEM;
	if (!old)
		m->memo_len++;
	else if (!is_mark(old))
		unref(m, (struct pk_value *)old);
	return 0;
}

/* A memo index can be any number: an index far past the entries stored costs memory
 * per entry, never per index. */
static int memo_put(struct pk_reader *m, uint64_t index)
{
	struct pk_value *v;
	int r;

	if (!m->n)
		return fail(m, EINVAL, "memo store with an empty stack");
	if (index > MAX_MEMO)
		return fail(m, EINVAL, "memo index %" PRIu64 " too large", index);
	v = m->stack[m->n - 1];
	ref(v);
	if ((r = memo_set(m, index, (uintptr_t)v))) {
		unref(m, v);
		return r;
	}
	v->memo = (uint32_t)(index + 1 <= UINT32_MAX ? index + 1 : 0);
	return 0;
}

static int memo_get(struct pk_reader *m, uint64_t index)
{
	uintptr_t slot = memo_slot(m, index);
	struct pk_value *v;

	if (!slot)
		return fail(m, EINVAL, "memo entry %" PRIu64 " was never stored", index);
	if (!is_mark(slot))
		return push(m, (struct pk_value *)slot);
	if (m->tokens && m->tokens->slot[slot % TOKEN_CACHE] == slot)
		return push(m, m->tokens->value[slot % TOKEN_CACHE]);
	if (!(v = value(m, PK_TOKEN)))
		return ENOMEM;
	v->tag = (uint8_t)(slot >> 1);
	v->i = (int64_t)(slot >> 9);
	if (m->tokens || (m->tokens = calloc(1, sizeof *m->tokens))) {
		struct pk_value **kept = &m->tokens->value[slot % TOKEN_CACHE];
		if (*kept)
			unref(m, *kept);
		ref(v);
		*kept = v;
		m->tokens->slot[slot % TOKEN_CACHE] = slot;
	}
	return push(m, v);
}

void pk_hold(struct pk_value *v)
{
	ref(v);
}

void pk_release(struct pk_reader *m, struct pk_value *v)
{
	unref(m, v);
}

void pk_token(struct pk_reader *m, struct pk_value *v, uint8_t tag, int64_t payload)
{
	bool in_memo = v->memo && memo_slot(m, v->memo - 1) == (uintptr_t)v;

	ref(v); /* held while it changes */
	empty(m, v);
	while (m->nwork) { /* what only it held */
		struct pk_value *x = m->work[--m->nwork];
		empty(m, x);
		give_back(m->a, x, sizeof *x);
	}
	v->type = PK_TOKEN;
	v->sorted = false;
	v->tag = tag;
	v->i = payload;
	if (in_memo && payload >= 0 && payload < (INT64_C(1) << MARK_PAYLOAD)) {
		if (v->memo - 1 < m->memo_cap)
			m->memo[v->memo - 1] = mark_of(tag, payload);
		else
			mt_map_put(&m->far, v->memo - 1, mark_of(tag, payload));
		unref(m, v); /* the memo's */
	}
	unref(m, v);
}

/* A protocol 0 number: the line's own bytes only (strtoll would read on past the newline
 * at the end of the input), all of them digits, in range. */
static int text_number(struct pk_reader *m, const char *s, size_t len, bool is_float, int64_t *i, double *f)
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

static int text_index(struct pk_reader *m, const char *s, size_t len, uint64_t *out)
{
	int64_t i = 0;
	int r = text_number(m, s, len, false, &i, NULL);

	if (!r && i < 0)
		r = fail(m, EINVAL, "memo index %" PRId64 " is negative", i);
	*out = (uint64_t)i;
	return r;
}

static int text_line(struct pk_reader *m, const char **s, size_t *len)
{
	const uint8_t *nl = memchr(m->p, '\n', (size_t)(m->end - m->p));

	if (!nl)
		return fail(m, EINVAL, "cut short in a text argument");
	*s = (const char *)m->p;
	*len = (size_t)(nl - m->p);
	m->p = nl + 1;
	return 0;
}

/* A string of len bytes at s. Equal strings are one value: a real snapshot's frames write
 * each file name anew, not through the memo (4,089 copies of one in a 3 MB file), and the
 * memo keeps every copy to the end. */
static int string_of(struct pk_reader *m, uint8_t type, const char *s, size_t len)
{
	uint64_t h = mt_fnv1a(MT_FNV_BASIS, s, len), at;
	struct pk_value *v;
	char *copy;

	if (mt_map_get(&m->strings, h, &at)) {
		v = (struct pk_value *)(uintptr_t)at;
		if (v->type == type && v->str.len == len && !memcmp(v->str.s, s, len))
			return push(m, v);
	}
	v = value(m, type);
	copy = alloc(m->a, len + 1);
	if (!v || !copy)
		return ENOMEM;
	memcpy(copy, s, len);
	copy[len] = '\0';
	v->str.s = copy;
	v->str.len = len;
	v->str.hash = h;
	if (!mt_map_get(&m->strings, h, NULL) && mt_map_put(&m->strings, h, (uintptr_t)v))
		return ENOMEM;
	return push(m, v);
}

static int string(struct pk_reader *m, uint8_t type, size_t len)
{
	int r;

	if (need(m, len))
		return EINVAL;
	r = string_of(m, type, (const char *)m->p, len);
	m->p += len;
	return r;
}

/* inline: a snapshot is mostly small integers, and gcc stopped inlining it once step()
 * grew (issue 42: 32 M of the import's instructions on bench/make_snapshot.py's file) */
static inline __attribute__((always_inline)) int integer(struct pk_reader *m, int64_t i)
{
	struct pk_value *v = value(m, PK_INT);

	if (v)
		v->i = i;
	return push(m, v);
}

static int tuple_of(struct pk_reader *m, size_t k)
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

static int step(struct pk_reader *m, uint8_t op)
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
			if (!(k = realloc(m->ahead, cap * sizeof *k)))
				return ENOMEM;
			m->ahead = k;
			m->capmarks = cap;
		}
		m->ahead[m->nmarks] = m->n;
		m->marks[m->nmarks++] = m->n;
		top_mark_moved(m);
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
		ref(v); /* held while filled: a hook may make it a token */
		if ((r = fill_from_mark(m, v, pop_mark(m))))
			return r; /* it and any items it took stay in the arena */
		r = push(m, v);
		unref(m, v);
		return r;
	case 0x85:
		return tuple_of(m, 1);
	case 0x86:
		return tuple_of(m, 2);
	case 0x87:
		return tuple_of(m, 3);
	case 'a': /* APPEND */
		if (m->n < 2 || m->stack[m->n - 2]->type != PK_LIST)
			return wrong_kind(m, m->n < 2 ? NULL : m->stack[m->n - 2], "APPEND to something not a list");
		if ((r = offer(m, m->stack[m->n - 2], m->n - 1)))
			return r < 0 ? -r : 0;
		m->n--;
		return seq_add(m, m->stack[m->n - 1], m->stack[m->n]);
	case 'e':
	case 'u': { /* APPENDS, SETITEMS */
		size_t from = pop_mark(m);
		if (from == SIZE_MAX || from == 0 || from > m->n)
			return fail(m, EINVAL, "%s without a mark", op == 'e' ? "APPENDS" : "SETITEMS");
		v = m->stack[from - 1];
		if (v->type != (op == 'e' ? PK_LIST : PK_DICT))
			return wrong_kind(m, v,
					  op == 'e' ? "APPENDS to the wrong kind of value"
						    : "SETITEMS to the wrong kind of value");
		return fill_from_mark(m, v, from);
	}
	case 's': /* SETITEM */
		if (m->n < 3 || m->stack[m->n - 3]->type != PK_DICT)
			return wrong_kind(m, m->n < 3 ? NULL : m->stack[m->n - 3], "SETITEM to something not a dict");
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
		/* 9 bytes: an unsigned 64-bit value with its sign byte (PyTorch writes a C++ frame's
		   line -1 as 2^64 - 1); kept as its 64 bits */
		if (n == 9 && need(m, 9) == 0 && (m->p[8] == 0 || (m->p[8] == 0xff && m->p[7] & 0x80))) {
			m->p += 9;
			return integer(m, (int64_t)le(m->p - 9, 8));
		}
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
	case 'S': /* UNICODE, STRING (protocol 0 text; escapes are kept as written) */
		if ((r = text_line(m, &s, &len)))
			return r;
		if (op == 'S' && len >= 2 && (s[0] == '\'' || s[0] == '"') && s[len - 1] == s[0]) {
			s++;
			len -= 2;
		}
		return string_of(m, PK_STR, s, len);
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
		unref(m, m->stack[--m->n]);
		return 0;
	case '1': {
		size_t from = pop_mark(m);
		if (from == SIZE_MAX || from > m->n)
			return fail(m, EINVAL, "POP_MARK without a mark");
		while (m->n > from)
			unref(m, m->stack[--m->n]);
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

/* Items piling up above a mark right over a list (one batch of a pickler that does not
 * batch) are offered to the hook ahead of their APPENDS, a thousand at a time; those it
 * took leave the stack. What it left (the top, a dict not yet filled) comes again with
 * the next thousand, unless it took none: each item is looked at a bounded number of times. */
static int offer_ahead(struct pk_reader *m)
{
	size_t top = m->nmarks - 1, from = m->ahead[top], mark = m->marks[top], used = 0;
	int r;

	if (!mark || mark > m->n || m->stack[mark - 1]->type != PK_LIST)
		return 0;
	if (from > m->n || from < mark) /* items popped since: those in their place are new */
		from = m->ahead[top] = m->n > mark ? m->n : mark;
	if (m->n - from < AHEAD)
		return 0;
	r = m->hooks->ahead(m->hooks->ctx, m, m->stack[mark - 1], m->stack + from, m->n - from, &used);
	if (r || !used || used > m->n - from) {
		m->ahead[top] = m->n;
		return r;
	}
	for (size_t i = from; i < from + used; i++)
		unref(m, m->stack[i]);
	memmove(m->stack + from, m->stack + from + used, (m->n - from - used) * sizeof *m->stack);
	m->n -= used;
	m->ahead[top] = from;
	return 0;
}

/* The pages of a mapped input behind the cursor go back to the kernel: nothing read is
 * looked at again (strings are copied), and a file's pages come back if it were. */
static void drop_read(struct pk_reader *m, size_t *dropped)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), from = *dropped,
	       to = ((uintptr_t)m->p - (uintptr_t)m->start) & ~(page - 1);
	uintptr_t base = (uintptr_t)m->start;

	if (base & (page - 1) || to < from + (256u << 10))
		return;
	madvise((void *)(base + from), to - from, MADV_DONTNEED);
	*dropped = to;
}

int pk_stream(const uint8_t *data, size_t size, struct pk_arena *arena, const struct pk_hooks *hooks,
	      struct pk_value **out, char *err, size_t errlen)
{
	struct pk_reader m = {.p = data,
			      .end = data + size,
			      .start = data,
			      .a = arena,
			      .hooks = hooks,
			      .ahead_at = SIZE_MAX,
			      .err = err,
			      .errlen = errlen};
	size_t dropped = 0;
	int r = 0;

	err[0] = '\0';
	for (size_t steps = 0; !r; steps++) {
		uint8_t op;
		if ((steps & 0xffff) == 0 && mt_progress_hook)
			mt_progress_hook("reading", (uint64_t)(m.p - data), size);
		if ((steps & 0xffff) == 0 && hooks && hooks->mapped)
			drop_read(&m, &dropped);
		if (m.p >= m.end) {
			r = fail(&m, EINVAL, "cut short (no STOP)");
			break;
		}
		op = *m.p++;
		if (op == '.') { /* STOP */
			if (m.n != 1)
				r = fail(&m, EINVAL, "%zu values left at STOP", m.n);
			else
				*out = m.stack[0];
			break;
		}
		r = step(&m, op);
		/* every 64th step is soon enough to offer a thousand items (issue 42: looking
		   after every opcode was 2% of an import) */
		if ((steps & 63) == 0 && m.n >= m.ahead_at && !r)
			r = offer_ahead(&m);
		if (r == ENOMEM)
			snprintf(err, errlen, "out of memory reading the pickle");
	}
	free(m.stack);
	free(m.marks);
	free(m.ahead);
	free(m.memo);
	for (size_t i = 0; m.tokens && i < TOKEN_CACHE; i++)
		if (m.tokens->value[i])
			unref(&m, m.tokens->value[i]);
	free(m.tokens);
	free(m.work);
	mt_map_free(&m.far);
	mt_map_free(&m.strings);
	return r;
}

int pk_parse(const uint8_t *data, size_t size, struct pk_arena *arena, struct pk_value **out, char *err, size_t errlen)
{
	return pk_stream(data, size, arena, NULL, out, err, errlen);
}

const struct pk_value *pk_get(const struct pk_value *cd, const char *key)
{
	/* a big dict is sorted on its first lookup: the order of its pairs is no part of its value */
	struct pk_value *d = (struct pk_value *)cd;
	size_t len = strlen(key), lo = 0, hi;

	if (!d || d->type != PK_DICT)
		return NULL;
	if (!d->sorted && d->seq.n / 2 >= SORTED_FROM)
		sort_dict(d); /* out of memory: the scan below */
	if (!d->sorted) {     /* a few pairs: the last of equal keys is the one Python keeps */
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
