/* The memtap command: one function per subcommand. */
#ifndef MEMTAP_CLI_H
#define MEMTAP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cmd_run(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_lua(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_replay(int argc, char **argv);
/* Each command's --help text, which the completions and manual pages are made from. */
extern const char run_usage[], report_usage[], dump_usage[], diff_usage[], export_usage[], lua_usage[], plan_usage[],
    replay_usage[];
/* The bundled policies' names, one a line (run.c), for the shell completions. */
void list_policies(void);
struct mt_trace;
/* Reads a trace or exits; a damaged trace is said once on stderr and true returned. */
bool read_trace(const char *path, struct mt_trace *t);
struct mt_plan_config;
/* memtap plan's options in one string, as memtap report --plan takes them; exits on bad ones. */
void plan_setup_from_text(const char *text, struct mt_plan_config *out);
/* A DeepSpeed config's text (dsconfig.c) applied onto c: 0, or EINVAL with err saying in
 * one line what is wrong. dp: the data-parallel size its batch sizes imply (0: none);
 * ignored and unmodelled: the keys it names without using them, "" when none. */
struct ds_config {
	uint64_t dp;
	char ignored[1024], unmodelled[1024];
	char err[512];
};
int ds_config_parse(const char *path, const char *text, size_t len, struct mt_plan_config *c, struct ds_config *out);
void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* The progress bar of long analyses (progress.c): start before reading, clear it before a
 * note on stderr, end it before printing results. */
void progress_start(void);
void progress_clear(void);
void progress_end(void);

/* Exit statuses of memtap's own commands. */
enum { EXIT_USAGE = 2, EXIT_DAMAGED = 3 };

#endif
