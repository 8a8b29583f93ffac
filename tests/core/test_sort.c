/* The reader's event sort: traces made of per-thread runs that overlap a little, a lot,
 * or not at all come out ordered by time, and events of equal time keep file order. */
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "reader/reader.h"

/* runs threads' batches of `batch` events each, every thread's clock drifting by up to
 * `overlap` ns against the others; addr numbers each thread's events in file order */
static int sorted_and_stable(unsigned threads, unsigned batch, unsigned batches, uint64_t overlap, bool ties)
{
	struct mt_trace t;
	uint64_t clock[64] = {0}, next[64] = {0};
	int good = 1;

	memset(&t, 0, sizeof t);
	srand(threads * 1000 + batch);
	for (unsigned b = 0; b < batches; b++)
		for (unsigned th = 0; th < threads; th++)
			for (unsigned i = 0; i < batch; i++) {
				clock[th] += ties ? (uint64_t)(rand() % 2) : 1 + (uint64_t)rand() % 10;
				struct mt_event e = {.kind = MT_EV_MARK,
						     .thread = th,
						     .time = clock[th] + (overlap ? th * overlap / threads : 0),
						     .addr = next[th]++};
				if (mt_trace_add_event(&t, &e))
					return 0;
			}
	if (mt_trace_finish(&t))
		return 0;
	memset(next, 0, sizeof next);
	for (size_t i = 0; i < t.nevents; i++) {
		const struct mt_event *e = &t.events[i];
		if ((i && e->time < t.events[i - 1].time) || e->addr != next[e->thread]++)
			good = 0;
	}
	good &= t.nevents == (size_t)threads * batch * batches;
	mt_trace_free(&t);
	return good;
}

int main(void)
{
	ok(sorted_and_stable(1, 1000, 1, 0, false), "one thread: already sorted");
	ok(sorted_and_stable(2, 512, 20, 0, false), "two threads in batches, clocks together");
	ok(sorted_and_stable(8, 64, 50, 300, false), "eight threads, batches overlapping");
	ok(sorted_and_stable(3, 1, 3000, 5000, false), "every event its own run");
	ok(sorted_and_stable(64, 100, 4, 100000, false), "64 threads, far apart");
	ok(sorted_and_stable(4, 200, 10, 50, true), "many equal times keep file order");
	ok(sorted_and_stable(7, 33, 31, 1 << 20, true), "uneven runs");
	return done();
}
