/* The injected library's interning tables: ids from 1, the same key the same id, full
 * tables answer 0, and a re-entry on the same thread (a signal handler interning while
 * the thread holds the table's lock) answers 0 at once instead of deadlocking. */
#include <stdio.h>
#include <string.h>

#include "../tap.h"
#include "recorder/mtp.h"

__thread struct mtp_thread mtp_self MTP_TLS; /* record.c's, which this test does not link */
struct mtp_options mtp_opt;

int main(void)
{
	struct mtp_table t = {.lock = PTHREAD_MUTEX_INITIALIZER};
	uint32_t a, b;
	size_t len;

	ok(mtp_table_init(&t, 4, 4096) == 0, "a table of 4 ids");
	a = mtp_table_intern(&t, "forward", 7);
	b = mtp_table_intern(&t, "backward", 8);
	is(a, 1, "the first key gets id 1");
	is(b, 2, "the next id 2");
	is(mtp_table_intern(&t, "forward", 7), a, "the same key, the same id");
	ok(memcmp(mtp_table_get(&t, b, &len), "backward", 8) == 0 && len == 8, "an id gives its key back");
	is(mtp_table_count(&t), 2, "two ids published");

	mtp_self.interning = true; /* as if a signal arrived while this thread inserted */
	is(mtp_table_intern(&t, "tick 1", 6), 0, "re-entered: no id, and no deadlock");
	is(mtp_table_intern(&t, "forward", 7), a, "re-entered: keys already there are still found");
	mtp_self.interning = false;
	is(t.full, 1, "the key that got no id is counted");
	is(mtp_table_intern(&t, "tick 1", 6), 3, "after the insert, the key gets its id");
	mtp_table_intern(&t, "optimizer", 9);
	is(mtp_table_intern(&t, "one too many", 12), 0, "a full table answers 0");
	is(t.full, 2, "and counts it");

	/* keys of one length told apart by their bytes (enough of them that probes meet) */
	{
		struct mtp_table u = {.lock = PTHREAD_MUTEX_INITIALIZER};
		bool apart = mtp_table_init(&u, 64, 4096) == 0;
		char key[16];

		for (int round = 0; round < 2; round++)
			for (uint32_t i = 0; i < 64; i++) {
				snprintf(key, sizeof key, "layer.%02u", i);
				apart &= mtp_table_intern(&u, key, 8) == i + 1;
			}
		ok(apart, "keys of the same length get ids of their own");
	}
	return done();
}
