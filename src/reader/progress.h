/* Progress of the offline side's long loops (reading, replaying), for a person at a
 * terminal: silent unless a tool installs a hook (tools/memtap/progress.c), and cheap
 * when it does, since callers report only every 65536 steps. */
#ifndef MT_PROGRESS_H
#define MT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef void (*mt_progress_fn)(const char *what, uint64_t done, uint64_t total);
extern mt_progress_fn mt_progress_hook;

/* In loops: step i of n. */
static inline void mt_progress(const char *what, size_t i, size_t n)
{
	if (mt_progress_hook && (i & 0xffff) == 0)
		mt_progress_hook(what, i, n);
}

#endif
