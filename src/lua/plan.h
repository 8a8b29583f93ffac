/* memtap.plan{...} (plan.c), in the policy module and the offline one. */
#ifndef MT_LUA_PLAN_H
#define MT_LUA_PLAN_H

#include <lua.h>

#include "core/plan.h"

/* memtap.plan{...} in a job: a table's `model` or `deepspeed` (files to read) is refused. */
int mt_lua_plan(lua_State *L);
/* Reads the config files the table at index t names onto c (offline: script/plan.c);
 * raises on a bad one. */
typedef void mt_lua_plan_configs(lua_State *L, int t, struct mt_plan_config *c);
/* memtap.plan{...} with `configs` read first, then the table's fields over them. */
int mt_lua_plan_with(lua_State *L, mt_lua_plan_configs *configs);
/* The table at index t's fields over c, as memtap plan reads its options; raises on a bad one. */
void mt_lua_plan_fields(lua_State *L, int t, struct mt_plan_config *c);

#endif
