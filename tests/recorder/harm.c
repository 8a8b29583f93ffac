/* Programs that do to memtap what real jobs do to themselves, for tests/recorder/test_harm.py:
 * `harm MODE`. Each one behaves the same with and without memtap, and prints what a
 * test needs to check that memtap took nothing from it. Allocation sizes say where
 * they were made.
 *   nvtx N        N NVTX ranges pushed and never popped (an allocation at depths 1, 64,
 *                 65, 600 and N: sizes 9000001..9000005), then popped to depth 10 (9000006)
 *                 and to 0, and one more range "after" (9000007); range i is named
 *                 "d<i % 1000>"
 *   pthread_exit  a thread allocates; main allocates, then ends with pthread_exit
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
 *                 frees 100 blocks after that, as a runtime's teardown does */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <alloca.h>
#include <errno.h>
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- main ends with pthread_exit ---- */
static void *allocate_some(void *arg)
{
	(void)arg;
	for (int i = 0; i < 10; i++)
		alloc_free(12000001);
	return NULL;
}

static void ends_with_pthread_exit(void)
{
	pthread_t t;

	pthread_create(&t, NULL, allocate_some, NULL);
	for (int i = 0; i < 10; i++)
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

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : "";

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(mode, "nvtx"))
		nvtx(strtoul(arg, NULL, 10));
	else if (!strcmp(mode, "pthread_exit"))
		ends_with_pthread_exit();
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
	else {
		fprintf(stderr, "usage: harm MODE [ARG]\n");
		return 2;
	}
	return 0;
}
