/* memtap.plan{...} (plan.c), in the policy module and the offline one. */
#ifndef MT_LUA_PLAN_H
#define MT_LUA_PLAN_H

#include <lua.h>

int mt_lua_plan(lua_State *L);

#endif
