/* The event codec (core/codec.c): random events through the encoder and back, in runs
 * that share their deltas as a chunk's do; and random byte strings shaped like events
 * (every varint length from 1 to 11 bytes, masks, kinds and tags in and out of range)
 * decoded by mt_decode_event and by the format read here byte by byte, each with the
 * buffer ending right after the event and with room to spare: the decoder reads a varint
 * of up to eight bytes in one load where it has room, and byte by byte where it has not. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "core/format.h"

/* ---- the format, byte by byte ---- */

static bool ref_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 70; shift += 7) {
		if (*p >= end)
			return false;
		uint8_t byte = *(*p)++;
		*v |= (uint64_t)(byte & 0x7f) << (shift & 63);
		if (!(byte & 0x80))
			return true;
	}
	return false;
}

static bool ref_zigzag(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	bool good = ref_varint(p, end, v);
	*v = (*v >> 1) ^ -(*v & 1);
	return good;
}

static bool ref_u8(const uint8_t **p, const uint8_t *end, uint8_t *v)
{
	if (*p >= end)
		return false;
	*v = *(*p)++;
	return true;
}

/* One event as the format says; false where it is bad. */
static bool ref_decode(const uint8_t **p, const uint8_t *end, struct mt_encoder *st, struct mt_event *e)
{
	uint64_t v, thread = 0, stack = 0, phase = 0;
	uint8_t mask, more, b = 0;
	bool good = true;

	memset(e, 0, sizeof *e);
	e->device = MT_NO_DEVICE;
	good &=
	    ref_u8(p, end, &e->kind) && ref_u8(p, end, &mask) && ref_varint(p, end, &thread) && ref_zigzag(p, end, &v);
	if (!good)
		return false;
	e->time = st->time += v;
	if (mask & 1) {
		if (!ref_zigzag(p, end, &v))
			return false;
		e->addr = st->addr += v;
	}
	uint64_t *fields[] = {&e->size, &e->aux, &e->aux2, &stack, &phase};
	for (int i = 0; i < 5; i++)
		if (mask & (2 << i) && !ref_varint(p, end, fields[i]))
			return false;
	if (mask & 0x40 && !ref_u8(p, end, &e->device))
		return false;
	if (mask & 0x80) {
		if (!ref_u8(p, end, &more))
			return false;
		if (more & 1 && !ref_u8(p, end, &e->tag))
			return false;
		if (more & 2 && !ref_u8(p, end, &b))
			return false;
		e->flags = more & 2 ? b : 0;
		if (more & 4) {
			if (!ref_zigzag(p, end, &v))
				return false;
			e->error = (int32_t)v;
		}
	}
	e->thread = (uint32_t)thread;
	e->stack = (uint32_t)stack;
	e->phase = (uint32_t)phase;
	return e->kind < MT_EV_COUNT && e->tag < MT_TAG_COUNT && (thread | stack | phase) <= UINT32_MAX;
}

/* ---- inputs ---- */

static uint64_t width(int bits)
{
	return bits == 0 ? 0 : bits == 64 ? tap_random() : tap_random() & ((1ull << bits) - 1);
}

/* A varint of n bytes (11: one too long), its payload random. */
static uint8_t *shaped_varint(uint8_t *p, int n)
{
	for (int i = 0; i < n; i++)
		*p++ = (uint8_t)((tap_random() & 0x7f) | (i + 1 < n ? 0x80 : 0));
	return p;
}

/* Bytes shaped like an event: the usual field lengths, now and then any up to 11. */
static size_t shaped_event(uint8_t *out)
{
	uint8_t *p = out, mask = (uint8_t)tap_random();
	int fields = 2 + __builtin_popcount(mask & 0x3f);

	*p++ = (uint8_t)(tap_random() % (MT_EV_COUNT + 2));
	*p++ = mask;
	for (int i = 0; i < fields; i++)
		p = shaped_varint(p, tap_random() % 8 ? 1 + (int)(tap_random() % 4) : 1 + (int)(tap_random() % 11));
	if (mask & 0x40)
		*p++ = (uint8_t)tap_random();
	if (mask & 0x80) {
		uint8_t more = (uint8_t)(tap_random() % 8);
		*p++ = more;
		if (more & 1)
			*p++ = (uint8_t)(tap_random() % (MT_TAG_COUNT + 1));
		if (more & 2)
			*p++ = (uint8_t)tap_random();
		if (more & 4)
			p = shaped_varint(p, 1 + (int)(tap_random() % 11));
	}
	return (size_t)(p - out);
}

static bool same(const struct mt_event *a, const struct mt_event *b)
{
	return a->kind == b->kind && a->device == b->device && a->tag == b->tag && a->flags == b->flags &&
	       a->thread == b->thread && a->time == b->time && a->addr == b->addr && a->size == b->size &&
	       a->aux == b->aux && a->aux2 == b->aux2 && a->stack == b->stack && a->phase == b->phase &&
	       a->error == b->error;
}

static void *grow(void *old, size_t old_cap, size_t new_cap)
{
	(void)old_cap;
	return realloc(old, new_cap);
}

int main(void)
{
	struct mt_buf b = {.grow = grow};
	static struct mt_event in[1000];
	size_t wrong = 0;

	/* random events, 200 runs of 1,000 sharing their deltas, the last ones decoded with
	   little room left */
	for (int run = 0; run < 200; run++) {
		struct mt_encoder enc = {0, 0}, dec = {0, 0};
		b.len = 0;
		for (int i = 0; i < 1000; i++) {
			struct mt_event *e = &in[i];
			*e = (struct mt_event){.kind = (uint8_t)(tap_random() % MT_EV_COUNT),
					       .device = tap_random() % 4 ? (uint8_t)(tap_random() % 8) : MT_NO_DEVICE,
					       .tag = tap_random() % 2 ? (uint8_t)(tap_random() % MT_TAG_COUNT) : 0,
					       .flags = tap_random() % 2 ? (uint8_t)tap_random() : 0,
					       .thread = (uint32_t)width((int)(tap_random() % 33)),
					       .time = width((int)(tap_random() % 65)),
					       .addr = width((int)(tap_random() % 65)),
					       .size = width((int)(tap_random() % 65)),
					       .aux = width((int)(tap_random() % 65)),
					       .aux2 = width((int)(tap_random() % 65)),
					       .stack = (uint32_t)width((int)(tap_random() % 33)),
					       .phase = (uint32_t)width((int)(tap_random() % 33)),
					       .error = (int32_t)width((int)(tap_random() % 33))};
			mt_encode_event(&b, &enc, e);
		}
		struct mt_cursor c = {b.data, b.data + b.len, 0};
		for (int i = 0; i < 1000; i++) {
			struct mt_event out;
			if (mt_decode_event(&c, &dec, &out) || !same(&out, &in[i]))
				wrong++;
		}
		wrong += c.p != c.end;
	}
	ok(!b.failed, "the encoder's buffer grew");
	is(wrong, 0, "200,000 random events encoded in runs and decoded: the same events, every byte read");

	/* shaped bytes: mt_decode_event against the format, ending right after the event and
	   with room to spare */
	uint8_t buf[256];
	size_t good = 0, bad = 0, long_ones = 0;
	wrong = 0;
	for (int i = 0; i < 400000; i++) {
		struct mt_encoder st = {tap_random(), tap_random()}, ref_st = st;
		struct mt_event e, want;
		size_t n = shaped_event(buf), end = n - (i % 3 == 0 && n > 1) + (i % 3 == 2 ? 100 : 0);
		const uint8_t *p = buf;
		memset(buf + n, 0xff, sizeof buf - n); /* continuation bits past the event */
		struct mt_cursor c = {buf, buf + end, 0};
		bool want_good = ref_decode(&p, buf + end, &ref_st, &want);
		int r = mt_decode_event(&c, &st, &e);
		if (want_good)
			wrong +=
			    r != 0 || !same(&e, &want) || c.p != p || st.time != ref_st.time || st.addr != ref_st.addr;
		else
			wrong += r != -1;
		good += want_good;
		bad += !want_good;
		long_ones += n > 40;
	}
	is(wrong, 0, "400,000 shaped events (%zu good, %zu bad, %zu of over 40 bytes) decoded as the format says", good,
	   bad, long_ones);
	ok(good > 10000 && bad > 10000, "both good and bad ones among them");
	free(b.data);
	return done();
}
