/* Options from the environment (MEMTAP_OPTIONS, then MEMTAP_<KEY>, which wins), read
 * straight from environ at start-up: no allocation, so it works while preloading.
 * A bad value is one warning on stderr and the default stays. */
#include "recorder/mtp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/path.h"
#include "core/units.h"

struct mtp_options mtp_opt;

enum type { T_STR, T_SIZE, T_BOOL };
static const struct option_def {
	const char *key;
	enum type type;
	const char *dflt;
	size_t offset;
} defs[] = {
#define OPT(key, type, dflt, help) {#key, T_##type, dflt, offsetof(struct mtp_options, key)},
#include "recorder/options.def"
#undef OPT
};

/* Storage for string values: environ may change later, so values are copied here. */
static char strings[16384];
static size_t strings_used;

__thread bool mtp_warn_privately;

/* The job's stderr, from a thread with a descriptor table of its own: a duplicate of its
 * descriptor 2 (pidfd_getfd: the same open file, offset included, so a line goes where
 * the job's next one would); without pidfds, the file reopened, only where no offset is
 * shared (a pipe, a terminal). -1: nowhere. */
static int job_stderr(void)
{
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0), fd;
	struct stat st;

	if (pidfd >= 0) {
		fd = (int)syscall(SYS_pidfd_getfd, pidfd, 2, 0);
		close(pidfd);
		if (fd >= 0)
			return fd;
	}
	fd = open("/proc/self/fd/2", O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0 && (fstat(fd, &st) != 0 || S_ISREG(st.st_mode))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

void mtp_warn(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n, fd = 2;

	if (mtp_opt.quiet)
		return;
	memcpy(line, "memtap: ", 8);
	va_start(ap, fmt);
	n = vsnprintf(line + 8, sizeof line - 9, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	n += 8;
	if (n > (int)sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	if (mtp_warn_privately && (fd = job_stderr()) < 0)
		return; /* the job's stderr is closed, or out of reach */
	if (write(fd, line, (size_t)n) < 0) {
		/* nowhere left to say it */
	}
	if (fd != 2)
		close(fd);
}

/* `memtap run` checks the options once and says what is wrong; its children stay quiet. */
static bool checked;

enum { VALUE_MAX = 4096 }; /* a path's room */

/* What each type takes, for the lines that refuse a value. */
static const char *const takes[] = {
    [T_STR] = "text", [T_SIZE] = "a number, with K, M or G for sizes", [T_BOOL] = "1 or 0 (on or off)"};

/* The one parser of values, the recorder's and memtap run's: value (len bytes) as d's
 * type, copied into buf, the number or flag in *n. 0; E2BIG when it is VALUE_MAX bytes or
 * more (never cut: a path cut short names another file); EINVAL when it is not of d's
 * type (takes[] says what is). */
static int parse(const struct option_def *d, const char *value, size_t len, char buf[VALUE_MAX], uint64_t *n)
{
	if (len >= VALUE_MAX)
		return E2BIG;
	memcpy(buf, value, len);
	buf[len] = '\0';
	switch (d->type) {
	case T_STR:
		break;
	case T_SIZE:
		return mt_parse_size(buf, n) ? EINVAL : 0;
	case T_BOOL:
		if (strcmp(buf, "1") && strcmp(buf, "0") && strcmp(buf, "true") && strcmp(buf, "false") &&
		    strcmp(buf, "on") && strcmp(buf, "off"))
			return EINVAL;
		*n = buf[0] == '1' || buf[0] == 't' || !strcmp(buf, "on");
		break;
	}
	return 0;
}

static void set(const struct option_def *d, const char *value, size_t len, const char *from)
{
	char buf[VALUE_MAX];
	uint64_t n = 0;
	void *field = (char *)&mtp_opt + d->offset;
	int err = parse(d, value, len, buf, &n);

	if (err == E2BIG) {
		if (!checked)
			mtp_warn("ignoring %s from %s: its value is longer than %d bytes", d->key, from, VALUE_MAX - 1);
		return;
	}
	if (err) {
		if (!checked)
			mtp_warn("ignoring %s=%s from %s: %s takes %s", d->key, buf, from, d->key, takes[d->type]);
		return;
	}
	switch (d->type) {
	case T_STR:
		if (strings_used + len + 1 > sizeof strings) {
			mtp_warn("ignoring %s: %s is too long", from, d->key);
			return;
		}
		memcpy(strings + strings_used, buf, len + 1);
		*(const char **)field = strings + strings_used;
		strings_used += len + 1;
		break;
	case T_SIZE:
		*(uint64_t *)field = n;
		break;
	case T_BOOL:
		*(bool *)field = n;
		break;
	}
}

static const struct option_def *find(const char *key, size_t len)
{
	for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
		if (strlen(defs[i].key) == len && strncasecmp(defs[i].key, key, len) == 0)
			return &defs[i];
	return NULL;
}

int mtp_option_check(const char *key, size_t len, const char *value, const char **expected)
{
	const struct option_def *d = find(key, len);
	char buf[VALUE_MAX];
	uint64_t n;
	int err;

	if (!d)
		return ENOENT;
	err = parse(d, value, strlen(value), buf, &n);
	if (err)
		*expected = err == E2BIG ? "a value shorter than 4096 bytes" : takes[d->type];
	return err ? EINVAL : 0;
}

/* memtap's own memory against max_memory, checked here so that a job does not find out
 * by losing events: the fixed part (stack and string tables, the writer's buffers, a
 * policy's Lua state) and what each thread takes (its ring, own stack, stack cache).
 * What does not fit is lowered, and the message says what to change instead. A thread
 * that finds max_memory reached later gets a smaller ring (record.c). */
static uint64_t per_thread(uint64_t ring)
{
	return MTP_BLOCK_BYTES + MTP_RING_BYTES(ring) + MTP_PY_CACHE_BYTES;
}

static void check_memory(void)
{
	uint64_t fixed = MTP_TABLE_BYTES(MTP_STACK_IDS, MTP_STACK_BLOB) +
			 MTP_TABLE_BYTES(MTP_STRING_IDS, MTP_STRING_BLOB) + MTP_WRITER_BYTES +
			 (mtp_opt.policy[0] ? mtp_opt.policy_memory : 0);
	uint64_t least = fixed + 16 * per_thread(MTP_FIRST_RING), avail, ring = mtp_opt.ring;
	char a[32], b[32], c[32], d[32];

	if (!mtp_opt.max_memory)
		return; /* no cap */
	if (mtp_opt.max_memory < least) {
		least = (least + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
		if (!checked)
			mtp_warn("max_memory=%s is less than memtap needs: %s for its stack and string tables, the "
				 "writer%s, "
				 "and %s for each thread; using max_memory=%s",
				 mt_format_size(mtp_opt.max_memory, a, sizeof a), mt_format_size(fixed, b, sizeof b),
				 mtp_opt.policy[0] ? " and the policies' Lua state" : "",
				 mt_format_size(per_thread(MTP_FIRST_RING), c, sizeof c),
				 mt_format_size(least, d, sizeof d));
		mtp_opt.max_memory = least;
	}
	avail = mtp_opt.max_memory - fixed;
	while (ring > 64 && 4 * per_thread(ring) > avail)
		ring /= 2;
	if (ring != mtp_opt.ring) {
		if (!checked)
			mtp_warn("ring=%llu takes %s a thread, and max_memory=%s leaves %s for threads beside memtap's "
				 "tables: using ring=%llu (to keep ring=%llu, raise -O max_memory to %s)",
				 (unsigned long long)mtp_opt.ring,
				 mt_format_size(per_thread(mtp_opt.ring), a, sizeof a),
				 mt_format_size(mtp_opt.max_memory, b, sizeof b), mt_format_size(avail, c, sizeof c),
				 (unsigned long long)ring, (unsigned long long)mtp_opt.ring,
				 mt_format_size(fixed + 4 * per_thread(mtp_opt.ring), d, sizeof d));
		mtp_opt.ring = ring;
	}
}

/* The first of the environment variables that is set, or NULL. */
static const char *first_env(const char *const *names)
{
	for (; *names; names++) {
		const char *v = getenv(*names);
		if (v && *v)
			return v;
	}
	return NULL;
}

const char *mtp_rank(void)
{
	static const char *const names[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", NULL};

	return first_env(names);
}

/* A launched job with the default output records into one run directory named by the
 * launcher's job id, beside where the trace would have gone: every rank names the same
 * one without talking to the others. torchrun's default id "none" is the agent's pid,
 * which all the ranks it started share. */
static void default_dir(void)
{
	static const struct {
		const char *launcher, *var;
	} ids[] = {{"torchrun", "TORCHELASTIC_RUN_ID"}, {"slurm", "SLURM_JOB_ID"}, {"mpi", "OMPI_MCA_orte_ess_jobid"},
		   {"mpi", "PMIX_NAMESPACE"},		{"lsf", "LSB_JOBID"},	   {"pbs", "PBS_JOBID"}};
	const char *out = mtp_opt.output, *slash = strrchr(out, '/'), *id = NULL, *launcher = NULL;
	char dir[1024], num[32];
	int n;

	if (mtp_opt.dir[0] || !mtp_rank() || strcmp(slash ? slash + 1 : out, "memtap-%p.trace") != 0)
		return;
	for (size_t i = 0; i < sizeof ids / sizeof ids[0] && !id; i++)
		if ((id = getenv(ids[i].var)) && *id)
			launcher = ids[i].launcher;
		else
			id = NULL;
	if (!id)
		return;
	if (strcmp(id, "none") == 0) {
		snprintf(num, sizeof num, "%d", (int)getppid());
		id = num;
	}
	n = snprintf(dir, sizeof dir, "%.*smemtap-%s-", slash ? (int)(slash - out + 1) : 0, out, launcher);
	for (const char *p = id; *p && n + 1 < (int)sizeof dir; p++) /* a file name: no '/' */
		dir[n++] = (*p == '/' || *p == ' ') ? '_' : *p;
	dir[n] = '\0';
	set(find("dir", 3), dir, (size_t)n, "the launcher's job id");
}

/* In a run directory the trace is the rank's. */
static void run_dir(void)
{
	char out[1100];
	int n;

	default_dir();
	if (!mtp_opt.dir[0])
		return;
	n = mt_path_join(out, sizeof out, mtp_opt.dir, "rank-%%r.trace");
	if (n > 0 && (size_t)n < sizeof out)
		set(find("output", 6), out, (size_t)n, "dir");
}

void mtp_options_load(void)
{
	const char *list = getenv("MEMTAP_OPTIONS");
	char name[64];

	checked = getenv("MEMTAP_OPTIONS_CHECKED") != NULL;
	for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
		set(&defs[i], defs[i].dflt, strlen(defs[i].dflt), "defaults");
	for (const char *p = list; p && *p;) {
		size_t n = strcspn(p, ","), k = strcspn(p, "=");
		const struct option_def *d;
		if (k < n && (d = find(p, k)))
			set(d, p + k + 1, n - k - 1, "MEMTAP_OPTIONS");
		else if (n && !checked)
			mtp_warn("ignoring '%.*s' in MEMTAP_OPTIONS: not a known key=value option", (int)n, p);
		p += n + (p[n] == ',');
	}
	for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
		const char *v;
		size_t k = 0;
		memcpy(name, "MEMTAP_", 7);
		for (const char *s = defs[i].key; *s && k + 8 < sizeof name; s++)
			name[7 + k++] = (char)(*s >= 'a' && *s <= 'z' ? *s - 32 : *s);
		name[7 + k] = '\0';
		if ((v = getenv(name)))
			set(&defs[i], v, strlen(v), name);
	}
	if (mtp_opt.depth > 256) {
		if (!checked)
			mtp_warn("depth=%llu is more than 256 frames: using 256", (unsigned long long)mtp_opt.depth);
		mtp_opt.depth = 256;
	}
	if (mtp_opt.ring < 64 || (mtp_opt.ring & (mtp_opt.ring - 1))) {
		uint64_t r = 64;
		while (r < mtp_opt.ring && r < (1u << 24))
			r *= 2;
		mtp_opt.ring = r;
	}
	if (mtp_opt.flush_ms == 0)
		mtp_opt.flush_ms = 1;
	run_dir();
	check_memory();
}
