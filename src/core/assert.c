/* A failed assertion: one line on stderr without allocating (it may fire inside a job's
 * hook), then abort. */
#include "core/assert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void mt_assert_fail(const char *cond, const char *file, int line)
{
	char msg[512];
	int n = snprintf(msg, sizeof msg, "memtap: assertion failed: %s (%s:%d)\n", cond, file, line);

	if (n > 0 && write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1) < 0) {
		/* nowhere left to say it */
	}
	abort();
}
