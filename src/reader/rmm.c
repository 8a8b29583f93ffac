/* RAPIDS RMM logging_resource_adaptor CSV read into a trace: the header
 * "Thread,Time,Action,Pointer,Size,Stream", then rows like
 * "140215,14:03:07.123456,allocate,0x7f5e40000000,4096,0x0". allocate, free and
 * "allocate failure" become events on device 0 (the log has no device); the time of
 * day becomes nanoseconds, carried past midnight. A malformed row is refused with its
 * line number and what is wrong: every field is read strictly (digits only, a time of
 * day in integers, a size no address space exceeds). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader/reader.h"
#include "core/map.h"
#include "core/text.h"

static const char header[] = "Thread,Time,Action,Pointer,Size,Stream";

bool mt_is_rmm_log(const uint8_t *data, size_t size)
{
	return size >= sizeof header - 1 && memcmp(data, header, sizeof header - 1) == 0;
}

/* Field i (0-based) of a row, copied into buf. */
static bool field(const char *row, size_t len, int i, char *buf, size_t cap)
{
	const char *p = row, *end = row + len;

	for (int k = 0; k < i; k++) {
		p = memchr(p, ',', (size_t)(end - p));
		if (!p)
			return false;
		p++;
	}
	const char *q = memchr(p, ',', (size_t)(end - p));
	size_t n = (size_t)((q ? q : end) - p);
	if (n >= cap || memchr(p, '\0', n)) /* a NUL would cut the field short unseen */
		return false;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return true;
}

/* Digits only (after 0x in base 16), no sign or blank, in range: strtoull takes "-1" and
 * "1e308" is no size. "(nil)" is the null pointer. */
static bool number(const char *s, int base, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;

	if (!strcmp(s, "(nil)")) {
		*out = 0;
		return true;
	}
	if (base == 16 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		p += 2;
	if (!*p)
		return false;
	for (; *p; p++) {
		int d = *p >= '0' && *p <= '9'	 ? *p - '0'
			: *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
			: *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
						 : 99;
		if (d >= base || v > (max - (uint64_t)d) / (uint64_t)base)
			return false;
		v = v * (uint64_t)base + (uint64_t)d;
	}
	*out = v;
	return true;
}

/* "HH:MM:SS" with up to nine digits of fraction, as nanoseconds since midnight; no
 * floating point, so no NaN, infinity or 1e308 gets through. */
static bool time_of_day(const char *s, uint64_t *ns)
{
	uint64_t h, m, sec, frac = 0, scale = 1000000000;
	char hh[3], mm[3], ss[3];
	const char *dot = strchr(s, '.');
	size_t whole = dot ? (size_t)(dot - s) : strlen(s);

	if (whole != 8 || s[2] != ':' || s[5] != ':')
		return false;
	memcpy(hh, s, 2), memcpy(mm, s + 3, 2), memcpy(ss, s + 6, 2);
	hh[2] = mm[2] = ss[2] = '\0';
	if (!number(hh, 10, 23, &h) || !number(mm, 10, 59, &m) || !number(ss, 10, 60, &sec))
		return false;
	if (dot) {
		size_t n = strlen(dot + 1);
		if (n == 0 || n > 9 || !number(dot + 1, 10, 999999999, &frac))
			return false;
		while (n--)
			scale /= 10;
		frac *= scale;
	}
	*ns = ((h * 60 + m) * 60 + sec) * 1000000000 + frac;
	return true;
}

int mt_trace_from_rmm(const uint8_t *data, size_t size, struct mt_trace *t)
{
	struct mt_map threads = {0};
	const char *p = (const char *)data, *end = p + size;
	uint64_t day = 0, last = 0, next_thread = 1;
	size_t line = 0;
	int r = 0;
	struct mt_event dev = {.kind = MT_EV_DEVICE, .device = 0, .thread = 1};

	t->info = mt_trace_own(t, 64);
	dev.aux = mt_trace_add_string(t, "device 0 (RMM log)");
	if (!t->info || !dev.aux || mt_trace_add_event(t, &dev))
		return ENOMEM;
	strcpy(t->info, "backend=rmm-log\nstart_monotonic_ns=0\n");
	while (p < end && !r) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = (size_t)((nl ? nl : end) - p);
		char thread[64], time[64], action[64], ptr[64], bytes[64], stream[64], why[160];
		const char *bad = NULL;
		uint64_t addr, n, tid, idx;
		struct mt_event e = {.device = 0};

		line++;
		if (len && p[len - 1] == '\r')
			len--;
		if (line == 1 || len == 0)
			goto next;
		if (!field(p, len, 0, thread, sizeof thread) || !field(p, len, 1, time, sizeof time) ||
		    !field(p, len, 2, action, sizeof action) || !field(p, len, 3, ptr, sizeof ptr) ||
		    !field(p, len, 4, bytes, sizeof bytes) || !field(p, len, 5, stream, sizeof stream))
			bad = "not Thread,Time,Action,Pointer,Size,Stream";
		else if (!number(thread, 10, UINT64_MAX, &tid))
			bad = "the thread is not a number";
		else if (!time_of_day(time, &e.time))
			bad = "the time is not HH:MM:SS.ffffff";
		else if (!number(ptr, 16, UINT64_MAX, &addr))
			bad = "the pointer is not a hexadecimal address";
		else if (!number(bytes, 10, MT_MAX_SIZE, &n))
			bad = "the size is not a number of bytes an address space can hold";
		else if (!number(stream, 16, UINT64_MAX, &e.aux))
			bad = "the stream is not a hexadecimal handle";
		if (bad) {
			snprintf(t->problem, sizeof t->problem, "RMM log, line %zu: %s", line, bad);
			r = EINVAL;
			break;
		}
		e.time += day;
		if (e.time + 12ull * 3600 * 1000000000 < last) { /* past midnight */
			day += 24ull * 3600 * 1000000000;
			e.time += 24ull * 3600 * 1000000000;
		}
		last = e.time;
		if (!mt_map_get(&threads, tid, &idx) && (r = mt_map_put(&threads, tid, idx = next_thread++)))
			break;
		e.thread = (uint32_t)idx;
		if (!strcmp(action, "allocate")) {
			e.kind = MT_EV_ALLOC;
			e.addr = addr;
			e.size = n;
		} else if (!strcmp(action, "free")) {
			e.kind = MT_EV_FREE;
			e.addr = addr;
		} else if (!strcmp(action, "allocate failure")) {
			e.kind = MT_EV_ALLOC_FAILED;
			e.size = n;
			e.error = 2;
		} else {
			snprintf(t->problem, sizeof t->problem, "RMM log, line %zu: unknown action '%.40s'", line,
				 mt_text_line(action));
			r = EINVAL;
			break;
		}
		if (mt_trace_check_event(t, &e, why, sizeof why)) {
			snprintf(t->problem, sizeof t->problem, "RMM log, line %zu: %s", line, why);
			r = EINVAL;
			break;
		}
		r = mt_trace_add_event(t, &e);
	next:
		p = nl ? nl + 1 : end;
	}
	mt_map_free(&threads);
	if (!r)
		r = mt_trace_finish(t);
	if (r == ENOMEM)
		snprintf(t->problem, sizeof t->problem, "out of memory reading the RMM log");
	t->complete = r == 0;
	return r;
}
