/* The policy engine: one sandboxed Lua 5.4 state for every policy file, the handlers
 * scripts register, and the one thread that runs them all. Events arrive from the writer
 * in ring order, one batch per drain; the policy thread sorts each batch and holds back
 * the events made after the drain began, which another thread's late push could still
 * precede. A push is late only when its thread was preempted between the clock and the
 * ring, and then nothing that depends on that event has happened yet (a free is recorded
 * before the memory is given back, an allocation before its address is returned), so what
 * a late push reorders is never one address's history.
 * The job's threads never run Lua: loading, an out-of-memory failure and exit are requests
 * they hand to the policy thread and wait for, at most the deadline (policy_deadline_ms);
 * a request not answered by then abandons the engine, and the job goes on as if there
 * were no policy. Every call into Lua is protected and runs under an instruction budget
 * that a script cannot catch, and a time limit; the first error is said, the third (or
 * running out of memory) switches the handler off. The application never sees a Lua error. */
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

#include "policy/engine.h"
#include "policy/heap.h"
#include "core/alloc.h"
#include "core/array.h"
#include "core/units.h"

#define HOOK_STEP 1000		/* instructions between budget checks */
#define POLICY_NICE 10		/* the policy thread's nice value */
#define POLICY_STACK (4u << 20) /* its stack: Lua's 200 nested C calls take under 400 KiB here */
#define QUEUE_MAX (1u << 20)	/* events waiting for the policy thread */
#define MAX_ERRORS 3		/* a handler that fails this often is switched off */
#define LOAD_BUDGET_FACTOR 100	/* a policy file's top level may run this many budgets */
#define MAX_HANDLERS 256	/* handlers all policy files may register together */
#define CALL_SHARE 4		/* one call may run a quarter of the deadline */
#define SAY_BURST 20		/* lines said at once; then one a second */
#define MAX_BLOCK (4u << 20)	/* the largest string or table part a script may make */
#define TRACEBACK_LEVELS 12	/* frames an error's traceback shows */
#define MAX_SECONDS 1e9		/* the longest period or interval a handler may ask for */
#define MAX_FACTOR 1e9		/* the largest growth on_peak may ask for */

const char *const mt_on_names[MT_ON_KINDS] = {"on_oom",	 "on_threshold", "on_peak", "on_phase",	  "on_iteration",
					      "on_leak", "on_exit",	 "every",   "on_peer_oom"};

struct mt_policy mt_pol;

struct queue {
	struct mt_event *e;
	size_t n, cap;
};

enum request { REQ_NONE, REQ_OOM, REQ_STOP };

/* What the writer hands over, and what the job's threads ask, under q.lock. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;	 /* the policy thread waits on it */
	pthread_cond_t answered; /* the job's threads wait on it */
	struct queue in;	 /* events waiting for the policy thread */
	uint64_t now;		 /* when the newest drain began */
	bool ready;		 /* a drain is complete */
	bool loaded;		 /* the policy files have run (or failed) */
	bool failed;		 /* no Lua state: policies are off */
	bool stopped;		 /* on_exit has run: later events are not looked at */
	pthread_t thread;
	bool running;
	uint64_t wake_at;
	enum request req; /* one request at a time */
	struct mt_event oom;
	bool retry;
	uint64_t asked, done; /* requests made, requests answered */
} q = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct queue held;	    /* in time order, not yet applied; the policy thread's */
static struct queue spare;	    /* the writer's next buffer; the policy thread's */
static __thread bool policy_thread; /* this is the policy thread: an OOM here is not ours to handle */
static bool abandoned;		    /* the policy thread missed a deadline: policies are off */
static uint64_t busy_since;	    /* when the running call into Lua began; 0: none */
static uint64_t call_until;	    /* the running call's time limit */
static const char *stopped_by;	    /* why the running call is being stopped; NULL: it is not */
static char refused[160];	    /* the call into C a budget could not pay, when that stopped it */
static int find_ref = LUA_NOREF;    /* string.find, as the sandbox has it, for name patterns */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Lines go out at once up to SAY_BURST, then one a second; what is held back is counted
 * and said with the next line that goes out, and at exit. */
static struct {
	pthread_mutex_t lock;
	unsigned tokens;
	uint64_t refilled;
	uint64_t held_back;
} said = {PTHREAD_MUTEX_INITIALIZER, SAY_BURST, 0, 0};

static void say_held_back(void)
{
	char line[128];

	if (!said.held_back)
		return;
	snprintf(line, sizeof line, "memtap: policy: %llu lines not said: too many in too short a time",
		 (unsigned long long)said.held_back);
	said.held_back = 0;
	mt_pol.host->say(line);
}

void mt_pol_say(const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof line, "memtap: policy: ");
	uint64_t now = now_ns();
	va_list ap;

	if (mt_pol.host->quiet)
		return;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&said.lock);
	if (now - said.refilled >= 1000000000ull) {
		said.tokens += (unsigned)((now - said.refilled) / 1000000000ull) < SAY_BURST
				   ? (unsigned)((now - said.refilled) / 1000000000ull)
				   : SAY_BURST;
		if (said.tokens > SAY_BURST)
			said.tokens = SAY_BURST;
		said.refilled = now;
	}
	if (said.tokens) {
		said.tokens--;
		say_held_back();
		mt_pol.host->say(line);
	} else {
		said.held_back++;
	}
	pthread_mutex_unlock(&said.lock);
}

/* Policies are off from now on; said once. Any thread. */
static void abandon(const char *why, uint64_t ms)
{
	if (!__atomic_exchange_n(&abandoned, true, __ATOMIC_ACQ_REL))
		mt_pol_say("%s within %llu ms (policy_deadline_ms): policies are off from now on, the job goes on", why,
			   (unsigned long long)ms);
	pthread_mutex_lock(&q.lock);
	pthread_cond_broadcast(&q.answered);
	pthread_mutex_unlock(&q.lock);
}

bool mt_pol_abandoned(void)
{
	return __atomic_load_n(&abandoned, __ATOMIC_ACQUIRE);
}

static uint64_t deadline_ms(void)
{
	return mt_pol.host->deadline_ns / 1000000ull;
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

static void count_hook(lua_State *L, lua_Debug *ar);

/* Once a call is over its budget or time, or policies are off, every instruction fails,
 * in whichever coroutine runs: a pcall in the script catches one error, not the next, and
 * the main thread's next instruction fails when a coroutine's error comes back to it. */
static void check(lua_State *L)
{
	if (!stopped_by) {
		if (mt_pol_abandoned())
			stopped_by = "policies are off";
		else if (mt_pol.budget_left <= 0)
			stopped_by = *refused ? refused : "instruction budget exceeded (policy_budget per call)";
		else if (now_ns() > call_until)
			stopped_by = "time limit exceeded (a quarter of policy_deadline_ms per call)";
		else
			return;
	}
	mt_pol.budget_left = 0;
	lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
	lua_sethook(mt_pol.L, count_hook, LUA_MASKCOUNT, 1);
	luaL_error(L, "%s", stopped_by);
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	if (lua_gethookcount(L) == 1 && !stopped_by) /* a coroutine an earlier call stopped */
		lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_STEP);
	else
		mt_pol.budget_left -= HOOK_STEP;
	check(L);
}

void mt_pol_charge(lua_State *L, double instructions, const char *what)
{
	if (instructions >= (double)mt_pol.budget_left) {
		if (what && !stopped_by && mt_pol.budget_left > 0)
			snprintf(refused, sizeof refused,
				 "instruction budget exceeded (policy_budget per call): %s may take %.3g instructions, "
				 "%lld left",
				 what, instructions, (long long)mt_pol.budget_left);
		mt_pol.budget_left = 0;
	} else
		mt_pol.budget_left -= (int64_t)instructions;
	check(L);
}

/* The message handler of every call. It runs where the error was raised, with hooks off
 * when the error is a budget's from the count hook, so its work must not grow with what a
 * script made: luaL_traceback's layout, but a function is named from the calling code
 * only (luaL_traceback looks for a global name in every loaded module's table). */
static int traceback(lua_State *L)
{
	luaL_Buffer b;
	lua_Debug ar;
	int level = 1;

	luaL_buffinit(L, &b);
	luaL_addstring(&b, lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : "an error that is not a string");
	luaL_addstring(&b, "\nstack traceback:");
	for (; lua_getstack(L, level, &ar) && level <= TRACEBACK_LEVELS; level++) {
		char line[LUA_IDSIZE + 160], name[128];

		lua_getinfo(L, "Sln", &ar);
		if (*ar.namewhat)
			snprintf(name, sizeof name, "%s '%s'", ar.namewhat, ar.name);
		else if (*ar.what == 'm')
			snprintf(name, sizeof name, "main chunk");
		else if (*ar.what != 'C')
			snprintf(name, sizeof name, "function <%s:%d>", ar.short_src, ar.linedefined);
		else
			snprintf(name, sizeof name, "?");
		if (ar.currentline > 0)
			snprintf(line, sizeof line, "\n\t%s:%d: in %s", ar.short_src, ar.currentline, name);
		else
			snprintf(line, sizeof line, "\n\t%s: in %s", ar.short_src, name);
		luaL_addstring(&b, line);
	}
	if (lua_getstack(L, level, &ar))
		luaL_addstring(&b, "\n\t...");
	luaL_pushresult(&b);
	return 1;
}

static const char *error_text(lua_State *L)
{
	return lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "an error that is not a string";
}

/* Calls the function under the traceback handler with `nargs` arguments; one result. */
static int call(lua_State *L, int nargs, int64_t budget)
{
	int base = lua_gettop(L) - nargs, r;
	uint64_t now = now_ns();

	lua_pushcfunction(L, traceback);
	lua_insert(L, base);
	mt_pol.budget_left = budget;
	stopped_by = NULL;
	refused[0] = '\0';
	call_until = now + mt_pol.host->deadline_ns / CALL_SHARE;
	__atomic_store_n(&busy_since, now, __ATOMIC_RELEASE);
	r = lua_pcall(L, nargs, 1, base);
	mt_pol_symbols_close();
	__atomic_store_n(&busy_since, 0, __ATOMIC_RELEASE);
	lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_STEP);
	lua_remove(L, base);
	if (r == LUA_ERRMEM)
		lua_gc(L, LUA_GCCOLLECT);
	return r;
}

/* Lua's allocator: memtap's capped heap, no block past MAX_BLOCK, so that no single
 * instruction copies or compares more than that, and each byte made charged to the
 * running call (the count hook sees what is spent). */
static void *lua_alloc(void *ud, void *p, size_t osize, size_t nsize)
{
	size_t had = p ? osize : 0;

	(void)ud;
	if (nsize == 0) {
		mt_free(p);
		return NULL;
	}
	if (nsize > had) {
		if (nsize > MAX_BLOCK)
			return NULL;
		mt_pol.budget_left -= (int64_t)((nsize - had) / 16);
	}
	return mt_realloc(p, nsize);
}

/* Runs `fn` protected with one light userdata argument; its one result stays on the stack. */
static int call_c(lua_CFunction fn, void *arg, int64_t budget)
{
	lua_pushcfunction(mt_pol.L, fn);
	lua_pushlightuserdata(mt_pol.L, arg);
	return call(mt_pol.L, 1, budget);
}

static void failed(struct mt_handler *h, int r, const char *msg)
{
	const char *kind = mt_on_names[h->kind];

	h->errors++;
	if (r == LUA_ERRMEM) {
		h->off = true;
		mt_pol_say("%s handler (%s) ran out of memory (policy_memory): switched off", kind, h->where);
		return;
	}
	if (h->errors == 1)
		mt_pol_say("%s handler (%s) failed: %s", kind, h->where, msg);
	if (h->errors >= MAX_ERRORS) {
		h->off = true;
		mt_pol_say("%s handler (%s) failed %u times: switched off", kind, h->where, h->errors);
	}
}

/* The event's table needs memory too: it is made in a protected call of its own. */
static int push_event(lua_State *L)
{
	mt_pol_push_event(L, lua_touserdata(L, 1));
	return 1;
}

bool mt_pol_fire(struct mt_handler *h, const struct mt_pol_event *ev, const char *want)
{
	lua_State *L = mt_pol.L;
	bool got = false;
	int r;

	if (h->off || mt_pol_abandoned())
		return false;
	if ((r = call_c(push_event, (void *)ev, (int64_t)mt_pol.host->budget)) == LUA_OK) {
		lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn);
		lua_insert(L, -2);
		r = call(L, 1, (int64_t)mt_pol.host->budget);
	}
	if (r == LUA_OK)
		got = want && lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), want) == 0;
	else
		failed(h, r, error_text(L));
	lua_pop(L, 1);
	return got;
}

struct matching {
	const char *name, *pattern;
};

static int match_protected(lua_State *L)
{
	const struct matching *m = lua_touserdata(L, 1);

	lua_rawgeti(L, LUA_REGISTRYINDEX, find_ref);
	lua_pushstring(L, m->name);
	lua_pushstring(L, m->pattern);
	lua_call(L, 2, 1);
	lua_pushboolean(L, !lua_isnil(L, -1));
	return 1;
}

bool mt_pol_match(const char *name, const char *pattern)
{
	struct matching m = {name, pattern};
	bool yes;

	yes = call_c(match_protected, &m, (int64_t)mt_pol.host->budget) == LUA_OK && lua_toboolean(mt_pol.L, -1);
	lua_pop(mt_pol.L, 1);
	return yes;
}

/* ---- registering handlers ---- */

/* A registrar reads and checks every argument and option into a handler of its own;
 * add() then registers it, raising before anything joins the table: a call that raises,
 * caught by pcall or not, leaves nothing behind for the events to find. */

/* An option of the table at `opts` (nil: no options), a number from min to max; NaN,
 * infinities and other types raise. */
static double opt_number(lua_State *L, int opts, const char *key, double dflt, double min, double max)
{
	double v = dflt;

	if (lua_isnoneornil(L, opts))
		return dflt;
	luaL_checktype(L, opts, LUA_TTABLE);
	if (lua_getfield(L, opts, key) != LUA_TNIL) {
		if (lua_type(L, -1) != LUA_TNUMBER)
			luaL_error(L, "option '%s' must be a number", key);
		v = lua_tonumber(L, -1);
		if (!(v >= min && v <= max)) {
			char range[64]; /* %g, which Lua's own formatting lacks */
			snprintf(range, sizeof range, "from %g to %g", min, max);
			luaL_error(L, "option '%s' is %s", key, range);
		}
	}
	lua_pop(L, 1);
	return v;
}

static int opt_device(lua_State *L, int opts)
{
	double d = opt_number(L, opts, "device", -1, -1, MT_NO_DEVICE - 1);

	if (d != (int)d)
		luaL_error(L, "option 'device' is a device number");
	return (int)d;
}

/* What a handler holds, let go. */
static void release(lua_State *L, struct mt_handler *h)
{
	luaL_unref(L, LUA_REGISTRYINDEX, h->fn);
	mt_free(h->name);
	mt_free(h->reported);
	mt_free(h->leak);
	mt_map_free(&h->matches);
}

/* Registers t, its settings checked, with the function at fn_index and the name (NULL:
 * none) the registrar has on the stack; raises, registering nothing, when it cannot. */
static void add(lua_State *L, struct mt_handler *t, int fn_index, const char *name)
{
	size_t n = name ? strlen(name) + 1 : 0;
	lua_Debug ar;

	luaL_checktype(L, fn_index, LUA_TFUNCTION);
	if (mt_pol.nh >= MAX_HANDLERS)
		luaL_error(L, "too many handlers: policies may register %d in all", MAX_HANDLERS);
	if (mt_grow((void **)&mt_pol.h, &mt_pol.cap, mt_pol.nh, sizeof *mt_pol.h))
		luaL_error(L, "not enough memory for another handler");
	if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar))
		snprintf(t->where, sizeof t->where, "%s:%d", ar.short_src, ar.currentline);
	lua_pushvalue(L, fn_index);
	t->fn = luaL_ref(L, LUA_REGISTRYINDEX); /* may raise: before anything is held */
	if ((name && !(t->name = mt_malloc(n))) ||
	    (t->kind == MT_ON_PEAK && !(t->reported = mt_calloc(2 * MT_MAX_DEVICES, sizeof *t->reported))) ||
	    (t->kind == MT_ON_LEAK && !(t->leak = mt_calloc(MT_MAX_DEVICES, sizeof *t->leak)))) {
		release(L, t);
		luaL_error(L, "not enough memory for another handler");
	}
	if (name)
		memcpy(t->name, name, n);
	mt_pol.h[mt_pol.nh++] = *t;
	mt_pol.count[t->kind]++;
}

static int reg_oom(lua_State *L)
{
	add(L, &(struct mt_handler){.kind = MT_ON_OOM, .device = -1}, 1, NULL);
	return 0;
}

static int reg_peer_oom(lua_State *L)
{
	add(L, &(struct mt_handler){.kind = MT_ON_PEER_OOM, .device = -1}, 1, NULL);
	return 0;
}

static int reg_exit(lua_State *L)
{
	add(L, &(struct mt_handler){.kind = MT_ON_EXIT, .device = -1}, 1, NULL);
	return 0;
}

static int reg_threshold(lua_State *L)
{
	struct mt_handler h = {.kind = MT_ON_THRESHOLD, .up = mt_pol_level(L, 1)};

	h.down = h.up * 0.95;
	h.device = opt_device(L, 3);
	if (lua_istable(L, 3) && lua_getfield(L, 3, "below") != LUA_TNIL) {
		h.down = mt_pol_level(L, -1);
		h.report_down = true;
		if ((h.down <= 1) != (h.up <= 1) || h.down >= h.up)
			luaL_error(L, "option 'below' must be a level of the same kind below the threshold");
	}
	add(L, &h, 2, NULL);
	return 0;
}

static int reg_peak(lua_State *L)
{
	struct mt_handler h = {.kind = MT_ON_PEAK};

	h.growth = opt_number(L, 2, "growth", 0.01, 0, MAX_FACTOR);
	h.interval_ns = (uint64_t)(opt_number(L, 2, "interval", 1.0, 0, MAX_SECONDS) * 1e9);
	h.device = opt_device(L, 2);
	add(L, &h, 1, NULL);
	return 0;
}

static int reg_phase(lua_State *L)
{
	luaL_checkstring(L, 1);
	lua_rawgeti(L, LUA_REGISTRYINDEX, find_ref); /* a bad pattern is an error now, not at each range */
	lua_pushliteral(L, "");
	lua_pushvalue(L, 1);
	if (lua_pcall(L, 2, 0, 0) != LUA_OK)
		luaL_error(L, "bad name pattern: %s", error_text(L));
	add(L, &(struct mt_handler){.kind = MT_ON_PHASE, .device = -1}, 2, lua_tostring(L, 1));
	return 0;
}

static int reg_iteration(lua_State *L)
{
	const char *name = NULL;

	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TTABLE);
		if (lua_getfield(L, 2, "name") != LUA_TNIL && !(name = lua_tostring(L, -1)))
			luaL_error(L, "option 'name' must be a string");
	}
	add(L, &(struct mt_handler){.kind = MT_ON_ITERATION, .device = -1}, 1, name);
	return 0;
}

static int reg_leak(lua_State *L)
{
	struct mt_handler h = {.kind = MT_ON_LEAK};
	double window = opt_number(L, 2, "iterations", 3, 2, 64);

	if (window != (unsigned)window)
		luaL_error(L, "option 'iterations' is a whole number");
	h.window = (unsigned)window;
	h.min_bytes = (uint64_t)opt_number(L, 2, "min_bytes", 1 << 20, 0, MT_POL_MAX_BYTES);
	h.device = opt_device(L, 2);
	add(L, &h, 1, NULL);
	return 0;
}

static int reg_every(lua_State *L)
{
	double s = luaL_checknumber(L, 1);
	struct mt_handler h = {.kind = MT_EVERY, .device = -1};

	luaL_argcheck(L, s >= 0.01 && s <= MAX_SECONDS, 1, "the period is from 0.01 to 10^9 seconds");
	h.period_ns = (uint64_t)(s * 1e9);
	h.next_ns = now_ns() + h.period_ns;
	add(L, &h, 2, NULL);
	return 0;
}

static const luaL_Reg registrars[] = {{"on_oom", reg_oom},
				      {"on_threshold", reg_threshold},
				      {"on_peak", reg_peak},
				      {"on_phase", reg_phase},
				      {"on_iteration", reg_iteration},
				      {"on_leak", reg_leak},
				      {"on_exit", reg_exit},
				      {"every", reg_every},
				      {"on_peer_oom", reg_peer_oom},
				      {NULL, NULL}};

/* ---- the state ---- */

/* The sandbox (sandbox.c), the memtap module with the registrars, print as memtap.log.
 * Protected: it needs memory, which may be short from the start. */
static int open_state(lua_State *L)
{
	mt_pol_open_sandbox(L);
	lua_getglobal(L, "string");
	lua_getfield(L, -1, "find");
	find_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_pop(L, 1);
	mt_pol_open_module(L);
	luaL_setfuncs(L, registrars, 0);
	lua_getfield(L, -1, "log"); /* print goes where memtap.log does, not into the job's output */
	lua_setglobal(L, "print");
	lua_setglobal(L, "memtap");
	return 0;
}

/* Lua calls this only when an error escapes every protected call, which the engine does
 * not let happen; if it does, this thread stops here and the job's threads, which never
 * wait past the deadline, go on without it. */
static int panic(lua_State *L)
{
	mt_pol_say("Lua failed outside a protected call (%s); policies are off", error_text(L));
	__atomic_store_n(&abandoned, true, __ATOMIC_RELEASE);
	for (;;)
		pause();
	return 0;
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
		mt_pol_say("%s; this policy is not run", error_text(L));
		while (mt_pol.nh > before) {
			struct mt_handler *h = &mt_pol.h[--mt_pol.nh];
			mt_pol.count[h->kind]--;
			release(L, h);
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
	uint64_t since = __atomic_load_n(&busy_since, __ATOMIC_ACQUIRE);

	if (mt_pol_abandoned())
		return;
	/* the writer drains every flush_ms: it notices a call that never comes back */
	if (since && now > since + 2 * mt_pol.host->deadline_ns) {
		abandon("a policy handler did not return", 2 * deadline_ms());
		return;
	}
	pthread_mutex_lock(&q.lock);
	if (!q.stopped) {
		if (n && fit(&q.in, q.in.n + n)) {
			memcpy(q.in.e + q.in.n, e, n * sizeof *e);
			q.in.n += n;
		} else if (n) {
			if (!mt_pol.dropped)
				mt_pol_say(
				    "the policy thread fell behind; its view of memory is approximate from now on");
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
 * swapped with a spare one. */
static void process(uint64_t cutoff)
{
	struct queue b;
	size_t i = 0, j = 0;

	pthread_mutex_lock(&q.lock);
	b = q.in;
	q.in = spare;
	pthread_mutex_unlock(&q.lock);
	mt_watch_forget_capacity(); /* the driver may have said a device's size since */
	mt_sort_events(b.e, b.n);   /* out of memory: applied as they came */
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

/* ---- the policy thread ---- */

static struct mt_pol_event oom_event(const struct mt_event *e)
{
	return (struct mt_pol_event){.kind = "oom",
				     .device = e->device == MT_NO_DEVICE ? -1 : e->device,
				     .size = e->size,
				     .time = e->time,
				     .stack = e->stack,
				     .phase = e->phase,
				     .free = e->aux,
				     .total = e->aux2,
				     .error = e->error};
}

/* The failing request and everything before it (fed by the host's drain), then every
 * on_oom handler. */
static bool run_oom(const struct mt_event *e)
{
	struct mt_pol_event ev = oom_event(e);
	bool retry = false;

	process(UINT64_MAX);
	mt_job_oom(true); /* the other ranks hear of it at their next poll */
	for (size_t i = 0; i < mt_pol.nh; i++)
		if (mt_pol.h[i].kind == MT_ON_OOM && mt_pol_fire(&mt_pol.h[i], &ev, "retry"))
			retry = true;
	mt_job_oom(false);
	return retry;
}

static void run_exit(void)
{
	struct mt_pol_event ev = {.kind = "exit", .device = -1, .time = now_ns()};

	process(UINT64_MAX);
	mt_watch_batch_end(ev.time);
	for (size_t i = 0; i < mt_pol.nh; i++)
		if (mt_pol.h[i].kind == MT_ON_EXIT)
			mt_pol_fire(&mt_pol.h[i], &ev, NULL);
	mt_job_stop();
	mt_pol_output_said();
	pthread_mutex_lock(&said.lock);
	say_held_back();
	pthread_mutex_unlock(&said.lock);
}

/* A global function named like a hook (`function on_oom(ev)`) while no handler of that
 * kind was registered: the script meant memtap.on_oom(on_oom), and the function will never
 * run. Said once a name, after every policy file has run (one may register another's).
 * Raw reads: no metamethod of the script's runs. Protected: it needs memory. */
static int say_unregistered(lua_State *L)
{
	lua_Debug ar;

	lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
	for (int k = 0; k < MT_ON_KINDS; k++) {
		const char *name = mt_on_names[k];
		if (mt_pol.count[k] || strncmp(name, "on_", 3) != 0) /* `every` is a helper's name too */
			continue;
		lua_pushstring(L, name);
		if (lua_rawget(L, -2) != LUA_TFUNCTION) {
			lua_pop(L, 1);
			continue;
		}
		if (lua_getinfo(L, ">S", &ar) && strcmp(ar.what, "C") != 0)
			mt_pol_say("%s:%d defines a global %s but never calls memtap.%s(%s): it will not run",
				   ar.short_src, ar.linedefined, name, name, name);
	}
	return 0;
}

/* The Lua state and every policy file, on this thread. */
static void start_state(void)
{
	char files[4096];

	if (!(mt_pol.L = lua_newstate(lua_alloc, NULL))) {
		mt_pol_say("no memory for a Lua state; policies are off");
		q.failed = true;
		return;
	}
	lua_atpanic(mt_pol.L, panic);
	lua_sethook(mt_pol.L, count_hook, LUA_MASKCOUNT, HOOK_STEP);
	mt_watch_init();
	mt_job_start();
	if (call_c(open_state, NULL, (int64_t)mt_pol.host->budget * LOAD_BUDGET_FACTOR) != LUA_OK) {
		mt_pol_say("cannot open the Lua libraries (%s); policies are off", error_text(mt_pol.L));
		q.failed = true;
		return;
	}
	lua_pop(mt_pol.L, 1);
	snprintf(files, sizeof files, "%s", mt_pol.host->files);
	for (char *save = NULL, *f = strtok_r(files, ":", &save); f; f = strtok_r(NULL, ":", &save))
		load(f);
	if (call_c(say_unregistered, NULL, mt_pol.host->budget) != LUA_OK)
		mt_pol_say("cannot look at the policies' globals: %s", error_text(mt_pol.L));
	lua_pop(mt_pol.L, 1);
}

static void wait_on(pthread_cond_t *c, uint64_t until)
{
	struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};

	pthread_cond_timedwait(c, &q.lock, &ts);
}

/* Called with q.lock held; returns with it held. */
static void answer(bool retry)
{
	q.retry = retry;
	q.req = REQ_NONE;
	q.done++;
	pthread_cond_broadcast(&q.answered);
}

/* The next timer, or the next look at the run directory, whichever comes first. */
static uint64_t next_wake(uint64_t now)
{
	uint64_t timer = mt_watch_next_timer(now), poll = mt_job_next_poll();

	return poll < timer ? poll : timer;
}

static void *policy_main(void *arg)
{
	(void)arg;
	policy_thread = true;
	/* background work: when the cores are busy, the job's threads go first */
	setpriority(PRIO_PROCESS, 0, POLICY_NICE); /* Linux: 0 is this thread */
	start_state();
	pthread_mutex_lock(&q.lock);
	if (!q.failed)
		q.wake_at = next_wake(now_ns());
	q.loaded = true;
	pthread_cond_broadcast(&q.answered);
	while (!q.failed && !mt_pol_abandoned()) {
		enum request req;
		uint64_t cutoff, next;
		while (!q.req && !q.ready && !mt_pol_abandoned() && now_ns() < q.wake_at)
			wait_on(&q.cond, q.wake_at);
		if (mt_pol_abandoned())
			break;
		req = q.req;
		if (req == REQ_OOM) {
			struct mt_event e = q.oom;
			pthread_mutex_unlock(&q.lock);
			bool retry = run_oom(&e);
			pthread_mutex_lock(&q.lock);
			answer(retry);
			continue;
		}
		if (req == REQ_STOP) {
			pthread_mutex_unlock(&q.lock);
			run_exit();
			pthread_mutex_lock(&q.lock);
			q.stopped = true; /* later events (other threads, other exit handlers) are not looked at */
			answer(false);
			break;
		}
		q.ready = false;
		cutoff = q.now;
		pthread_mutex_unlock(&q.lock);
		process(cutoff);
		mt_watch_batch_end(now_ns());
		mt_job_poll(now_ns());
		next = next_wake(now_ns());
		pthread_mutex_lock(&q.lock);
		q.wake_at = next;
	}
	pthread_mutex_unlock(&q.lock);
	return NULL;
}

/* ---- the engine's entry points, on the job's threads ---- */

/* Hands the policy thread a request and waits for its answer, at most the deadline;
 * a request not answered by then abandons the engine. False when there was no answer. */
static bool ask(enum request req, const struct mt_event *e, bool *retry)
{
	uint64_t until = now_ns() + mt_pol.host->deadline_ns, mine = 0;
	bool answered;

	pthread_mutex_lock(&q.lock);
	while (q.req && !q.stopped && !mt_pol_abandoned() && now_ns() < until) /* another thread's first */
		wait_on(&q.answered, until);
	if (!q.req && !q.stopped && !mt_pol_abandoned()) {
		q.req = req;
		if (e)
			q.oom = *e;
		mine = ++q.asked;
		pthread_cond_signal(&q.cond);
		while (q.done < mine && !mt_pol_abandoned() && now_ns() < until)
			wait_on(&q.answered, until);
	}
	answered = mine && q.done >= mine;
	*retry = answered && q.retry;
	pthread_mutex_unlock(&q.lock);
	if (!answered && !q.stopped)
		abandon(req == REQ_OOM ? "the on_oom handlers did not finish" : "the on_exit handlers did not finish",
			deadline_ms());
	return answered;
}

static bool oom(const struct mt_event *e)
{
	bool retry = false;

	if (!mt_pol.count[MT_ON_OOM] || policy_thread || mt_pol_abandoned())
		return false;
	ask(REQ_OOM, e, &retry);
	return retry;
}

/* Never waits for a policy thread that missed its deadline: it may never come back. */
static void stop(void)
{
	bool retry;

	if (!q.running || mt_pol_abandoned())
		return;
	if (ask(REQ_STOP, NULL, &retry))
		pthread_join(q.thread, NULL);
	q.running = false;
}

static const struct mt_policy_engine engine = {feed, oom, stop};

static void init_conditions(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* now_ns()'s clock */
	pthread_cond_init(&q.cond, &a);
	pthread_cond_init(&q.answered, &a);
	pthread_condattr_destroy(&a);
}

__attribute__((visibility("default"))) int memtap_policy_start(const struct mt_policy_host *host,
							       const struct mt_policy_engine **out)
{
	uint64_t until;
	int r;

	if (host->abi != MT_POLICY_ABI)
		return EINVAL;
	mt_pol.host = host;
	mt_heap_init(host, host->memory);
	init_conditions();
	/* made by memtap's writer, in its descriptor table; not the job's ulimit -s, which
	   threads take by default */
	r = host->spawn(&q.thread, POLICY_STACK, policy_main, NULL);
	if (r) {
		mt_pol_say("cannot start the policy thread: %s; policies are off", strerror(r));
		return r;
	}
	q.running = true;
	until = now_ns() + host->deadline_ns;
	pthread_mutex_lock(&q.lock);
	while (!q.loaded && !mt_pol_abandoned() && now_ns() < until)
		wait_on(&q.answered, until);
	r = q.loaded ? (q.failed ? ENOMEM : 0) : ETIMEDOUT;
	pthread_mutex_unlock(&q.lock);
	if (r == ETIMEDOUT)
		abandon("the policy files did not finish loading", deadline_ms());
	else if (r == ENOMEM)
		pthread_join(q.thread, NULL);
	if (r)
		return r;
	*out = &engine;
	return 0;
}
