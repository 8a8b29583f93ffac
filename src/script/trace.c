/* memtap.trace objects: one trace (or snapshot, or RMM log) read with its report built,
 * so every number a script sees is the one `memtap report` prints. Events come as
 * tables through an iterator; the report as the table form of its JSON document. */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/report.h"
#include "script/script.h"
#include "core/units.h"

#define TRACE_META "memtap.trace"
#define WALK_META "memtap.walk"

/* The walk of an iterator of t:events() (a userdata, its upvalue): ended at its end, when
 * collected, or when its trace closes (its decoding thread reads the trace's file). */
struct lwalk {
	struct mt_walk *w;	   /* NULL once ended */
	size_t i;		   /* the index of the event it gives next */
	struct lwalk *prev, *next; /* the trace's walks still going */
};

struct ltrace {
	struct mt_trace t;
	struct mt_report r;
	struct mt_symbols *sym; /* opened at the first stack asked for */
	struct mt_views *views; /* the stacks' views, made as reports need them */
	struct lwalk walks;	/* the list's head */
	bool open;
};

static void end_walk(struct lwalk *it)
{
	if (!it->w)
		return;
	mt_walk_end(it->w);
	it->w = NULL;
	it->prev->next = it->next;
	it->next->prev = it->prev;
}

static struct ltrace *check(lua_State *L, int i)
{
	struct ltrace *x = luaL_checkudata(L, i, TRACE_META);

	luaL_argcheck(L, x->open, i, "a closed trace");
	return x;
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
	lua_pushinteger(L, v);
	lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
	if (v && *v) {
		lua_pushstring(L, v);
		lua_setfield(L, -2, k);
	}
}

static double seconds(const struct ltrace *x, uint64_t ns)
{
	return ns > x->r.start ? (double)(ns - x->r.start) / 1e9 : 0.0;
}

/* Event e, the i-th. */
static void push_event(lua_State *L, const struct ltrace *x, const struct mt_event *e, size_t i)
{
	lua_createtable(L, 0, 16);
	set_int(L, "index", (lua_Integer)i + 1);
	set_str(L, "kind", mt_kind_names[e->kind]);
	lua_pushnumber(L, seconds(x, e->time));
	lua_setfield(L, -2, "time");
	set_int(L, "thread", mt_trace_thread(&x->t, e->thread));
	set_int(L, "device", e->device == MT_NO_DEVICE ? -1 : e->device);
	set_int(L, "addr", (lua_Integer)e->addr);
	set_int(L, "size", (lua_Integer)e->size);
	set_int(L, "aux", (lua_Integer)e->aux);
	set_int(L, "aux2", (lua_Integer)e->aux2);
	set_int(L, "stack", e->stack);
	set_int(L, "error", e->error);
	set_str(L, "phase", mt_trace_string(&x->t, e->phase));
	if (e->tag)
		set_str(L, "tag", mt_tag_names[e->tag]);
	if (mt_composition_category(&x->r.comp, i))
		set_str(L, "category", mt_tag_names[mt_composition_category(&x->r.comp, i)]);
	if (e->kind == MT_EV_RANGE_PUSH || e->kind == MT_EV_RANGE_START || e->kind == MT_EV_MARK ||
	    e->kind == MT_EV_NVTX_MARK || e->kind == MT_EV_DEVICE)
		set_str(L, "name", mt_trace_string(&x->t, e->aux));
}

/* The iterator of t:events([kind]): upvalues trace, its walk, kind or -1. */
static int next_event(lua_State *L)
{
	struct ltrace *x = check(L, lua_upvalueindex(1));
	struct lwalk *it = lua_touserdata(L, lua_upvalueindex(2));
	lua_Integer kind = lua_tointeger(L, lua_upvalueindex(3));
	const struct mt_event *e = NULL;

	while (it->w && (e = mt_walk_one(it->w)) && kind >= 0 && e->kind != kind)
		it->i++;
	if (!e) {
		end_walk(it);
		return 0;
	}
	push_event(L, x, e, it->i++);
	return 1;
}

static int walk_gc(lua_State *L)
{
	end_walk(luaL_checkudata(L, 1, WALK_META));
	return 0;
}

static int events(lua_State *L)
{
	const char *name = luaL_optstring(L, 2, NULL);
	lua_Integer kind = -1;
	struct ltrace *x = check(L, 1);
	struct lwalk *it;

	for (int k = 0; name && k < MT_EV_COUNT; k++)
		if (!strcmp(name, mt_kind_names[k]))
			kind = k;
	if (name && kind < 0)
		return luaL_argerror(L, 2, lua_pushfstring(L, "no event kind '%s'", name));
	lua_pushvalue(L, 1);
	it = lua_newuserdatauv(L, sizeof *it, 0);
	*it = (struct lwalk){mt_walk_start(&x->t), 0, &x->walks, x->walks.next};
	if (!it->w)
		return luaL_error(L, "out of memory");
	x->walks.next->prev = it;
	x->walks.next = it;
	luaL_setmetatable(L, WALK_META);
	lua_pushinteger(L, kind);
	lua_pushcclosure(L, next_event, 3);
	return 1;
}

static struct mt_symbols *symbols(struct ltrace *x)
{
	if (!x->sym)
		x->sym = mt_symbols_open(&x->t);
	return x->sym;
}

/* t:report([top]): the table form of `memtap report --json`. */
static int report(lua_State *L)
{
	struct ltrace *x = check(L, 1);
	lua_Integer top = luaL_optinteger(L, 2, 10);

	luaL_argcheck(L, top > 0, 2, "a positive number of stacks");
	if (!x->views && !(x->views = mt_views_open(&x->t, symbols(x))))
		return luaL_error(L, "out of memory");
	mt_lua_push_report(L, &x->r, symbols(x), x->views, (size_t)top);
	return 1;
}

/* t:stack(id): its frames, innermost first: {function, file, line, module, address}. */
static int stack(lua_State *L)
{
	struct ltrace *x = check(L, 1);
	lua_Integer id = luaL_checkinteger(L, 2);
	struct mt_symbols *sym = symbols(x);
	uint32_t depth = id > 0 && (size_t)id < x->t.nstacks ? x->t.stacks[id].depth : 0;

	lua_createtable(L, (int)depth, 0);
	for (uint32_t i = 0; i < depth; i++) {
		const struct mt_frame *f = mt_symbols_frame(sym, x->t.stacks[id].frames[i]);
		lua_createtable(L, 0, 5);
		set_str(L, "function", f->function);
		set_str(L, "file", f->file);
		if (f->file)
			set_int(L, "line", f->line);
		set_str(L, "module", f->module);
		set_int(L, "address", (lua_Integer)f->addr);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	return 1;
}

/* t:live_at(seconds): what was live then (after every event up to that time). */
static int live_at(lua_State *L)
{
	struct ltrace *x = check(L, 1);
	double at = luaL_checknumber(L, 2);
	struct mt_walk *w = mt_walk_start(&x->t);
	const struct mt_event *e;
	struct mt_replay rp;
	lua_Integer n = 0;

	if (!w || mt_replay_init(&rp)) {
		mt_walk_end(w);
		return luaL_error(L, "out of memory");
	}
	while ((e = mt_walk_one(w)) && seconds(x, e->time) <= at)
		mt_replay_apply(&rp, e);
	mt_walk_end(w);
	lua_newtable(L);
	for (size_t i = 0; i < rp.slots.n; i++) {
		const struct mt_live *l = &rp.live[i];
		if (!l->in_use)
			continue;
		lua_createtable(L, 0, 7);
		set_int(L, "addr", (lua_Integer)l->addr);
		set_int(L, "size", (lua_Integer)l->size);
		set_int(L, "device", l->device == MT_NO_DEVICE ? -1 : l->device);
		set_str(L, "kind", mt_live_kind_names[l->kind]);
		set_int(L, "stack", l->stack);
		lua_pushnumber(L, seconds(x, l->time));
		lua_setfield(L, -2, "time");
		if (mt_composition_category(&x->r.comp, l->event))
			set_str(L, "category", mt_tag_names[mt_composition_category(&x->r.comp, l->event)]);
		lua_rawseti(L, -2, ++n);
	}
	mt_replay_free(&rp);
	return 1;
}

static int index_(lua_State *L)
{
	struct ltrace *x = check(L, 1);
	const char *k = luaL_checkstring(L, 2);

	if (!strcmp(k, "path"))
		lua_pushstring(L, x->t.path);
	else if (!strcmp(k, "nevents"))
		lua_pushinteger(L, (lua_Integer)x->t.nevents);
	else if (!strcmp(k, "complete"))
		lua_pushboolean(L, x->t.complete);
	else if (!strcmp(k, "problem"))
		x->t.problem[0] ? (void)lua_pushstring(L, x->t.problem) : lua_pushnil(L);
	else if (luaL_getmetafield(L, 1, "methods") == LUA_TTABLE)
		lua_getfield(L, -1, k);
	else
		lua_pushnil(L);
	return 1;
}

static int gc(lua_State *L)
{
	struct ltrace *x = luaL_checkudata(L, 1, TRACE_META);

	if (x->open) {
		while (x->walks.next != &x->walks)
			end_walk(x->walks.next);
		mt_views_close(x->views);
		mt_symbols_close(x->sym);
		mt_report_free(&x->r);
		mt_trace_free(&x->t);
		x->open = false;
	}
	return 0;
}

static int tostring(lua_State *L)
{
	struct ltrace *x = check(L, 1);

	lua_pushfstring(L, "memtap.trace(%s, %d events)", x->t.path, (int)x->t.nevents);
	return 1;
}

int mt_lua_push_trace(lua_State *L, const char *path, bool *damaged)
{
	struct ltrace *x = lua_newuserdatauv(L, sizeof *x, 1);
	int r;

	memset(x, 0, sizeof *x);
	x->walks.prev = x->walks.next = &x->walks;
	luaL_setmetatable(L, TRACE_META);
	lua_pushstring(L, path); /* the path string outlives the trace: keep it with the object */
	lua_setiuservalue(L, -2, 1);
	lua_getiuservalue(L, -1, 1);
	r = mt_trace_load(lua_tostring(L, -1), &x->t);
	lua_pop(L, 1);
	if (r) {
		lua_pushnil(L);
		lua_pushstring(L, x->t.problem);
		mt_trace_free(&x->t);
		return 2;
	}
	if (mt_report_build(&x->r, &x->t, NULL)) {
		mt_report_free(&x->r);
		mt_trace_free(&x->t);
		lua_pushnil(L);
		lua_pushfstring(L, "out of memory reading %s", path);
		return 2;
	}
	x->open = true;
	*damaged = x->t.problem[0] != '\0';
	if (*damaged)
		lua_pushstring(L, x->t.problem);
	else
		lua_pushnil(L);
	return 2;
}

static int open_(lua_State *L)
{
	bool damaged = false;

	return mt_lua_push_trace(L, luaL_checkstring(L, 1), &damaged);
}

static int format_size(lua_State *L)
{
	char buf[32];

	lua_pushstring(L, mt_format_size((uint64_t)luaL_checkinteger(L, 1), buf, sizeof buf));
	return 1;
}

int mt_lua_open(lua_State *L)
{
	static const luaL_Reg methods[] = {
	    {"events", events}, {"report", report}, {"stack", stack}, {"live_at", live_at}, {NULL, NULL}};
	static const luaL_Reg meta[] = {
	    {"__index", index_}, {"__gc", gc}, {"__close", gc}, {"__tostring", tostring}, {NULL, NULL}};
	static const luaL_Reg module[] = {
	    {"open", open_}, {"format_size", format_size}, {"plan", mt_script_plan}, {NULL, NULL}};

	if (luaL_newmetatable(L, TRACE_META)) {
		luaL_setfuncs(L, meta, 0);
		luaL_newlib(L, methods);
		lua_setfield(L, -2, "methods");
	}
	lua_pop(L, 1);
	if (luaL_newmetatable(L, WALK_META)) {
		lua_pushcfunction(L, walk_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_pop(L, 1);
	luaL_newlib(L, module);
	return 1;
}
