/* Start and end of recording in a process: options, own-code range (so its frames
 * are skipped), interning tables, the trace file and writer, fork and exit handling.
 * A child forked without exec stops recording unless follow_fork is set; a child that
 * execs loads memtap afresh through the inherited LD_PRELOAD and records into its own
 * file. Start-up runs once, at memtap's constructor or at the first hook that comes
 * before it (a library's constructor that allocates); hooks pass straight through
 * while it runs. A fatal signal flushes the buffers before the process dies. */
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "recorder/mtp.h"

bool mtp_load_bounds(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
	*lo = UINTPTR_MAX;
	*hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < *lo)
			*lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > *hi)
			*hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	return *hi > *lo;
}

pid_t mtp_pid;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t here = (uintptr_t)arg;
	uintptr_t lo, hi;

	(void)size;
	if (!mtp_load_bounds(info, &lo, &hi) || here < lo || here >= hi)
		return 0;
	mtp_self_start = lo;
	mtp_self_end = hi;
	return 1;
}

/* The end of recording: what the rings hold is written, with the END chunk. It may run
 * in a signal handler that interrupted a hook (exit() there is the usual way to end on
 * SIGTERM), so it calls nothing that hooks may hold locks in: not the driver, not
 * memtap's tables; the writer is asked, not locked. One thread ends recording; another
 * that exits meanwhile waits for its END. A vfork child, or one made without fork
 * (clone, syscall), shares its parent's writer or has none: it passes through. */
static long ending_thread;
static uint32_t ended; /* futex: the END is written */

static void at_exit(void)
{
	struct mtp_thread *t = &mtp_self;
	long me = mtp_gettid(), first = 0;

	if (getpid() != mtp_pid || mtp_state_now() < MTP_ON)
		return;
	if (!__atomic_compare_exchange_n(&ending_thread, &first, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* (a signal handler on the ending thread itself cannot wait for it) */
		while (first != me && !__atomic_load_n(&ended, __ATOMIC_ACQUIRE))
			mtp_futex_wait(&ended, 0, 0);
		return;
	}
	if (t->busy) {
		/* interrupted inside its own record, which will never end: that event and the
		   handlers' ones waiting behind it are lost, and counted */
		mtp_drop(MT_DROP_NESTED, 1 + t->nested_head - t->nested_tail);
	} else if (mtp_writer_has_events()) {
		/* a process that recorded nothing (a shell, a launcher, a forked child that never
		   touched the GPU) leaves no file behind */
		struct mt_event e = {.kind = MT_EV_PROCESS_EXIT, .device = MT_NO_DEVICE};
		mtp_record(&e, false);
	}
	/* on_exit handlers see everything, and may still take a snapshot; not from inside a
	   hook, whose locks (the policy engine's among them) the interrupted call may hold */
	if (t->depth == 0)
		mtp_policy_stop();
	else if (mtp_policy)
		mtp_warn("the process ended inside a CUDA call (from a signal handler): on_exit handlers did not run");
	mtp_writer_stop();
	if (mtp_opt.check_stacks)
		mtp_warn("check_stacks: %llu of %llu cached stacks differed from a full unwind",
			 (unsigned long long)mtp_stack_mismatches, (unsigned long long)mtp_stack_checks);
	__atomic_store_n(&ended, 1, __ATOMIC_RELEASE);
	mtp_futex_wake(&ended);
}

/* _exit and _Exit end the process without atexit handlers (Python's os._exit, a worker's
 * end, a signal handler's): the rings are written first, as at exit. quick_exit calls
 * _exit inside the C library, past these: its at_quick_exit handler does the same. */
MTP_EXPORT void _exit(int status)
{
	MTP_NEXT(_exit)
	at_exit();
	if (fn)
		fn(status);
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

MTP_EXPORT void _Exit(int status)
{
	MTP_NEXT(_Exit)
	at_exit();
	if (fn)
		fn(status);
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

/* Two threads that call exit at once would run the exit handlers together (glibc before
 * 2.39: exit is not thread-safe), and the one done first ends the process while the other
 * is still writing memtap's END: a second caller waits for the process to end, as glibc
 * 2.39's does. A vfork child, or one made without fork, passes through. */
static long exiting;

MTP_EXPORT void exit(int status)
{
	long me = mtp_gettid(), first = 0;

	MTP_NEXT(exit)
	if (getpid() == mtp_pid &&
	    !__atomic_compare_exchange_n(&exiting, &first, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
	    first != me) {
		uint32_t never = 0;
		for (;;)
			mtp_futex_wait(&never, 0, 0);
	}
	if (fn)
		fn(status);
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

/* A job whose main thread calls pthread_exit lives on until its other threads end; glibc
 * then ends the process, with status 0. memtap's own threads would keep it alive for
 * good: the main thread's pthread_exit leaves a thread of the job's (its descriptors,
 * directory and root, for the job's exit handlers) that ends the process once the
 * writer sees that only memtap's threads are left. */
MTP_EXPORT void pthread_exit(void *value)
{
	MTP_NEXT(pthread_exit)
	if (mtp_state_now() == MTP_ON && getpid() == mtp_pid && mtp_gettid() == mtp_pid)
		mtp_writer_main_gone();
	if (fn)
		fn(value);
	syscall(SYS_exit, 0);
	__builtin_unreachable();
}

/* A fatal signal: write what the buffers hold (the events just before a crash are the
 * ones that explain it), then let the signal do what it would have done. */
static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static struct sigaction previous[sizeof fatal / sizeof fatal[0]];

static void on_fatal(int sig)
{
	static int once;

	for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
		if (fatal[i] == sig)
			sigaction(sig, &previous[i], NULL);
	if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL) && mtp_state_now() == MTP_ON)
		mtp_writer_crash_flush();
	raise(sig); /* delivered when the handler returns, to the handler that was there before */
}

static void catch_fatal_signals(void)
{
	struct sigaction sa = {.sa_handler = on_fatal, .sa_flags = SA_NODEFER};

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
		struct sigaction old;
		/* an application's own handler stays: it was there first and may chain to the default */
		if (sigaction(fatal[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO)) {
			previous[i] = old;
			sigaction(fatal[i], &sa, NULL);
		}
	}
}

static void fork_prepare(void)
{
	if (mtp_state_now() == MTP_ON)
		mtp_writer_atfork_prepare();
}

static void fork_parent(void)
{
	if (mtp_state_now() == MTP_ON)
		mtp_writer_atfork_parent();
}

static void fork_child(void)
{
	exiting = 0;
	if (mtp_state_now() != MTP_ON)
		return;
	mtp_pid = getpid();
	/* the devices' DEVICE events are in the parent's trace: the child's makes its own */
	__atomic_store_n(&mtp_devices_seen, 0, __ATOMIC_RELAXED);
	mtp_rings_reset_child();
	mtp_graph_reset_child();
	mtp_policy_forget();
	mtp_writer_atfork_child(mtp_opt.follow_fork);
}

static void start(void)
{
	mtp_start_ns = mtp_now();
	mtp_pid = getpid();
	mtp_options_load();
	if (!mtp_opt.enabled) {
		__atomic_store_n(&mtp_state, MTP_OFF, __ATOMIC_RELEASE);
		return;
	}
	dl_iterate_phdr(find_self, (void *)(uintptr_t)&start);
	if (mtp_table_init(&mtp_stacks, 1u << 18, 64u << 20) || mtp_table_init(&mtp_strings, 1u << 16, 4u << 20)) {
		mtp_warn("cannot reserve memory for stack and string tables; recording is off");
		__atomic_store_n(&mtp_state, MTP_OFF, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&mtp_state, MTP_STARTING, __ATOMIC_RELEASE);
	/* the policy thread is the writer's to make: with a policy, the writer starts now */
	if (mtp_writer_start(mtp_opt.policy[0] != '\0')) {
		__atomic_store_n(&mtp_state, MTP_OFF, __ATOMIC_RELEASE);
		return;
	}
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atexit(at_exit);
	at_quick_exit(at_exit);
	catch_fatal_signals();
	/* policies start at the first call that is recorded (mtp_policy_begin) */
	__atomic_store_n(&mtp_policy_pending, mtp_opt.policy[0] != '\0', __ATOMIC_RELEASE);
	__atomic_store_n(&mtp_state, MTP_ON, __ATOMIC_RELEASE);
}

bool mtp_constructed;

/* Once, by whoever comes first; a thread that finds another starting memtap passes
 * through (waiting could deadlock: the starter may need the loader's lock that thread
 * holds). */
MTP_NOINLINE bool mtp_start(void)
{
	static bool once;

	if (mtp_state_now() == MTP_UNSTARTED && !__atomic_exchange_n(&once, true, __ATOMIC_ACQ_REL))
		start();
	return mtp_state_now() >= MTP_ON;
}

__attribute__((constructor)) static void mtp_init(void)
{
	mtp_start();
	__atomic_store_n(&mtp_constructed, true, __ATOMIC_RELEASE);
}
