/* memtap lua: run a Lua 5.4 script over traces and snapshots, for custom reports and CI
 * checks. The script sees `memtap` (also require "memtap"), memtap.traces (one object per
 * file given) and memtap.trace (the first); the script's own arguments come after `--`
 * in `arg`. An error in the script is one line and exit 1, so `error("over budget")`
 * fails a CI job. */
#include <limits.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

#include "script/script.h"
#include "cli.h"

const char lua_usage[] =
    "usage: memtap lua SCRIPT.lua [TRACE...] [-- ARGS...]\n"
    "Runs SCRIPT with the memtap module over the traces (memtap traces, PyTorch snapshots,\n"
    "RMM logs): memtap.trace is the first, memtap.traces all of them; each has :events([kind]),\n"
    ":report([top]) (the table form of `memtap report --json`), :live_at(seconds), :stack(id),\n"
    "and .path, .nevents, .complete, .problem. memtap.format_size(bytes) prints sizes;\n"
    "memtap.plan{...} plans capacity (docs/PLAN.md).\n"
    "ARGS after -- are the script's `arg`. Exit status: the script's os.exit, 0 when it ends,\n"
    "1 when it raises an error (one line on stderr), 2 for a bad script or trace, 3 when a\n"
    "trace was cut short or damaged (the script saw what it held). SCRIPT is a file, or a bundled\n"
    "example by name: peak_budget, phases (installed under share/memtap/lua/examples).\n";

static int traceback(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);

	lua_pushstring(L, msg ? msg : "an error that is not a string");
	return 1;
}

int cmd_lua(int argc, char **argv)
{
	int nargs = 0, status = 0, script_args = argc, ntraces;
	char script[PATH_MAX];
	lua_State *L;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(lua_usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--")) {
			script_args = i;
			break;
		}
	if (argv[1][0] == '-' && argv[1][1]) /* a script so named: ./-x.lua */
		bad_usage("lua", "lua", "unknown option %s", argv[1]);
	find_lua(argv[1], "examples/", "script", script);
	argv[1] = script;
	need_regular_file(argv[1]);
	if (!(L = luaL_newstate()))
		die(1, "out of memory");
	luaL_openlibs(L);
	luaL_requiref(L, "memtap", mt_lua_open, 1);
	/* the traces */
	ntraces = script_args - 2;
	lua_createtable(L, ntraces, 0);
	for (int i = 0; i < ntraces; i++) {
		bool damaged = false;
		mt_lua_push_trace(L, argv[2 + i], &damaged);
		if (lua_isnil(L, -2)) {
			fprintf(stderr, "memtap: %s\n", lua_tostring(L, -1));
			lua_close(L);
			return EXIT_USAGE;
		}
		if (damaged) {
			fprintf(stderr, "memtap: %s: %s; the script sees the %s before it\n", argv[2 + i],
				lua_tostring(L, -1), "events");
			status = EXIT_DAMAGED;
		}
		lua_pop(L, 1);
		lua_rawseti(L, -2, i + 1);
	}
	lua_rawgeti(L, -1, 1);
	lua_setfield(L, -3, "trace");
	lua_setfield(L, -2, "traces");
	lua_pop(L, 1);
	/* arg: [0] the script, then what follows -- */
	lua_createtable(L, argc - script_args, 1);
	lua_pushstring(L, argv[1]);
	lua_rawseti(L, -2, 0);
	for (int i = script_args + 1; i < argc; i++) {
		lua_pushstring(L, argv[i]);
		lua_rawseti(L, -2, ++nargs);
	}
	lua_setglobal(L, "arg");
	lua_pushcfunction(L, traceback);
	if (luaL_loadfile(L, argv[1]) != LUA_OK) {
		fprintf(stderr, "memtap: %s\n", lua_tostring(L, -1));
		lua_close(L);
		return EXIT_USAGE;
	}
	if (lua_pcall(L, 0, 0, -2) != LUA_OK) {
		fprintf(stderr, "memtap: %s\n", lua_tostring(L, -1));
		status = 1;
	}
	fflush(stdout);
	lua_close(L);
	return status;
}
