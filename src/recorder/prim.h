/* The recorder's one portability seam (as mimalloc's prim.h): everything that depends on
 * the machine or the system beyond POSIX, for x86-64 Linux with glibc today (configure
 * refuses other hosts). A port provides:
 *  - dlsym's entry (dlsym_x86_64.S): RTLD_NEXT and RTLD_DEFAULT lookups leave by a jump,
 *    so glibc still sees the application's return address; other handles reach
 *    mt_dlsym_hook; glibc's own dlsym is found (GLIBC_2.34, else GLIBC_2.2.5) without
 *    running C, safely before constructors and sanitizer initialisation;
 *  - a call on another stack whose frame unwinders follow back (onstack_x86_64.S);
 *  - a spin-wait hint, the kernel's thread id, and the frame-pointer frame's layout
 *    (saved frame pointer, then the return address) that stack.c walks.
 * Standalone (no other memtap header): a test's spy library links the dlsym entry too. */
#ifndef MTP_PRIM_H
#define MTP_PRIM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
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
