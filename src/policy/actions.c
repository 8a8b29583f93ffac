/* What a policy can do inside the job (the `memtap` module's actions) and the tables its
 * handlers are given. Files are written only under the policy directory: a path with a
 * ".." component, or an absolute one outside it, is refused, and files.c opens the rest.
 * Each action charges its work to the call's budget.
 * A stack is symbolized when a script first reads `ev.stack`, not before: with dladdr,
 * and where that names no function (a program's own functions are not exported), with
 * elfutils from the module's own file, read at most once a handler's call. */
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/engine.h"
#include "policy/heap.h"
#include "lua/plan.h"
#include "core/path.h"
#include "core/units.h"

#define EVENT_META "memtap.event"
#define FILE_COST 10000 /* instructions an action that opens and writes a file is charged */
#define LINE_COST 1000	/* a line said, a mark recorded */

static void set_int(lua_State *L, const char *k, uint64_t v)
{
	lua_pushinteger(L, (lua_Integer)v);
	lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
	if (v && *v) {
		lua_pushstring(L, v);
		lua_setfield(L, -2, k);
	}
}

/* ---- stacks ---- */

/* A Python frame's string, "function\tfile\tline", as "function (file:line)". */
static void python_frame(char *out, size_t size, const char *s, size_t len)
{
	char buf[256], *file, *line; /* shorter than `out`, which gains " (:)" */

	snprintf(buf, sizeof buf, "%.*s", (int)len, s);
	if (!(file = strchr(buf, '\t')) || !(line = strchr(file + 1, '\t'))) {
		snprintf(out, size, "%s", buf);
		return;
	}
	*file++ = *line++ = '\0';
	snprintf(out, size, "%s (%s:%s)", buf, file, line);
}

/* The module files a handler's call has read, closed (and unmapped) when the call returns:
 * none stays open in the job. */
static Dwfl *symbols;

/* No separate debug files (a library's in /usr/lib/debug can take a second to read):
 * the module's own symbol table and debug information only. */
static int own_file_only(Dwfl_Module *m, void **user, const char *name, Dwarf_Addr base, const char *file,
			 const char *link, GElf_Word crc, char **path)
{
	(void)m, (void)user, (void)name, (void)base, (void)file, (void)link, (void)crc, (void)path;
	return -1;
}

/* What dladdr could not name, from the module's own file: "function (file:line)", or
 * "function+0xoff (module)" without line information; false when the file names none
 * either. */
static bool file_symbol(lua_State *L, uintptr_t a, const char *mod, char *out, size_t size)
{
	static const Dwfl_Callbacks callbacks = {.find_elf = dwfl_build_id_find_elf,
						 .find_debuginfo = own_file_only,
						 .section_address = dwfl_offline_section_address};
	struct link_map *map = NULL;
	Dwfl_Module *m = NULL;
	const char *name, *file;
	GElf_Sym sym;
	GElf_Off off;
	Dl_info info;
	int line;

	if (!dladdr1((void *)a, &info, (void **)&map, RTLD_DL_LINKMAP) || !map || !info.dli_fname)
		return false;
	/* the program's own name is as it was started, maybe relative to a directory since left */
	const char *path = !map->l_name[0] ? "/proc/self/exe" : info.dli_fname;
	if (path[0] != '/')
		return false;
	if (!symbols && !(symbols = dwfl_begin(&callbacks)))
		return false;
	if (!(m = dwfl_addrmodule(symbols, a))) { /* the module, read once a call */
		mt_pol_charge(L, FILE_COST, "reading a module's symbols");
		dwfl_report_begin_add(symbols);
		m = dwfl_report_elf(symbols, mod, path, -1, map->l_addr, false);
		dwfl_report_end(symbols, NULL, NULL);
	}
	if (!m || !(name = dwfl_module_addrinfo(m, a, &off, &sym, NULL, NULL, NULL)))
		return false;
	Dwfl_Line *l = dwfl_module_getsrc(m, a);
	if (l && (file = dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL))) {
		const char *base = strrchr(file, '/');
		snprintf(out, size, "%s (%s:%d)", name, base ? base + 1 : file, line);
	} else {
		snprintf(out, size, "%s+0x%llx (%s)", name, (unsigned long long)off, mod);
	}
	return true;
}

void mt_pol_symbols_close(void)
{
	if (symbols)
		dwfl_end(symbols);
	symbols = NULL;
}

static const char named_from_files; /* registry key: address -> what file_frame said */

/* A frame dladdr names no function for, into line: as said before (a file is read again
 * only for an address not seen), else from its module's file, else its module and offset.
 * cache: the stack index of the named_from_files table. */
static void file_frame(lua_State *L, int cache, uint64_t a, const Dl_info *info, const char *mod, char *line,
		       size_t size)
{
	if (lua_rawgeti(L, cache, (lua_Integer)a) == LUA_TSTRING) {
		snprintf(line, size, "%s", lua_tostring(L, -1));
		lua_pop(L, 1);
		return;
	}
	lua_pop(L, 1);
	if (!file_symbol(L, (uintptr_t)a, mod, line, size))
		snprintf(line, size, "0x%llx (%s+0x%llx)", (unsigned long long)a, mod,
			 (unsigned long long)(a - (uintptr_t)info->dli_fbase));
	lua_pushstring(L, line);
	lua_rawseti(L, cache, (lua_Integer)a);
}

static void push_frames(lua_State *L, uint32_t id)
{
	size_t len = 0;
	const uint64_t *f = id ? mt_pol.host->stack(id, &len) : NULL;
	size_t n = f ? len / sizeof *f : 0;
	int cache;

	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &named_from_files) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushvalue(L, -1);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &named_from_files);
	}
	cache = lua_gettop(L);
	lua_createtable(L, (int)n, 0);
	for (size_t i = 0; i < n; i++) {
		uint64_t a;
		Dl_info info;
		char line[512];
		memcpy(&a, (const char *)f + i * sizeof a, sizeof a);
		if (a & MT_PYFRAME) {
			size_t len = 0;
			const char *py = mt_pol.host->string((uint32_t)a, &len);
			python_frame(line, sizeof line, py ? py : "?", py ? len : 1);
		} else if (dladdr((void *)(uintptr_t)a, &info) && info.dli_fname) {
			const char *mod = strrchr(info.dli_fname, '/');
			mod = mod ? mod + 1 : info.dli_fname;
			if (info.dli_sname)
				snprintf(line, sizeof line, "%s+0x%llx (%s)", info.dli_sname,
					 (unsigned long long)(a - (uintptr_t)info.dli_saddr), mod);
			else
				file_frame(L, cache, a, &info, mod, line, sizeof line);
		} else {
			snprintf(line, sizeof line, "0x%llx", (unsigned long long)a);
		}
		lua_pushstring(L, line);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_remove(L, cache);
}

/* __index of event and top tables: `stack` from `stack_id` on first read */
static int lazy_stack(lua_State *L)
{
	if (lua_type(L, 2) != LUA_TSTRING || strcmp(lua_tostring(L, 2), "stack") != 0)
		return 0;
	lua_getfield(L, 1, "stack_id");
	push_frames(L, (uint32_t)lua_tointeger(L, -1));
	lua_pushvalue(L, -1);
	lua_setfield(L, 1, "stack");
	return 1;
}

static void with_stack(lua_State *L, uint32_t id)
{
	set_int(L, "stack_id", id);
	luaL_setmetatable(L, EVENT_META);
}

/* ---- numbers ---- */

static void set_memory(lua_State *L, int device, uint64_t free_bytes, uint64_t total)
{
	const struct mt_device_state *s;
	uint64_t cap;

	if ((device = mt_watch_device(device)) < 0)
		return;
	s = &mt_pol.rp.dev[device];
	cap = mt_pol.host->cap((uint8_t)device);
	if (!total) { /* not said by the driver: the device's capacity (or cap) less what memtap saw made */
		total = mt_watch_capacity(device);
		free_bytes = total > s->current ? total - s->current : 0;
	}
	set_int(L, "device", (uint64_t)device);
	set_int(L, "allocated", s->current);
	set_int(L, "reserved", mt_watch_reserved(device));
	set_int(L, "peak", s->peak);
	set_int(L, "free", free_bytes);
	set_int(L, "total", total);
	if (cap)
		set_int(L, "cap", cap);
}

void mt_pol_push_event(lua_State *L, const struct mt_pol_event *ev)
{
	const struct mt_policy_host *host = mt_pol.host;

	lua_createtable(L, 0, 20);
	set_str(L, "kind", ev->kind);
	set_memory(L, ev->device, ev->free, ev->total);
	if (ev->device < 0)
		lua_pushnil(L),
		    lua_setfield(L, -2, "device"); /* not about one device: the numbers are the first one's */
	if (ev->size)
		set_int(L, "size", ev->size);
	lua_pushnumber(L, ev->time > host->start_ns ? (double)(ev->time - host->start_ns) / 1e9 : 0.0);
	lua_setfield(L, -2, "time");
	set_str(L, "phase", mt_pol_string(ev->phase));
	set_str(L, "name", mt_pol_string(ev->name));
	set_int(L, "iteration", ev->iteration ? ev->iteration : mt_pol.iteration);
	set_str(L, "direction", ev->direction);
	if (ev->level)
		set_int(L, "level", ev->level);
	if (ev->growth)
		set_int(L, "growth", ev->growth);
	if (ev->error)
		set_int(L, "error", (uint64_t)ev->error);
	if (ev->peer_id) {
		set_int(L, "rank", (uint64_t)ev->peer_rank);
		set_int(L, "pid", (uint64_t)ev->peer_pid);
		set_str(L, "host", ev->peer_host);
		set_str(L, "id", ev->peer_id);
		lua_pushnumber(L, (double)ev->peer_realtime / 1e9);
		lua_setfield(L, -2, "realtime");
	}
	with_stack(L, ev->stack);
}

/* ---- paths under the policy directory ---- */

/* The path a script names, relative to the policy directory, with %p (the pid) and %n (a
 * sequence number) filled in. */
static const char *path_arg(lua_State *L, int i, const char *dflt, char *rel, size_t len)
{
	static unsigned sequence;
	const char *dir = mt_pol.host->dir, *p;
	size_t given, k = 0, n = strlen(dir);

	p = dflt ? luaL_optlstring(L, i, dflt, &given) : luaL_checklstring(L, i, &given);
	if (!*p)
		luaL_argerror(L, i, "an empty path");
	if (strlen(p) != given)
		luaL_argerror(L, i, "a path with a NUL byte in it");
	for (const char *s = p; *s; s++)
		if (s[0] == '.' && s[1] == '.' && (s == p || s[-1] == '/') && (s[2] == '/' || !s[2]))
			luaL_argerror(L, i, "a path with '..' in it");
	if (*p == '/') {
		if (strncmp(p, dir, n) != 0 || p[n] != '/')
			luaL_error(L, "%s is not under the policy directory %s", p, dir);
		p += n + 1;
	}
	for (; *p && k + 24 < len; p++) {
		if (*p != '%' || (p[1] != 'p' && p[1] != 'n' && p[1] != '%')) {
			rel[k++] = *p;
			continue;
		}
		p++;
		k +=
		    (size_t)(*p == '%' ? snprintf(rel + k, len - k, "%%")
				       : snprintf(rel + k, len - k, "%u", *p == 'p' ? (unsigned)getpid() : ++sequence));
	}
	rel[k] = '\0';
	if (*p)
		luaL_argerror(L, i, "a path too long");
	if (!k || rel[k - 1] == '/')
		luaL_argerror(L, i, "a path that names no file");
	return rel;
}

static int fail(lua_State *L, const char *what, int err)
{
	char path[4200];

	mt_path_join(path, sizeof path, mt_pol.host->dir, "%s", what);
	lua_pushnil(L);
	lua_pushfstring(L, "%s: %s", path, mt_pol_why(err));
	return 2;
}

/* ---- the actions ---- */

static int snapshot(lua_State *L)
{
	char rel[2048], path[4200];
	uint64_t bytes;
	int r;

	mt_pol_charge(L, FILE_COST, NULL);
	path_arg(L, 1, "memtap-%p-snapshot-%n.trace", rel, sizeof rel);
	mt_path_join(path, sizeof path, mt_pol.host->dir, "%s", rel);
	r = mt_pol_snapshot_in(mt_pol.host->dir, rel, path, 0600, false, &bytes);
	mt_pol.budget_left -= (int64_t)(bytes / 16); /* the copy, seen by the next budget check: the path is returned */
	if (r)
		return fail(L, rel, r);
	lua_pushstring(L, path);
	return 1;
}

/* Every rank's snapshot of this moment: this rank's now, the others' at their next poll. */
static int snapshot_all(lua_State *L)
{
	char id[64], path[4200];
	int r;

	mt_pol_charge(L, FILE_COST, NULL);
	if ((r = mt_job_snapshot_all(id, sizeof id, path, sizeof path)) == ENOTCONN) {
		lua_pushnil(L);
		lua_pushstring(L, "not in a run directory (memtap run --dir, or a launcher's job id)");
		return 2;
	}
	if (r) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s: %s", path, mt_pol_why(r));
		return 2;
	}
	lua_pushstring(L, path);
	lua_pushstring(L, id);
	return 2;
}

static int capture(lua_State *L, bool on)
{
	int d = mt_watch_device(mt_pol_device(L, 1));
	int r = mt_pol.host->capture(on, d < 0 ? 0 : (uint8_t)d);

	if (r) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s failed with CUDA error %d", on ? "cuProfilerStart" : "cuProfilerStop", r);
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static int capture_start(lua_State *L)
{
	return capture(L, true);
}

static int capture_stop(lua_State *L)
{
	return capture(L, false);
}

double mt_pol_level(lua_State *L, int i)
{
	static const char msg[] = "a level is a fraction (0.9, \"90%\") or a size (\"30GiB\")";

	if (lua_type(L, i) == LUA_TSTRING) {
		const char *s = lua_tostring(L, i);
		size_t n = strlen(s);
		uint64_t bytes;
		char *end;
		if (n && s[n - 1] == '%') {
			double pct = strtod(s, &end);
			if (end == s + n - 1 && pct > 0 && pct <= 100)
				return pct / 100;
		} else if (mt_parse_size(s, &bytes) == 0 && bytes > 1 && (double)bytes <= MT_POL_MAX_BYTES) {
			return (double)bytes;
		}
		luaL_argerror(L, i, msg);
	}
	double v = luaL_checknumber(L, i);
	luaL_argcheck(L, v > 0 && v <= MT_POL_MAX_BYTES, i, msg);
	return v;
}

int mt_pol_device(lua_State *L, int i)
{
	lua_Integer d = luaL_opt(L, luaL_checkinteger, i, -1);

	luaL_argcheck(L, d >= -1 && d < MT_NO_DEVICE, i, "a device number, or nil");
	return (int)d;
}

/* memtap.set_cap(device, level): device nil for every device; level nil or 0 to lift it */
static int set_cap(lua_State *L)
{
	int d = mt_pol_device(L, 1);
	double v = 0;

	if (!lua_isnoneornil(L, 2) && !(lua_isinteger(L, 2) && lua_tointeger(L, 2) == 0))
		v = mt_pol_level(L, 2);
	mt_pol.host->set_cap(d, v > 1 ? (uint64_t)v : 0, v <= 1 ? v : 0);
	mt_watch_forget_capacity();
	return 0;
}

/* memtap.allocator{device=, policy=, knob=value, ...}, or memtap.allocator("knob:value,...")
 * for every device: the caching allocator's knobs, for the engines running and those made
 * later. Raises on a knob it cannot use; a refused call changes nothing. */
static int allocator(lua_State *L)
{
	char conf[512] = "", why[200];
	const char *policy = NULL;
	lua_Integer device = -1;
	size_t n = 0;

	if (lua_type(L, 1) == LUA_TSTRING) {
		n = (size_t)snprintf(conf, sizeof conf, "%s", lua_tostring(L, 1));
	} else {
		luaL_checktype(L, 1, LUA_TTABLE);
		for (lua_pushnil(L); lua_next(L, 1); lua_pop(L, 1)) {
			const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;

			luaL_argcheck(L, k, 1, "knobs are named: {max_split_size_mb = 512, ...}");
			if (strcmp(k, "device") == 0) {
				device = lua_tointeger(L, -1);
				luaL_argcheck(L, lua_isinteger(L, -1) && device >= 0 && device < MT_NO_DEVICE, 1,
					      "device: a device number");
			} else if (strcmp(k, "policy") == 0) {
				luaL_argcheck(L, lua_type(L, -1) == LUA_TSTRING, 1,
					      "policy: a name such as \"memtap-vmm\"");
				policy = lua_tostring(L, -1);
			} else if (n < sizeof conf) {
				char num[32];
				const char *v = num;
				bool pushed = false;

				if (lua_isboolean(L, -1))
					v = lua_toboolean(L, -1) ? "True" : "False";
				else if (lua_isinteger(L, -1))
					snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -1));
				else if (lua_type(L, -1) == LUA_TNUMBER)
					snprintf(num, sizeof num, "%.15g", lua_tonumber(L, -1));
				else
					v = luaL_tolstring(L, -1, NULL), pushed = true;
				n += (size_t)snprintf(conf + n, sizeof conf - n, "%s%s:%s", n ? "," : "", k, v);
				if (pushed)
					lua_pop(L, 1);
			}
		}
	}
	luaL_argcheck(L, n < sizeof conf, 1, "too many knobs");
	if (!mt_pol.host->allocator)
		return luaL_error(L, "memtap.allocator: the CUPTI backend serves no allocations");
	if (mt_pol.host->allocator((int)device, policy, conf, why, sizeof why))
		return luaL_error(L, "memtap.allocator: %s", why);
	return 0;
}

/* memtap.allocator_stats([device]): the caching allocator's counters and knobs, or nil
 * while the device has none (memtap run --allocator=caching, python memtap.use_allocator) */
static int allocator_stats(lua_State *L)
{
	int d = mt_watch_device(mt_pol_device(L, 1));
	struct mt_cache_stats s;
	uint64_t largest;
	char conf[512];

	if (!mt_pol.host->allocator_stats || !mt_pol.host->allocator_stats(d, &s, &largest, conf, sizeof conf)) {
		lua_pushnil(L);
		return 1;
	}
	lua_createtable(L, 0, 16);
	set_int(L, "reserved", s.reserved);
	set_int(L, "allocated", s.allocated);
	set_int(L, "requested", s.requested);
	set_int(L, "peak_reserved", s.peak_reserved);
	set_int(L, "largest_free", largest);
	set_int(L, "segments", s.segments);
	set_int(L, "allocs", s.allocs);
	set_int(L, "frees", s.frees);
	set_int(L, "hits", s.hits);
	set_int(L, "ooms", s.ooms);
	set_int(L, "retries", s.retries);
	set_int(L, "stitched", s.stitched);
	set_int(L, "released", s.released);
	set_int(L, "gc_runs", s.gc_runs);
	set_str(L, "conf", conf);
	return 1;
}

static int stats(lua_State *L)
{
	int d = mt_watch_device(mt_pol_device(L, 1));

	lua_createtable(L, 0, 10);
	set_memory(L, d, 0, 0);
	set_int(L, "iteration", mt_pol.iteration);
	set_int(L, "policy_memory", mt_heap_used());
	set_int(L, "policy_output", mt_pol_output_written());
	lua_pushboolean(L, mt_pol.dropped == 0);
	lua_setfield(L, -2, "complete");
	return 1;
}

static void add_bytes(lua_State *L, const char *key, uint64_t bytes)
{
	lua_getfield(L, -1, key);
	lua_Integer have = lua_tointeger(L, -1);
	lua_pop(L, 1);
	lua_pushinteger(L, have + (lua_Integer)bytes);
	lua_setfield(L, -2, key);
}

/* Live device bytes now, by tag (memtap_tag_*, python/memtap) and by the NVTX range
 * they were allocated in; `memtap report` infers categories where nothing was tagged. */
static int composition(lua_State *L)
{
	int d = mt_pol_device(L, 1);
	const struct mt_replay *rp = &mt_pol.rp;

	mt_pol_charge(L, (double)rp->slots.n, NULL); /* a walk over every live allocation */
	lua_createtable(L, 0, 3);
	lua_newtable(L); /* by_tag */
	lua_newtable(L); /* by_phase */
	for (size_t i = 0; i < rp->slots.n; i++) {
		const struct mt_live *l = &rp->live[i];
		if (!l->in_use || !mt_live_on_device(l) || (d >= 0 && l->device != d))
			continue;
		add_bytes(L, l->phase ? mt_pol_string(l->phase) : "(no range)", l->size);
		lua_insert(L, -2);
		add_bytes(L, mt_tag_names[l->tag < MT_TAG_COUNT ? l->tag : MT_TAG_NONE], l->size);
		lua_insert(L, -2);
	}
	lua_setfield(L, -3, "by_phase");
	lua_setfield(L, -2, "by_tag");
	return 1;
}

static int top(lua_State *L)
{
	lua_Integer n = luaL_optinteger(L, 1, 10);
	int d = mt_pol_device(L, 2);
	struct mt_stack_bytes buf[100];
	size_t got;

	luaL_argcheck(L, n >= 1 && n <= 100, 1, "from 1 to 100 stacks");
	mt_pol_charge(L, (double)mt_pol.rp.slots.n, NULL);
	got = mt_watch_top(buf, (size_t)n, 0, d);
	lua_createtable(L, (int)got, 0);
	for (size_t i = 0; i < got; i++) {
		lua_createtable(L, 0, 4);
		set_int(L, "bytes", buf[i].bytes);
		set_int(L, "count", buf[i].count);
		with_stack(L, buf[i].stack);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	return 1;
}

static int log_(lua_State *L)
{
	luaL_Buffer b;
	int n = lua_gettop(L);

	luaL_buffinit(L, &b);
	for (int i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	luaL_pushresult(&b);
	mt_pol_charge(L, LINE_COST + (double)lua_rawlen(L, -1) / 16, NULL);
	mt_pol_say("%s", lua_tostring(L, -1));
	return 0;
}

static int mark(lua_State *L)
{
	mt_pol_charge(L, LINE_COST, NULL);
	mt_pol.host->mark(luaL_checkstring(L, 1));
	return 0;
}

static int append(lua_State *L)
{
	char rel[2048];
	size_t len, done = 0;
	const char *text;
	int fd, err;

	path_arg(L, 1, NULL, rel, sizeof rel);
	text = luaL_checklstring(L, 2, &len);
	mt_pol_charge(L, FILE_COST + (double)len / 16, NULL);
	if ((err = mt_pol_output_fits(len)))
		return fail(L, rel, err);
	if ((fd = mt_pol_open_in(mt_pol.host->dir, rel, O_WRONLY | O_APPEND | O_CREAT, 0644, false)) < 0)
		return fail(L, rel, fd);
	while (done < len && !err) {
		ssize_t w = write(fd, text + done, len - done);
		if (w <= 0)
			err = w < 0 ? errno : ENOSPC;
		else
			done += (size_t)w;
	}
	mt_pol_output_wrote(done);
	if (close(fd) != 0 && !err)
		err = errno;
	if (err)
		return fail(L, rel, err);
	lua_pushboolean(L, 1);
	return 1;
}

/* ---- JSON out, for JSON-lines files ---- */

/* The text so far, in a userdata at a fixed place on the stack: a luaL_Buffer must be on
 * top whenever it grows, which a walk that holds keys and values above it cannot promise.
 * A larger block replaces it as it grows (no block passes the largest a script may make). */
struct out {
	lua_State *L;
	int slot;
	char *p;
	size_t n, cap;
};

static void put(struct out *o, const char *s, size_t len)
{
	if (!len)
		return;
	if (len > o->cap - o->n) {
		size_t cap = o->cap ? o->cap : 256;
		char *p;

		while (cap - o->n < len)
			cap *= 2;
		p = lua_newuserdatauv(o->L, cap, 0);
		if (o->n)
			memcpy(p, o->p, o->n);
		lua_replace(o->L, o->slot);
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->n, s, len);
	o->n += len;
}

static void put_str(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static void json_string(struct out *o, const char *s, size_t n)
{
	size_t plain = 0;

	put(o, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		if (c != '"' && c != '\\' && c >= 0x20)
			continue;
		put(o, s + plain, i - plain);
		plain = i + 1;
		if (c < 0x20)
			snprintf(esc, sizeof esc, "\\u%04x", c);
		else
			snprintf(esc, sizeof esc, "\\%c", c);
		put_str(o, esc);
	}
	put(o, s + plain, n - plain);
	put(o, "\"", 1);
}

static void json_value(struct out *o, int i, int depth);

static void json_table(struct out *o, int i, int depth)
{
	lua_State *L = o->L;
	lua_Integer n = (lua_Integer)lua_rawlen(L, i);
	bool first = true;

	if (n > 0) {
		put(o, "[", 1);
		for (lua_Integer k = 1; k <= n; k++) {
			if (k > 1)
				put(o, ",", 1);
			lua_rawgeti(L, i, k);
			json_value(o, lua_gettop(L), depth + 1);
			lua_pop(L, 1);
		}
		put(o, "]", 1);
		return;
	}
	put(o, "{", 1);
	lua_pushnil(L);
	while (lua_next(L, i)) {
		size_t len;
		const char *k;
		if (!first)
			put(o, ",", 1);
		first = false;
		lua_pushvalue(L, -2);
		k = luaL_tolstring(L, -1, &len);
		json_string(o, k, len);
		lua_pop(L, 2);
		put(o, ":", 1);
		json_value(o, lua_gettop(L), depth + 1);
		lua_pop(L, 1);
	}
	put(o, "}", 1);
}

static void json_value(struct out *o, int i, int depth)
{
	lua_State *L = o->L;
	char num[64];
	size_t len;
	const char *s;

	if (depth > 64)
		luaL_error(L, "memtap.json: nested too deep");
	luaL_checkstack(L, 8, "memtap.json: nested too deep"); /* a level's key, value, name and a new block */
	switch (lua_type(L, i)) {
	case LUA_TBOOLEAN:
		put_str(o, lua_toboolean(L, i) ? "true" : "false");
		break;
	case LUA_TNUMBER:
		if (lua_isinteger(L, i))
			snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, i));
		else if (isfinite(lua_tonumber(L, i)))
			snprintf(num, sizeof num, "%.17g", lua_tonumber(L, i));
		else
			snprintf(num, sizeof num, "null");
		put_str(o, num);
		break;
	case LUA_TSTRING:
		s = lua_tolstring(L, i, &len);
		json_string(o, s, len);
		break;
	case LUA_TTABLE:
		json_table(o, i, depth);
		break;
	default:
		put_str(o, "null");
	}
}

static int json(lua_State *L)
{
	struct out o = {.L = L, .slot = 2};

	luaL_checkany(L, 1);
	lua_settop(L, 1);
	lua_pushnil(L); /* the slot of the text */
	json_value(&o, 1, 0);
	lua_pushlstring(L, o.p ? o.p : "", o.n);
	mt_pol_charge(L, (double)o.n / 16, NULL); /* the walk was about as long as what it wrote */
	return 1;
}

static int format_size(lua_State *L)
{
	char buf[64];

	lua_pushstring(L, mt_format_size((uint64_t)luaL_checkinteger(L, 1), buf, sizeof buf));
	return 1;
}

static int parse_size(lua_State *L)
{
	uint64_t bytes;

	if (mt_parse_size(luaL_checkstring(L, 1), &bytes) != 0)
		luaL_argerror(L, 1, "a size such as 512MiB, 40GiB or 80GB");
	lua_pushinteger(L, (lua_Integer)bytes);
	return 1;
}

static int devices(lua_State *L)
{
	int k = 0;

	lua_newtable(L);
	for (int d = 0; d < MT_NO_DEVICE; d++)
		if (mt_pol.rp.dev[d].seen) {
			lua_pushinteger(L, d);
			lua_rawseti(L, -2, ++k);
		}
	return 1;
}

int mt_pol_open_module(lua_State *L)
{
	static const luaL_Reg fns[] = {{"snapshot", snapshot},
				       {"snapshot_all", snapshot_all},
				       {"capture_start", capture_start},
				       {"capture_stop", capture_stop},
				       {"set_cap", set_cap},
				       {"stats", stats},
				       {"top", top},
				       {"log", log_},
				       {"mark", mark},
				       {"append", append},
				       {"json", json},
				       {"format_size", format_size},
				       {"devices", devices},
				       {"composition", composition},
				       {"parse_size", parse_size},
				       {"plan", mt_lua_plan},
				       {"allocator", allocator},
				       {"allocator_stats", allocator_stats},
				       {NULL, NULL}};

	luaL_newmetatable(L, EVENT_META);
	lua_pushcfunction(L, lazy_stack);
	lua_setfield(L, -2, "__index");
	lua_pushliteral(L, EVENT_META); /* out of a script's reach: a __gc there would finalize every event */
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 1);
	luaL_newlib(L, fns);
	set_str(L, "dir", mt_pol.host->dir);
	set_int(L, "pid", (uint64_t)getpid());
	if (mt_job_active()) { /* a rank of a job */
		set_str(L, "run_dir", mt_pol.host->run_dir);
		set_int(L, "rank", (uint64_t)mt_job_rank());
		set_int(L, "world_size", (uint64_t)(mt_pol.host->world_size > 0 ? mt_pol.host->world_size : 1));
	}
	return 1;
}
