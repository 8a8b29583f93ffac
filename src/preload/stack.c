/* Native stacks: libunwind's unw_backtrace with its per-thread cache, memtap's own
 * frames dropped, the rest interned so a repeated stack costs one id. Symbols are
 * not looked up here: the trace carries return addresses and the module map, and
 * `memtap report` resolves them offline. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "preload/mtp.h"

#define MAX_FRAMES 256
#define OWN_FRAMES 8 /* at most this many of memtap's frames sit above the caller */

uintptr_t mtp_self_start, mtp_self_end;

uint32_t mtp_stack_capture(void)
{
	void *frames[MAX_FRAMES + OWN_FRAMES];
	int n = unw_backtrace(frames, (int)mtp_opt.depth + OWN_FRAMES);
	int first = 0;

	while (first < n && (uintptr_t)frames[first] >= mtp_self_start && (uintptr_t)frames[first] < mtp_self_end)
		first++;
	n -= first;
	if (n > (int)mtp_opt.depth)
		n = (int)mtp_opt.depth;
	if (n <= 0)
		return 0;
	return mtp_table_intern(&mtp_stacks, frames + first, (size_t)n * sizeof frames[0]);
}
