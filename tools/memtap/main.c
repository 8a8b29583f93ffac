/* memtap: command-line entry. Subcommands live in their own files; bad input is one
 * line on stderr and exit status 2. A trace may also be a PyTorch memory snapshot. */
#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/text.h"
#include "reader/file.h"

/* The commands: the usage below, `memtap --complete` (the shell completions) and the
 * manual pages' names (tools/mkman.py) all come from this table and the commands' own
 * usage texts. `about` lines after the first are continued under it. */
static const struct command {
	const char *name, *args, *about;
	int (*fn)(int argc, char **argv);
	const char *usage;
	bool progress;
	void (*help)(FILE *f); /* where the usage is made, not a text */
} commands[] = {
    {"run", "[options] -- COMMAND [ARGS]", "record the GPU memory of COMMAND and its children", cmd_run, run_usage,
     false},
    {"report", "TRACE... [--json]",
     "the peak: what it was for and its stacks; growth per\niteration; live at exit; OOMs (several: one row per rank)",
     cmd_report, report_usage, true},
    {"diff", "A B [--json]", "what changed between two traces, per category and stack", cmd_diff, diff_usage, true},
    {"export", "--format=F TRACE", "folded stacks, perfetto (Chrome JSON) or memviz (pickle)", cmd_export, export_usage,
     true},
    {"top", "TRACE|DIR|PID [--once]",
     "a running job's memory, live, like nvtop: devices, what\nis live now and where, growth, OOMs; one row per rank",
     cmd_top, top_usage, false},
    {"dump", "TRACE [--json]", "every recorded event, one per line", cmd_dump, dump_usage, false},
    {"lua", "SCRIPT.lua TRACE... [-- ARGS]", "run a Lua script over traces (custom reports, CI checks)", cmd_lua,
     lua_usage, false},
    {"plan", "MODEL SETUP [--gpu-mem SIZE]",
     "device memory per GPU of a training setup: ZeRO,\noffload, recomputation, TP/PP/SP; will it fit", cmd_plan, NULL,
     false, plan_help},
    {"replay", "INPUT [--policy=P]",
     "a trace's or snapshot's allocations through allocator\npolicies (native, memtap, memtap-vmm, bump), simulated",
     cmd_replay, replay_usage, false},
    {"version", "", "print memtap's version", NULL, NULL, false},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0], ABOUT_COLUMN = 36 };

static void usage(FILE *f)
{
	fputs("usage: memtap COMMAND [ARGS]\n", f);
	for (size_t i = 0; i < NCOMMANDS; i++) {
		const struct command *c = &commands[i];
		int n = fprintf(f, "  %s %s", c->name, c->args);
		for (const char *a = c->about, *nl; a; a = nl ? nl + 1 : NULL, n = 0) {
			nl = strchr(a, '\n');
			fprintf(f, "%*s%.*s\n", n < ABOUT_COLUMN ? ABOUT_COLUMN - n : 1, "",
				nl ? (int)(nl - a) : (int)strlen(a), a);
		}
	}
	fputs("`memtap COMMAND --help` describes a command.\n", f);
}

/* The options a usage text shows: the -x and --name words of its synopsis lines and of
 * the lines that start with an option, in order, each once. */
static void print_options(const char *text)
{
	char seen[4096] = "\n";
	size_t used = 1;

	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n'), *p = line;
		if (!end)
			end = line + strlen(line);
		while (p < end && *p == ' ')
			p++;
		bool synopsis = !strncmp(p, "usage:", 6) || !strncmp(p, "memtap ", 7) || *p == '[' || *p == '-';
		for (; synopsis && p < end; p++) {
			size_t n = 0;
			if (*p != '-' || (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '-')))
				continue;
			if (p[1] == '-' && islower((unsigned char)p[2]))
				for (n = 3; p + n < end && (islower((unsigned char)p[n]) ||
							    isdigit((unsigned char)p[n]) || p[n] == '-');
				     n++)
					;
			else if (isalpha((unsigned char)p[1]) && (p + 2 == end || !isalnum((unsigned char)p[2])))
				n = 2;
			if (!n)
				continue;
			char word[64];
			snprintf(word, sizeof word, "\n%.*s\n", (int)n, p);
			if (!strstr(seen, word) && used + n + 1 < sizeof seen) {
				printf("%.*s\n", (int)n, p);
				memcpy(seen + used, word + 1, n + 2);
				used += n + 1;
			}
			p += n - 1;
		}
		line = *end ? end + 1 : end;
	}
}

/* The options whose values the completions offer, from the tables their commands check. */
static const struct {
	const char *command, *option;
	const char *const *words;
} values[] = {{"export", "--format", export_formats},	{"export", "--what", export_whats},
	      {"run", "--backend", run_backends},	{"run", "--allocator", run_allocators},
	      {"report", "--frames", frame_views},	{"diff", "--frames", frame_views},
	      {"plan", "--estimator", plan_estimators}, {"plan", "--gpu-mem", plan_gpus}};

/* memtap --complete WHAT [COMMAND [OPTION]]: the words the shell completions offer (hidden). */
static int complete(int argc, char **argv)
{
	const char *what = argc > 2 ? argv[2] : "";

	if (!strcmp(what, "commands")) {
		for (size_t i = 0; i < NCOMMANDS; i++) {
			printf("%s\t", commands[i].name);
			for (const char *a = commands[i].about; *a; a++)
				putchar(*a == '\n' ? ' ' : *a);
			putchar('\n');
		}
		return 0;
	}
	if (!strcmp(what, "options") && argc > 3) {
		for (size_t i = 0; i < NCOMMANDS; i++)
			if (!strcmp(commands[i].name, argv[3]) && (commands[i].usage || commands[i].help)) {
				char *text = NULL;
				size_t n = 0;
				FILE *m = commands[i].usage ? NULL : open_memstream(&text, &n);
				if (m) {
					commands[i].help(m);
					fclose(m);
				}
				print_options(commands[i].usage ? commands[i].usage : text ? text : "");
				free(text);
				puts("--help");
			}
		return 0;
	}
	if (!strcmp(what, "values") && argc > 4) {
		for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
			if (!strcmp(values[i].command, argv[3]) && !strcmp(values[i].option, argv[4]))
				for (const char *const *w = values[i].words; *w; w++)
					puts(*w);
		return 0;
	}
	if (!strcmp(what, "policies")) {
		list_policies();
		return 0;
	}
	if (!strcmp(what, "keys")) {
#define OPT(key, type, dflt, help) puts(#key);
#include "recorder/options.def"
#undef OPT
		return 0;
	}
	die(EXIT_USAGE, "--complete takes commands, options COMMAND, values COMMAND OPTION, policies or keys");
}

void die(int status, const char *fmt, ...)
{
	va_list ap;

	progress_end();
	fputs("memtap: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

void bad_usage(const char *command, const char *help, const char *fmt, ...)
{
	va_list ap;

	progress_end();
	fprintf(stderr, "memtap %s: ", command);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see memtap %s --help)\n", help);
	exit(EXIT_USAGE);
}

/* The long option a word names ("--top=5", "--to"): exactly, else the one it begins, else
 * NULL; *several when it begins more than one. */
static const struct option *long_named(const struct option *longopts, const char *word, size_t n, bool *several)
{
	const struct option *found = NULL;

	*several = false;
	for (const struct option *o = longopts; o->name; o++)
		if (strlen(o->name) == n && !strncmp(o->name, word, n))
			return o;
	for (const struct option *o = longopts; o->name; o++)
		if (!strncmp(o->name, word, n)) {
			*several = found != NULL;
			found = o;
		}
	return *several ? NULL : found;
}

/* What getopt_long refused, said once: the word is the one it finished with (optind moved
 * past it) when that is a long option, else the short option optopt names (a short one
 * inside a bundle leaves optind where it was). */
static void refuse_option(char **argv, const struct option *longopts, const char *help, bool missing)
{
	const char *word = optind > 1 ? argv[optind - 1] : "", *command = argv[0];
	const char *name = !strncmp(word, "--", 2) && word[2] ? word + 2 : NULL;
	size_t n = name ? strcspn(name, "=") : 0, k = 0;
	bool several = false;
	const struct option *o = name ? long_named(longopts, name, n, &several) : NULL;
	char names[512] = "";
	struct mt_near near = {0};

	if (name && (!optopt || (o && o->val == optopt) || several)) {
		if (several) {
			for (const struct option *l = longopts; l->name; l++)
				if (!strncmp(l->name, name, n) && k < sizeof names)
					k += (size_t)snprintf(names + k, sizeof names - k, "%s--%s", k ? ", " : "",
							      l->name);
			bad_usage(command, help, "option --%.*s is ambiguous: %s", (int)n, name, names);
		}
		if (o && missing)
			bad_usage(command, help, "--%s needs a value", o->name);
		if (o)
			bad_usage(command, help, "--%s takes no value", o->name);
		snprintf(names, sizeof names, "%.*s", (int)n, name);
		near.word = mt_text_line(names);
		for (const struct option *l = longopts; l->name; l++)
			mt_near_offer(&near, l->name);
		if (near.best)
			bad_usage(command, help, "unknown option --%s; did you mean --%s?", names, near.best);
		bad_usage(command, help, "unknown option --%s", names);
	}
	if (missing)
		bad_usage(command, help, "-%c needs a value", optopt);
	bad_usage(command, help, "unknown option -%c", isprint(optopt) ? optopt : '?');
}

int choose(const char *command, const char *option, const char *text, const char *const *words)
{
	char list[512], shown[256];
	struct mt_near near = {shown};
	size_t k = 0, n = 0;

	for (n = 0; words[n]; n++)
		if (text && !strcmp(text, words[n]))
			return (int)n;
	for (size_t i = 0; i < n && k < sizeof list; i++)
		k += (size_t)snprintf(list + k, sizeof list - k, "%s%s",
				      i == 0	  ? ""
				      : i + 1 < n ? ", "
						  : " or ",
				      words[i]);
	if (!text)
		bad_usage(command, command, "%s is needed: %s", option, list);
	snprintf(shown, sizeof shown, "%s", text);
	mt_text_line(shown);
	for (size_t i = 0; i < n; i++)
		mt_near_offer(&near, words[i]);
	if (near.best)
		bad_usage(command, command, "%s is %s, not '%s'; did you mean %s?", option, list, shown, near.best);
	bad_usage(command, command, "%s is %s, not '%s'", option, list, shown);
}

int next_option(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *help)
{
	char opts[64];
	int c;

	/* ':' first (after a '+'): a missing value is told from an unknown option */
	snprintf(opts, sizeof opts, "%s:%s", shortopts[0] == '+' ? "+" : "", shortopts + (shortopts[0] == '+'));
	opterr = 0;
	c = getopt_long(argc, argv, opts, longopts, NULL);
	if (c == '?' || c == ':')
		refuse_option(argv, longopts, help, c == ':');
	return c;
}

void need_regular_file(const char *path)
{
	char why[4400];
	int fd;

	if (mt_file_open(path, &fd, NULL, why, sizeof why))
		die(EXIT_USAGE, "%s", why);
	close(fd);
}

/* A word that is no command: the nearest command or option when one is near. */
static void unknown_command(const char *word)
{
	static const char *const options[] = {"--help", "--version"};
	struct mt_near near = {word};
	char shown[256];

	if (word[0] == '-')
		for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
			mt_near_offer(&near, options[i]);
	else
		for (size_t i = 0; i < NCOMMANDS; i++)
			mt_near_offer(&near, commands[i].name);
	snprintf(shown, sizeof shown, "%s", word);
	mt_text_line(shown);
	if (near.best)
		die(EXIT_USAGE, "unknown %s '%s'; did you mean %s? (see memtap --help)",
		    word[0] == '-' ? "option" : "command", shown, near.best);
	die(EXIT_USAGE, "unknown %s '%s' (see memtap --help)", word[0] == '-' ? "option" : "command", shown);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (commands[i].fn && !strcmp(argv[1], commands[i].name)) {
			if (commands[i].progress)
				progress_start();
			return commands[i].fn(argc - 1, argv + 1);
		}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("memtap %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--complete") == 0)
		return complete(argc, argv);
	unknown_command(argv[1]);
}
