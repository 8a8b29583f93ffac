/* The recorder's one portability seam (as mimalloc's prim.h): everything that depends on
 * the machine or the system beyond POSIX, for x86-64 Linux with glibc today (configure
 * refuses other hosts). A port provides:
 *  - dlsym's entry (dlsym_x86_64.S): RTLD_NEXT and RTLD_DEFAULT lookups leave by a jump,
 *    so glibc still sees the application's return address; other handles reach
 *    mt_dlsym_hook; glibc's own dlsym is found (GLIBC_2.34, else GLIBC_2.2.5) without
 *    running C, safely before constructors and sanitizer initialisation;
 *  - a call on another stack whose frame unwinders follow back (onstack_x86_64.S);
 *  - a spin-wait hint, the kernel's thread id, and the frame-pointer frame's layout
 *    (saved frame pointer, then the return address) that stack.c walks;
 *  - futexes (a wait and a wake a signal handler may use), and a thread's own
 *    descriptor table, working directory and root (writer.c).
 * Standalone (no other memtap header): a test's spy library links the dlsym entry too. */
#ifndef MTP_PRIM_H
#define MTP_PRIM_H

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MT_HIDDEN __attribute__((visibility("hidden")))

/* ---- dlsym (dlsym_x86_64.S) ---- */
typedef void *(*mt_dlsym_fn)(void *, const char *);

extern MT_HIDDEN mt_dlsym_fn mt_real_dlsym;
MT_HIDDEN mt_dlsym_fn mt_dlsym_resolve(void);
/* the library's own: every lookup on a real handle */
MT_HIDDEN void *mt_dlsym_hook(void *handle, const char *name);
/* Optional (weak in the stub): when mt_dlsym_watch is true, every dlsym(RTLD_DEFAULT, name)
 * first calls mt_dlsym_default(name, the caller's return address). */
extern MT_HIDDEN bool mt_dlsym_watch;
MT_HIDDEN void mt_dlsym_default(const char *name, const void *caller);

/* ---- another stack (onstack_x86_64.S) ---- */
/* fn(arg) with the stack pointer at top (aligned down to 16 bytes); its result */
MT_HIDDEN void *mtp_on_stack(void *(*fn)(void *), void *arg, void *top);

/* ---- the processor and the kernel ---- */
static inline void mtp_cpu_relax(void)
{
	__builtin_ia32_pause();
}

static inline long mtp_gettid(void)
{
	return syscall(SYS_gettid);
}

/* Sleeps while *word holds `seen`, at most ns nanoseconds (0: no limit); a wake, a
 * signal or a changed word ends it early. */
static inline void mtp_futex_wait(uint32_t *word, uint32_t seen, uint64_t ns)
{
	struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};

	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, ns ? &t : NULL, NULL, 0);
}

static inline void mtp_futex_wake(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Gives the calling thread a descriptor table, working directory and root of its own
 * (unshare(2)): nothing the process's other threads do to theirs (close_range, dup2,
 * chdir, chroot) reaches it, and what it opens takes no number in theirs. Threads it
 * makes share them. The copy of the process's descriptors is closed at once (an end
 * of a pipe kept open here would keep its reader waiting for good); 0, 1 and 2 become
 * eventfds, which refuse what a stray write to standard error would put into a file of
 * memtap's there, or, in sanitizer builds, stay the process's: sanitizer reports from
 * this thread go there. false when the kernel refused: the thread shares the process's. */
static inline bool mtp_own_files(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	const int keep = 3;
#else
	const int keep = 0;
#endif

	if (unshare(CLONE_FILES | CLONE_FS) != 0)
		return false;
	if (syscall(SYS_close_range, keep, ~0u, 0) != 0)
		for (int fd = keep; fd < 65536; fd++)
			close(fd);
	for (int fd = keep; fd < 3; fd++)
		eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* the lowest numbers free: 0, 1, 2 in turn */
#if defined(__SANITIZE_THREAD__)
	{
		/* ThreadSanitizer keeps one table of descriptors for the whole process, and would
		   take a number used in both tables for a race: memtap's own take numbers above
		   those a test's job holds */
		struct rlimit r;
		int hold = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), top = 1024;
		if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < 1024 + 128)
			top = (int)r.rlim_cur - 128;
		for (int fd = hold + 1; hold >= 0 && fd < top; fd++)
			dup2(hold, fd);
	}
#endif
	return true;
}

/* A frame-pointer frame: fp[0] the caller's frame pointer, fp[1] the return address. */
static inline uintptr_t *mtp_frame_up(const uintptr_t *fp)
{
	return (uintptr_t *)fp[0];
}

static inline uintptr_t *mtp_frame_return_slot(uintptr_t *fp)
{
	return &fp[1];
}

#endif
