/* The memtap command: one function per subcommand. */
#ifndef MEMTAP_CLI_H
#define MEMTAP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int cmd_run(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_lua(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_top(int argc, char **argv);
/* Each command's --help text, which the completions and manual pages are made from. */
extern const char run_usage[], report_usage[], dump_usage[], diff_usage[], export_usage[], lua_usage[], replay_usage[],
    top_usage[];
void plan_help(FILE *f); /* plan's usage is made from the planner's table of options */
/* The bundled policies' names, one a line (run.c), for the shell completions. */
void list_policies(void);
/* A Lua file named on the command line: a file, else a bundled one by name (NAME or
 * NAME.lua in the bundled folder's `sub`: "" for policies, "/examples" for scripts),
 * into out (PATH_MAX); exits with one line naming `what` when there is none. */
void find_lua(const char *name, const char *sub, const char *what, char *out);
/* memtap run on a Python job with torch 2.2 or later: its tracker of torch's tensors built
 * (once) and named in MEMTAP_TORCH_TRACKER for the job; else one line why not (torch.c). */
void torch_prepare(const char *cmd, bool quiet);
struct mt_trace;
/* Reads a trace or exits; a damaged trace is said once on stderr and true returned. */
bool read_trace(const char *path, struct mt_trace *t);
/* The same for a command whose analyses walk the events (report, diff, dump, export, replay): a
 * trace of 64 MiB or more is opened and walked from its file (mt_trace_load). */
bool load_trace(const char *path, struct mt_trace *t);
/* Once the walks are done: EXIT_DAMAGED or 0, and a problem a walk met (the file changed
 * under it) said when loading the trace had not. */
int walked_status(const struct mt_trace *t, bool damaged);
struct mt_report;
struct mt_symbols;
/* memtap report --serve (serve.c): the page, and its detail when asked, on 127.0.0.1:port
 * (0: a free one, said on stdout) until the process is stopped. */
_Noreturn void serve_report(struct mt_report *r, struct mt_symbols *sym, size_t top, unsigned port);
struct mt_plan_config;
/* memtap plan's options in one string, as memtap report --plan takes them; exits on bad ones. */
void plan_setup_from_text(const char *text, struct mt_plan_config *out);
/* --gpu-mem's value: a size (80GiB) or a GPU's name (h100); exits with one line when neither. */
uint64_t plan_gpu_mem(const char *text);
void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Bad use of a command, in one line: "memtap COMMAND: what (see memtap HELP --help)"
 * (HELP: the command whose --help says more); exit 2. */
void bad_usage(const char *command, const char *help, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
struct option;
/* getopt_long over a command's argv (argv[0] its name) that never returns '?' or ':': an
 * unknown option (with the nearest known one), an ambiguous abbreviation, a value missing
 * or not taken is said by bad_usage. */
int next_option(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *help);
/* The words an option takes, NULL-terminated: the commands check values against them
 * (choose) and the shell completions offer them (memtap --complete values). */
extern const char *const export_formats[],
    *const export_whats[], *const run_backends[], *const run_allocators[], *const frame_views[],
									       *const plan_estimators[],
										   *const plan_gpus[];
/* The index of text in the words `option` of `command` takes; else one line (bad_usage)
 * naming them and the nearest, or, for a NULL text, saying the option is needed. */
int choose(const char *command, const char *option, const char *text, const char *const *words);
/* Exits with one line unless path is a regular file: for a file another library opens by
 * its path (Lua's loadfile), where a FIFO would wait for a writer (reader/file.h). */
void need_regular_file(const char *path);
/* The progress bar of long analyses (progress.c): start before reading, clear it before a
 * note on stderr, end it before printing results. */
void progress_start(void);
void progress_clear(void);
void progress_end(void);

/* Exit statuses of memtap's own commands. */
enum { EXIT_USAGE = 2, EXIT_DAMAGED = 3 };

#endif
