/* The `memtap` Lua module. Offline (memtap lua) it opens traces and snapshots and hands
 * scripts their events, stacks, live allocations and the report's analyses; the
 * in-process policies will share it. */
#ifndef MT_LUA_H
#define MT_LUA_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>

/* Pushes the module table (memtap.open, memtap.format_size, memtap.plan). */
int mt_lua_open(lua_State *L);
/* memtap.plan{...} offline (plan.c): lua/plan.h's, with model= and deepspeed= files read. */
int mt_script_plan(lua_State *L);
/* Opens a trace as a memtap.trace object; on failure pushes nil and a message. Returns 2
 * values either way; *damaged says the trace was cut short or damaged but read. */
int mt_lua_push_trace(lua_State *L, const char *path, bool *damaged);
struct mt_report;
struct mt_symbols;
struct mt_views;
/* Pushes the report as the table form of its JSON document (tables.c); the views are
 * the caller's, so a Lua error (out of memory) leaves nothing of memtap's behind. */
void mt_lua_push_report(lua_State *L, const struct mt_report *r, struct mt_symbols *sym, struct mt_views *views,
			size_t top);

#endif
