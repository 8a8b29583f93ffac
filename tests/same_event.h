/* Whether two events are the same, field by field (their padding aside): for the tests
 * that read one trace two ways. */
#ifndef MT_TEST_SAME_EVENT_H
#define MT_TEST_SAME_EVENT_H

#include <stdbool.h>

#include "core/format.h"

static inline bool same_event(const struct mt_event *a, const struct mt_event *b)
{
	return a->kind == b->kind && a->device == b->device && a->tag == b->tag && a->flags == b->flags &&
	       a->thread == b->thread && a->time == b->time && a->addr == b->addr && a->size == b->size &&
	       a->aux == b->aux && a->aux2 == b->aux2 && a->stack == b->stack && a->phase == b->phase &&
	       a->error == b->error;
}

#endif
