/* The policy engine: one sandboxed Lua 5.4 state for every policy file, the handlers
 * scripts register, and the thread that feeds them. Events arrive from the writer in ring
 * order, one batch per drain; the policy thread sorts each batch and holds back the events
 * made after the drain began, which another thread's late push could still precede. A
 * push is late only when its thread was preempted between the clock and the ring, and
 * then nothing that depends on that event has happened yet (a free is recorded before the
 * memory is given back, an allocation before its address is returned), so what a late push
 * reorders is never one address's history. Every handler call
 * runs under an instruction budget, with a traceback on error; the first error is said,
 * the third switches the handler off. The application never sees a Lua error. */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lua/engine.h"
#include "lua/heap.h"
#include "util/alloc.h"
#include "util/array.h"
#include "util/units.h"

#define HOOK_STEP 1000               /* instructions between budget checks */
#define POLICY_NICE 10               /* the policy thread's nice value */
#define QUEUE_MAX (1u << 20)         /* events waiting for the policy thread */
#define MAX_ERRORS 3                 /* a handler that fails this often is switched off */
#define LOAD_BUDGET_FACTOR 100       /* a policy file's top level may run this many budgets */

const char *const mt_on_names[MT_ON_KINDS] = {"on_oom", "on_threshold", "on_peak", "on_phase", "on_iteration",
					      "on_leak", "on_exit", "every"};

struct mt_policy mt_pol = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct queue {
	struct mt_event *e;
	size_t n, cap;
};

/* What the writer hands over, under its own lock; the events it holds wait for the policy thread. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct queue in;
	uint64_t now;                /* when the newest drain began */
	bool ready, stop, stopped;
	pthread_t thread;
	bool running;
	uint64_t wake_at;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static struct queue held;           /* in time order, not yet applied; under mt_pol.lock */
static struct queue spare;          /* the writer's next buffer; under mt_pol.lock */
static __thread bool in_policy;     /* this thread is running Lua: an OOM here is not ours to handle */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mt_pol_say(const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof line, "memtap: policy: ");
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	mt_pol.host->say(line);
}

const char *mt_pol_string(uint32_t id)
{
	static char buf[512];
	size_t len = 0;
	const char *s = id ? mt_pol.host->string(id, &len) : NULL;

	if (!s)
		return "";
	if (len >= sizeof buf)
		len = sizeof buf - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return buf;
}

/* ---- calling Lua ---- */

static void count_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	if ((mt_pol.budget_left -= HOOK_STEP) < 0)
		luaL_error(L, "instruction budget exceeded (%I per call; MEMTAP_POLICY_BUDGET)",
			   (lua_Integer)mt_pol.host->budget);
}

static int traceback(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);

	luaL_traceback(L, L, msg ? msg : "an error that is not a string", 1);
	return 1;
}

/* Calls the function under the traceback handler with `nargs` arguments; one result. */
static int call(lua_State *L, int nargs, int64_t budget)
{
	int base = lua_gettop(L) - nargs, r;

	lua_pushcfunction(L, traceback);
	lua_insert(L, base);
	mt_pol.budget_left = budget;
	in_policy = true;
	r = lua_pcall(L, nargs, 1, base);
	in_policy = false;
	lua_remove(L, base);
	if (r == LUA_ERRMEM)
		lua_gc(L, LUA_GCCOLLECT);
	return r;
}

bool mt_pol_fire(struct mt_handler *h, const struct mt_pol_event *ev, const char *want)
{
	lua_State *L = mt_pol.L;
	bool got = false;

	if (h->off)
		return false;
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn);
	mt_pol_push_event(L, ev);
	if (call(L, 1, (int64_t)mt_pol.host->budget) == LUA_OK) {
		got = want && lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), want) == 0;
	} else {
		h->errors++;
		if (h->errors == 1)
			mt_pol_say("%s handler (%s) failed: %s", mt_on_names[h->kind], h->where, lua_tostring(L, -1));
		if (h->errors >= MAX_ERRORS) {
			h->off = true;
			mt_pol_say("%s handler (%s) failed %u times: switched off", mt_on_names[h->kind], h->where,
				   h->errors);
		}
	}
	lua_pop(L, 1);
	return got;
}

/* ---- registering handlers ---- */

static double opt_number(lua_State *L, int opts, const char *key, double dflt)
{
	double v = dflt;

	if (lua_istable(L, opts)) {
		lua_getfield(L, opts, key);
		if (!lua_isnil(L, -1)) {
			if (!lua_isnumber(L, -1))
				luaL_error(L, "option '%s' must be a number", key);
			v = lua_tonumber(L, -1);
		}
		lua_pop(L, 1);
	}
	return v;
}

static struct mt_handler *add(lua_State *L, enum mt_hook_kind kind, int fn_index)
{
	struct mt_handler *h;
	lua_Debug ar;

	luaL_checktype(L, fn_index, LUA_TFUNCTION);
	if (mt_grow((void **)&mt_pol.h, &mt_pol.cap, mt_pol.nh, sizeof *mt_pol.h))
		luaL_error(L, "not enough memory for another handler");
	h = &mt_pol.h[mt_pol.nh];
	memset(h, 0, sizeof *h);
	h->kind = kind;
	h->device = -1;
	if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar))
		snprintf(h->where, sizeof h->where, "%s:%d", ar.short_src, ar.currentline);
	lua_pushvalue(L, fn_index);
	h->fn = luaL_ref(L, LUA_REGISTRYINDEX);
	mt_pol.nh++;
	mt_pol.count[kind]++;
	return h;
}

static void device_opt(lua_State *L, int opts, struct mt_handler *h)
{
	double d = opt_number(L, opts, "device", -1);

	if (d < -1 || d >= MT_MAX_DEVICES - 1)
		luaL_error(L, "option 'device' is a device number");
	h->device = (int)d;
}

static char *copy_name(lua_State *L, int i)
{
	size_t n;
	const char *s = luaL_checklstring(L, i, &n);
	char *c = mt_malloc(n + 1);

	if (!c)
		luaL_error(L, "not enough memory");
	memcpy(c, s, n + 1);
	return c;
}

static int reg_oom(lua_State *L)
{
	add(L, MT_ON_OOM, 1);
	return 0;
}

static int reg_exit(lua_State *L)
{
	add(L, MT_ON_EXIT, 1);
	return 0;
}

static int reg_threshold(lua_State *L)
{
	double up = mt_pol_level(L, 1), down;
	struct mt_handler *h;

	luaL_checktype(L, 2, LUA_TFUNCTION);
	down = up * 0.95;
	if (lua_istable(L, 3)) {
		lua_getfield(L, 3, "below");
		if (!lua_isnil(L, -1)) {
			down = mt_pol_level(L, -1);
			if ((down <= 1) != (up <= 1) || down >= up)
				luaL_error(L, "option 'below' must be a level of the same kind below the threshold");
		}
		lua_pop(L, 1);
	}
	h = add(L, MT_ON_THRESHOLD, 2);
	h->up = up;
	h->down = down;
	if (lua_istable(L, 3)) {
		lua_getfield(L, 3, "below");
		h->report_down = !lua_isnil(L, -1);
		lua_pop(L, 1);
	}
	device_opt(L, 3, h);
	return 0;
}

static int reg_peak(lua_State *L)
{
	struct mt_handler *h = add(L, MT_ON_PEAK, 1);

	h->growth = opt_number(L, 2, "growth", 0.01);
	h->interval_ns = (uint64_t)(opt_number(L, 2, "interval", 1.0) * 1e9);
	if (!(h->reported = mt_calloc(2 * MT_MAX_DEVICES, sizeof *h->reported)))
		luaL_error(L, "not enough memory");
	device_opt(L, 2, h);
	return 0;
}

static int reg_phase(lua_State *L)
{
	struct mt_handler *h;

	luaL_checkstring(L, 1);
	lua_getglobal(L, "string"); /* a pattern that cannot match anything is an error now, not at each range */
	lua_getfield(L, -1, "find");
	lua_pushliteral(L, "");
	lua_pushvalue(L, 1);
	if (lua_pcall(L, 2, 0, 0) != LUA_OK)
		luaL_error(L, "bad name pattern: %s", lua_tostring(L, -1));
	lua_pop(L, 1);
	h = add(L, MT_ON_PHASE, 2);

	h->name = copy_name(L, 1);
	return 0;
}

static int reg_iteration(lua_State *L)
{
	struct mt_handler *h = add(L, MT_ON_ITERATION, 1);

	if (lua_istable(L, 2)) {
		lua_getfield(L, 2, "name");
		if (!lua_isnil(L, -1))
			h->name = copy_name(L, -1);
		lua_pop(L, 1);
	}
	return 0;
}

static int reg_leak(lua_State *L)
{
	struct mt_handler *h = add(L, MT_ON_LEAK, 1);
	double window = opt_number(L, 2, "iterations", 3), min = opt_number(L, 2, "min_bytes", 1 << 20);

	if (window < 2 || window > 64)
		luaL_error(L, "option 'iterations' is from 2 to 64");
	h->window = (unsigned)window;
	h->min_bytes = min > 0 ? (uint64_t)min : 0;
	device_opt(L, 2, h);
	if (!(h->leak = mt_calloc(MT_MAX_DEVICES, sizeof *h->leak)))
		luaL_error(L, "not enough memory");
	return 0;
}

static int reg_every(lua_State *L)
{
	double s = luaL_checknumber(L, 1);
	struct mt_handler *h;

	luaL_argcheck(L, s >= 0.01, 1, "the period is at least 0.01 seconds");
	h = add(L, MT_EVERY, 2);
	h->period_ns = (uint64_t)(s * 1e9);
	h->next_ns = now_ns() + h->period_ns;
	return 0;
}

static const luaL_Reg registrars[] = {
	{"on_oom", reg_oom},           {"on_threshold", reg_threshold}, {"on_peak", reg_peak}, {"on_phase", reg_phase},
	{"on_iteration", reg_iteration}, {"on_leak", reg_leak},          {"on_exit", reg_exit}, {"every", reg_every},
	{NULL, NULL}};

/* ---- the sandbox ---- */

static void open_sandbox(lua_State *L)
{
	static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},        {LUA_COLIBNAME, luaopen_coroutine},
					{LUA_TABLIBNAME, luaopen_table},  {LUA_STRLIBNAME, luaopen_string},
					{LUA_MATHLIBNAME, luaopen_math},  {LUA_UTF8LIBNAME, luaopen_utf8},
					{LUA_OSLIBNAME, luaopen_os},      {NULL, NULL}};
	/* what a policy may not reach: other code, other files, the process */
	static const char *const gone[] = {"dofile", "loadfile", "load", "require", NULL};
	static const char *const os_kept[] = {"clock", "date", "difftime", "getenv", "time", NULL};

	for (const luaL_Reg *l = libs; l->name; l++) {
		luaL_requiref(L, l->name, l->func, 1);
		lua_pop(L, 1);
	}
	for (const char *const *g = gone; *g; g++) {
		lua_pushnil(L);
		lua_setglobal(L, *g);
	}
	lua_getglobal(L, "os");
	lua_createtable(L, 0, 5);
	for (const char *const *k = os_kept; *k; k++) {
		lua_getfield(L, -2, *k);
		lua_setfield(L, -2, *k);
	}
	lua_setglobal(L, "os");
	lua_pop(L, 1);
	lua_getglobal(L, "string");
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	lua_pop(L, 1);
	mt_pol_open_module(L);
	luaL_setfuncs(L, registrars, 0);
	lua_getfield(L, -1, "log"); /* print goes where memtap.log does, not into the job's output */
	lua_setglobal(L, "print");
	lua_setglobal(L, "memtap");
}

/* Reads a policy file into the engine's heap (not through stdio: not the application's heap). */
static char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && (buf = mt_malloc((size_t)st.st_size + 1)))
		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
	close(fd);
	if (buf && got != (size_t)st.st_size) {
		mt_free(buf);
		return NULL;
	}
	*len = got;
	return buf;
}

/* Runs one policy file; on failure its handlers go again and the failure is said. */
static void load(const char *path)
{
	lua_State *L = mt_pol.L;
	size_t len, before = mt_pol.nh;
	char name[4200];
	char *text = slurp(path, &len);
	int r;

	if (!text) {
		mt_pol_say("cannot read %s: %s; it is not run", path, strerror(errno ? errno : EIO));
		return;
	}
	snprintf(name, sizeof name, "@%s", path);
	r = luaL_loadbufferx(L, text, len, name, "t");
	mt_free(text);
	if (r == LUA_OK)
		r = call(L, 0, (int64_t)mt_pol.host->budget * LOAD_BUDGET_FACTOR);
	if (r != LUA_OK) {
		mt_pol_say("%s; this policy is not run", lua_tostring(L, -1));
		while (mt_pol.nh > before) {
			struct mt_handler *h = &mt_pol.h[--mt_pol.nh];
			luaL_unref(L, LUA_REGISTRYINDEX, h->fn);
			mt_pol.count[h->kind]--;
		}
	}
	lua_pop(L, 1);
}

/* ---- events in, in time order ---- */

static bool fit(struct queue *x, size_t need)
{
	size_t cap = x->cap ? x->cap : 4096;
	struct mt_event *e;

	if (need <= x->cap)
		return true;
	while (cap < need)
		cap *= 2;
	if (cap > QUEUE_MAX || !(e = mt_pol.host->map(cap * sizeof *e)))
		return false;
	if (x->n)
		memcpy(e, x->e, x->n * sizeof *e);
	if (x->e)
		mt_pol.host->unmap(x->e, x->cap * sizeof *e);
	x->e = e;
	x->cap = cap;
	return true;
}

static void feed(const struct mt_event *e, size_t n, uint64_t now)
{
	pthread_mutex_lock(&q.lock);
	if (!q.stopped) {
		if (n && fit(&q.in, q.in.n + n)) {
			memcpy(q.in.e + q.in.n, e, n * sizeof *e);
			q.in.n += n;
		} else if (n) {
			if (!mt_pol.dropped)
				mt_pol_say("the policy thread fell behind; its view of memory is approximate from now on");
			__atomic_add_fetch(&mt_pol.dropped, n, __ATOMIC_RELAXED);
		}
		if (!n) { /* the end of a drain: the policy thread may go */
			q.now = now;
			q.ready = true;
			pthread_cond_signal(&q.cond);
		}
	}
	pthread_mutex_unlock(&q.lock);
}

/* Applies the events that waited and the writer's new batch, merged in time order, up to
 * `cutoff`; the rest waits in `held`. The batch is taken without a copy: its buffer is
 * swapped with a spare one. Called with mt_pol.lock held. */
static void process(uint64_t cutoff)
{
	struct queue b;
	size_t i = 0, j = 0;

	pthread_mutex_lock(&q.lock);
	b = q.in;
	q.in = spare;
	pthread_mutex_unlock(&q.lock);
	mt_watch_forget_capacity(); /* the driver may have said a device's size since */
	mt_sort_events(b.e, b.n); /* out of memory: applied as they came */
	while (i < held.n || j < b.n) {
		bool old = j == b.n || (i < held.n && held.e[i].time <= b.e[j].time);
		const struct mt_event *e = old ? &held.e[i] : &b.e[j];
		if (e->time >= cutoff)
			break;
		mt_watch_apply(e);
		*(old ? &i : &j) += 1;
	}
	/* what waits: the rest of the held events, then the rest of the batch */
	if (i) {
		memmove(held.e, held.e + i, (held.n - i) * sizeof *held.e);
		held.n -= i;
	}
	if (j < b.n && fit(&held, held.n + b.n - j)) {
		memcpy(held.e + held.n, b.e + j, (b.n - j) * sizeof *held.e);
		held.n += b.n - j;
		mt_sort_events(held.e, held.n);
	} else if (j < b.n) {
		__atomic_add_fetch(&mt_pol.dropped, b.n - j, __ATOMIC_RELAXED);
	}
	b.n = 0;
	spare = b;
}

static void *policy_main(void *arg)
{
	(void)arg;
	/* background work: when the cores are busy, the job's threads go first */
	setpriority(PRIO_PROCESS, (id_t)gettid(), POLICY_NICE);
	pthread_mutex_lock(&q.lock);
	while (!q.stop) {
		uint64_t cutoff;
		struct timespec until;
		uint64_t wait = q.wake_at > now_ns() ? q.wake_at - now_ns() : 0;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += (time_t)(wait / 1000000000ull);
		until.tv_nsec += (long)(wait % 1000000000ull);
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		while (!q.stop && !q.ready && pthread_cond_timedwait(&q.cond, &q.lock, &until) == 0)
			;
		if (q.stop)
			break;
		q.ready = false;
		cutoff = q.now;
		pthread_mutex_unlock(&q.lock);

		pthread_mutex_lock(&mt_pol.lock);
		process(cutoff);
		uint64_t now = now_ns();
		mt_watch_batch_end(now);
		uint64_t next = mt_watch_next_timer(now);
		pthread_mutex_unlock(&mt_pol.lock);

		pthread_mutex_lock(&q.lock);
		q.wake_at = next;
	}
	pthread_mutex_unlock(&q.lock);
	return NULL;
}

/* ---- the engine's entry points ---- */

static struct mt_pol_event oom_event(const struct mt_event *e)
{
	return (struct mt_pol_event){.kind = "oom", .device = e->device == MT_NO_DEVICE ? -1 : e->device,
				     .size = e->size, .time = e->time, .stack = e->stack, .phase = e->phase,
				     .free = e->aux, .total = e->aux2, .error = e->error};
}

static bool oom(const struct mt_event *e)
{
	bool retry = false;
	struct mt_pol_event ev = oom_event(e);

	if (!mt_pol.count[MT_ON_OOM] || in_policy || q.stopped)
		return false;
	pthread_mutex_lock(&mt_pol.lock);
	mt_pol.host->sync(); /* the failing request and everything before it */
	process(UINT64_MAX);
	for (size_t i = 0; i < mt_pol.nh; i++)
		if (mt_pol.h[i].kind == MT_ON_OOM && mt_pol_fire(&mt_pol.h[i], &ev, "retry"))
			retry = true;
	pthread_mutex_unlock(&mt_pol.lock);
	return retry;
}

static void stop(void)
{
	struct mt_pol_event ev = {.kind = "exit", .device = -1, .time = now_ns()};

	pthread_mutex_lock(&q.lock);
	q.stop = true;
	pthread_cond_signal(&q.cond);
	pthread_mutex_unlock(&q.lock);
	if (q.running)
		pthread_join(q.thread, NULL);
	q.running = false;
	pthread_mutex_lock(&mt_pol.lock);
	mt_pol.host->sync();
	process(UINT64_MAX);
	mt_watch_batch_end(ev.time);
	for (size_t i = 0; i < mt_pol.nh; i++)
		if (mt_pol.h[i].kind == MT_ON_EXIT)
			mt_pol_fire(&mt_pol.h[i], &ev, NULL);
	pthread_mutex_lock(&q.lock);
	q.stopped = true; /* later events (other threads, other exit handlers) are not looked at */
	pthread_mutex_unlock(&q.lock);
	pthread_mutex_unlock(&mt_pol.lock);
}

static const struct mt_policy_engine engine = {feed, oom, stop};

__attribute__((visibility("default"))) int memtap_policy_start(const struct mt_policy_host *host,
							     const struct mt_policy_engine **out)
{
	char files[4096];
	sigset_t all, old;
	int r;

	if (host->abi != MT_POLICY_ABI)
		return EINVAL;
	mt_pol.host = host;
	mt_heap_init(host, host->memory);
	if (!(mt_pol.L = lua_newstate(mt_heap_lua, NULL))) {
		mt_pol_say("no memory for a Lua state; policies are off");
		return ENOMEM;
	}
	lua_sethook(mt_pol.L, count_hook, LUA_MASKCOUNT, HOOK_STEP);
	mt_watch_init();
	open_sandbox(mt_pol.L);
	snprintf(files, sizeof files, "%s", host->files);
	for (char *save = NULL, *f = strtok_r(files, ":", &save); f; f = strtok_r(NULL, ":", &save))
		load(f);
	q.wake_at = mt_watch_next_timer(now_ns());
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&q.thread, NULL, policy_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	q.running = r == 0;
	if (r)
		mt_pol_say("cannot start the policy thread: %s; only on_oom and on_exit run", strerror(r));
	*out = &engine;
	return 0;
}
