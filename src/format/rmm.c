/* RAPIDS RMM logging_resource_adaptor CSV read into a trace: the header
 * "Thread,Time,Action,Pointer,Size,Stream", then rows like
 * "140215,14:03:07.123456,allocate,0x7f5e40000000,4096,0x0". allocate, free and
 * "allocate failure" become events on device 0 (the log has no device); the time of
 * day becomes nanoseconds, carried past midnight. A malformed row is refused with its
 * line number. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/reader.h"
#include "util/map.h"

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
	if (n >= cap)
		return false;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return true;
}

static bool number(const char *s, int base, uint64_t *out)
{
	char *end;

	if (!strcmp(s, "(nil)")) {
		*out = 0;
		return true;
	}
	errno = 0;
	*out = strtoull(s, &end, base);
	return end != s && !*end && !errno;
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
		char thread[64], time[64], action[64], ptr[64], bytes[64], stream[64];
		uint64_t addr, n, tid, idx, h, m;
		double s;
		struct mt_event e = {.device = 0};

		line++;
		if (len && p[len - 1] == '\r')
			len--;
		if (line == 1 || len == 0)
			goto next;
		if (!field(p, len, 0, thread, sizeof thread) || !field(p, len, 1, time, sizeof time) ||
		    !field(p, len, 2, action, sizeof action) || !field(p, len, 3, ptr, sizeof ptr) ||
		    !field(p, len, 4, bytes, sizeof bytes) || !field(p, len, 5, stream, sizeof stream) ||
		    sscanf(time, "%lu:%lu:%lf", &h, &m, &s) != 3 || !number(ptr, 16, &addr) ||
		    !number(bytes, 10, &n) || !number(thread, 10, &tid)) {
			snprintf(t->problem, sizeof t->problem, "RMM log, line %zu: not Thread,Time,Action,Pointer,Size,Stream",
				 line);
			r = EINVAL;
			break;
		}
		e.time = (uint64_t)((double)(h * 3600 + m * 60) * 1e9 + s * 1e9) + day;
		if (e.time + 12ull * 3600 * 1000000000 < last) { /* past midnight */
			day += 24ull * 3600 * 1000000000;
			e.time += 24ull * 3600 * 1000000000;
		}
		last = e.time;
		if (!mt_map_get(&threads, tid, &idx)) {
			idx = next_thread++;
			mt_map_put(&threads, tid, idx);
		}
		e.thread = (uint32_t)idx;
		number(stream, 16, &e.aux);
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
			snprintf(t->problem, sizeof t->problem, "RMM log, line %zu: unknown action '%.40s'", line, action);
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
	t->complete = r == 0;
	return r;
}
