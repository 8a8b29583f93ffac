/* memtap.plan{...}: capacity planning (core/plan.h) from Lua, in policies and in
 * offline scripts. The table's fields are memtap plan's options with underscores; a
 * `measured` table (bytes by component, as memtap.composition().by_tag or a report's
 * composition_at_peak) calibrates the model on the run that `run` describes (fields
 * overriding the table's own; default: the table itself). */
#include <lauxlib.h>
#include <math.h>
#include <string.h>

#include "core/plan.h"
#include "core/units.h"
#include "lua/plan.h"

/* A measured size: bytes, or text such as "1GiB". */
static double size(lua_State *L, int t, const char *key)
{
	uint64_t v = 0;
	int type = lua_getfield(L, t, key);

	if (type == LUA_TSTRING && mt_parse_size(lua_tostring(L, -1), &v))
		luaL_error(L, "memtap.plan: %s is not a size", key);
	else if (type == LUA_TNUMBER)
		v = (uint64_t)fmin(fmax(0, lua_tonumber(L, -1)), 1e18);
	lua_pop(L, 1);
	return (double)v;
}

/* The fields of the table at t over c: each option of core/plan_options.def by its name,
 * read as the command reads its text (numbers, booleans and strings alike). */
void mt_lua_plan_fields(lua_State *L, int t, struct mt_plan_config *c)
{
	char why[256], shown[64];

	for (const struct mt_plan_option *o = mt_plan_options; o->name; o++) {
		int top = lua_gettop(L), type = lua_getfield(L, t, o->name);
		const char *text;

		if (type == LUA_TNIL) {
			lua_pop(L, 1);
			continue;
		}
		if (type == LUA_TBOOLEAN)
			text = lua_toboolean(L, -1) ? "true" : "false";
		else if (type == LUA_TNUMBER && lua_isinteger(L, -1))
			text = lua_pushfstring(L, "%I", lua_tointeger(L, -1));
		else if (type == LUA_TNUMBER || type == LUA_TSTRING)
			text = lua_tostring(L, -1);
		else
			text = luaL_typename(L, -1);
		snprintf(shown, sizeof shown, "memtap.plan: %s", o->name);
		if (o->kind == MT_PLAN_OPT_VERSION && type == LUA_TNUMBER) /* 1.10 would read as 1.1 */
			luaL_error(L, "%s takes a release as a string such as '1.10', not the number %s", shown, text);
		if (mt_plan_set(c, o, text, shown, why, sizeof why))
			luaL_error(L, "%s", why);
		lua_settop(L, top);
	}
}

static void checked(lua_State *L, struct mt_plan_config *c)
{
	const char *problem = mt_plan_check(c);

	if (problem)
		luaL_error(L, "memtap.plan: %s", problem);
}

static void set_num(lua_State *L, const char *key, double v)
{
	if (isinf(v))
		lua_pushboolean(L, 0);
	else
		lua_pushinteger(L, (lua_Integer)llround(v));
	lua_setfield(L, -2, key);
}

/* In a job: the policy reads no file for a plan. */
static void no_configs(lua_State *L, int t, struct mt_plan_config *c)
{
	int model = lua_getfield(L, t, "model"), deepspeed = lua_getfield(L, t, "deepspeed");

	(void)c;
	lua_pop(L, 2);
	if (model != LUA_TNIL || deepspeed != LUA_TNIL)
		luaL_error(L, "memtap.plan: model= and deepspeed= read files: in memtap lua scripts, not in a job's "
			      "policy (give the fields instead: memtap plan --model FILE --deepspeed FILE --lua "
			      "writes them)");
}

int mt_lua_plan(lua_State *L)
{
	return mt_lua_plan_with(L, no_configs);
}

int mt_lua_plan_with(lua_State *L, mt_lua_plan_configs *configs)
{
	struct mt_plan_config c = MT_PLAN_DEFAULTS;
	struct mt_plan_scale scale, *s = NULL;
	struct mt_plan p;
	double table[4][3];

	luaL_checktype(L, 1, LUA_TTABLE);
	configs(L, 1, &c);
	mt_lua_plan_fields(L, 1, &c);
	if (lua_getfield(L, 1, "measured") == LUA_TTABLE) {
		struct mt_plan_config run = c;
		double measured[MT_PLAN_COMPONENTS];
		int m = lua_gettop(L);

		if (lua_getfield(L, 1, "run") == LUA_TTABLE)
			mt_lua_plan_fields(L, lua_gettop(L), &run);
		lua_pop(L, 1);
		checked(L, &run);
		for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
			measured[j] = size(L, m, mt_plan_component_names[j]);
		mt_plan_calibrate(&run, measured, size(L, m, "other"), &scale);
		s = &scale;
	}
	lua_pop(L, 1);
	checked(L, &c);
	mt_plan_compute(&c, s, &p);
	lua_createtable(L, 0, 16);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		set_num(L, mt_plan_component_names[j], p.bytes[j]);
	set_num(L, "framework", p.framework);
	set_num(L, "cuda_context", p.context);
	set_num(L, "nccl", p.nccl);
	set_num(L, "cublas_workspaces", p.cublas);
	set_num(L, "paged", p.paged);
	set_num(L, "total", p.total);
	set_num(L, "cpu", p.cpu);
	set_num(L, "nvme", p.nvme);
	set_num(L, "dp", (double)p.dp);
	set_num(L, "model_params", (double)c.params);
	lua_pushstring(L, p.moment);
	lua_setfield(L, -2, "moment");
	if (c.layers) { /* table[zero + 1].none/selective/full: totals, false where impossible */
		mt_plan_table(&c, s, table);
		lua_createtable(L, 4, 0);
		for (int z = 0; z <= 3; z++) {
			lua_createtable(L, 0, 3);
			for (int r = 0; r < 3; r++)
				set_num(L, mt_plan_recompute_names[r], table[z][r]);
			lua_rawseti(L, -2, z + 1);
		}
		lua_setfield(L, -2, "table");
	}
	return 1;
}
