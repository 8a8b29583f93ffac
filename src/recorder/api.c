/* The public API (include/memtap.h) as the injected library provides it: tags and
 * marks become events; a snapshot is the trace so far, closed, in a file of its own. */
#define MEMTAP_BUILDING
#include "memtap.h"

#include <errno.h>

#include "recorder/mtp.h"

static bool recording(void)
{
	return mtp_state_now() == MTP_ON || mtp_state_now() == MTP_CLOSED;
}

static int event(uint8_t kind, uint8_t tag, uint64_t addr, uint64_t size, uint64_t aux)
{
	if (!recording())
		return ENOTSUP;
	/* never part of a CUDA call: inside another hook it is a signal handler's, and recorded */
	if (mtp_enter_at(NULL)) {
		struct mt_event e = {
		    .kind = kind, .device = MT_NO_DEVICE, .tag = tag, .addr = addr, .size = size, .aux = aux};
		mtp_record(&e, kind == MT_EV_TAG_RANGE);
	}
	mtp_leave();
	return 0;
}

MTP_EXPORT int memtap_tag_push(int category)
{
	struct mtp_thread *t = &mtp_self;

	if (category <= MT_TAG_NONE || category >= MT_TAG_COUNT)
		return EINVAL;
	if (t->tag_depth >= (int)sizeof t->tag)
		return ENOSPC;
	t->tag[t->tag_depth++] = (uint8_t)category;
	return event(MT_EV_TAG_PUSH, (uint8_t)category, 0, 0, 0);
}

MTP_EXPORT int memtap_tag_pop(void)
{
	struct mtp_thread *t = &mtp_self;

	if (t->tag_depth == 0)
		return EINVAL;
	t->tag_depth--;
	return event(MT_EV_TAG_POP, 0, 0, 0, 0);
}

MTP_EXPORT int memtap_tag_range(const void *ptr, size_t size, int category)
{
	/* a range past the end of the address space names no memory: refused, never recorded */
	if (!ptr || !size || size > MT_MAX_SIZE || (uintptr_t)ptr + size < (uintptr_t)ptr || category <= MT_TAG_NONE ||
	    category >= MT_TAG_COUNT)
		return EINVAL;
	return event(MT_EV_TAG_RANGE, (uint8_t)category, (uintptr_t)ptr, size, 0);
}

MTP_EXPORT int memtap_mark(const char *name)
{
	if (!name)
		return EINVAL;
	return recording() ? event(MT_EV_MARK, 0, 0, 0, mtp_intern(name)) : ENOTSUP;
}

MTP_EXPORT int memtap_snapshot(const char *path)
{
	int r;

	if (!path || !*path)
		return EINVAL;
	if (!recording())
		return ENOTSUP;
	r = event(MT_EV_SNAPSHOT, 0, 0, 0, mtp_intern(path));
	return r ? r : mtp_writer_snapshot(path);
}

MTP_EXPORT int memtap_active(void)
{
	return mtp_state_now() == MTP_ON;
}
