/* memtap run: start a command with memtap preloaded (LD_PRELOAD) and as its NVTX
 * injection, pass on the signals a launcher sends it, end as the job ended, and
 * say in three lines what happened: the peak, where the trace is, and whether events
 * were dropped. Children that exec inherit the environment and record into their own
 * files; each process also leaves a line in a status folder of memtap run's, so a trace
 * that could not be made or was deleted is said, not taken for a job that never
 * touched the GPU. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "analyze/diagnose.h"
#include "analyze/report.h"
#include "analyze/symbols.h"
#include "cli.h"
#include "recorder/options.h"
#include "core/path.h"
#include "core/text.h"
#include "core/units.h"

#ifndef MT_PKGLIBDIR
#define MT_PKGLIBDIR "/usr/local/lib/memtap"
#endif

const char run_usage[] =
    "usage: memtap run [options] -- COMMAND [ARGS]\n"
    "Runs COMMAND with memtap recording every device allocation and free, with stacks\n"
    "and NVTX phases, into a trace file; then prints the peak and where the trace is.\n"
    "  -o, --output PATTERN   trace path (default memtap-%p.trace; %p pid, %r rank, %h host)\n"
    "  --dir DIR              the job's run directory: every rank (RANK, OMPI_COMM_WORLD_RANK,\n"
    "                         SLURM_PROCID, ...) writes DIR/rank-R.trace, and the ranks' policies\n"
    "                         act on the whole job there (memtap.snapshot_all, on_peer_oom);\n"
    "                         memtap report DIR. Without --dir or -o, a launched job's ranks use\n"
    "                         memtap-LAUNCHER-JOBID (torchrun, SLURM, Open MPI, LSF, PBS job ids)\n"
    "  --depth N              stack frames per allocation (default 32; 0: none)\n"
    "  --follow-fork          also record children forked without exec\n"
    "  --backend B            preload (default: LD_PRELOAD hooks) or cupti (CUPTI callbacks through\n"
    "                         CUDA_INJECTION64_PATH; one CUPTI client per process; not yet GPU-verified)\n"
    "  --policy FILE.lua      run a Lua policy inside the job (repeatable; also MEMTAP_POLICY, files\n"
    "                         separated by ':'); a bundled one by name: oom_snapshot, threshold_capture,\n"
    "                         leak_watch, cap, peak_report (docs/LUA.md). A syntax error stops here.\n"
    "  --allocator caching    serve cudaMalloc, cudaFree, cudaMallocAsync and cudaFreeAsync from\n"
    "                         memtap's caching allocator (policy: -O alloc_policy=memtap-vmm|memtap|\n"
    "                         native|bump, knobs: -O alloc_conf=...; docs/ALLOCATOR.md). PyTorch jobs\n"
    "                         plug it in with memtap.use_allocator() instead\n"
    "  -O, --option KEY=VALUE any memtap option (below), as MEMTAP_<KEY> would set it; an unknown\n"
    "                         KEY or a VALUE it does not take stops here\n"
    "  -q, --quiet            no summary, and no line from the policies (-O policy_quiet=1); memtap's\n"
    "                         warnings in the job stay (-O quiet=1 for none)\n"
    "Options (also MEMTAP_OPTIONS=\"key=value,...\" or MEMTAP_<KEY> in the environment):\n"
#define OPT(key, type, dflt, help) "  " #key " (default " dflt "): " help "\n"
#include "recorder/options.def"
#undef OPT
    "memtap run ends as COMMAND does: with its exit status, or by the signal that ended it;\n"
    "signals sent to memtap run go on to COMMAND.\n";

const char *const run_backends[] = {"preload", "cupti", NULL};
const char *const run_allocators[] = {"caching", "none", NULL};

/* A library of memtap's: $MEMTAP_LIBRARY (preload backend), the build tree's, or the
 * installed one. `dir` is its folder in the build tree, `name` its file name. */
static const char *find_library(const char *dir, const char *name, char *buf, size_t len)
{
	char exe[PATH_MAX - 128];
	const char *env = strcmp(dir, "recorder") == 0 ? getenv("MEMTAP_LIBRARY") : NULL;
	ssize_t n;

	if (env && *env)
		return env;
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		char *slash;
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			/* tools/memtap/memtap (or .libs/memtap) in a build tree */
			snprintf(buf, len, "%s/../../src/%s/.libs/%s", exe, dir, name);
			if (access(buf, R_OK) == 0)
				return buf;
			snprintf(buf, len, "%s/../../../src/%s/.libs/%s", exe, dir, name);
			if (access(buf, R_OK) == 0)
				return buf;
		}
	}
	mt_path_join(buf, len, MT_PKGLIBDIR, "%s", name);
	return buf;
}

/* The folders bundled policies are found in, first match wins. */
static void policy_dirs(const char *dirs[3])
{
	dirs[0] = getenv("MEMTAP_LUA_DIR");
	dirs[1] = MT_SRCDIR "/lua";
	dirs[2] = MT_PKGDATADIR "/lua";
}

void list_policies(void)
{
	const char *dirs[3];

	policy_dirs(dirs);
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		struct dirent *e;
		DIR *d;

		if (!dirs[i] || !*dirs[i] || !(d = opendir(dirs[i])))
			continue;
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			if (n > 4 && e->d_name[0] != '.' && !strcmp(e->d_name + n - 4, ".lua"))
				printf("%.*s\n", (int)(n - 4), e->d_name);
		}
		closedir(d);
	}
}

void find_lua(const char *name, const char *sub, const char *what, char *out)
{
	const char *dirs[3];
	char path[PATH_MAX];

	policy_dirs(dirs);
	if (strchr(name, '/') || access(name, F_OK) == 0) {
		if (!realpath(name, out))
			die(EXIT_USAGE, "cannot read %s %s: %s", what, name, strerror(errno));
		return;
	}
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		if (!dirs[i] || !*dirs[i])
			continue;
		mt_path_join(path, sizeof path, dirs[i], "%s%s%s", sub, name, strstr(name, ".lua") ? "" : ".lua");
		if (access(path, R_OK) == 0 && realpath(path, out))
			return;
	}
	die(EXIT_USAGE, "no %s file %s, and no bundled %s of that name", what, name, what);
}

/* A policy that does not compile stops the run before the job starts: file, line, what. */
static void check_policy(const char *path)
{
	lua_State *L;

	need_regular_file(path);
	if (!(L = luaL_newstate()))
		die(1, "out of memory");
	if (luaL_loadfilex(L, path, "t") != LUA_OK) {
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", lua_tostring(L, -1));
		lua_close(L);
		die(EXIT_USAGE, "policy %s", msg);
	}
	lua_close(L);
}

/* Appends to MEMTAP_POLICY the absolute paths of the policies given, each checked. */
static void add_policy(char *list, size_t len, const char *name)
{
	char path[PATH_MAX];
	size_t k = strlen(list);

	find_lua(name, "", "policy", path);
	check_policy(path);
	if (strchr(path, ':'))
		die(EXIT_USAGE, "a policy path cannot contain ':' (%s)", path);
	if (k + strlen(path) + 2 > len)
		die(EXIT_USAGE, "too many policies");
	snprintf(list + k, len - k, "%s%s", k ? ":" : "", path);
}

/* -O KEY=VALUE as MEMTAP_<KEY>: a key the recorder does not have, or a value it would
 * ignore, stops the run here (the recorder would say it and run on). */
static void set_option(const char *kv)
{
	static const char *const keys[] = {
#define OPT(key, type, dflt, help) #key,
#include "recorder/options.def"
#undef OPT
	};
	char name[128] = "MEMTAP_", key[sizeof name], shown[256];
	const char *eq = strchr(kv, '='), *expected = "";
	size_t k = 7;
	struct mt_near near = {key};

	if (!eq || eq == kv || (size_t)(eq - kv) > sizeof name - 8)
		die(EXIT_USAGE, "-O needs KEY=VALUE, not '%s'", kv);
	snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
	snprintf(shown, sizeof shown, "%s", kv);
	mt_text_line(key);
	mt_text_line(shown);
	switch (mtp_option_check(kv, (size_t)(eq - kv), eq + 1, &expected)) {
	case 0:
		break;
	case ENOENT:
		for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
			mt_near_offer(&near, keys[i]);
		if (near.best)
			bad_usage("run", "run", "-O %s: unknown key %s; did you mean %s?", shown, key, near.best);
		bad_usage("run", "run", "-O %s: unknown key %s", shown, key);
	default:
		bad_usage("run", "run", "-O %s: %s takes %s", shown, key, expected);
	}
	for (const char *p = kv; p < eq; p++)
		name[k++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
	name[k] = '\0';
	setenv(name, eq + 1, 1);
}

/* The files the child wrote: the pattern with its pid, and its .N variants (an image
 * that execs itself keeps its pid and writes the next one), oldest first. */
static int find_traces(const char *pattern, pid_t pid, time_t since, char out[][PATH_MAX + 16], int max)
{
	char base[PATH_MAX], host[256] = "";
	const char *rank = mtp_rank();
	size_t k = 0;
	int found = 0;

	gethostname(host, sizeof host - 1);
	if (!rank)
		rank = "0";
	for (const char *p = pattern; *p && k + 32 < sizeof base; p++) {
		if (*p != '%' || !p[1]) {
			base[k++] = *p;
			continue;
		}
		p++;
		if (*p == 'p')
			k += (size_t)snprintf(base + k, sizeof base - k, "%d", (int)pid);
		else if (*p == 'h')
			k += (size_t)snprintf(base + k, sizeof base - k, "%s", host);
		else if (*p == 'r')
			k += (size_t)snprintf(base + k, sizeof base - k, "%s", rank);
		else if (*p == '%')
			base[k++] = '%';
		else {
			base[k++] = '%';
			base[k++] = *p;
		}
		if (k >= sizeof base)
			k = sizeof base - 1;
	}
	base[k] = '\0';
	for (int i = 0; i < 1000; i++) {
		char path[PATH_MAX + 16];
		struct stat st;
		if (i == 0)
			snprintf(path, sizeof path, "%s", base);
		else
			snprintf(path, sizeof path, "%s.%d", base, i);
		if (stat(path, &st) != 0) {
			if (i > 0)
				break;
			continue;
		}
		/* a device or a pipe (-o /dev/null) is written as it is, whatever its time */
		if ((st.st_mtime >= since || !S_ISREG(st.st_mode)) && found < max)
			snprintf(out[found++], PATH_MAX + 16, "%s", path);
		if (!S_ISREG(st.st_mode))
			break;
	}
	return found;
}

/* A job's run directory: how many ranks wrote a trace and took snapshots, in one line. */
static void dir_summary(const char *dir, time_t since)
{
	char path[PATH_MAX + 300];
	struct dirent *e;
	struct stat st;
	int ranks = 0, snapshots = 0;
	DIR *d = opendir(dir);

	if (!d) {
		fprintf(stderr, "memtap: no run directory %s: no rank allocated device memory\n", dir);
		return;
	}
	while ((e = readdir(d))) {
		mt_path_join(path, sizeof path, dir, "%s", e->d_name);
		if (!strncmp(e->d_name, "rank-", 5) && strstr(e->d_name, ".trace") && stat(path, &st) == 0 &&
		    st.st_mtime >= since)
			ranks++;
	}
	closedir(d);
	mt_path_join(path, sizeof path, dir, "snapshots");
	if ((d = opendir(path))) {
		while ((e = readdir(d)))
			snapshots += e->d_name[0] != '.';
		closedir(d);
	}
	fprintf(stderr,
		"memtap: run directory %s: %d rank trace%s, %d snapshot%s of the whole job (memtap report %s)\n", dir,
		ranks, ranks == 1 ? "" : "s", snapshots, snapshots == 1 ? "" : "s", dir);
}

/* One line: how many events are missing, why, and what to change for each reason. */
static void say_drops(const struct mt_trace *t)
{
	char ring[32], cap[64], sz[32], line[1024];
	uint64_t known = 0, max_memory = 0;
	size_t k;

	if (!mt_trace_info(t, "ring", ring, sizeof ring))
		snprintf(ring, sizeof ring, "?");
	if (mt_trace_info(t, "max_memory", cap, sizeof cap))
		max_memory = strtoull(cap, NULL, 10);
	snprintf(cap, sizeof cap, "%s", max_memory ? mt_format_size(max_memory, sz, sizeof sz) : "no cap");
	k = (size_t)snprintf(line, sizeof line, "memtap: %" PRIu64 " events dropped:", t->dropped);
	for (int i = 0; i < MT_DROP_COUNT; i++) {
		static const char *const why[MT_DROP_COUNT] = {
		    [MT_DROP_RING_FULL] = "a thread's buffer was full and memtap's writer made no progress for 3 s "
					  "(stuck writing, or held by the job; a larger -O ring=N, now %s, may help)",
		    [MT_DROP_MEMORY] =
			"memtap's memory cap was reached (raise -O max_memory=SIZE, now %s, or lower -O ring)",
		    [MT_DROP_WRITE] = "the trace could not be written (a full disk or a file size limit; see above)",
		    [MT_DROP_NESTED] = "signal handlers nested too deep inside memtap's recording",
		    [MT_DROP_INVALID] = "they held values no trace may hold (a size past any address space)",
		};
		char text[256];
		if (!t->drops[i])
			continue;
		snprintf(text, sizeof text, why[i], i == MT_DROP_RING_FULL ? ring : cap);
		k += (size_t)snprintf(line + k, k < sizeof line ? sizeof line - k : 0, "%s %" PRIu64 " because %s",
				      known ? ";" : "", t->drops[i], text);
		known += t->drops[i];
	}
	if (known < t->dropped)
		k += (size_t)snprintf(line + k, k < sizeof line ? sizeof line - k : 0, "%s %" PRIu64 " %s",
				      known ? ";" : "", t->dropped - known,
				      known ? "more" : "(this trace does not say why)");
	fprintf(stderr, "%s\n", line);
}

static void summary(const char *path)
{
	struct mt_trace t;
	struct mt_report r;
	char sz[32], cap[128];
	int best = -1;
	struct stat st;

	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "memtap: the trace went to %s, which is not a file: nothing to summarize\n", path);
		return;
	}
	if (stat(path, &st) == 0 && st.st_size == 0) {
		fprintf(stderr, "memtap: trace %s is empty: memtap could not write to it (the reason is above)\n",
			path);
		return;
	}
	if (mt_trace_read(path, &t) != 0) {
		fprintf(stderr, "memtap: %s\n", t.problem);
		return;
	}
	if (mt_report_build(&r, &t, NULL) == 0) {
		for (int d = 0; d < MT_MAX_DEVICES; d++)
			if (r.end.dev[d].seen && (best < 0 || r.end.dev[d].peak > r.end.dev[best].peak))
				best = d;
		if (best >= 0) {
			char rsv[32];
			/* a caching allocator's blocks (PyTorch's through its tracker): its reserve too */
			fprintf(stderr, "memtap: peak %s allocated on device %d (%s, %s) at %.3f s%s%s%s\n",
				mt_format_size(r.end.dev[best].peak, sz, sizeof sz), best,
				r.end.dev[best].name ? mt_trace_string(&t, r.end.dev[best].name) : "unnamed",
				mt_capacity_text(&r.end.dev[best], cap, sizeof cap),
				r.end.dev[best].peak_time > r.start
				    ? (double)(r.end.dev[best].peak_time - r.start) / 1e9
				    : 0.0,
				r.end.dev[best].peak_reserved ? "; its caching allocator reserved " : "",
				r.end.dev[best].peak_reserved
				    ? mt_format_size(r.end.dev[best].peak_reserved, rsv, sizeof rsv)
				    : "",
				r.end.dev[best].peak_reserved ? " at most" : "");
		} else {
			fprintf(stderr, "memtap: no device memory was allocated\n");
		}
		if (r.noom) { /* symbols only for the failing stack's first user frame */
			struct mt_symbols *sym = mt_symbols_open(&t);
			struct mt_diagnosis *g;
			size_t n;
			mt_report_oom_summary(stderr, &r, sym, "memtap: ");
			mt_symbols_close(sym);
			if (mt_diagnose(&r, &g, &n) == 0 && n)
				fprintf(
				    stderr,
				    "memtap: why: %s; what to change so that it fits: memtap report %s (with --plan "
				    "'the model and setup' for the training setup's changes)\n",
				    mt_cause_words[g[0].cause], path);
			free(g);
		}
		fprintf(stderr, "memtap: trace %s: %" PRIu64 " allocations, %" PRIu64 " frees (memtap report %s)\n",
			path, r.end.allocs, r.end.frees, path);
		mt_report_free(&r);
	}
	if (t.waits) {
		char line[256];
		fprintf(stderr, "memtap: %s\n", mt_report_waits_text(&t, line, sizeof line));
	}
	if (t.dropped)
		say_drops(&t);
	else if (t.problem[0])
		fprintf(stderr, "memtap: %s\n", t.problem);
	else
		fprintf(stderr, "memtap: no events dropped\n");
	mt_trace_free(&t);
}

/* The processes that recorded something but whose trace is not there to be read: one
 * line each, when `say`. Returns how many processes left a status (the folder goes). */
static int status_summary(const char *dir, bool say)
{
	char path[PATH_MAX + 300], text[PATH_MAX + 512];
	struct dirent *e;
	int n = 0;
	DIR *d = opendir(dir);

	while (d && (e = readdir(d))) {
		char trace[PATH_MAX + 16] = "", problem[300] = "";
		unsigned long long written = 0, dropped = 0;
		FILE *f;
		size_t len;
		if (e->d_name[0] == '.')
			continue;
		mt_path_join(path, sizeof path, dir, "%s", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		len = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		unlink(path);
		text[len] = '\0';
		if (!len) /* a process that recorded nothing */
			continue;
		n++;
		for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
			if (!strncmp(l, "written=", 8))
				written = strtoull(l + 8, NULL, 10);
			else if (!strncmp(l, "dropped=", 8))
				dropped = strtoull(l + 8, NULL, 10);
			else if (!strncmp(l, "trace=", 6))
				snprintf(trace, sizeof trace, "%s", l + 6);
			else if (!strncmp(l, "problem=", 8))
				snprintf(problem, sizeof problem, "%s", l + 8);
		if (say && problem[0])
			fprintf(stderr, "memtap: process %s made %llu events, but its trace %s %s\n", e->d_name,
				written + dropped, trace, problem);
	}
	if (d)
		closedir(d);
	rmdir(dir);
	return n;
}

/* memtap run stands for the job. Run from a terminal's foreground, the job shares its
 * process group, so the terminal's signals (Ctrl-C, Ctrl-Z) reach the job as they would;
 * otherwise (a launcher, timeout, SLURM, Popen) the job has a group of its own, and a
 * signal sent to memtap run, or to its group, reaches the job once, through memtap run.
 * In both, what a process sends memtap run goes on to the job; memtap run then ends as
 * the job did (its status, or the signal that ended it), and if memtap run is killed
 * outright the job is too (PR_SET_PDEATHSIG). Signals are taken synchronously
 * (sigwaitinfo), with SIGCHLD: the job's end. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGTSTP, SIGCONT};

/* In the terminal's group, Ctrl-Z stops memtap run with the job, as the shell expects:
 * SIGTSTP and SIGCONT are not taken then. */
static void forwarding_set(sigset_t *set, bool own_group)
{
	size_t n = sizeof forwarded / sizeof forwarded[0] - (own_group ? 0 : 2);

	sigemptyset(set);
	for (size_t i = 0; i < n; i++)
		sigaddset(set, forwarded[i]);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void wait_forwarding(pid_t job, bool own_group, int *status)
{
	sigset_t set;
	siginfo_t info, last = {0};
	double last_at = 0;

	forwarding_set(&set, own_group);
	for (;;) {
		pid_t r = waitpid(job, status, WNOHANG);
		if (r == job)
			return;
		if (r < 0 && errno != EINTR)
			die(1, "lost the command: %s", strerror(errno));
		if (sigwaitinfo(&set, &info) <= 0 || info.si_signo == SIGCHLD)
			continue;
		/* in the terminal's group, the kernel's (the terminal's) reached the job already */
		if (!own_group && info.si_code > 0)
			continue;
		/* the same signal from the same sender again at once (timeout(1) sends its child one
		   and its group one): one, as a signal still pending in the job would have been */
		if (info.si_signo == last.si_signo && info.si_pid == last.si_pid && now_s() - last_at < 0.1)
			continue;
		kill(job, info.si_signo);
		last = info;
		last_at = now_s();
	}
}

/* Ends memtap run as the job ended: by the same signal (without a core of its own), or
 * with its status. */
static int end_as(int status)
{
	struct rlimit none = {0, 0};
	sigset_t set;

	if (!WIFSIGNALED(status))
		return WEXITSTATUS(status);
	setrlimit(RLIMIT_CORE, &none);
	signal(WTERMSIG(status), SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, WTERMSIG(status));
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(WTERMSIG(status));
	return 128 + WTERMSIG(status); /* a signal whose default is not to end */
}

int cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {{"output", 1, 0, 'o'},
						 {"depth", 1, 0, 'd'},
						 {"follow-fork", 0, 0, 'f'},
						 {"option", 1, 0, 'O'},
						 {"backend", 1, 0, 'b'},
						 {"policy", 1, 0, 'P'},
						 {"allocator", 1, 0, 'A'},
						 {"quiet", 0, 0, 'q'},
						 {"help", 0, 0, 'h'},
						 {"dir", 1, 0, 'D'},
						 {0, 0, 0, 0}};
	char lib[PATH_MAX], output[2 * PATH_MAX], traces[8][PATH_MAX + 16], *preload, policies[8192] = "",
										      status_dir[PATH_MAX];
	sigset_t forwarding, unblocked;
	pid_t runner = getpid();
	bool own_group;
	const char *pattern = "memtap-%p.trace", *old, *library, *dir = NULL;
	bool quiet = false, cupti = false;
	uint64_t n;
	time_t start = time(NULL);
	pid_t pid;
	int c, status;

	while ((c = next_option(argc, argv, "+o:O:qh", longopts, "run")) != -1) {
		switch (c) {
		case 'o':
			pattern = optarg;
			break;
		case 'D':
			dir = optarg;
			break;
		case 'd':
			if (mt_parse_size(optarg, &n) != 0 || n > 256)
				die(EXIT_USAGE, "--depth takes a number of frames from 0 to 256, not '%s'", optarg);
			setenv("MEMTAP_DEPTH", optarg, 1);
			break;
		case 'f':
			setenv("MEMTAP_FOLLOW_FORK", "1", 1);
			break;
		case 'b':
			cupti = choose("run", "--backend", optarg, run_backends) == 1;
			break;
		case 'O':
			set_option(optarg);
			break;
		case 'A':
			setenv("MEMTAP_ALLOCATOR",
			       choose("run", "--allocator", optarg, run_allocators) == 0 ? optarg : "", 1);
			break;
		case 'P':
			add_policy(policies, sizeof policies, optarg);
			break;
		case 'q':
			quiet = true;
			setenv("MEMTAP_POLICY_QUIET", "1", 1);
			break;
		case 'h':
			fputs(run_usage, stdout);
			return 0;
		}
	}
	if (optind >= argc)
		die(EXIT_USAGE, "which command? usage: memtap run [options] -- COMMAND [ARGS]");
	library = cupti ? find_library("cupti", "libmemtap-cupti.so", lib, sizeof lib)
			: find_library("recorder", "libmemtap.so", lib, sizeof lib);
	if (access(library, R_OK) != 0)
		die(EXIT_USAGE, "cannot find memtap's library (%s): set MEMTAP_LIBRARY", library);
	if (dir && strcmp(pattern, "memtap-%p.trace"))
		die(EXIT_USAGE, "--dir names the traces itself (DIR/rank-R.trace): give --dir or -o, not both");
	if (dir) {
		char abs[PATH_MAX];
		if (!*dir)
			die(EXIT_USAGE, "--dir needs a folder");
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			die(EXIT_USAGE, "cannot make the run directory %s: %s", dir, strerror(errno));
		if (!realpath(dir, abs))
			die(EXIT_USAGE, "cannot use the run directory %s: %s", dir, strerror(errno));
		setenv("MEMTAP_DIR", abs, 1);
	}
	/* an absolute pattern: the command may change directory */
	if (pattern[0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof cwd))
			die(EXIT_USAGE, "cannot tell the current directory: %s", strerror(errno));
		mt_path_join(output, sizeof output, cwd, "%s", pattern);
		pattern = output;
	}
	setenv("MEMTAP_OUTPUT", pattern, 1);
	if (!policies[0] && (old = getenv("MEMTAP_POLICY")) && *old) { /* from the environment: checked all the same */
		char list[sizeof policies];
		snprintf(list, sizeof list, "%s", old);
		for (char *save = NULL, *f = strtok_r(list, ":", &save); f; f = strtok_r(NULL, ":", &save))
			add_policy(policies, sizeof policies, f);
	}
	if (policies[0]) {
		char engine[PATH_MAX];
		setenv("MEMTAP_POLICY", policies, 1);
		if (!getenv("MEMTAP_POLICY_ENGINE"))
			setenv("MEMTAP_POLICY_ENGINE",
			       find_library("policy", "libmemtap-policy.so", engine, sizeof engine), 1);
	}
	/* the job's options, checked once here with the library's own parser */
	mtp_options_load();
	setenv("MEMTAP_OPTIONS_CHECKED", "1", 1);
	if (!cupti && mtp_opt.torch && !mtp_opt.allocator[0])
		torch_prepare(argv[optind], quiet);
	if (cupti) {
		old = getenv("CUDA_INJECTION64_PATH");
		if (old && *old && strcmp(old, library) != 0)
			die(EXIT_USAGE, "CUDA_INJECTION64_PATH is already %s: only one injection library can be loaded",
			    old);
		setenv("CUDA_INJECTION64_PATH", library, 1);
	} else {
		old = getenv("LD_PRELOAD");
		if (asprintf(&preload, "%s%s%s", library, old && *old ? ":" : "", old ? old : "") < 0)
			die(1, "out of memory");
		setenv("LD_PRELOAD", preload, 1);
		free(preload);
	}
	old = getenv("NVTX_INJECTION64_PATH");
	if (old && *old && strcmp(old, library) != 0)
		fprintf(stderr, "memtap: NVTX_INJECTION64_PATH is already %s; NVTX phases will not be recorded\n", old);
	else
		setenv("NVTX_INJECTION64_PATH", library, 1);

	mt_path_join(status_dir, sizeof status_dir, getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
		     "memtap-run-XXXXXX");
	if (mkdtemp(status_dir))
		setenv("MEMTAP_STATUS", status_dir, 1);
	else
		status_dir[0] = '\0';

	/* blocked from before the fork, so that none is lost: wait_forwarding takes them */
	own_group = !isatty(STDIN_FILENO) || tcgetpgrp(STDIN_FILENO) != getpgrp();
	forwarding_set(&forwarding, own_group);
	sigprocmask(SIG_BLOCK, &forwarding, &unblocked);
	pid = fork();
	if (pid < 0)
		die(1, "cannot start %s: %s", argv[optind], strerror(errno));
	if (pid == 0) {
		if (own_group)
			setpgid(0, 0);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != runner)
			_exit(127); /* memtap run is gone already */
		sigprocmask(SIG_SETMASK, &unblocked, NULL);
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "memtap: cannot run %s: %s\n", argv[optind], strerror(errno));
		_exit(127);
	}
	if (own_group)
		setpgid(pid, pid); /* as the child does: whichever comes first */
	wait_forwarding(pid, own_group, &status);
	sigprocmask(SIG_SETMASK, &unblocked, NULL);
	if (!quiet && mtp_opt.dir[0] && !mtp_rank()) { /* a launcher's ranks under one memtap run */
		dir_summary(mtp_opt.dir, start);
	} else if (!quiet) {
		int n = find_traces(mtp_opt.output, pid, start, traces, 8);
		for (int i = 0; i < n; i++)
			summary(traces[i]);
		if (status_dir[0] && status_summary(status_dir, true))
			status_dir[0] = '\0';
		else if (n == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 127))
			fprintf(stderr, "memtap: %s made no GPU allocation: no trace was written\n", argv[optind]);
	}
	if (status_dir[0])
		status_summary(status_dir, false);
	return end_as(status);
}
