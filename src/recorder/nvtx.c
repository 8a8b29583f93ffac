/* NVTX v3 injection: every library that includes the NVTX headers loads memtap
 * through NVTX_INJECTION64_PATH and asks it to fill its function table, so
 * InitializeInjectionNvtx2 runs once per library and must be idempotent. Pushed
 * ranges form each thread's phase stack (the innermost names an allocation's phase);
 * start/end ranges and marks are recorded as events. Domains share the thread's stack. */
#include <nvtx3/nvToolsExt.h>
#include <limits.h>
#include <string.h>

#include "recorder/mtp.h"

static uint64_t next_range = 1;
/* range id % 256 -> id << 32 | name, to name what ends; a range whose slot a later one
 * took ends without a name rather than with the other's */
static uint64_t range_names[256];
uint32_t mtp_phase_cut;

/* The text of an event's message; registered strings are memtap string ids. */
static uint32_t message_id(const nvtxEventAttributes_t *a)
{
	char buf[256];
	size_t i = 0;

	if (!a)
		return 0;
	switch (a->messageType) {
	case NVTX_MESSAGE_TYPE_ASCII:
		return mtp_intern(a->message.ascii);
	case NVTX_MESSAGE_TYPE_REGISTERED: {
		/* memtap's own ids (nvtxDomainRegisterStringA): any other handle names nothing */
		uintptr_t id = (uintptr_t)a->message.registered;
		return id <= mtp_table_count(&mtp_strings) ? (uint32_t)id : 0;
	}
	case NVTX_MESSAGE_TYPE_UNICODE:
		for (const wchar_t *w = a->message.unicode; w && *w && i + 1 < sizeof buf; w++)
			buf[i++] = *w > 0 && *w < 128 ? (char)*w : '?';
		buf[i] = '\0';
		return mtp_intern(buf);
	default:
		return 0;
	}
}

static void record_simple(uint8_t kind, uint64_t aux, uint64_t aux2)
{
	/* never part of a CUDA call: inside another hook it is a signal handler's, and recorded */
	if (mtp_enter_at(NULL)) {
		struct mt_event e = {.kind = kind, .device = MT_NO_DEVICE, .aux = aux, .aux2 = aux2};
		mtp_record(&e, false);
	}
	mtp_leave();
}

/* NVTX's answer: the level, or a negative number for an error */
static int level_of(uint64_t depth)
{
	return depth < INT_MAX ? (int)depth : INT_MAX;
}

static int push(uint32_t name)
{
	struct mtp_thread *t = &mtp_self;
	uint64_t level = t->phase_depth;

	/* a push past the slots (a loop that never pops) overwrites the name of the level
	   MTP_PHASE_SLOTS below: that level's phase reads as "not kept" from then on */
	if (level >= MTP_PHASE_SLOTS && !__atomic_load_n(&mtp_phase_cut, __ATOMIC_RELAXED))
		__atomic_store_n(&mtp_phase_cut, mtp_intern("(an NVTX range nested more than 64 deep: name not kept)"),
				 __ATOMIC_RELAXED);
	t->phase[level % MTP_PHASE_SLOTS] = (uint64_t)(uint32_t)level << 32 | name;
	t->phase_depth = level + 1;
	record_simple(MT_EV_RANGE_PUSH, name, 0);
	return level_of(level);
}

static int pop(void)
{
	struct mtp_thread *t = &mtp_self;

	if (t->phase_depth == 0)
		return -1;
	record_simple(MT_EV_RANGE_POP, 0, 0);
	return level_of(--t->phase_depth);
}

static nvtxRangeId_t start(uint32_t name)
{
	nvtxRangeId_t id = __atomic_fetch_add(&next_range, 1, __ATOMIC_RELAXED);

	__atomic_store_n(&range_names[id % 256], (uint64_t)(uint32_t)id << 32 | name, __ATOMIC_RELAXED);
	mtp_set_open_range(name);
	record_simple(MT_EV_RANGE_START, name, id);
	return id;
}

static void end(nvtxRangeId_t id)
{
	uint64_t slot = __atomic_load_n(&range_names[id % 256], __ATOMIC_RELAXED);

	record_simple(MT_EV_RANGE_END, slot >> 32 == (uint32_t)id ? (uint32_t)slot : 0, id);
	mtp_set_open_range(0);
}

static int NVTX_API push_a(const char *m)
{
	return push(mtp_intern(m));
}
static int NVTX_API push_ex(const nvtxEventAttributes_t *a)
{
	return push(message_id(a));
}
static int NVTX_API pop_core(void)
{
	return pop();
}
static nvtxRangeId_t NVTX_API start_a(const char *m)
{
	return start(mtp_intern(m));
}
static nvtxRangeId_t NVTX_API start_ex(const nvtxEventAttributes_t *a)
{
	return start(message_id(a));
}
static void NVTX_API end_core(nvtxRangeId_t id)
{
	end(id);
}
static void NVTX_API mark_a(const char *m)
{
	record_simple(MT_EV_NVTX_MARK, mtp_intern(m), 0);
}
static void NVTX_API mark_ex(const nvtxEventAttributes_t *a)
{
	record_simple(MT_EV_NVTX_MARK, message_id(a), 0);
}

static int NVTX_API d_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	(void)d;
	return push(message_id(a));
}
static int NVTX_API d_pop(nvtxDomainHandle_t d)
{
	(void)d;
	return pop();
}
static nvtxRangeId_t NVTX_API d_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	(void)d;
	return start(message_id(a));
}
static void NVTX_API d_end(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
	(void)d;
	end(id);
}
static void NVTX_API d_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	(void)d;
	mark_ex(a);
}
static nvtxDomainHandle_t NVTX_API d_create(const char *name)
{
	return (nvtxDomainHandle_t)(uintptr_t)mtp_intern(name);
}
static nvtxStringHandle_t NVTX_API d_register(nvtxDomainHandle_t d, const char *s)
{
	(void)d;
	return (nvtxStringHandle_t)(uintptr_t)mtp_intern(s);
}

static void put(NvtxFunctionTable table, unsigned size, unsigned id, void *fn)
{
	if (id < size && table[id])
		*table[id] = (NvtxFunctionPointer)fn;
}

MTP_EXPORT int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
	const NvtxExportTableCallbacks *cb = get ? (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS) : NULL;
	NvtxFunctionTable core = NULL, core2 = NULL;
	unsigned n1 = 0, n2 = 0;

	if (!cb || cb->struct_size < sizeof *cb || !mtp_start())
		return 0;
	if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n1) ||
	    !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n2))
		return 0;
	put(core, n1, NVTX_CBID_CORE_RangePushA, (void *)push_a);
	put(core, n1, NVTX_CBID_CORE_RangePushEx, (void *)push_ex);
	put(core, n1, NVTX_CBID_CORE_RangePop, (void *)pop_core);
	put(core, n1, NVTX_CBID_CORE_RangeStartA, (void *)start_a);
	put(core, n1, NVTX_CBID_CORE_RangeStartEx, (void *)start_ex);
	put(core, n1, NVTX_CBID_CORE_RangeEnd, (void *)end_core);
	put(core, n1, NVTX_CBID_CORE_MarkA, (void *)mark_a);
	put(core, n1, NVTX_CBID_CORE_MarkEx, (void *)mark_ex);
	put(core2, n2, NVTX_CBID_CORE2_DomainRangePushEx, (void *)d_push);
	put(core2, n2, NVTX_CBID_CORE2_DomainRangePop, (void *)d_pop);
	put(core2, n2, NVTX_CBID_CORE2_DomainRangeStartEx, (void *)d_start);
	put(core2, n2, NVTX_CBID_CORE2_DomainRangeEnd, (void *)d_end);
	put(core2, n2, NVTX_CBID_CORE2_DomainMarkEx, (void *)d_mark);
	put(core2, n2, NVTX_CBID_CORE2_DomainCreateA, (void *)d_create);
	put(core2, n2, NVTX_CBID_CORE2_DomainRegisterStringA, (void *)d_register);
	return 1;
}
