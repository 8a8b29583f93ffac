/* The offline hash map (core/map.h) against a plain table of the same keys: puts, gets,
 * deletes and values in place at random, with a walk over the slots that deletes as it goes; a churn of keys
 * that come and go as a replay's addresses do; and a delete whose next slot is empty
 * leaves no tombstone, nor the tombstones before it (they made probes long and the table
 * regrow often where most keys come and go). */
#include <stdint.h>
#include <stdlib.h>

#include "../tap.h"
#include "core/map.h"

#define KEYS 4096

int main(void)
{
	static uint64_t want[KEYS];
	static bool in[KEYS];
	struct mt_map m = {0};
	size_t count = 0, wrong = 0;

	for (int i = 0; i < 400000; i++) {
		uint64_t r = tap_random(), k = r % KEYS, v = 0, *at;
		bool found;
		switch ((r >> 32) % 4) {
		case 0:
			count += !in[k];
			in[k] = true;
			want[k] = r;
			wrong += mt_map_put(&m, k * 4096, r) != 0;
			break;
		case 1:
			found = mt_map_del(&m, k * 4096, &v);
			wrong += found != in[k] || (found && v != want[k]);
			count -= in[k];
			in[k] = false;
			break;
		case 2: /* the value in place: what was there, then the new one */
			if (!(at = mt_map_at(&m, k * 4096, &found))) {
				wrong++;
				break;
			}
			wrong += found != in[k] || *at != (found ? want[k] : 0);
			count += !in[k];
			in[k] = true;
			*at = want[k] = r;
			break;
		default:
			found = mt_map_get(&m, k * 4096, &v);
			wrong += found != in[k] || (found && v != want[k]);
		}
	}
	is(wrong, 0, "400,000 puts, deletes, gets and values in place at random: each answer the plain table's");
	is(m.count, count, "the count is the plain table's");
	size_t seen = 0;
	for (size_t i = 0; i < m.cap; i++) /* a walk that deletes every other entry it meets */
		if (m.used[i] == 1) {
			seen++;
			if (seen % 2 && mt_map_del(&m, m.keys[i], NULL))
				in[m.keys[i] / 4096] = false;
		}
	is(seen, count, "a walk over the slots that deletes as it goes meets every entry once");
	for (uint64_t k = 0; k < KEYS; k++)
		wrong += mt_map_get(&m, k * 4096, NULL) != in[k];
	is(wrong, 0, "after it, the entries left are those not deleted");
	for (size_t i = m.cap; i-- > 0;) /* each delete's next slot is empty by then */
		if (m.used[i] == 1)
			mt_map_del(&m, m.keys[i], NULL);
	ok(m.count == 0 && m.occupied == 0, "deleted from the last slot down, no tombstone is left (%zu slots taken)",
	   m.occupied);
	mt_map_free(&m);

	/* 500 live keys, each freed at random and replaced by a new one, a million times */
	uint64_t live[500];
	for (int i = 0; i < 500; i++)
		mt_map_put(&m, live[i] = tap_random() & ~0xfffull, 1);
	for (int i = 0; i < 1000000; i++) {
		uint64_t *k = &live[tap_random() % 500];
		wrong += !mt_map_del(&m, *k, NULL);
		wrong += mt_map_put(&m, *k = tap_random() & ~0xfffull, 1) != 0;
	}
	is(wrong, 0, "a million frees and allocations of 500 live keys");
	mt_map_free(&m);
	return done();
}
