/* memtap's run-time options (options.def): read from the environment by the recorder at
 * start-up, and by `memtap run`, which checks them before the job starts. The one header
 * of the recorder's that the command uses. */
#ifndef MTP_OPTIONS_H
#define MTP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mtp_options {
#define OPT(key, type, dflt, help) OPT_##type key;
#define OPT_STR const char *
#define OPT_SIZE uint64_t
#define OPT_BOOL bool
#include "recorder/options.def"
#undef OPT
#undef OPT_STR
#undef OPT_SIZE
#undef OPT_BOOL
};
extern __attribute__((visibility("hidden"))) struct mtp_options mtp_opt;
/* Defaults, then MEMTAP_OPTIONS, then MEMTAP_<KEY>; a bad value is one warning and the
 * default stays; memory options are checked against max_memory (options.c). */
__attribute__((visibility("hidden"))) void mtp_options_load(void);
/* An option as `memtap run -O KEY=VALUE` gives it (key: len bytes, case ignored), read by
 * the parser that reads MEMTAP_<KEY>: 0; ENOENT when no option has that key; EINVAL when
 * the value is not one it takes, *expected saying what it takes ("1 or 0"). */
__attribute__((visibility("hidden"))) int mtp_option_check(const char *key, size_t len, const char *value,
							   const char **expected);
/* The process's rank from its launcher's environment (RANK, OMPI_COMM_WORLD_RANK,
 * PMIX_RANK, SLURM_PROCID), or NULL. */
__attribute__((visibility("hidden"))) const char *mtp_rank(void);
/* One line on stderr, "memtap: ...", unless quiet; no allocation. On memtap's own threads
 * (mtp_warn_privately: they have a descriptor table of their own) the job's stderr as it
 * is at that moment, through a duplicate of its descriptor (options.c). */
extern __attribute__((visibility("hidden"))) __thread bool mtp_warn_privately;
__attribute__((visibility("hidden"))) void mtp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
