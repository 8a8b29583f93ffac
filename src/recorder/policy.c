/* memtap's side of the Lua policies: loads the engine (libmemtap-policy.so, RTLD_LOCAL,
 * so neither it nor Lua is visible to the application) when policy files are given, at
 * the process's first call into CUDA, NVTX or memtap's API (a shell that execs runs none),
 * answers its calls, and keeps what the hooks must check synchronously: per-device caps
 * (an allocation past its device's cap fails with the real out-of-memory code before the
 * driver is asked) and whether stacks are recorded outside capture ranges. */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recorder/allocator.h"
#include "core/path.h"
#include "policy/policy.h"
#include "recorder/hooks.h"

const struct mt_policy_engine *mtp_policy;
bool mtp_capping, mtp_capturing;
static uint64_t caps[MT_NO_DEVICE];    /* bytes */
static double fractions[MT_NO_DEVICE]; /* or a fraction of the device */
static char dir[PATH_MAX];

/* An id from the engine may come from a script (an event table's stack_id): NULL unless
 * the table has it. */
static const void *entry(struct mtp_table *t, uint32_t id, size_t *len)
{
	*len = 0;
	return id && id <= mtp_table_count(t) ? mtp_table_get(t, id, len) : NULL;
}

static const void *string(uint32_t id, size_t *len)
{
	return entry(&mtp_strings, id, len);
}

static const void *stack(uint32_t id, size_t *len)
{
	return entry(&mtp_stacks, id, len);
}

static void say(const char *line)
{
	mtp_warn("%s", line + (strncmp(line, "memtap: ", 8) == 0 ? 8 : 0));
}

/* Recorded whatever the hook depth: a policy's mark or snapshot inside an OOM handler
 * belongs in the trace. */
static void record_named(uint8_t kind, const char *name)
{
	struct mt_event e = {.kind = kind, .device = MT_NO_DEVICE, .aux = mtp_intern(name)};

	if (mtp_state_now() == MTP_ON)
		mtp_record(&e, false);
}

static void mark(const char *name)
{
	record_named(MT_EV_MARK, name);
}

/* memtap's own notes (caps, capture ranges, allocator knobs): marks that are not
 * iteration boundaries. Not in a process that has recorded nothing (a launcher's shell):
 * it leaves no file. */
void mtp_note(const char *text)
{
	if (__atomic_load_n(&mtp_logs, __ATOMIC_ACQUIRE))
		record_named(MT_EV_NVTX_MARK, text);
}

static int snapshot(int fd, const char *path, uint64_t limit)
{
	record_named(MT_EV_SNAPSHOT, path);
	return mtp_writer_snapshot_fd(fd, limit);
}

static int capture(bool on, uint8_t device)
{
	static void *start, *stop, *get_current, *retain, *set_current;
	PFN_cuCtxGetCurrent_v4000 get = (PFN_cuCtxGetCurrent_v4000)mtp_lookup_once(&get_current, "cuCtxGetCurrent");
	CUresult (*fn)(void) = (CUresult(*)(void))(on ? mtp_lookup_once(&start, "cuProfilerStart")
						      : mtp_lookup_once(&stop, "cuProfilerStop"));
	CUcontext ctx = NULL;
	CUresult r;

	if (!fn || !get)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* the policy thread has no context of its own: use the device's primary one */
	if (get(&ctx) == CUDA_SUCCESS && !ctx) {
		PFN_cuDevicePrimaryCtxRetain_v7000 ret =
		    (PFN_cuDevicePrimaryCtxRetain_v7000)mtp_lookup_once(&retain, "cuDevicePrimaryCtxRetain");
		PFN_cuCtxSetCurrent_v4000 set =
		    (PFN_cuCtxSetCurrent_v4000)mtp_lookup_once(&set_current, "cuCtxSetCurrent");
		if (ret && set && ret(&ctx, device) == CUDA_SUCCESS)
			set(ctx);
	}
	if ((r = fn()) == CUDA_SUCCESS) {
		__atomic_store_n(&mtp_capturing, on, __ATOMIC_RELAXED);
		mtp_note(on ? "memtap.capture_start" : "memtap.capture_stop");
	}
	return (int)r;
}

static void set_cap(int device, uint64_t bytes, double fraction)
{
	char text[96];
	bool any = false;

	for (int d = 0; d < MT_NO_DEVICE; d++) {
		if (device < 0 || d == device) {
			__atomic_store_n(&caps[d], bytes, __ATOMIC_RELAXED);
			fractions[d] = bytes ? 0 : fraction;
		}
		any = any || caps[d] || fractions[d] > 0;
	}
	__atomic_store_n(&mtp_capping, any, __ATOMIC_RELEASE);
	snprintf(text, sizeof text, "memtap.cap %d %llu %g", device, (unsigned long long)bytes, fraction);
	mtp_note(text);
}

uint64_t mtp_cap_of(uint8_t device, uint64_t total)
{
	uint64_t bytes;

	if (device >= MT_NO_DEVICE)
		return 0;
	bytes = __atomic_load_n(&caps[device], __ATOMIC_RELAXED);
	return bytes ? bytes : (uint64_t)(fractions[device] * (double)total);
}

static uint64_t cap(uint8_t device)
{
	return mtp_cap_of(device, mtp_device_total(device));
}

#ifndef MTP_DLOPENED /* the CUPTI backend serves no allocations: no allocator */
static int allocator(int device, const char *policy, const char *conf, char *why, size_t n)
{
	char text[512];
	int err = mtp_allocator_set(device, policy, conf, why, n);

	if (!err) {
		snprintf(text, sizeof text, "memtap.allocator %d %s%s%s", device, policy ? policy : "",
			 policy && *conf ? "," : "", conf);
		mtp_note(text);
	}
	return err;
}
#endif

static struct mt_policy_host host = {
    .abi = MT_POLICY_ABI,
    .spawn = mtp_writer_spawn,
    .map = mtp_map,
    .unmap = mtp_unmap,
    .string = string,
    .stack = stack,
    .say = say,
    .mark = mark,
    .snapshot = snapshot,
    .capture = capture,
    .set_cap = set_cap,
    .cap = cap,
#ifndef MTP_DLOPENED
    .allocator = allocator,
    .allocator_stats = mtp_allocator_stats,
#endif
};

static int world_size(void)
{
	static const char *const names[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const char *v = getenv(names[i]);
		if (v && *v)
			return atoi(v);
	}
	return 0;
}

/* The engine beside this library unless the policy_engine option names it. */
static void *open_engine(void)
{
	char path[PATH_MAX], dir[PATH_MAX];
	Dl_info self;

	if (mtp_opt.policy_engine[0])
		snprintf(path, sizeof path, "%s", mtp_opt.policy_engine);
	else if (dladdr((void *)open_engine, &self) && self.dli_fname) {
		snprintf(dir, sizeof dir, "%s", self.dli_fname); /* dirname's answer points into dir */
		mt_path_join(path, sizeof path, dirname(dir), "libmemtap-policy.so");
	} else
		return NULL;
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void *load(void *unused)
{
	mt_policy_start_fn *start;
	void *lib;

	(void)unused;
	if (mtp_opt.policy_dir[0]) {
		snprintf(dir, sizeof dir, "%s", mtp_opt.policy_dir);
	} else { /* the trace's folder */
		snprintf(dir, sizeof dir, "%s", mtp_opt.output);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		else if (!getcwd(dir, sizeof dir))
			snprintf(dir, sizeof dir, ".");
	}
	if (!(lib = open_engine())) {
		mtp_warn("cannot load the policy engine (%s); policies are off", dlerror());
		return NULL;
	}
	start = (mt_policy_start_fn *)mtp_dlsym(lib, MT_POLICY_START);
	host.files = mtp_opt.policy;
	host.dir = dir;
	host.budget = mtp_opt.policy_budget;
	host.memory = mtp_opt.policy_memory;
	host.deadline_ns = mtp_opt.policy_deadline_ms * 1000000ull;
	host.output = mtp_opt.policy_output;
	host.quiet = mtp_opt.quiet || mtp_opt.policy_quiet;
	host.start_ns = mtp_start_ns;
	host.run_dir = mtp_opt.dir[0] ? mtp_opt.dir : NULL;
	host.rank = mtp_rank() ? atoi(mtp_rank()) : -1;
	host.world_size = world_size();
	host.poll_ns = mtp_opt.flush_ms * 1000000ull;
	const struct mt_policy_engine *engine = NULL;
	if (start && start(&host, &engine) == 0)
		__atomic_store_n(&mtp_policy, engine, __ATOMIC_RELEASE); /* the writer reads it as it drains */
	return NULL;
}

bool mtp_policy_pending;

/* On a stack of memtap's: the loader and the engine's start need more than a small
 * thread of the job's may have. */
MTP_NOINLINE bool mtp_policy_begin(void)
{
	static bool once;

	if (!__atomic_exchange_n(&once, true, __ATOMIC_ACQ_REL)) {
		mtp_slow_stack(load, NULL);
		__atomic_store_n(&mtp_policy_pending, false, __ATOMIC_RELEASE);
	}
	return true;
}

/* On the failing thread's own memtap stack (the job's may be small): the rings drained,
 * so the engine has the failure and everything before it, then its on_oom handlers, which
 * run on the policy thread while this thread waits (at most policy_deadline_ms). */
static void *ask_on_oom(void *e)
{
	const struct mt_policy_engine *p = __atomic_load_n(&mtp_policy, __ATOMIC_ACQUIRE);

	mtp_writer_sync();
	return p->oom(e) ? e : NULL;
}

bool mtp_policy_oom(const struct mt_event *e)
{
	return __atomic_load_n(&mtp_policy, __ATOMIC_ACQUIRE) && mtp_own_stack(ask_on_oom, (void *)e) != NULL;
}

void mtp_policy_stop(void)
{
	const struct mt_policy_engine *p = __atomic_load_n(&mtp_policy, __ATOMIC_ACQUIRE);

	if (p) {
		mtp_writer_sync(); /* everything so far, for on_exit */
		p->stop();	   /* the engine ignores what comes after */
	}
}

/* A forked child has no policy thread: its policies stay with the parent. */
void mtp_policy_forget(void)
{
	__atomic_store_n(&mtp_policy, NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&mtp_policy_pending, false, __ATOMIC_RELEASE);
	mtp_capping = false;
	memset(caps, 0, sizeof caps);
	memset(fractions, 0, sizeof fractions);
}
