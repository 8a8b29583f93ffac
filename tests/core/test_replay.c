/* What a replay keeps of each device's peak (core/replay.c, mt_replay_at_peak) against a
 * second replay stopped at the peak's event, as the report made before: random streams
 * that rise, hold and fall on three devices, with addresses handed out again without a
 * free, frees of addresses never seen, failed calls, VMM handles mapped (which moves their
 * stack), unmapped and released, tags moved, managed and host memory and segments. Every
 * field of every entry live at the peak must be the same, in the same order, and what was
 * kept no more than what was live then. And a device's stamps wrapping while an entry
 * stamped before is still live. */
#include <errno.h>
#include <stdbool.h>

#include "../tap.h"
#include "core/alloc.h"
#include "core/replay.h"

#define ADDRS 48
#define HANDLES 12

static unsigned below(unsigned n)
{
	return (unsigned)(tap_random() % n);
}

/* One event; `grow` is the chance in 100 that it makes memory rather than frees it. */
static struct mt_event random_event(size_t i, unsigned grow)
{
	static const uint8_t devices[] = {0, 0, 1, 2, MT_NO_DEVICE};
	struct mt_event e = {.time = 1000 + i,
			     .device = devices[below(sizeof devices)],
			     .stack = 1 + below(9),
			     .phase = below(4),
			     .tag = (uint8_t)below(5),
			     .flags = (uint8_t)below(4)};
	unsigned roll = below(100);

	e.addr = 0x10000 * (1 + below(ADDRS));
	e.size = 512 * (1 + below(64));
	if (roll < grow / 2)
		e.kind = MT_EV_ALLOC;
	else if (roll < grow * 2 / 3)
		e.kind = (uint8_t[]){MT_EV_VMM_CREATE, MT_EV_MANAGED_ALLOC, MT_EV_HOST_ALLOC}[below(3)];
	else if (roll < grow)
		e.kind = MT_EV_VMM_MAP;
	else if (roll < grow + (100 - grow) / 2)
		e.kind = (uint8_t[]){MT_EV_FREE, MT_EV_FREE, MT_EV_HOST_FREE}[below(3)];
	else
		e.kind = (uint8_t[]){MT_EV_VMM_UNMAP,	  MT_EV_VMM_RELEASE,  MT_EV_TAG_RANGE,
				     MT_EV_SEGMENT_ALLOC, MT_EV_SEGMENT_FREE, MT_EV_ALLOC_FAILED}[below(6)];
	if (e.kind == MT_EV_VMM_CREATE || e.kind == MT_EV_VMM_MAP || e.kind == MT_EV_VMM_RELEASE)
		e.aux = 1 + below(HANDLES);
	if (e.kind == MT_EV_VMM_UNMAP)
		e.size = 0x10000 * (1 + below(4));
	if (below(40) == 0)
		e.error = 2;
	return e;
}

/* Device d's entries live in rp, as mt_replay_at_peak gives them. */
static size_t live_on(const struct mt_replay *rp, int d, struct mt_live *out)
{
	size_t n = 0;

	for (size_t i = 0; i < rp->slots.n; i++) {
		const struct mt_live *l = &rp->live[i];
		if (l->in_use && l->device == d && mt_live_on_device(l))
			out[n++] = *l;
	}
	return n;
}

/* Field by field (not their padding), but for the stamp of what was kept. */
static bool same(const struct mt_live *a, const struct mt_live *b)
{
	return a->addr == b->addr && a->size == b->size && a->time == b->time && a->event == b->event &&
	       a->stack == b->stack && a->phase == b->phase && a->device == b->device && a->kind == b->kind &&
	       a->tag == b->tag && a->flags == b->flags && a->in_use == b->in_use && a->block == b->block &&
	       a->aux == b->aux && a->aux2 == b->aux2 && a->handle == b->handle && a->refs == b->refs &&
	       a->released == b->released;
}

/* A stamped before the stamps wrap, still live; after the wrap the stamp comes round again
 * and A's free must still be kept: A was live at the last peak. */
static bool wrapped_stamps(void)
{
	struct mt_event a = {.kind = MT_EV_ALLOC, .addr = 0x1000, .size = 100}, b = a, c = a, tag = a, free_a = a;
	struct mt_replay r;
	struct mt_live *live = NULL;
	size_t n = 0;
	bool found = false;

	b.addr = 0x2000, c.addr = 0x3000;
	tag.kind = MT_EV_TAG_RANGE, tag.tag = 1;
	free_a.kind = MT_EV_FREE;
	mt_replay_init(&r);
	mt_replay_keep_peaks(&r);
	mt_replay_apply(&r, &a);   /* a peak */
	mt_replay_apply(&r, &tag); /* A kept, stamped 1 */
	mt_replay_apply(&r, &b);   /* a peak: stamps 2 */
	r.kept[0].gen = UINT32_MAX;
	tag.addr = b.addr;
	mt_replay_apply(&r, &tag);    /* B kept, stamped UINT32_MAX */
	mt_replay_apply(&r, &c);      /* a peak: the stamps wrap to 1 */
	mt_replay_apply(&r, &free_a); /* A changes after that peak */
	if (!mt_replay_at_peak(&r, 0, &live, &n))
		for (size_t i = 0; i < n; i++)
			found |= live[i].addr == a.addr;
	mt_free(live);
	mt_replay_free(&r);
	return found && n == 3;
}

/* Keeping that starts after an event would miss what changed before: refused, as is the
 * peak of a replay that never kept. */
static bool refused(void)
{
	struct mt_event a = {.kind = MT_EV_ALLOC, .addr = 0x1000, .size = 100};
	struct mt_replay r;
	struct mt_live *live;
	size_t n;
	bool ok;

	mt_replay_init(&r);
	mt_replay_apply(&r, &a);
	ok = mt_replay_keep_peaks(&r) == EINVAL && mt_replay_at_peak(&r, 0, &live, &n) == EINVAL && !live && !n;
	mt_replay_free(&r);
	mt_replay_init(&r);
	ok = ok && !mt_replay_keep_peaks(&r) && mt_replay_keep_peaks(&r) == EINVAL;
	mt_replay_free(&r);
	return ok;
}

int main(void)
{
	enum { STREAMS = 3000, MOST = 600 };
	static struct mt_event ev[MOST];
	static struct mt_live want[MOST];
	size_t compared = 0, entries = 0, differ = 0, failed = 0, over = 0;

	for (int s = 0; s < STREAMS; s++) {
		struct mt_replay end, second;
		size_t n = 50 + below(MOST - 50), rise = below((unsigned)n), fall = rise + below((unsigned)(n - rise));
		for (size_t i = 0; i < n; i++)
			ev[i] = random_event(i, i < rise ? 80 : i < fall ? 50 : 25);
		mt_replay_init(&end);
		if (mt_replay_keep_peaks(&end)) {
			ok(0, "keeping the peaks");
			return done();
		}
		for (size_t i = 0; i < n; i++)
			mt_replay_apply(&end, &ev[i]);
		for (int d = 0; d < 3; d++) {
			struct mt_live *got;
			size_t ngot, nwant;
			if (!end.dev[d].peak)
				continue;
			mt_replay_init(&second);
			for (size_t i = 0; i <= end.dev[d].peak_event; i++)
				mt_replay_apply(&second, &ev[i]);
			nwant = live_on(&second, d, want);
			mt_replay_free(&second);
			if (mt_replay_at_peak(&end, d, &got, &ngot)) {
				failed++;
				continue;
			}
			compared++;
			entries += nwant;
			over += end.kept[d].n > nwant;
			if (ngot != nwant)
				differ++;
			else
				for (size_t k = 0; k < ngot; k++)
					if (!same(&got[k], &want[k])) {
						differ++;
						break;
					}
			mt_free(got);
		}
		mt_replay_free(&end);
	}
	ok(compared > STREAMS && entries > 10 * compared,
	   "%zu peaks compared over %d streams, %zu entries live at them", compared, STREAMS, entries);
	is(failed, 0, "each device's peak given");
	is(differ, 0, "each peak's entries as a replay stopped there holds them, in its order");
	is(over, 0, "what was kept no more than what was live at the peak");
	ok(wrapped_stamps(), "an entry stamped before the stamps wrapped is kept again after");
	ok(refused(), "keeping asked for once a replay has begun, or the peak asked for without it: EINVAL");
	return done();
}
