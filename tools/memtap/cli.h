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
struct mt_trace;
/* Reads a trace or exits; a damaged trace is said once on stderr and true returned. */
bool read_trace(const char *path, struct mt_trace *t);
struct mt_plan_config;
/* memtap plan's options in one string, as memtap report --plan takes them; exits on bad ones. */
void plan_setup_from_text(const char *text, struct mt_plan_config *out);
/* --gpu-mem's value: a size (80GiB) or a GPU's name (h100); exits with one line when neither. */
uint64_t plan_gpu_mem(const char *text);
/* What the command line and the model give, for the "auto" values of a DeepSpeed config
 * (the Hugging Face Trainer fills them from its arguments and the model). */
struct ds_context {
	bool precision_given, micro_batch_given, micro_batches_given, recompute_given, zero_given;
	int precision;		    /* 0 fp32, 1 bf16, 2 fp16 */
	const char *precision_text; /* --precision's value as given ("amp-bf16") */
	int zero;		    /* --zero's stage */
	const char *model_dtype;    /* the model's torch_dtype when it names one ("bfloat16"), else NULL */
	uint64_t micro_batch, micro_batches, hidden;
};
/* A DeepSpeed config's text (dsconfig.c) applied onto c: 0, or EINVAL with err saying in
 * one line what is wrong. batch: its train_batch_size (0: none, or "auto" not filled);
 * micro_auto: no micro-batch where train_micro_batch_size_per_gpu or train_batch_size is
 * "auto" (the Hugging Face Trainer fills them: nothing to derive without --micro-batch);
 * ignored and unmodelled: the keys it names without using them; notes: how "auto",
 * deprecated spellings and ineffective sections were read; "" when none. ctx may be NULL. */
struct ds_config {
	uint64_t batch, micro, steps; /* the batch keys as read ("auto" filled), 0 where absent */
	bool micro_auto;
	char ignored[1024], unmodelled[1024], notes[2048];
	char err[512];
};
int ds_config_parse(const char *path, const char *text, size_t len, const struct ds_context *ctx,
		    struct mt_plan_config *c, struct ds_config *out);
/* DeepSpeed's batch sizes (runtime/config.py: _set_batch_related_parameters, then
 * _batch_assertion) from ds's keys over world data-parallel GPUs (0: not given: what the
 * config's three keys imply, else 1): the micro-batch and accumulation steps (0 and 0
 * where the micro-batch is an "auto" not filled) and *world. note says what was derived
 * ("" when nothing). 0, or EINVAL with err (DeepSpeed's reason, one line). */
int ds_config_batch(const char *path, const struct ds_config *ds, uint64_t *world, uint64_t *micro, uint64_t *steps,
		    char *note, size_t note_size, char *err, size_t err_size);
/* A Hugging Face config.json (hfconfig.c) onto c's model fields: 0, or EINVAL with err in
 * one line naming the field memtap does not model. note: what it assumed; dtype: the
 * torch_dtype it names, "" when none. */
struct hf_config {
	char err[512], note[1024], model_type[64], dtype[32];
};
int hf_config_parse(const char *path, const char *text, size_t len, struct mt_plan_config *c, struct hf_config *out);
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
