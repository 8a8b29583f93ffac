/* The memtap command: one function per subcommand. */
#ifndef MEMTAP_CLI_H
#define MEMTAP_CLI_H

int cmd_run(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_lua(int argc, char **argv);
int cmd_plan(int argc, char **argv);
void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* The progress bar of long analyses (progress.c): start before reading, clear it before a
 * note on stderr, end it before printing results. */
void progress_start(void);
void progress_clear(void);
void progress_end(void);

/* Exit statuses of memtap's own commands. */
enum { EXIT_USAGE = 2, EXIT_DAMAGED = 3 };

#endif
