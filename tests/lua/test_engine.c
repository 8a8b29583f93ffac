/* The policy engine (libmemtap-policy.so) driven through its seam by a host of the test's
 * own, whose snapshot call can hang as a stuck file system would. A job's thread must
 * never wait past the deadline: not at load, not in on_oom, not at exit, and a handler
 * that never returns on the policy thread is noticed by the next drain. Then the engine
 * is abandoned: every later call returns at once and the job's results are untouched.
 * The engine is $MT_BUILDDIR/src/policy/.libs/libmemtap-policy.so. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../tap.h"
#include "policy/policy.h"

static char said[16384]; /* what the engine said, under said_lock */
static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
static int stuck; /* snapshot calls that hung (atomic) */

static void *map(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void unmap(void *p, size_t n)
{
	munmap(p, n);
}

static const void *no_table(uint32_t id, size_t *len)
{
	(void)id;
	*len = 0;
	return NULL;
}

static void say(const char *line)
{
	pthread_mutex_lock(&said_lock);
	strncat(said, line, sizeof said - strlen(said) - 2);
	strcat(said, "\n");
	pthread_mutex_unlock(&said_lock);
}

/* Whether the engine said text so far. */
static bool heard(const char *text)
{
	bool yes;

	pthread_mutex_lock(&said_lock);
	yes = strstr(said, text) != NULL;
	pthread_mutex_unlock(&said_lock);
	return yes;
}

static void nothing(const char *s)
{
	(void)s;
}

/* A file system that never answers. */
static int hang(int fd, const char *path, uint64_t limit)
{
	(void)fd, (void)path, (void)limit;
	__atomic_add_fetch(&stuck, 1, __ATOMIC_RELAXED);
	for (;;)
		pause();
	return 0;
}

static int capture(bool on, uint8_t device)
{
	(void)on, (void)device;
	return 0;
}

static void set_cap(int device, uint64_t bytes, double fraction)
{
	(void)device, (void)bytes, (void)fraction;
}

static uint64_t cap(uint8_t device)
{
	(void)device;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *dir, *argv_engine;

/* memtap's writer makes the policy thread; here, a plain thread with every signal blocked */
static int spawn(pthread_t *thread, size_t stack, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	sigset_t all, old;
	int r;

	pthread_attr_init(&a);
	if (stack)
		pthread_attr_setstacksize(&a, stack);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(thread, &a, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	return r;
}

/* A fresh engine (a fresh dlopen of a private copy: the engine is a singleton) running `source`. */
static int start(const char *engine_so, const char *source, const struct mt_policy_engine **e, int n)
{
	static struct mt_policy_host hosts[8]; /* one each: a stuck engine still reads its own */
	struct mt_policy_host *host = &hosts[n % 8];
	char path[4096], copy[4096], cmd[8400];
	FILE *f;
	void *lib;
	mt_policy_start_fn *start_fn;

	snprintf(path, sizeof path, "%s/policy%d.lua", dir, n);
	if (!(f = fopen(path, "w")))
		return EIO;
	fputs(source, f);
	fclose(f);
	snprintf(copy, sizeof copy, "%s/engine%d.so", dir, n);
	snprintf(cmd, sizeof cmd, "cp '%s' '%s'", engine_so, copy);
	if (system(cmd) != 0 || !(lib = dlopen(copy, RTLD_NOW | RTLD_LOCAL)) ||
	    !(start_fn = (mt_policy_start_fn *)dlsym(lib, MT_POLICY_START)))
		return ENOENT;
	*host = (struct mt_policy_host){.abi = MT_POLICY_ABI,
					.files = strdup(path),
					.dir = dir,
					.budget = 200000,
					.memory = 64 << 20,
					.deadline_ns = 300000000ull,
					.start_ns = now_ns(),
					.spawn = spawn,
					.map = map,
					.unmap = unmap,
					.string = no_table,
					.stack = no_table,
					.say = say,
					.mark = nothing,
					.snapshot = hang,
					.capture = capture,
					.set_cap = set_cap,
					.cap = cap};
	pthread_mutex_lock(&said_lock);
	said[0] = '\0';
	pthread_mutex_unlock(&said_lock);
	return start_fn(host, e);
}

int main(void)
{
	const struct mt_policy_engine *e = NULL;
	struct mt_event oom = {.kind = MT_EV_ALLOC_FAILED, .device = 0, .size = 1 << 20, .error = 2};
	char so[4096], tmp[] = "/tmp/memtap-engine-XXXXXX", cmd[64];
	const char *build = getenv("MT_BUILDDIR");
	int r;

	snprintf(so, sizeof so, "%s/src/policy/.libs/libmemtap-policy.so", build ? build : ".");
	if (!(dir = mkdtemp(tmp)))
		return 2;
	argv_engine = so;

	r = start(argv_engine, "memtap.on_oom(function(ev) memtap.snapshot('x.trace') return 'retry' end)\n", &e, 1);
	is(r, 0, "an engine whose on_oom takes a snapshot starts");
	ok(e && !e->oom(&oom), "on_oom stuck in a snapshot: the failing thread gets no retry, after the deadline");
	ok(heard("the on_oom handlers did not finish within 300 ms (policy_deadline_ms): policies are off"),
	   "and memtap says policies are off");
	ok(e && !e->oom(&oom) && __atomic_load_n(&stuck, __ATOMIC_RELAXED) == 1,
	   "the next failure does not wait: the engine is abandoned");
	e->feed(&oom, 1, now_ns());
	e->feed(NULL, 0, now_ns());
	e->stop();
	ok(1, "feeding and stopping an abandoned engine return at once (the stuck thread is not joined)");

	r = start(argv_engine, "memtap.snapshot('y.trace')\n", &e, 2);
	is(r, ETIMEDOUT, "a policy file whose top level hangs: the job starts without policies after the deadline");
	ok(heard("the policy files did not finish loading within 300 ms"), "and says so");

	r = start(argv_engine, "memtap.on_exit(function(ev) memtap.snapshot('z.trace') end)\n", &e, 3);
	is(r, 0, "an engine whose on_exit takes a snapshot starts");
	e->stop();
	ok(heard("the on_exit handlers did not finish within 300 ms"), "exit waits no longer than the deadline");

	r = start(argv_engine, "memtap.every(0.01, function(ev) memtap.snapshot('w.trace') end)\n", &e, 4);
	is(r, 0, "an engine with a timer that takes a snapshot starts");
	while (__atomic_load_n(&stuck, __ATOMIC_RELAXED) < 4)
		usleep(1000);
	e->feed(NULL, 0, now_ns() + 700000000ull); /* a drain more than twice the deadline later */
	ok(heard("a policy handler did not return within 600 ms"), "the writer's next drain notices the stuck timer");
	ok(!e->oom(&oom), "and on_oom is not asked");
	e->stop();

	r = start(argv_engine, "memtap.on_oom(function(ev) return 'retry' end)\n", &e, 5);
	ok(r == 0 && e->oom(&oom), "a healthy engine still answers: 'retry'");
	e->stop();
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (!tap_failed && system(cmd) != 0)
		return 2;
	/* the stuck threads stay stuck, on purpose: exit without the leak checker's stop of
	 * every thread, which crashes on them */
	r = done();
	fflush(stdout);
	_exit(r);
}
