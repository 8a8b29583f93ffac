/* The report's document as Lua tables: analyze/emit.h's sink for scripts. Each container
 * is a table on the Lua stack until it closes, then goes into its parent; numbers are
 * read from the digits the JSON form prints, so t:report() holds what `memtap report
 * --json` says, value for value, without writing the text and reading it back. */
#include <lauxlib.h>
#include <stdio.h>

#include "analyze/report.h"
#include "script/script.h"

struct tables {
	lua_State *L;
	int depth;
	const char *key[MT_EMIT_DEPTH];	 /* each open container's key in its parent */
	lua_Integer next[MT_EMIT_DEPTH]; /* an array's next index; 0 in an object */
};

/* The value on top of the Lua stack goes into the open container below it. */
static void put(struct tables *s, const char *key)
{
	lua_State *L = s->L;

	if (!s->depth)
		return; /* the document itself stays on the stack */
	if (s->next[s->depth - 1])
		lua_rawseti(L, -2, s->next[s->depth - 1]++);
	else if (key)
		lua_setfield(L, -2, key);
	else
		lua_pop(L, 1);
}

static void open_table(void *ctx, const char *key, bool array, int lines)
{
	struct tables *s = ctx;

	(void)lines;
	if (s->depth >= MT_EMIT_DEPTH)
		luaL_error(s->L, "memtap: the report nests too deep");
	luaL_checkstack(s->L, 2, "the report");
	lua_newtable(s->L);
	s->key[s->depth] = key;
	s->next[s->depth++] = array ? 1 : 0;
}

static void close_table(void *ctx)
{
	struct tables *s = ctx;

	s->depth--;
	put(s, s->key[s->depth]);
}

static void set_value(void *ctx, const char *key, const struct mt_value *v)
{
	struct tables *s = ctx;
	lua_State *L = s->L;
	char digits[64];

	luaL_checkstack(L, 2, "the report");
	switch (v->kind) {
	case MT_V_NULL:
		lua_pushnil(L);
		break;
	case MT_V_BOOL:
		lua_pushboolean(L, v->b);
		break;
	case MT_V_INT:
		lua_pushinteger(L, (lua_Integer)v->i);
		break;
	case MT_V_UINT:
		if (v->u <= (uint64_t)LUA_MAXINTEGER)
			lua_pushinteger(L, (lua_Integer)v->u);
		else
			lua_pushnumber(L, (lua_Number)v->u);
		break;
	case MT_V_NUM:
		/* "%.0f" reads as an integer and "%.3f" as its three decimals, as in the JSON */
		snprintf(digits, sizeof digits, "%.*f", v->num.decimals, v->num.x);
		if (!lua_stringtonumber(L, digits))
			lua_pushnumber(L, v->num.x); /* inf or nan, which the report never writes */
		break;
	case MT_V_STR:
		if (v->s)
			lua_pushstring(L, v->s);
		else
			lua_pushnil(L);
		break;
	}
	put(s, key);
}

void mt_lua_push_report(lua_State *L, const struct mt_report *r, struct mt_symbols *sym, struct mt_views *views,
			size_t top)
{
	static const struct mt_emit_sink sink = {open_table, close_table, set_value};
	struct tables s = {.L = L};
	struct mt_emit e = {&sink, &s};

	mt_report_emit(&e, r, sym, views, top);
}
