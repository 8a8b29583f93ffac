/* Programs that do to memtap what real jobs do to themselves, for tests/recorder/test_harm.py:
 * `harm MODE`. Each one behaves the same with and without memtap, and prints what a
 * test needs to check that memtap took nothing from it. Allocation sizes say where
 * they were made.
 *   nvtx N        N NVTX ranges pushed and never popped (an allocation at depths 1, 64,
 *                 65, 600 and N: sizes 9000001..9000005), then popped to depth 10 (9000006)
 *                 and to 0, and one more range "after" (9000007); range i is named
 *                 "d<i % 1000>"
 *   nvtxreg       a mark and a range whose attributes name a registered string NVTX never
 *                 handed out, between 100 allocations of 9100001 and 100 of 9100002
 *   pthread_exit DIR  in DIR: opens job.log (buffered), changes into DIR/sub, registers an
 *                 exit handler that writes atexit.txt there, starts a thread that
 *                 allocates and lives on, allocates, then ends with pthread_exit
 *   pthread_exit_first DIR  the same, but main makes no CUDA call: the thread makes the
 *                 process's first, once main has gone
 *   sigexit       allocates in a loop until SIGALRM (after argv[2] microseconds), whose
 *                 handler calls exit(0): the usual C way to end on a signal
 *   smallstacks N 64 threads with 16 KiB stacks, all but N bytes of them in use, make their
 *                 first CUDA call at once
 *   closefds DIR  after its first allocations (and memtap's first flush) closes every
 *                 descriptor above 2, opens two
 *                 files in DIR, and allocates from many call chains (new stacks) while it
 *                 writes to them; prints "files intact" when they hold exactly what it wrote
 *   dup2 DIR      opens DIR/job.log and puts it over every descriptor from 3 to 63 while
 *                 it allocates and logs; prints "log intact" when the log is only its lines
 *   fastexit HOW  5000 allocation pairs, then _exit, _Exit or quick_exit (HOW) with status 0
 *   huge          failed allocations of sizes no device has, a tag range past the end of
 *                 the address space (prints its result), a pool's release threshold of
 *                 UINT64_MAX (as NVIDIA's streamOrderedAllocation sample sets it), then 60
 *                 allocations of 11000001
 *   chroot DIR    an allocation, then chroot(DIR) (in a user namespace when not root), then
 *                 100 more; prints "chrooted" when it could
 *   unlink PATH   100 allocations, then deletes PATH (its own trace), then 100 more
 *   busyexit      64 threads allocate without end while main calls exit(0); a destructor
 *                 frees 100 blocks after that, as a runtime's teardown does
 *   vforkexit     a vfork child whose exec fails ends with exit() (not _exit, as some code
 *                 does), then the parent makes 2000 pairs of 21000001 and waits past a
 *                 flush (the child's exit ran the parent's exit handlers: none runs at its
 *                 own)
 *   rawfork HOW   a child made without glibc's fork (HOW: syscall, clone) ends with exit(3);
 *                 prints "child 3"
 *   exit2         two threads make 500 pairs each, then call exit(0) at once
 *   snapexec DIR US  takes snapshots into DIR without end; after US microseconds a SIGALRM
 *                 handler execs /bin/echo "exec'd from a handler"
 *   snapat DIR    memtap_snapshot with paths the job means from where it is: in DIR, a
 *                 thread with a working directory of its own (DIR/own) takes "own.trace";
 *                 then the job chroots into DIR/jail and takes "../../jailed.trace" and
 *                 "/abs.trace" (both inside the jail, for the job); prints each result
 *   term2         says "ready", waits for a SIGTERM, then 300 ms more, and prints how many
 *                 SIGTERMs came ("one SIGTERM" when one did)
 *   written N     N pairs in 20 bursts over a second, then prints the bytes the process
 *                 wrote in all ("wchar N", /proc/self/io: memtap's threads' writes included)
 *   noshare CMD.. runs CMD with unshare(2) refused (EPERM) by a seccomp filter, as a
 *                 container's profile may for a process without CAP_SYS_ADMIN
 *   sandboxed     100 allocations, then a filter that kills the process when any thread
 *                 opens a file (as a hardened worker's), then 50 more over half a second
 *   oomstack      an allocation no device has, made from a function of its own file (a
 *                 static one: no exported symbol names it), then prints "fds A B maps C D":
 *                 how many descriptors it had open, and mappings of its own file, before
 *                 the allocation and after it failed
 *   forkhandler MS   pushes NVTX ranges of new names (memtap interns each) for MS
 *                 milliseconds while a 1 ms timer's handler forks (once a push since its last) a
 *                 child that _exits at once, and reaps it; prints "forked" when some were */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <alloca.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "memtap.h"

#define NOINLINE __attribute__((noinline))

static void alloc_free(size_t size)
{
	void *p = NULL;

	if (cudaMalloc(&p, size) == cudaSuccess)
		cudaFree(p);
}

/* ---- NVTX ranges that are never popped ---- */
static void nvtx(unsigned long n)
{
	char name[32];

	for (unsigned long i = 0; i < n; i++) {
		snprintf(name, sizeof name, "d%lu", i % 1000);
		nvtxRangePushA(name);
		if (i + 1 == 1 || i + 1 == 64 || i + 1 == 65 || i + 1 == 600 || i + 1 == n)
			alloc_free(9000001 + (i + 1 == 1     ? 0
					      : i + 1 == 64  ? 1
					      : i + 1 == 65  ? 2
					      : i + 1 == 600 ? 3
							     : 4));
	}
	for (unsigned long i = n; i > 10; i--)
		nvtxRangePop();
	alloc_free(9000006);
	while (nvtxRangePop() >= 0)
		;
	nvtxRangePushA("after");
	alloc_free(9000007);
	nvtxRangePop();
}

/* NVTX calls whose attributes name a registered string NVTX never handed out */
static void nvtx_registered(void)
{
	nvtxEventAttributes_t a = {.version = NVTX_VERSION,
				   .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE,
				   .messageType = NVTX_MESSAGE_TYPE_REGISTERED,
				   .message.registered = (nvtxStringHandle_t)(uintptr_t)123456};

	for (int i = 0; i < 100; i++)
		alloc_free(9100001);
	nvtxMarkEx(&a);
	nvtxRangePushEx(&a);
	for (int i = 0; i < 100; i++)
		alloc_free(9100002);
	nvtxRangePop();
}

/* ---- main ends with pthread_exit ---- */
static FILE *job_log;

static void *allocate_some(void *first)
{
	if (first)
		usleep(200000); /* main has gone by now */
	for (int i = 0; i < 10; i++)
		alloc_free(12000001);
	usleep(300000); /* main has gone by now */
	return NULL;
}

/* runs when the last thread has gone, where the job's files and directory are */
static void at_end(void)
{
	FILE *f = fopen("atexit.txt", "w");

	if (f)
		fclose(f);
	printf("atexit ran\n");
}

static void ends_with_pthread_exit(const char *dir, bool main_allocates)
{
	pthread_t t;
	char sub[4096];

	snprintf(sub, sizeof sub, "%s/sub", dir);
	job_log = fopen("job.log", "w"); /* buffered: written out by exit, as the process ends */
	fprintf(job_log, "the job's own log line\n");
	if (mkdir(sub, 0755) != 0 || chdir(sub) != 0)
		return;
	atexit(at_end);
	printf("main leaves"); /* buffered too */
	pthread_create(&t, NULL, allocate_some, main_allocates ? NULL : &t);
	for (int i = 0; i < 10 && main_allocates; i++)
		alloc_free(12000002);
	pthread_exit(NULL);
}

/* ---- exit() from a signal handler ---- */
static void on_alarm(int sig)
{
	(void)sig;
	exit(0);
}

static void sigexit(long us)
{
	struct itimerval it = {{0, 0}, {us / 1000000, us % 1000000}};
	size_t free_b, total;

	alloc_free(13000001);
	signal(SIGALRM, on_alarm);
	setitimer(ITIMER_REAL, &it, NULL);
	for (;;) {
		alloc_free(13000002);
		cudaMemGetInfo(&free_b, &total);
	}
}

/* ---- threads with small stacks ---- */
static pthread_barrier_t together;

static NOINLINE void first_call(void)
{
	void *p;

	pthread_barrier_wait(&together);
	if (cudaMalloc(&p, 14000001) == cudaSuccess)
		cudaFree(p);
}

static size_t left = 8192;

/* The job's own frames hold all of the thread's stack but `left` bytes when it first calls CUDA. */
static void *small_thread(void *arg)
{
	pthread_attr_t a;
	void *low;
	size_t size;
	char here;
	volatile char *used;

	(void)arg;
	pthread_getattr_np(pthread_self(), &a);
	pthread_attr_getstack(&a, &low, &size);
	pthread_attr_destroy(&a);
	used = alloca((size_t)(&here - (char *)low) - left);
	used[0] = 1;
	first_call();
	return NULL;
}

static int smallstacks(void)
{
	pthread_t t[64];
	pthread_attr_t a;

	pthread_barrier_init(&together, NULL, 64);
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 16384);
	for (int i = 0; i < 64; i++)
		if (pthread_create(&t[i], &a, small_thread, NULL))
			return 1;
	for (int i = 0; i < 64; i++)
		pthread_join(t[i], NULL);
	printf("threads done\n");
	return 0;
}

/* ---- a job that closes its descriptors, or puts its own over memtap's ---- */
static NOINLINE void chain(int depth, size_t size)
{
	if (depth > 0)
		chain(depth - 1, size);
	else
		alloc_free(size);
	__asm__ volatile("" ::: "memory"); /* no tail call: each depth is a stack of its own */
}

static int check_file(const char *path, const char *want)
{
	char got[65536];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, got, sizeof got - 1);

	if (fd >= 0)
		close(fd);
	if (n < 0)
		return 0;
	got[n] = '\0';
	return strcmp(got, want) == 0;
}

static int closefds(const char *dir)
{
	char a[4096], b[4096], want[65536] = "";
	int fa, fb, ok = 1;

	alloc_free(15000001);
	chain(3, 15000002);
	usleep(300000); /* past the writer's first flush: memtap's trace is open by now */
	if (syscall(SYS_close_range, 3, ~0u, 0) != 0)
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
	snprintf(a, sizeof a, "%s/a.txt", dir);
	snprintf(b, sizeof b, "%s/b.txt", dir);
	fa = open(a, O_RDWR | O_CREAT | O_TRUNC, 0644);
	fb = open(b, O_RDWR | O_CREAT | O_TRUNC, 0644);
	for (int i = 0; i < 400; i++) {
		char line[64];
		int n = snprintf(line, sizeof line, "line %d\n", i);
		chain(i % 40, 15000003);
		ok &= write(fa, line, (size_t)n) == n && write(fb, line, (size_t)n) == n;
		strcat(want, line);
		if (i % 50 == 0)
			usleep(20000); /* the writer's turn: it flushes every 100 ms */
	}
	ok &= close(fa) == 0 && close(fb) == 0;
	ok &= check_file(a, want) && check_file(b, want);
	printf(ok ? "files intact\n" : "files damaged\n");
	return !ok;
}

static int dup2s(const char *dir)
{
	char path[4096], want[65536] = "";
	int log, ok = 1;

	alloc_free(16000001);
	usleep(300000); /* past the writer's first flush: memtap's trace is open by now */
	snprintf(path, sizeof path, "%s/job.log", dir);
	log = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	for (int fd = 3; fd < 64; fd++)
		if (fd != log)
			dup2(log, fd);
	for (int i = 0; i < 400; i++) {
		char line[64];
		int n = snprintf(line, sizeof line, "job %d\n", i);
		chain(i % 40, 16000002);
		ok &= write(log, line, (size_t)n) == n;
		strcat(want, line);
		if (i % 50 == 0)
			usleep(20000);
	}
	ok &= check_file(path, want);
	printf(ok ? "log intact\n" : "log damaged\n");
	return !ok;
}

/* ---- fast exits ---- */
static void fastexit(const char *how)
{
	for (int i = 0; i < 5000; i++)
		alloc_free(17000001);
	if (!strcmp(how, "_Exit"))
		_Exit(0);
	if (!strcmp(how, "quick_exit"))
		quick_exit(0);
	_exit(0);
}

/* ---- sizes no device has ---- */
static void huge(void)
{
	void *p;
	struct cudaPitchedPtr pp;
	cudaMemPool_t pool;
	uint64_t threshold = UINT64_MAX;
	int r;

	cudaMalloc(&p, SIZE_MAX);
	cudaMalloc3D(&pp, (struct cudaExtent){1ull << 21, 1ull << 21, 1ull << 20}); /* 2^62 bytes */
	cudaGetLastError();
	cudaMalloc(&p, 11000002);
	r = memtap_tag_range(p, SIZE_MAX, MEMTAP_ACTIVATIONS);
	printf("tag_range %d\n", r);
	cudaFree(p);
	if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess)
		cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
	for (int i = 0; i < 60; i++)
		alloc_free(11000001);
}

/* ---- a policy reads the stack of a failure in a function no symbol exports ---- */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

static __attribute__((noinline)) cudaError_t fail_here(void)
{
	void *p;

	return cudaMalloc(&p, 1ull << 50);
}

/* How many mappings of its own file the process has: its segments, and a reader's */
static int own_maps(void)
{
	char self[4096], line[8192];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	FILE *f = fopen("/proc/self/maps", "r");
	int count = 0;

	self[n > 0 ? n : 0] = '\0';
	while (f && fgets(line, sizeof line, f))
		count += n > 0 && strstr(line, self) != NULL;
	if (f)
		fclose(f);
	return count;
}

static void oomstack(void)
{
	int fds = open_fds(), maps = own_maps();

	fail_here();
	printf("fds %d %d maps %d %d\n", fds, open_fds(), maps, own_maps());
}

/* ---- the job changes its root ---- */
static int chrooted(const char *dir)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	char map[64];
	int fd;

	if (chroot(dir) == 0)
		return 1;
	/* not root: a user namespace of its own lets it */
	if (unshare(CLONE_NEWUSER) != 0)
		return 0;
	if ((fd = open("/proc/self/setgroups", O_WRONLY)) >= 0) {
		(void)!write(fd, "deny", 4);
		close(fd);
	}
	snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
	if ((fd = open("/proc/self/uid_map", O_WRONLY)) >= 0) {
		(void)!write(fd, map, strlen(map));
		close(fd);
	}
	snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
	if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
		(void)!write(fd, map, strlen(map));
		close(fd);
	}
	return chroot(dir) == 0;
}

static void chroot_mode(const char *dir)
{
	alloc_free(18000001);
	if (chrooted(dir) && chdir("/") == 0)
		printf("chrooted\n");
	for (int i = 0; i < 100; i++)
		alloc_free(18000002);
}

static void unlink_mode(const char *path)
{
	for (int i = 0; i < 100; i++)
		alloc_free(19000001);
	usleep(300000); /* past a flush: the file is there */
	unlink(path);
	for (int i = 0; i < 100; i++)
		alloc_free(19000002);
}

/* ---- exit while other threads allocate ---- */
static void *busy(void *arg)
{
	(void)arg;
	for (;;)
		alloc_free(20000001);
	return NULL;
}

static void *kept[100];

__attribute__((destructor)) static void teardown(void)
{
	for (int i = 0; i < 100; i++)
		if (kept[i])
			cudaFree(kept[i]);
}

static void busyexit(void)
{
	pthread_t t;

	for (int i = 0; i < 100; i++)
		cudaMalloc(&kept[i], 20000002);
	for (int i = 0; i < 64; i++)
		pthread_create(&t, NULL, busy, NULL);
	usleep(50000);
	exit(0);
}

/* ---- process shapes that reach memtap's exit path in odd ways ---- */
static void vforkexit(void)
{
	pid_t pid;
	int status;

	alloc_free(21000001);
	if ((pid = vfork()) == 0) {
		execl("/nonexistent", "x", (char *)NULL);
		exit(127);
	}
	waitpid(pid, &status, 0);
	for (int i = 0; i < 2000; i++)
		alloc_free(21000001);
	usleep(300000);
}

static int child_exit(void *arg)
{
	(void)arg;
	exit(3);
}

static void rawfork(const char *how)
{
	static char stack[1 << 16];
	pid_t pid;
	int status = 0;

	alloc_free(22000001);
	if (!strcmp(how, "syscall")) {
		if ((pid = (pid_t)syscall(SYS_fork)) == 0)
			child_exit(NULL);
	} else {
		pid = clone(child_exit, stack + sizeof stack, SIGCHLD, NULL);
	}
	waitpid(pid, &status, 0);
	printf("child %d\n", WEXITSTATUS(status));
	alloc_free(22000001);
}

static pthread_barrier_t both;

static void *exit_together(void *arg)
{
	(void)arg;
	for (int i = 0; i < 500; i++)
		alloc_free(23000001);
	pthread_barrier_wait(&both);
	exit(0);
}

static void exit2(void)
{
	pthread_t t[2];

	pthread_barrier_init(&both, NULL, 2);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, exit_together, NULL);
	pthread_join(t[0], NULL);
}

/* ---- exec and fork from signal handlers, in the middle of memtap's work ---- */
static void exec_echo(int sig)
{
	(void)sig;
	execl("/bin/echo", "echo", "exec'd from a handler", (char *)NULL);
	_exit(99);
}

static void snapexec(const char *dir, long us)
{
	struct itimerval it = {{0, 0}, {us / 1000000, us % 1000000}};
	char path[4096];

	alloc_free(24000001);
	signal(SIGALRM, exec_echo);
	setitimer(ITIMER_REAL, &it, NULL);
	for (unsigned i = 0;; i++) {
		alloc_free(24000001);
		snprintf(path, sizeof path, "%s/snap-%u.trace", dir, i % 4);
		unlink(path);
		memtap_snapshot(path);
	}
}

/* ---- snapshots at paths the job means ---- */
static void *own_directory(void *arg)
{
	char own[4096];

	snprintf(own, sizeof own, "%s/own", (const char *)arg);
	if (unshare(CLONE_FS) != 0 || mkdir(own, 0755) != 0 || chdir(own) != 0)
		return NULL;
	printf("own %d\n", memtap_snapshot("own.trace"));
	return NULL;
}

static void snapat(const char *dir)
{
	char jail[4096];
	pthread_t t;

	alloc_free(26000001);
	pthread_create(&t, NULL, own_directory, (void *)dir);
	pthread_join(t, NULL);
	snprintf(jail, sizeof jail, "%s/jail", dir);
	if (mkdir(jail, 0755) != 0 || !chrooted(jail) || chdir("/") != 0)
		return;
	printf("jailed %d\n", memtap_snapshot("../../jailed.trace"));
	printf("abs %d\n", memtap_snapshot("/abs.trace"));
}

/* ---- a launcher's SIGTERM: how many reach the job ---- */
static volatile sig_atomic_t terms;

static void count_term(int sig)
{
	(void)sig;
	terms++;
}

static void term2(void)
{
	alloc_free(27000001);
	signal(SIGTERM, count_term);
	printf("ready\n");
	while (!terms)
		pause();
	usleep(300000); /* a second one, if there is one, arrives meanwhile */
	if (terms == 1)
		printf("one SIGTERM\n");
	else
		printf("%d SIGTERMs\n", (int)terms);
}

/* ---- what the whole process wrote: the job's files and memtap's ---- */
static void written(long n)
{
	char buf[1024], *at;
	FILE *f;
	size_t len;

	for (int k = 0; k < 20; k++) {
		for (long i = 0; i < n / 20; i++)
			alloc_free(28000001 + (size_t)(i % 100));
		usleep(50000);
	}
	if (!(f = fopen("/proc/self/io", "r")))
		return;
	len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = '\0';
	if ((at = strstr(buf, "wchar: ")))
		printf("wchar %llu\n", strtoull(at + 7, NULL, 10));
}

/* ---- seccomp filters: unshare refused, files no longer opened ---- */
/* A filter that answers one system call with `action`, for this thread or (TSYNC) all. */
static int deny(int nr, uint32_t action, unsigned flags)
{
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, action),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

static int noshare(char **argv)
{
	if (deny(__NR_unshare, SECCOMP_RET_ERRNO | EPERM, 0) != 0)
		return 1;
	execvp(argv[0], argv);
	return 127;
}

/* a hardened worker: after start-up, no thread may open a file again, on pain of death */
static void sandboxed(void)
{
	for (int i = 0; i < 100; i++)
		alloc_free(29000001);
	usleep(300000); /* past memtap's first flush: its trace is open */
	if (deny(__NR_openat, SECCOMP_RET_KILL_PROCESS, SECCOMP_FILTER_FLAG_TSYNC) != 0)
		return;
	for (int i = 0; i < 50; i++) {
		alloc_free(29000001);
		usleep(10000);
	}
	printf("sandboxed work done\n");
}

static volatile sig_atomic_t forks, pushed;

/* One fork for each timer tick that finds the loop has pushed since the last: a fork
 * that takes longer than the tick (a sanitizer's) would otherwise run the handler back to
 * back and the loop never again */
static void fork_reap(int sig)
{
	int err = errno;
	pid_t pid;

	(void)sig;
	if (!pushed)
		return;
	pushed = 0;
	if ((pid = fork()) == 0)
		_exit(0);
	if (pid > 0 && waitpid(pid, NULL, 0) == pid)
		forks++;
	errno = err;
}

static void forkhandler(long ms)
{
	struct itimerval it = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
	struct timespec start, now;
	char name[32];

	alloc_free(25000001);
	signal(SIGALRM, fork_reap);
	setitimer(ITIMER_REAL, &it, NULL);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned i = 0;; i++) {
		snprintf(name, sizeof name, "r%u", i);
		nvtxRangePushA(name);
		nvtxRangePop();
		pushed = 1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > ms)
			break;
	}
	setitimer(ITIMER_REAL, &off, NULL);
	printf(forks ? "forked\n" : "no fork\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : "";

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(mode, "nvtx"))
		nvtx(strtoul(arg, NULL, 10));
	else if (!strcmp(mode, "nvtxreg"))
		nvtx_registered();
	else if (!strcmp(mode, "pthread_exit") || !strcmp(mode, "pthread_exit_first"))
		ends_with_pthread_exit(arg, !strcmp(mode, "pthread_exit"));
	else if (!strcmp(mode, "sigexit"))
		sigexit(strtol(arg, NULL, 10));
	else if (!strcmp(mode, "smallstacks") && (left = strtoul(arg, NULL, 10)) > 0)
		return smallstacks();
	else if (!strcmp(mode, "closefds"))
		return closefds(arg);
	else if (!strcmp(mode, "dup2"))
		return dup2s(arg);
	else if (!strcmp(mode, "fastexit"))
		fastexit(arg);
	else if (!strcmp(mode, "huge"))
		huge();
	else if (!strcmp(mode, "chroot"))
		chroot_mode(arg);
	else if (!strcmp(mode, "unlink"))
		unlink_mode(arg);
	else if (!strcmp(mode, "busyexit"))
		busyexit();
	else if (!strcmp(mode, "vforkexit"))
		vforkexit();
	else if (!strcmp(mode, "rawfork"))
		rawfork(arg);
	else if (!strcmp(mode, "exit2"))
		exit2();
	else if (!strcmp(mode, "snapexec") && argc > 3)
		snapexec(arg, strtol(argv[3], NULL, 10));
	else if (!strcmp(mode, "noshare") && argc > 2)
		return noshare(argv + 2);
	else if (!strcmp(mode, "sandboxed"))
		sandboxed();
	else if (!strcmp(mode, "written"))
		written(strtol(arg, NULL, 10));
	else if (!strcmp(mode, "term2"))
		term2();
	else if (!strcmp(mode, "snapat"))
		snapat(arg);
	else if (!strcmp(mode, "oomstack"))
		oomstack();
	else if (!strcmp(mode, "forkhandler"))
		forkhandler(strtol(arg, NULL, 10));
	else {
		fprintf(stderr, "usage: harm MODE [ARG]\n");
		return 2;
	}
	return 0;
}
