/* memtap.plan{...}: capacity planning (plan/plan.h) from Lua, in policies and in
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

static uint64_t count(lua_State *L, int t, const char *key, uint64_t dflt)
{
	lua_Integer v;
	int isnum;

	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return dflt;
	}
	v = lua_tointegerx(L, -1, &isnum);
	if (!isnum || v < 0)
		luaL_error(L, "memtap.plan: %s must be a whole non-negative number", key);
	lua_pop(L, 1);
	return (uint64_t)v;
}

static bool flag(lua_State *L, int t, const char *key, bool dflt)
{
	bool v = dflt;

	if (lua_getfield(L, t, key) != LUA_TNIL)
		v = lua_toboolean(L, -1);
	lua_pop(L, 1);
	return v;
}

/* The index of the field's name in names, -1 when it is absent. */
static int choice(lua_State *L, int t, const char *key, const char *const *names)
{
	const char *s;

	if (lua_getfield(L, t, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return -1;
	}
	s = lua_tostring(L, -1);
	for (int i = 0; s && names[i]; i++)
		if (!strcmp(s, names[i])) {
			lua_pop(L, 1);
			return i;
		}
	return luaL_error(L, "memtap.plan: %s does not take '%s'", key, s ? s : luaL_typename(L, -1));
}

/* A size: bytes, or text such as "1GiB". */
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

/* Reads the fields of the table at t over c. */
static void read_config(lua_State *L, int t, struct mt_plan_config *c)
{
	uint64_t zero;
	int i;

	c->layers = count(L, t, "layers", c->layers);
	c->hidden = count(L, t, "hidden", c->hidden);
	c->heads = count(L, t, "heads", c->heads);
	c->query_groups = count(L, t, "query_groups", c->query_groups);
	c->ffn = count(L, t, "ffn", c->ffn);
	c->vocab = count(L, t, "vocab", c->vocab);
	c->seq = count(L, t, "seq", c->seq);
	c->micro_batch = count(L, t, "micro_batch", c->micro_batch);
	c->untied = flag(L, t, "untied", c->untied);
	c->swiglu = flag(L, t, "swiglu", c->swiglu);
	c->rmsnorm = flag(L, t, "rmsnorm", c->rmsnorm);
	c->params = count(L, t, "params", c->params);
	c->largest_layer = count(L, t, "largest_layer", c->largest_layer);
	if ((i = choice(L, t, "precision", mt_plan_precision_names)) >= 0)
		c->precision = i ? MT_MIXED16 : MT_FP32;
	if ((i = choice(L, t, "optimizer", mt_plan_optimizer_names)) >= 0)
		c->optimizer = mt_plan_optimizer_values[i];
	if ((i = choice(L, t, "recompute", mt_plan_recompute_names)) >= 0)
		c->recompute = (enum mt_recompute)i;
	if ((zero = count(L, t, "zero", (uint64_t)c->zero)) > 3)
		luaL_error(L, "memtap.plan: zero takes a stage from 0 to 3");
	c->zero = (int)zero;
	c->nodes = count(L, t, "nodes", c->nodes);
	c->gpus_per_node = count(L, t, "gpus_per_node", c->gpus_per_node);
	c->tp = count(L, t, "tp", c->tp);
	c->pp = count(L, t, "pp", c->pp);
	c->vpp = count(L, t, "vpp", c->vpp);
	c->micro_batches = count(L, t, "micro_batches", c->micro_batches);
	c->sp = flag(L, t, "sp", c->sp);
	if ((i = choice(L, t, "offload_optimizer", mt_plan_offload_names)) >= 0)
		c->offload_optimizer = (enum mt_offload)i;
	if ((i = choice(L, t, "offload_params", mt_plan_offload_names)) >= 0)
		c->offload_params = (enum mt_offload)i;
	if (lua_getfield(L, t, "overhead") != LUA_TNIL)
		c->overhead = size(L, t, "overhead");
	lua_pop(L, 1);
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

int mt_lua_plan(lua_State *L)
{
	struct mt_plan_config c = {.precision = MT_MIXED16, .optimizer = MT_ADAM, .nodes = 1, .gpus_per_node = 1};
	struct mt_plan_scale scale, *s = NULL;
	struct mt_plan p;
	double table[4][3];

	luaL_checktype(L, 1, LUA_TTABLE);
	read_config(L, 1, &c);
	if (lua_getfield(L, 1, "measured") == LUA_TTABLE) {
		struct mt_plan_config run = c;
		double measured[MT_PLAN_COMPONENTS];
		int m = lua_gettop(L);

		if (lua_getfield(L, 1, "run") == LUA_TTABLE)
			read_config(L, lua_gettop(L), &run);
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
