/* Stable natural merge sort. The writer drains each thread's ring in order, so a trace is
 * made of long sorted runs that overlap only a little where threads' batches meet. Each
 * merge leaves in place the head of the left run and the tail of the right run that are
 * already in order, and buffers only the smaller of what remains: a nearly sorted trace
 * costs a scan and a small buffer, not a second copy of every event. Equal times keep
 * file order, so one thread's events stay in order. */
#include "core/assert.h"
#include "core/format.h"
#include "core/alloc.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static size_t first_after(const struct mt_event *e, size_t lo, size_t hi, uint64_t time, bool or_equal)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (e[mid].time < time || (or_equal && e[mid].time == time))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int merge(struct mt_event *e, size_t lo, size_t mid, size_t hi, struct mt_event **tmp, size_t *cap)
{
	size_t nl, nr;

	lo = first_after(e, lo, mid, e[mid].time, true);      /* left events not later than the right's first */
	hi = first_after(e, mid, hi, e[mid - 1].time, false); /* right events not earlier than the left's last */
	nl = mid - lo;
	nr = hi - mid;
	if (!nl || !nr)
		return 0;
	if ((nl < nr ? nl : nr) > *cap) {
		struct mt_event *v = mt_realloc(*tmp, (nl < nr ? nl : nr) * sizeof *v);
		if (!v)
			return ENOMEM;
		*tmp = v;
		*cap = nl < nr ? nl : nr;
	}
	if (nl <= nr) { /* buffer the left, merge forwards */
		struct mt_event *a = *tmp, *b = e + mid, *k = e + lo;
		memcpy(a, e + lo, nl * sizeof *a);
		while (a < *tmp + nl && b < e + hi)
			*k++ = b->time < a->time ? *b++ : *a++;
		memcpy(k, a, (size_t)(*tmp + nl - a) * sizeof *a);
	} else { /* buffer the right, merge backwards */
		struct mt_event *a = e + mid, *b = *tmp + nr, *k = e + hi;
		memcpy(*tmp, e + mid, nr * sizeof **tmp);
		while (b > *tmp && a > e + lo)
			*--k = a[-1].time > b[-1].time ? *--a : *--b;
		memcpy(e + lo, *tmp, (size_t)(b - *tmp) * sizeof **tmp);
	}
	return 0;
}

static bool sorted(const struct mt_event *e, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (e[i].time < e[i - 1].time)
			return false;
	return true;
}

int mt_sort_events(struct mt_event *e, size_t n)
{
	size_t *start = NULL, runs = 0, cap = 0, tcap = 0;
	struct mt_event *tmp = NULL;
	int r = 0;
	size_t first = 1;

	while (first < n && e[first].time >= e[first - 1].time)
		first++;
	if (first >= n)
		return 0; /* in order already: nothing to buffer */
	for (size_t i = 0; i < n; i++) {
		if (i && e[i].time >= e[i - 1].time)
			continue;
		if (runs == cap) {
			size_t *v = mt_realloc(start, (cap = cap ? 2 * cap : 64) * sizeof *v);
			if (!v) {
				mt_free(start);
				return ENOMEM;
			}
			start = v;
		}
		start[runs++] = i;
	}
	while (runs > 1 && !r) { /* merge pairs of neighbouring runs */
		size_t k = 0;
		for (size_t i = 0; i < runs && !r; i += 2) {
			if (i + 1 < runs)
				r = merge(e, start[i], start[i + 1], i + 2 < runs ? start[i + 2] : n, &tmp, &tcap);
			start[k++] = start[i];
		}
		runs = k;
	}
	mt_free(tmp);
	mt_free(start);
	mt_assert_walk(r || sorted(e, n));
	return r;
}
