/* What a policy may reach, and what its calls into C cost. A policy gets Lua's own
 * libraries less what reaches other code, other files or the process. The count hook
 * sees only Lua instructions, so every library function is wrapped: before the call it
 * charges the most its C code can do with those arguments (a step of a loop, 16 bytes
 * moved in bulk, a call to printf: see ---- worst cases ----), which a budget that cannot
 * pay refuses, after it the bytes it returned; where a table's metamethods decide the
 * work, the library works on a proxy that pays as it goes. Lua runs some code with its
 * hooks off, where no budget can stop it: finalizers (__gc, refused), message handlers
 * (xpcall's runs after the unwinding) and the close methods of a coroutine a budget
 * error ended (every coroutine's body catches that error first). */
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <string.h>

#include "policy/engine.h"
#include "policy/heap.h"

#define BYTES_PER_INSTRUCTION 16 /* copying or scanning: about what one VM instruction costs */
#define CONVERSION 100		 /* one of format's or os.date's: a call to printf or strftime, 100-300 ns here */
#define MAX_COST 1e18

typedef double cost_fn(lua_State *L);

struct cost {
	const char *name;
	cost_fn *fn;
};

static double len_of(lua_State *L, int i)
{
	size_t n = 0;

	if (lua_type(L, i) == LUA_TSTRING)
		lua_tolstring(L, i, &n);
	return (double)n;
}

/* An integer argument as the library reads it (luaL_checkinteger): a float with an
 * integral value and a numeric string too. dflt when absent, or not one (Lua raises). */
static double int_arg(lua_State *L, int i, double dflt)
{
	int is_integer;
	lua_Integer v = lua_tointegerx(L, i, &is_integer);

	return is_integer ? (double)v : dflt;
}

static double table_len(lua_State *L, int i)
{
	return lua_type(L, i) == LUA_TTABLE ? (double)lua_rawlen(L, i) : 0;
}

/* ---- worst cases ---- */

/* Every string argument scanned once: most functions of the string and utf8 libraries. */
static double scan_cost(lua_State *L)
{
	double bytes = 0;

	for (int i = 1, n = lua_gettop(L); i <= n; i++)
		bytes += len_of(L, i);
	return bytes / BYTES_PER_INSTRUCTION;
}

/* The escapes ('%' and the character after it) in a replacement or a date's format */
static double escapes(const char *s, size_t n)
{
	double count = 0;

	for (size_t i = 0; i < n; i += 2) { /* memchr: mostly text between them */
		const char *e = memchr(s + i, '%', n - i);

		if (!e)
			break;
		i = (size_t)(e - s);
		count++;
	}
	return count;
}

/* ---- patterns ---- */

/* A string argument as the library reads it, a number too: that one is converted on a
 * copy pushed on the stack, which the caller removes. NULL for anything else. */
static const char *string_arg(lua_State *L, int i, size_t *n)
{
	*n = 0;
	if (lua_type(L, i) == LUA_TNUMBER) {
		lua_pushvalue(L, i);
		return lua_tolstring(L, -1, n);
	}
	return lua_type(L, i) == LUA_TSTRING ? lua_tolstring(L, i, n) : NULL;
}

/* The bytes a search reads of a subject of n: from its start position (argument i, as
 * Lua reads it: negative counts from the end), all of them when there is none. */
static double bytes_from(lua_State *L, int i, double n)
{
	double init = int_arg(L, i, 1);

	if (init > 0)
		return init - 1 > n ? 0 : n - (init - 1);
	return init == 0 || -init > n ? n : -init;
}

/* Where the class that starts at p[i] ends, as Lua's classend, never past the pattern */
static size_t class_end(const char *p, size_t m, size_t i)
{
	if (p[i] == '%') {
		i += 2;
	} else if (p[i] == '[') { /* a set: ']' first is a member, '%]' too */
		i += i + 1 < m && p[i + 1] == '^' ? 2 : 1;
		for (bool first = true; i < m && (p[i] != ']' || first); first = false)
			i += p[i] == '%' ? 2 : 1;
		i++;
	} else {
		i++;
	}
	return i < m ? i : m;
}

/* The most steps Lua's matcher takes over n bytes of subject: from its first position
 * only, or from each (`unanchored`). A step tries one class at one position: a character
 * or %a in one, a set byte by byte. A repetition (*, +, -) reads its class at each of the
 * positions left, then tries the rest of the pattern from each; an optional item (?)
 * tries the rest twice; a balance (%b) scans the subject, a back-reference (%1) compares
 * it in bulk, a frontier (%f) reads its set twice. The matcher only moves forward, so a
 * path through the pattern is fixed by the positions its start and repetitions choose, in
 * order, repeats allowed: j choices among n + 1 positions make C(n + j, j) paths. */
static double match_steps(const char *p, size_t m, double n, bool unanchored)
{
	double choices = unanchored ? 1 : 0, paths = unanchored ? n + 1 : 1, steps = 0;
	size_t i = 0, e;

	while (i < m && paths < MAX_COST) {
		double item = 1, ways = 1; /* the item's steps on each path, then the paths on from each */
		char next = i + 1 < m ? p[i + 1] : '\0';

		if (p[i] == '(' || p[i] == ')' || (p[i] == '$' && i + 1 == m)) {
			e = i + 1;
		} else if (p[i] == '%' && next == 'b') {
			item = n + 1;
			e = i + 4;
		} else if (p[i] == '%' && next == 'f') {
			e = class_end(p, m, i + 2);
			item = 2.0 * (double)(e - i);
		} else if (p[i] == '%' && next >= '0' && next <= '9') {
			item = 1 + (n + 1) / BYTES_PER_INSTRUCTION;
			e = i + 2;
		} else {
			e = class_end(p, m, i);
			if (p[i] == '[')
				item = (double)(e - i);
			if (e < m && (p[e] == '*' || p[e] == '+' || p[e] == '-')) {
				item += (n + 1) * item;
				choices++;
				ways = (n + choices) / choices;
				e++;
			} else if (e < m && p[e] == '?') {
				ways = 2;
				e++;
			}
		}
		steps += paths * item;
		paths *= ways;
		i = e;
	}
	steps += paths;
	return steps < MAX_COST ? steps : MAX_COST;
}

/* Lua's test for a search without special characters, which string.find makes plain */
static bool is_plain(const char *p, size_t m)
{
	for (size_t i = 0; i <= m; i += strlen(p + i) + 1) /* Lua's strings end in a '\0' */
		if (strpbrk(p + i, "^$*+?.([%-"))
			return false;
	return true;
}

/* A search for the pattern (argument 2) in the subject (argument 1), from the start
 * position in argument `init` (0: none): the matcher's steps from every position the
 * subject has left, or from the first alone when a '^' anchors the pattern (`anchors`:
 * gmatch reads it as a character). gmatch and gsub may try a position `again`, after an
 * empty match there. string.find's plain search (`plain`: asked for, or no special
 * characters) compares the pattern in bulk at each position instead. */
static double search_cost(lua_State *L, int init, bool plain, bool anchors, double again)
{
	int top = lua_gettop(L);
	size_t n, m;
	const char *s = string_arg(L, 1, &n), *p = string_arg(L, 2, &m);
	double left, cost = 0;

	if (s && p) {
		left = init ? bytes_from(L, init, (double)n) : (double)n;
		if (plain && (lua_toboolean(L, 4) || is_plain(p, m)))
			cost = (left + 1) * (1 + (double)m / BYTES_PER_INSTRUCTION);
		else if (anchors && m && p[0] == '^')
			cost = match_steps(p + 1, m - 1, left, false);
		else
			cost = again * match_steps(p, m, left, true);
	}
	lua_settop(L, top);
	return cost < MAX_COST ? cost : MAX_COST;
}

static double find_cost(lua_State *L)
{
	return search_cost(L, 3, true, true, 1);
}

static double match_cost(lua_State *L)
{
	return search_cost(L, 3, false, true, 1);
}

/* gmatch's iterator does its work later, when the loop calls it: charged all at once here */
static double gmatch_cost(lua_State *L)
{
	return search_cost(L, 3, false, false, 2);
}

/* gsub(s, pattern, repl, max): the search, then at each match (one for an anchored
 * pattern, at most max) a call of repl, or a pass over repl's bytes with a step at each
 * escape (%1, %%) whether it writes anything or not. What it writes is charged as the
 * result grows. */
static double gsub_cost(lua_State *L)
{
	int top = lua_gettop(L);
	size_t n, m, r;
	const char *s = string_arg(L, 1, &n), *p = string_arg(L, 2, &m), *repl = string_arg(L, 3, &r);
	double matches = p && m && p[0] == '^' ? 1 : (double)n + 1, each = 1 + (double)r / BYTES_PER_INSTRUCTION;

	each += repl ? escapes(repl, r) : 0;
	matches = fmax(0, fmin(matches, int_arg(L, 4, matches)));
	lua_settop(L, top);
	return s ? search_cost(L, 0, false, true, 2) + matches * each : 0;
}

/* ---- conversions ---- */

/* printf works a float out digit by digit, each digit a pass over the number's binary
 * expansion in 64-bit words: "%.6f" of 1e308 is 315 digits over 17 words, 14 us here. */
static double float_cost(double x, char conversion, double precision)
{
	int e2 = 0;
	double digits = precision + 1;

	if (!isfinite(x))
		return 0;
	frexp(x, &e2);
	if (conversion == 'f' && e2 > 0)
		digits += e2 * 0.30103; /* the digits before the point */
	return 2 * digits * (2 + fabs((double)e2) / 64);
}

/* string.format(f, ...): its bytes, and at each conversion a call to printf and what it
 * works out (a float's digits, %q's bytes one at a time). A conversion takes an
 * argument, so there are no more of them than arguments. */
static double format_cost(lua_State *L)
{
	size_t m;
	const char *f = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &m) : NULL, *end = f ? f + m : NULL;
	double cost = scan_cost(L);

	for (int arg = 2, top = lua_gettop(L); f && arg <= top && (f = memchr(f, '%', (size_t)(end - f)));) {
		const char *spec = f + 1, *c, *dot; /* flags, width, precision, then the conversion */
		double precision;
		int is_number;
		lua_Number x;

		if (spec < end && *spec == '%') {
			f = spec + 1;
			continue;
		}
		c = spec + strspn(spec, "-+ #0123456789."); /* stops at the '\0' Lua's strings end in */
		dot = memchr(spec, '.', (size_t)(c - spec));
		precision = dot ? 0 : -1;
		for (const char *d = dot ? dot + 1 : c; d < c && *d >= '0' && *d <= '9' && precision < 100; d++)
			precision = precision * 10 + (*d - '0');
		cost += CONVERSION;
		x = lua_tonumberx(L, arg, &is_number);
		if (c < end && *c && strchr("aAeEfgG", *c) && is_number)
			cost += float_cost(x, *c, precision >= 0 ? precision : *c == 'a' || *c == 'A' ? 13 : 6);
		else if (c < end && *c == 'q')
			cost += len_of(L, arg);
		if (c >= end)
			break;
		f = c + 1;
		arg++;
	}
	return cost;
}

/* os.date(f, t): its bytes, and a call to strftime at each conversion */
static double date_cost(lua_State *L)
{
	size_t m;
	const char *f = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &m) : NULL;

	return scan_cost(L) + (f ? escapes(f, m) * CONVERSION : 0);
}

/* string.rep(s, n, sep): n copies, even of nothing */
static double rep_cost(lua_State *L)
{
	double n = int_arg(L, 2, 0);

	return n > 0 ? n + n * (len_of(L, 1) + len_of(L, 3)) / BYTES_PER_INSTRUCTION : 0;
}

/* ---- tables ---- */

/* A proxy's metamethods: the table's own get, set and length (its metamethods and all),
 * each get paid as the library makes it, for a string its bytes too (sort compares the
 * elements it gets, concat copies them). */
static int proxy_get(lua_State *L)
{
	lua_settop(L, 2);
	lua_gettable(L, lua_upvalueindex(1));
	mt_pol_charge(L, 1 + len_of(L, -1) / BYTES_PER_INSTRUCTION, NULL);
	return 1;
}

static int proxy_set(lua_State *L)
{
	mt_pol_charge(L, 1, NULL);
	lua_settop(L, 3);
	lua_settable(L, lua_upvalueindex(1));
	return 0;
}

static int proxy_len(lua_State *L)
{
	lua_pushinteger(L, luaL_len(L, lua_upvalueindex(1)));
	return 1;
}

/* A table with a metatable is what its metamethods say: a length from __len may be
 * anything, elements may come from __index. No charge made beforehand could hold, so the
 * library gets an empty proxy in its place (argument 1) whose every get and set is the
 * table's, paid as it goes. */
static bool proxied(lua_State *L)
{
	static const lua_CFunction fns[] = {proxy_get, proxy_set, proxy_len};
	static const char *const names[] = {"__index", "__newindex", "__len"};

	if (lua_type(L, 1) != LUA_TTABLE || !lua_getmetatable(L, 1))
		return false;
	lua_pop(L, 1);
	lua_createtable(L, 0, 0);
	lua_createtable(L, 0, 3);
	for (int i = 0; i < 3; i++) {
		lua_pushvalue(L, 1);
		lua_pushcclosure(L, fns[i], 1);
		lua_setfield(L, -2, names[i]);
	}
	lua_setmetatable(L, -2);
	lua_replace(L, 1);
	return true;
}

/* table.concat(t, sep, i, j) and table.unpack(t, i, j): one step an element */
static double range_cost(lua_State *L, int from)
{
	double i = int_arg(L, from, 1), j = int_arg(L, from + 1, table_len(L, 1));

	if (proxied(L))
		return 0;
	return j >= i ? j - i + 1 : 0;
}

static double concat_cost(lua_State *L)
{
	return range_cost(L, 3);
}

static double unpack_cost(lua_State *L)
{
	return range_cost(L, 2);
}

/* table.move(a1, f, e, t [, a2]): e - f + 1 moves, whether the slots hold anything or not */
static double move_cost(lua_State *L)
{
	double f = int_arg(L, 2, 0), e = int_arg(L, 3, 0);

	return e >= f ? e - f + 1 : 0;
}

/* table.insert and table.remove at a position shift what follows it */
static double shift_cost(lua_State *L)
{
	return proxied(L) ? 0 : table_len(L, 1);
}

/* table.sort(t, comp): n log n comparisons. Without comp Lua compares strings in C, each
 * comparison up to their bytes: the walk that finds the longest is paid first. */
static double sort_cost(lua_State *L)
{
	double n = table_len(L, 1), longest = 0;

	if (proxied(L))
		return 0;
	if (lua_isnoneornil(L, 2) && n > 1) {
		mt_pol_charge(L, n, lua_tostring(L, lua_upvalueindex(3)));
		for (lua_Integer i = 1; i <= (lua_Integer)n; i++) {
			lua_rawgeti(L, 1, i);
			longest = fmax(longest, len_of(L, -1));
			lua_pop(L, 1);
		}
	}
	return n * log2(n + 1) * (1 + longest / BYTES_PER_INSTRUCTION);
}

/* A full collection or a step walks the heap; asking how big it is costs nothing. */
static double collect_cost(lua_State *L)
{
	const char *opt = luaL_optstring(L, 1, "collect");

	if (strcmp(opt, "count") == 0 || strcmp(opt, "isrunning") == 0)
		return 0;
	return (double)mt_heap_used() / BYTES_PER_INSTRUCTION;
}

/* ---- the wrapper ---- */

/* Charges the worst case, calls the library's own function (upvalue 1) with every
 * argument, then charges the bytes it returned. Its errors name it (upvalue 3): called
 * from here, Lua could not; so does a budget that refuses the call. */
static int guarded(lua_State *L)
{
	cost_fn *cost = (cost_fn *)lua_touserdata(L, lua_upvalueindex(2));
	int n = lua_gettop(L), results;
	double out = 0;

	mt_pol_charge(L, cost(L), lua_tostring(L, lua_upvalueindex(3)));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	if (lua_pcall(L, n, LUA_MULTRET, 0) != LUA_OK) {
		if (lua_type(L, -1) == LUA_TSTRING && strstr(lua_tostring(L, -1), "'?'"))
			luaL_gsub(L, lua_tostring(L, -1), "'?'", lua_tostring(L, lua_upvalueindex(3)));
		return lua_error(L);
	}
	results = lua_gettop(L);
	for (int i = 1; i <= results; i++)
		out += len_of(L, i);
	mt_pol_charge(L, out / BYTES_PER_INSTRUCTION, NULL);
	return results;
}

/* Replaces table[name] (the table on top of the stack) by its guarded self. */
static void guard(lua_State *L, const char *name, cost_fn *cost)
{
	lua_getfield(L, -1, name);
	if (!lua_iscfunction(L, -1)) {
		lua_pop(L, 1);
		return;
	}
	lua_pushlightuserdata(L, (void *)cost);
	lua_pushfstring(L, "'%s'", name);
	lua_pushcclosure(L, guarded, 3);
	lua_setfield(L, -2, name);
}

/* Every C function of a library, each with its own worst case or the scan of its strings. */
static void guard_library(lua_State *L, const char *lib, const struct cost *costs)
{
	const char *names[64]; /* keys stay in the table, so their strings stay alive */
	int n = 0;

	lua_getglobal(L, lib);
	for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1))
		if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1) && n < 64)
			names[n++] = lua_tostring(L, -2);
	for (int i = 0; i < n; i++) {
		cost_fn *fn = scan_cost;
		for (const struct cost *c = costs; c->name; c++)
			if (strcmp(c->name, names[i]) == 0)
				fn = c->fn;
		guard(L, names[i], fn);
	}
	lua_pop(L, 1);
}

/* setmetatable, less __gc: Lua runs finalizers with hooks off. An object is finalized
 * only if its metatable had __gc when it was set, so this one check holds, with the
 * metatables memtap sets from C out of reach (__metatable). */
static int set_metatable(lua_State *L)
{
	lua_settop(L, 2);
	if (lua_type(L, 2) == LUA_TTABLE) {
		lua_pushliteral(L, "__gc");
		if (lua_rawget(L, 2) != LUA_TNIL)
			return luaL_error(L, "a policy cannot set __gc: Lua would run it where no budget can stop it");
		lua_pop(L, 1);
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* xpcall(f, msgh, ...) as pcall, then msgh on the error: Lua runs a message handler with
 * hooks off when the error came from a hook (a spent budget), so it runs here, after the
 * unwinding, where the budget still holds. The sandbox has no debug library, so a handler
 * could not look at the failed call's stack anyway. */
static int x_pcall(lua_State *L)
{
	int n = lua_gettop(L);

	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_pushvalue(L, 1); /* f, then the arguments after msgh */
	for (int i = 3; i <= n; i++)
		lua_pushvalue(L, i);
	if (lua_pcall(L, n - 2 < 0 ? 0 : n - 2, LUA_MULTRET, 0) == LUA_OK) {
		lua_pushboolean(L, 1);
		lua_insert(L, n + 1);
		return lua_gettop(L) - n;
	}
	lua_pushvalue(L, 2);
	lua_insert(L, -2);
	lua_pushboolean(L, 0);
	lua_insert(L, -3);
	lua_pcall(L, 1, 1, 0); /* the handler's own error takes the place of its answer */
	return 2;
}

/* The body of every coroutine a policy makes: its function, in a yieldable pcall. The
 * budget's error is raised inside the count hook, where Lua has turned hooks off; a
 * coroutine that error ends keeps them off, and Lua would close its pending
 * to-be-closed variables (coroutine.close, coroutine.wrap's error path) where no budget
 * can stop them. Caught here, the error gives the coroutine its hooks back first, as
 * every pcall does, the close methods run under the budget, and it goes on from here. */
static int body_end(lua_State *L, int status, lua_KContext ctx)
{
	(void)ctx;
	if (status != LUA_OK && status != LUA_YIELD)
		return lua_error(L);
	return lua_gettop(L);
}

static int body(lua_State *L)
{
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	return body_end(L, lua_pcallk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, 0, body_end), 0);
}

/* coroutine.create or coroutine.wrap (upvalue 1) of the function in its body */
static int co_make(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	lua_settop(L, 1);
	lua_pushcclosure(L, body, 1);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, 1, 1);
	return 1;
}

void mt_pol_open_sandbox(lua_State *L)
{
	static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},	 {LUA_COLIBNAME, luaopen_coroutine},
					{LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
					{LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8},
					{LUA_OSLIBNAME, luaopen_os},	 {NULL, NULL}};
	/* what a policy may not reach: other code, other files, the process */
	static const char *const gone[] = {"dofile", "loadfile", "load", "require", NULL};
	static const char *const os_kept[] = {"clock", "date", "difftime", "getenv", "time", NULL};
	static const struct cost string_costs[] = {{"find", find_cost}, {"match", match_cost}, {"gmatch", gmatch_cost},
						   {"gsub", gsub_cost}, {"rep", rep_cost},     {"format", format_cost},
						   {NULL, NULL}};
	static const struct cost table_costs[] = {
	    {"concat", concat_cost}, {"unpack", unpack_cost}, {"move", move_cost}, {"insert", shift_cost},
	    {"remove", shift_cost},  {"sort", sort_cost},     {NULL, NULL}};
	static const struct cost os_costs[] = {{"date", date_cost}, {NULL, NULL}};
	static const struct cost none[] = {{NULL, NULL}};
	static const char *const made[] = {"create", "wrap", NULL}; /* coroutines, over body */

	for (const luaL_Reg *l = libs; l->name; l++) {
		luaL_requiref(L, l->name, l->func, 1);
		lua_pop(L, 1);
	}
	for (const char *const *g = gone; *g; g++) {
		lua_pushnil(L);
		lua_setglobal(L, *g);
	}
	lua_getglobal(L, "os");
	lua_createtable(L, 0, 5);
	for (const char *const *k = os_kept; *k; k++) {
		lua_getfield(L, -2, *k);
		lua_setfield(L, -2, *k);
	}
	lua_setglobal(L, "os");
	lua_pop(L, 1);
	lua_getglobal(L, "string");
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	lua_pop(L, 1);
	guard_library(L, "string", string_costs);
	guard_library(L, "table", table_costs);
	guard_library(L, "utf8", none);
	guard_library(L, "os", os_costs);
	lua_pushglobaltable(L);
	guard(L, "collectgarbage", collect_cost);
	lua_getfield(L, -1, "setmetatable");
	lua_pushcclosure(L, set_metatable, 1);
	lua_setfield(L, -2, "setmetatable");
	lua_pushcfunction(L, x_pcall);
	lua_setfield(L, -2, "xpcall");
	lua_pop(L, 1);
	lua_getglobal(L, "coroutine");
	for (const char *const *k = made; *k; k++) {
		lua_getfield(L, -1, *k);
		lua_pushcclosure(L, co_make, 1);
		lua_setfield(L, -2, *k);
	}
	lua_pop(L, 1);
}
