/* memtap.plan{...} (plan.c), in the policy module and the offline one. */
#ifndef MT_LUA_PLAN_H
#define MT_LUA_PLAN_H

#include <lua.h>

#include "core/plan.h"

/* memtap.plan{...} in a job: a table's `model` or `deepspeed` (files to read) is refused. */
int mt_lua_plan(lua_State *L);
/* The same, the table at index t's config files read onto c first by `configs` (offline:
 * script/trace.c), then its fields over them; configs raises on a bad file. */
typedef void mt_lua_plan_configs(lua_State *L, int t, struct mt_plan_config *c);
/* The table at index t's fields over c, as memtap plan reads its options; raises on a bad one. */
void mt_lua_plan_fields(lua_State *L, int t, struct mt_plan_config *c);
int mt_lua_plan_with(lua_State *L, mt_lua_plan_configs *configs);

#endif
