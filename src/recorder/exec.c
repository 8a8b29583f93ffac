/* exec: the kernel replaces the process image and no atexit handler runs, so the trace
 * is completed first: every ring drained, then an END chunk with the totals. The writer
 * stays held until the exec returns, so nothing follows the END; if the exec fails, the
 * END chunk is cut off again and recording goes on. A vfork child, which shares its
 * parent's memory and writer, passes straight through. The new image loads memtap
 * afresh through LD_PRELOAD and records into a file of its own. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "recorder/mtp.h"

int execvpe(const char *file, char *const argv[], char *const envp[]);
int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);

static bool before(void)
{
	if (__atomic_load_n(&mtp_state, __ATOMIC_ACQUIRE) != MTP_ON || getpid() != mtp_pid)
		return false;
	mtp_writer_exec_begin();
	return true;
}

static int after(bool held, int r)
{
	int err = errno;

	if (held)
		mtp_writer_exec_failed();
	errno = err;
	return r;
}

#define NEXT(name)                                                                                                     \
	MTP_NEXT(name)                                                                                                 \
	if (!fn) {                                                                                                     \
		errno = ENOSYS;                                                                                        \
		return -1;                                                                                             \
	}

MTP_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	NEXT(execve);
	bool held = before();
	return after(held, fn(path, argv, envp));
}

MTP_EXPORT int execv(const char *path, char *const argv[])
{
	NEXT(execv);
	bool held = before();
	return after(held, fn(path, argv));
}

MTP_EXPORT int execvp(const char *file, char *const argv[])
{
	NEXT(execvp);
	bool held = before();
	return after(held, fn(file, argv));
}

MTP_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	NEXT(execvpe);
	bool held = before();
	return after(held, fn(file, argv, envp));
}

MTP_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	NEXT(fexecve);
	bool held = before();
	return after(held, fn(fd, argv, envp));
}

MTP_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	NEXT(execveat);
	bool held = before();
	return after(held, fn(dirfd, path, argv, envp, flags));
}

/* The list forms, as glibc builds them: the arguments into an array on the stack. */
#define COLLECT(first, argv, ap, then)                                                                                 \
	size_t n = 1;                                                                                                  \
	va_start(ap, first);                                                                                           \
	while (va_arg(ap, const char *))                                                                               \
		n++;                                                                                                   \
	va_end(ap);                                                                                                    \
	const char *argv[n + 1];                                                                                       \
	argv[0] = first;                                                                                               \
	va_start(ap, first);                                                                                           \
	for (size_t i = 1; i <= n; i++)                                                                                \
		argv[i] = va_arg(ap, const char *);                                                                    \
	then;                                                                                                          \
	va_end(ap)

MTP_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;

	COLLECT(arg, argv, ap, (void)0);
	return execv(path, (char *const *)argv);
}

MTP_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;

	COLLECT(arg, argv, ap, (void)0);
	return execvp(file, (char *const *)argv);
}

MTP_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char *const *envp;

	COLLECT(arg, argv, ap, envp = va_arg(ap, char *const *));
	return execve(path, (char *const *)argv, envp);
}
