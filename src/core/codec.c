/* Byte-level codec of the trace: CRC-32, varints and the event encoding shared by
 * the writer (in the injected library) and the reader (in the memtap tool).
 * An event is: kind, presence mask, thread, time delta, then the present fields;
 * zero fields are left out, times and addresses are deltas from the previous event. */
#include "core/format.h"

#include <endian.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *const mt_kind_names[MT_EV_COUNT] = {
#define EV(name, text, doc) text,
#include "core/events.def"
#undef EV
};

const char *const mt_drop_names[MT_DROP_COUNT] = {
#define X(name, text, doc) text,
    MT_DROP_REASONS(X)
#undef X
};

const char *const mt_tag_names[MT_TAG_COUNT] = {"none",	       "params",      "grads", "optimizer",
						"activations", "temporaries", "other"};

/* ---- what a valid event is: the writer refuses (and counts) what the reader would reject ---- */

const char *mt_event_invalid(const struct mt_event *e, char *buf, size_t len)
{
	const char *kind, *a;

	if (mt_event_valid(e))
		return NULL;
	kind = e->kind < MT_EV_COUNT ? mt_kind_names[e->kind] : "unknown";
	a = strchr("aeiou", kind[0]) ? "an" : "a";
	if (e->kind >= MT_EV_COUNT || e->tag >= MT_TAG_COUNT)
		snprintf(buf, len, "an event of kind %u with tag %u", e->kind, e->tag);
	else if (e->size > MT_MAX_SIZE && !(mt_kind_bit(e->kind) & MT_ANY_SIZE_KINDS))
		snprintf(buf, len, "%s %s event of %llu bytes, more than any address space", a, kind,
			 (unsigned long long)e->size);
	else
		snprintf(buf, len, "%s %s event of %llu bytes at 0x%llx runs past the end of the address space", a,
			 kind, (unsigned long long)e->size, (unsigned long long)e->addr);
	return len ? buf : "invalid";
}

/* CRC-32C (Castagnoli): the SSE4.2 instruction where the CPU has it, else a table. The
 * IEEE CRC-32 only to read traces written before 2026-11-21 (docs/FORMAT.md). */
struct crc_table {
	uint32_t poly, t[256];
	int ready;
};
static struct crc_table castagnoli = {.poly = 0x82f63b78u}, ieee = {.poly = 0xedb88320u};

static uint32_t crc_soft(struct crc_table *tab, uint32_t crc, const uint8_t *p, size_t len)
{
	if (!__atomic_load_n(&tab->ready, __ATOMIC_ACQUIRE)) {
		/* idempotent: racing threads compute the same table */
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = c & 1 ? tab->poly ^ (c >> 1) : c >> 1;
			tab->t[i] = c;
		}
		__atomic_store_n(&tab->ready, 1, __ATOMIC_RELEASE);
	}
	while (len--)
		crc = tab->t[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hard(uint32_t crc, const uint8_t *p, size_t len)
{
	uint64_t c = crc;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c = __builtin_ia32_crc32di(c, w);
	}
	crc = (uint32_t)c;
	for (; len; p++, len--)
		crc = __builtin_ia32_crc32qi(crc, *p);
	return crc;
}
#endif

uint32_t mt_crc32(uint32_t crc, const void *data, size_t len)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc_hard(crc, data, len);
#endif
	return ~crc_soft(&castagnoli, crc, data, len);
}

uint32_t mt_crc32_ieee(uint32_t crc, const void *data, size_t len)
{
	return ~crc_soft(&ieee, ~crc, data, len);
}

static int reserve(struct mt_buf *b, size_t n)
{
	size_t cap;
	void *p;

	if (b->len + n <= b->cap)
		return 0;
	if (b->failed || !b->grow)
		return -1;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + n)
		cap *= 2;
	p = b->grow(b->data, b->cap, cap);
	if (!p) {
		b->failed = 1;
		return -1;
	}
	b->data = p;
	b->cap = cap;
	return 0;
}

void mt_buf_bytes(struct mt_buf *b, const void *p, size_t n)
{
	if (reserve(b, n) == 0) {
		memcpy(b->data + b->len, p, n);
		b->len += n;
	}
}

void mt_buf_u8(struct mt_buf *b, uint8_t v)
{
	mt_buf_bytes(b, &v, 1);
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v);
static inline uint8_t *put_zigzag(uint8_t *p, int64_t v);

void mt_buf_varint(struct mt_buf *b, uint64_t v)
{
	if (reserve(b, 10) == 0)
		b->len = (size_t)(put_varint(b->data + b->len, v) - b->data);
}

void mt_buf_zigzag(struct mt_buf *b, int64_t v)
{
	if (reserve(b, 10) == 0)
		b->len = (size_t)(put_zigzag(b->data + b->len, v) - b->data);
}

enum {
	HAS_ADDR = 1 << 0,
	HAS_SIZE = 1 << 1,
	HAS_AUX = 1 << 2,
	HAS_AUX2 = 1 << 3,
	HAS_STACK = 1 << 4,
	HAS_PHASE = 1 << 5,
	HAS_DEVICE = 1 << 6,
	HAS_MORE = 1 << 7, /* tag, flags, error follow as a second mask and values */
};

enum { MORE_TAG = 1, MORE_FLAGS = 2, MORE_ERROR = 4 };

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline uint8_t *put_zigzag(uint8_t *p, int64_t v)
{
	return put_varint(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

#define MAX_EVENT_BYTES 80 /* kind, masks, flags, device, tag, and eight varints of at most 10 */

void mt_encode_event(struct mt_buf *b, struct mt_encoder *st, const struct mt_event *e)
{
	uint8_t more = (e->tag ? MORE_TAG : 0) | (e->flags ? MORE_FLAGS : 0) | (e->error ? MORE_ERROR : 0);
	uint8_t mask = (e->addr ? HAS_ADDR : 0) | (e->size ? HAS_SIZE : 0) | (e->aux ? HAS_AUX : 0) |
		       (e->aux2 ? HAS_AUX2 : 0) | (e->stack ? HAS_STACK : 0) | (e->phase ? HAS_PHASE : 0) |
		       (e->device != MT_NO_DEVICE ? HAS_DEVICE : 0) | (more ? HAS_MORE : 0);
	uint8_t *p;

	if (reserve(b, MAX_EVENT_BYTES))
		return;
	p = b->data + b->len;
	*p++ = e->kind;
	*p++ = mask;
	p = put_varint(p, e->thread);
	p = put_zigzag(p, (int64_t)(e->time - st->time));
	st->time = e->time;
	if (mask & HAS_ADDR) {
		p = put_zigzag(p, (int64_t)(e->addr - st->addr));
		st->addr = e->addr;
	}
	if (mask & HAS_SIZE)
		p = put_varint(p, e->size);
	if (mask & HAS_AUX)
		p = put_varint(p, e->aux);
	if (mask & HAS_AUX2)
		p = put_varint(p, e->aux2);
	if (mask & HAS_STACK)
		p = put_varint(p, e->stack);
	if (mask & HAS_PHASE)
		p = put_varint(p, e->phase);
	if (mask & HAS_DEVICE)
		*p++ = e->device;
	if (mask & HAS_MORE) {
		*p++ = more;
		if (more & MORE_TAG)
			*p++ = e->tag;
		if (more & MORE_FLAGS)
			*p++ = e->flags;
		if (more & MORE_ERROR)
			p = put_zigzag(p, e->error);
	}
	b->len = (size_t)(p - b->data);
}

uint64_t mt_get_varint(struct mt_cursor *c)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		if (c->p >= c->end) {
			c->bad = 1;
			return 0;
		}
		uint8_t byte = *c->p++;
		v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return v;
	}
	c->bad = 1;
	return 0;
}

int64_t mt_get_zigzag(struct mt_cursor *c)
{
	uint64_t v = mt_get_varint(c);
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* The most an event's decoding reads: kind, two masks, device, tag, flags and nine
 * varints of at most ten bytes. With that much left (room), nothing is checked. */
#define MAX_EVENT_READ 96

/* A varint of at most eight bytes read in one load, without a branch on its length: the
 * first byte whose top bit is clear ends it, and its 7-bit groups are packed together in
 * three steps (pairs, fours, eights). 0 when it is longer (a value of 2^56 or more). The
 * caller has ten bytes to read. */
static inline unsigned varint8(const uint8_t *p, uint64_t *v)
{
	uint64_t x, stops;

	memcpy(&x, p, sizeof x);
	x = le64toh(x);
	stops = ~x & 0x8080808080808080ull;
	if (!stops)
		return 0;
	unsigned bits = (unsigned)__builtin_ctzll(stops) + 1; /* 8, 16, ... 64 */
	x &= ~0ull >> (64 - bits);
	x = (x & 0x007f007f007f007full) | ((x & 0x7f007f007f007f00ull) >> 1);
	x = (x & 0x00003fff00003fffull) | ((x & 0x3fff00003fff0000ull) >> 2);
	*v = (x & 0x000000000fffffffull) | ((x & 0x0fffffff00000000ull) >> 4);
	return bits / 8;
}

static inline uint64_t varint(struct mt_cursor *c, bool room)
{
	if (room || c->end - c->p >= 10) {
		uint64_t v = *c->p; /* one byte, the most common length, on one test */
		unsigned n = v < 0x80 ? 1 : varint8(c->p, &v);
		if (n) {
			c->p += n;
			return v;
		}
		v = 0;
		for (int shift = 0; shift < 70; shift += 7) {
			uint8_t byte = *c->p++;
			v |= (uint64_t)(byte & 0x7f) << (shift & 63);
			if (!(byte & 0x80))
				return v;
		}
		c->bad = 1;
		return 0;
	}
	return mt_get_varint(c);
}

static inline int64_t zigzag(struct mt_cursor *c, bool room)
{
	uint64_t v = varint(c, room);
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline uint8_t get_u8(struct mt_cursor *c, bool room)
{
	if (!room && c->p >= c->end) {
		c->bad = 1;
		return 0;
	}
	return *c->p++;
}

/* The cursor and the deltas are worked on in locals: the event's byte fields may alias
 * anything, so stores to them would make the compiler reload pointers it keeps in memory. */
static inline __attribute__((always_inline)) int decode(struct mt_cursor *cursor, struct mt_encoder *st,
							struct mt_event *e, bool room)
{
	struct mt_cursor k = *cursor, *c = &k;
	uint64_t time = st->time, addr = st->addr, thread, stack = 0, phase = 0;
	uint8_t mask;

	memset(e, 0, sizeof *e);
	e->kind = get_u8(c, room);
	mask = get_u8(c, room);
	thread = varint(c, room);
	time += (uint64_t)zigzag(c, room);
	e->time = time;
	e->device = MT_NO_DEVICE;
	if (mask & HAS_ADDR) {
		addr += (uint64_t)zigzag(c, room);
		e->addr = addr;
	}
	if (mask & HAS_SIZE)
		e->size = varint(c, room);
	if (mask & HAS_AUX)
		e->aux = varint(c, room);
	if (mask & HAS_AUX2)
		e->aux2 = varint(c, room);
	if (mask & HAS_STACK)
		stack = varint(c, room);
	if (mask & HAS_PHASE)
		phase = varint(c, room);
	if (mask & HAS_DEVICE)
		e->device = get_u8(c, room);
	if (mask & HAS_MORE) {
		uint8_t more = get_u8(c, room);
		if (more & MORE_TAG)
			e->tag = get_u8(c, room);
		if (more & MORE_FLAGS)
			e->flags = get_u8(c, room);
		if (more & MORE_ERROR)
			e->error = (int32_t)zigzag(c, room);
	}
	/* 32-bit fields written wider are damage, not numbers to cut down */
	if (e->kind >= MT_EV_COUNT || e->tag >= MT_TAG_COUNT || (thread | stack | phase) > UINT32_MAX)
		k.bad = 1;
	e->thread = (uint32_t)thread;
	e->stack = (uint32_t)stack;
	e->phase = (uint32_t)phase;
	*cursor = k;
	st->time = time;
	st->addr = addr;
	return k.bad ? -1 : 0;
}

int mt_decode_event(struct mt_cursor *c, struct mt_encoder *st, struct mt_event *e)
{
	return c->end - c->p >= MAX_EVENT_READ ? decode(c, st, e, true) : decode(c, st, e, false);
}
