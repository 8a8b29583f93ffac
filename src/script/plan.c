/* memtap.plan{model = "config.json", deepspeed = "ds_config.json", ...} in memtap lua:
 * the configs read as memtap plan reads them (plan/config.h), the table's fields over
 * them as the command line's options are, a DeepSpeed config's batch derived last. */
#include <lauxlib.h>
#include <string.h>

#include "core/plan.h"
#include "lua/plan.h"
#include "plan/config.h"
#include "script/script.h"

static bool has(lua_State *L, int t, const char *name)
{
	bool there = lua_getfield(L, t, name) != LUA_TNIL;

	lua_pop(L, 1);
	return there;
}

static const char *text(lua_State *L, int t, const char *name)
{
	const char *s = lua_getfield(L, t, name) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;

	lua_pop(L, 1); /* the table holds the string */
	return s;
}

static void configs(lua_State *L, int t, struct mt_plan_config *c)
{
	const char *model = text(L, t, "model"), *deepspeed = text(L, t, "deepspeed");
	struct mt_plan_config given = *c;
	struct hf_config hf = {0};
	struct ds_context x;
	struct ds_config ds;
	char note[512], err[512];
	uint64_t dropped;
	bool needs_micro;

	if ((has(L, t, "model") && !model) || (has(L, t, "deepspeed") && !deepspeed))
		luaL_error(L, "memtap.plan: model= and deepspeed= take a file's path");
	if (model && mt_plan_read_model(model, c, &hf))
		luaL_error(L, "memtap.plan: %s", hf.err);
	if (!deepspeed)
		return;
	mt_lua_plan_fields(L, t, &given); /* what the table says, for DeepSpeed's "auto" */
	x = (struct ds_context){.precision_given = has(L, t, "precision"),
				.micro_batch_given = has(L, t, "micro_batch"),
				.micro_batches_given = has(L, t, "micro_batches"),
				.recompute_given = has(L, t, "recompute"),
				.zero_given = has(L, t, "zero"),
				.precision_text = text(L, t, "precision"),
				.zero = given.zero,
				.micro_batch = given.micro_batch,
				.micro_batches = given.micro_batches,
				.hidden = c->hidden ? c->hidden : given.hidden};
	x.precision = given.precision == MT_FP32 ? 0 : x.precision_text && strstr(x.precision_text, "fp16") ? 2 : 1;
	mt_plan_ds_context_model(&x, hf.dtype);
	if (mt_plan_read_deepspeed(deepspeed, &x, c, &ds))
		luaL_error(L, "memtap.plan: %s", ds.err);
	mt_lua_plan_fields(L, t, c);
	if (mt_plan_deepspeed_batch(deepspeed, &ds,
				    &(struct mt_plan_given){has(L, t, "nodes") || has(L, t, "gpus_per_node"),
							    has(L, t, "tp"), x.micro_batch_given, x.micro_batches_given,
							    x.recompute_given},
				    c, &needs_micro, &dropped, note, sizeof note, err, sizeof err))
		luaL_error(L, "memtap.plan: %s", err);
	if (needs_micro)
		luaL_error(L, "memtap.plan: %s leaves the micro-batch \"auto\": give micro_batch", deepspeed);
}

int mt_script_plan(lua_State *L)
{
	return mt_lua_plan_with(L, configs);
}
