/* JSON text to Lua values, for handing the report's JSON document to scripts: objects
 * become tables with string keys, arrays sequences from 1, integers Lua integers, other
 * numbers floats, null nil. Only what memtap writes needs to be read, but any valid
 * JSON is; invalid text raises a Lua error. */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "script/script.h"

struct cursor {
	const char *p, *end;
};

static void skip(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\t' || *c->p == '\r'))
		c->p++;
}

static int bad(lua_State *L, const char *what)
{
	return luaL_error(L, "memtap: bad JSON (%s)", what);
}

static void value(lua_State *L, struct cursor *c, int depth);

static void string(lua_State *L, struct cursor *c)
{
	luaL_Buffer b;

	c->p++; /* the opening quote */
	luaL_buffinit(L, &b);
	while (c->p < c->end && *c->p != '"') {
		char ch = *c->p++;
		if (ch != '\\') {
			luaL_addchar(&b, ch);
			continue;
		}
		if (c->p >= c->end)
			break;
		switch (ch = *c->p++) {
		case 'b':
			luaL_addchar(&b, '\b');
			break;
		case 'f':
			luaL_addchar(&b, '\f');
			break;
		case 'n':
			luaL_addchar(&b, '\n');
			break;
		case 'r':
			luaL_addchar(&b, '\r');
			break;
		case 't':
			luaL_addchar(&b, '\t');
			break;
		case 'u': {
			char hex[5] = {0};
			unsigned long u;
			if (c->end - c->p < 4)
				bad(L, "short \\u escape");
			memcpy(hex, c->p, 4);
			c->p += 4;
			u = strtoul(hex, NULL, 16);
			if (u < 0x80) {
				luaL_addchar(&b, (char)u);
			} else if (u < 0x800) {
				luaL_addchar(&b, (char)(0xc0 | u >> 6));
				luaL_addchar(&b, (char)(0x80 | (u & 0x3f)));
			} else {
				luaL_addchar(&b, (char)(0xe0 | u >> 12));
				luaL_addchar(&b, (char)(0x80 | (u >> 6 & 0x3f)));
				luaL_addchar(&b, (char)(0x80 | (u & 0x3f)));
			}
			break;
		}
		default:
			luaL_addchar(&b, ch);
			break; /* \" \\ \/ */
		}
	}
	if (c->p >= c->end)
		bad(L, "unterminated string");
	c->p++;
	luaL_pushresult(&b);
}

static void number(lua_State *L, struct cursor *c)
{
	char buf[64];
	size_t n = 0;
	bool integer = true;

	while (c->p < c->end && n < sizeof buf - 1 && strchr("+-0123456789.eE", *c->p)) {
		if (strchr(".eE", *c->p))
			integer = false;
		buf[n++] = *c->p++;
	}
	buf[n] = '\0';
	if (!n)
		bad(L, "unexpected character");
	if (integer)
		lua_pushinteger(L, (lua_Integer)strtoll(buf, NULL, 10));
	else
		lua_pushnumber(L, strtod(buf, NULL));
}

static bool word(struct cursor *c, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n))
		return false;
	c->p += n;
	return true;
}

static void value(lua_State *L, struct cursor *c, int depth)
{
	if (depth > 200)
		bad(L, "nested too deep");
	luaL_checkstack(L, 4, "JSON");
	skip(c);
	if (c->p >= c->end)
		bad(L, "cut short");
	if (*c->p == '{' || *c->p == '[') {
		bool object = *c->p++ == '{';
		lua_Integer i = 1;
		lua_newtable(L);
		skip(c);
		if (c->p < c->end && *c->p == (object ? '}' : ']')) {
			c->p++;
			return;
		}
		for (;;) {
			if (object) {
				skip(c);
				if (c->p >= c->end || *c->p != '"')
					bad(L, "object key");
				string(L, c);
				skip(c);
				if (c->p >= c->end || *c->p++ != ':')
					bad(L, "missing ':'");
				value(L, c, depth + 1);
				lua_rawset(L, -3);
			} else {
				value(L, c, depth + 1);
				lua_rawseti(L, -2, i++);
			}
			skip(c);
			if (c->p < c->end && *c->p == ',') {
				c->p++;
				continue;
			}
			if (c->p < c->end && *c->p == (object ? '}' : ']')) {
				c->p++;
				return;
			}
			bad(L, object ? "missing '}'" : "missing ']'");
		}
	}
	if (*c->p == '"')
		string(L, c);
	else if (word(c, "true"))
		lua_pushboolean(L, 1);
	else if (word(c, "false"))
		lua_pushboolean(L, 0);
	else if (word(c, "null"))
		lua_pushnil(L);
	else
		number(L, c);
}

void mt_lua_push_json(lua_State *L, const char *text, size_t len)
{
	struct cursor c = {text, text + len};

	value(L, &c, 0);
	skip(&c);
	if (c.p != c.end)
		bad(L, "text after the value");
}
