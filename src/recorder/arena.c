/* memtap's own memory: whole pages from mmap, counted against max_memory, so that
 * nothing memtap keeps comes from (or disturbs) the application's heap. */
#include "recorder/mtp.h"

#include <string.h>
#include <sys/mman.h>

static size_t mapped;

void *mtp_map(size_t bytes)
{
	size_t cur = __atomic_add_fetch(&mapped, bytes, __ATOMIC_RELAXED);
	void *p;

	if (mtp_opt.max_memory && cur > mtp_opt.max_memory) {
		__atomic_sub_fetch(&mapped, bytes, __ATOMIC_RELAXED);
		return NULL;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		__atomic_sub_fetch(&mapped, bytes, __ATOMIC_RELAXED);
		return NULL;
	}
	return p;
}

void mtp_unmap(void *p, size_t bytes)
{
	if (p) {
		munmap(p, bytes);
		__atomic_sub_fetch(&mapped, bytes, __ATOMIC_RELAXED);
	}
}

void *mtp_grow(void *old, size_t old_cap, size_t new_cap)
{
	void *p = mtp_map(new_cap);

	if (p && old) {
		memcpy(p, old, old_cap);
		mtp_unmap(old, old_cap);
	}
	return p;
}

size_t mtp_mapped_bytes(void)
{
	return __atomic_load_n(&mapped, __ATOMIC_RELAXED);
}
