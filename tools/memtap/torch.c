/* memtap run's part in recording PyTorch's tensors: find the torch the job's Python would
 * import (without importing it), and build src/recorder/torch_tracker.cc against its own
 * headers once per torch (kept in memtap's cache folder), for libmemtap.so to attach
 * (src/recorder/torch.c). Whatever fails is said in one line and the job runs anyway,
 * with torch's segments recorded and not its tensors. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/map.h"
#include "core/path.h"
#include "cli.h"

extern char **environ;

/* the tracker's build: frame pointers, for memtap's walk over its frames (recorder/stack.c) */
#define FLAGS "-std=c++17", "-O2", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-w"
#define NOT_TENSORS "memtap records torch's segments, not its tensors"

/* Runs argv for at most `bound` seconds with its output (both streams) in out; its exit
 * status, -1 when it did not end by itself, NO_PROGRAM when there is no such program. */
#define NO_PROGRAM (-2)
static int run_quietly(char *const argv[], char *out, size_t len, int bound)
{
	const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[PATH_MAX];
	posix_spawn_file_actions_t fa;
	int fd, status = -1, spawned;
	ssize_t n = 0;
	pid_t pid;

	out[0] = '\0';
	mt_path_join(path, sizeof path, tmp, "memtap-torch-XXXXXX");
	if ((fd = mkstemp(path)) < 0)
		return -1;
	unlink(path);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd, STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, fd, STDERR_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	spawned = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (spawned != 0) {
		close(fd);
		return spawned == ENOENT || spawned == EACCES ? NO_PROGRAM : -1;
	}
	for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited++) {
		if (waited == bound * 20) { /* a compiler that hangs does not hold the job back */
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		usleep(50000);
	}
	if (lseek(fd, 0, SEEK_SET) == 0 && (n = read(fd, out, len - 1)) > 0)
		out[n] = '\0';
	close(fd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A program's path: prog itself when it names one, else the first on the PATH; NULL. */
static FILE *open_program(const char *prog, char *path, size_t len)
{
	FILE *f = NULL;

	if (strchr(prog, '/'))
		return access(prog, X_OK) == 0 && snprintf(path, len, "%s", prog) > 0 ? fopen(prog, "r") : NULL;
	for (const char *dirs = getenv("PATH"); !f && dirs && *dirs;
	     dirs += strcspn(dirs, ":") + (dirs[strcspn(dirs, ":")] != 0)) {
		snprintf(path, len, "%.*s/%s", (int)strcspn(dirs, ":"), dirs, prog);
		f = access(path, X_OK) == 0 ? fopen(path, "r") : NULL;
	}
	return f;
}

enum command { NOT_PYTHON, PYTHON, LAUNCHER };

/* Whether the command is a Python (out: it), a script or launcher that may start one (out:
 * the python3 on the PATH), or neither (a program of its own: no Python is asked). */
static enum command python_of(const char *cmd, char *out, size_t len)
{
	static const char *const launchers[] = {"sh",	 "bash",   "dash",    "zsh",	"env",
						"srun",	 "mpirun", "mpiexec", "uv",	"conda",
						"nohup", "time",   "timeout", "stdbuf", NULL};
	const char *base = strrchr(cmd, '/') ? strrchr(cmd, '/') + 1 : cmd;
	char path[PATH_MAX], line[256], *p, *end, *slash;
	FILE *f;

	snprintf(out, len, "python3");
	if (strncmp(base, "python", 6) == 0) {
		snprintf(out, len, "%s", cmd);
		return PYTHON;
	}
	for (size_t i = 0; launchers[i]; i++)
		if (!strcmp(base, launchers[i]))
			return LAUNCHER;
	if (!(f = open_program(cmd, path, sizeof path)))
		return NOT_PYTHON;
	p = fgets(line, sizeof line, f);
	fclose(f);
	if (!p || strncmp(line, "#!", 2) != 0)
		return NOT_PYTHON;
	if (!strstr(line, "python"))
		return LAUNCHER; /* a shell script */
	p = line + 2 + strspn(line + 2, " \t");
	end = p + strcspn(p, " \t\n");
	if (end - p >= 4 && strncmp(end - 4, "/env", 4) == 0) { /* #!/usr/bin/env python3 */
		p = end + strspn(end, " \t");
		end = p + strcspn(p, " \t\n");
	}
	slash = memrchr(p, '/', (size_t)(end - p));
	if (strncmp(slash ? slash + 1 : p, "python", 6) != 0)
		return LAUNCHER;
	snprintf(out, len, "%.*s", (int)(end - p), p);
	return PYTHON;
}

/* `name = '...'` at a line's start in torch/version.py (since 2.1 its `__all__` names
 * them first, in quotes) */
static bool version_field(const char *text, const char *name, char *out, size_t len)
{
	size_t n = strlen(name);

	for (const char *line = text; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		const char *p = line + n, *q;
		if (strncmp(line, name, n) != 0 || (*p != ' ' && *p != '='))
			continue;
		p += strspn(p, " ");
		if (*p++ != '=' || !*(p += strspn(p, " ")) || !strchr("'\"", *p) || !(q = strchr(p + 1, *p)))
			return false;
		snprintf(out, len, "%.*s", (int)(q - p - 1), p + 1);
		return true;
	}
	return false;
}

static uint64_t fnv_file(uint64_t h, const char *path)
{
	char buf[8192];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return h;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		h = mt_fnv1a(h, buf, n);
	fclose(f);
	return h;
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	mt_path_join(path, sizeof path, dir, "%s", name);
	return access(path, R_OK) == 0;
}

/* Where CUDA's headers are: the toolkit's, or the wheel's beside torch. */
static const char *cuda_include(const char *torch, char *buf, size_t len)
{
	const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};

	for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
		if (homes[i] && *homes[i]) {
			mt_path_join(buf, len, homes[i], "include");
			if (exists(buf, "cuda_runtime_api.h"))
				return buf;
		}
	}
	mt_path_join(buf, len, torch, "../nvidia/cuda_runtime/include");
	return exists(buf, "cuda_runtime_api.h") ? buf : NULL;
}

/* memtap's cache folder, made if need be */
static bool cache_dir(char *out, size_t len)
{
	char resolved[PATH_MAX];
	const char *env = getenv("MEMTAP_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

	if (env && *env)
		snprintf(out, len, "%s", env);
	else if (xdg && *xdg)
		mt_path_join(out, len, xdg, "memtap");
	else if (home && *home)
		mt_path_join(out, len, home, ".cache/memtap");
	else
		return false;
	for (char *p = out + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(out, 0755);
			*p = '/';
		}
	if (mkdir(out, 0755) != 0 && errno != EEXIST)
		return false;
	/* the job may change directory before it loads the tracker */
	return realpath(out, resolved) && snprintf(out, len, "%s", resolved) < (int)len;
}

/* The first line of a compiler's complaint that says what went wrong. */
static void first_error(char *text)
{
	char *e = strstr(text, "error");
	char *start = e ? e : text, *nl;

	while (e && start > text && start[-1] != '\n')
		start--;
	if ((nl = strchr(start, '\n')))
		*nl = '\0';
	memmove(text, start, strlen(start) + 1);
}

/* The first line of a file (a failed build's error) into out; false when there is none. */
static bool read_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
	bool got = f && fgets(out, (int)len, f);

	if (f)
		fclose(f);
	if (got)
		out[strcspn(out, "\n")] = '\0';
	return got;
}

enum built { BUILT, FAILED, NO_COMPILER };

/* Compiles the tracker into lib, with the compiler cxx; else the compiler's first error,
 * or what is missing, in out. */
static enum built build(const char *cxx, const char *lib, const char *src, const char *torch, char *out, size_t len)
{
	static char tmp[PATH_MAX + 96], ilib[PATH_MAX + 64], iinc[PATH_MAX + 16], icuda[PATH_MAX + 2], cuda[PATH_MAX];
	char *argv[] = {(char *)cxx, FLAGS, "-o", tmp, (char *)src, ilib, iinc, icuda, NULL};

	snprintf(tmp, sizeof tmp, "%s.%d", lib, (int)getpid());
	snprintf(ilib, sizeof ilib, "-DMEMTAP_TORCH_LIB=\"%s/lib/libc10_cuda.so\"", torch);
	snprintf(iinc, sizeof iinc, "-I%s/include", torch);
	if (cuda_include(torch, cuda, sizeof cuda))
		snprintf(icuda, sizeof icuda, "-I%s", cuda);
	else
		argv[sizeof argv / sizeof argv[0] - 2] = NULL;
	int status = run_quietly(argv, out, len, 300);

	if (status == 0 && rename(tmp, lib) == 0)
		return BUILT;
	unlink(tmp);
	if (status == NO_PROGRAM) {
		snprintf(out, len, "no C++ compiler: %s (set CXX)", cxx);
		return NO_COMPILER;
	}
	first_error(out);
	if (!out[0])
		snprintf(out, len, "%s failed", cxx);
	return FAILED;
}

void torch_prepare(const char *cmd, bool quiet)
{
	/* static: memtap run is one thread, and a job run under a small stack limit (ulimit -s)
	   starts from this stack */
	static char python[PATH_MAX], out[16384], torch[PATH_MAX], path[PATH_MAX + 64], src[PATH_MAX], dir[PATH_MAX],
	    lib[PATH_MAX + 64], failed[PATH_MAX + 64];
	char version[64] = "", git[64] = "", *at;
	/* its answer after a mark: a Python's start-up may print things of its own */
	char *find[] = {
	    python, "-c",
	    "import importlib.util as u\n"
	    "s = u.find_spec('torch')\n"
	    "print('memtap-torch=' + (s.submodule_search_locations[0] if s and s.submodule_search_locations "
	    "else ''))",
	    NULL};
	const char *env = getenv("MEMTAP_TORCH_TRACKER"), *const flags[] = {FLAGS},
		   *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "c++";
	/* a script or a launcher may start Python: the python3 on the PATH is asked, and only
	   what memtap does is said */
	enum command how = python_of(cmd, python, sizeof python);
	bool named = how == PYTHON;
	int major = 0, minor = 0;
	uint64_t h = MT_FNV_BASIS;
	FILE *f;
	size_t n;

	if ((env && *env) || how == NOT_PYTHON)
		return;
	if (run_quietly(find, out, sizeof out, 60) != 0 || !(at = strstr(out, "memtap-torch=/")))
		return; /* no torch for that Python */
	at += strlen("memtap-torch=");
	snprintf(torch, sizeof torch, "%.*s", (int)strcspn(at, "\n"), at);
	mt_path_join(path, sizeof path, torch, "version.py");
	if (!(f = fopen(path, "r")))
		return;
	n = fread(out, 1, sizeof out - 1, f);
	out[n] = '\0';
	fclose(f);
	version_field(out, "__version__", version, sizeof version);
	version_field(out, "git_version", git, sizeof git);
	if (sscanf(version, "%d.%d", &major, &minor) != 2) {
		if (named)
			fprintf(stderr, "memtap: no torch version in %s/version.py: " NOT_TENSORS "\n", torch);
		return;
	}
	if (major < 2 || (major == 2 && minor < 2)) {
		if (named)
			fprintf(stderr,
				"memtap: torch %s has no allocator trace tracker (2.2 and later do): " NOT_TENSORS "\n",
				version);
		return;
	}
	mt_path_join(path, sizeof path, torch, "include/c10/cuda/CUDACachingAllocator.h");
	if (access(path, R_OK) != 0) {
		if (named)
			fprintf(stderr,
				"memtap: torch %s at %s has no C++ headers to build its tracker with: " NOT_TENSORS
				"\n",
				version, torch);
		return;
	}
	snprintf(src, sizeof src, "%s/src/recorder/torch_tracker.cc", MT_SRCDIR);
	if (access(src, R_OK) != 0)
		snprintf(src, sizeof src, "%s/torch/torch_tracker.cc", MT_PKGDATADIR);
	if (!cache_dir(dir, sizeof dir)) {
		fprintf(stderr,
			"memtap: no folder to keep its tracker of torch %s in (set MEMTAP_CACHE_DIR): " NOT_TENSORS
			"\n",
			version);
		return;
	}
	/* one build per torch, its allocator's headers, the compiler and the tracker's source:
	   the name says which; a build that failed is not tried again for them */
	h = mt_fnv1a(h, version, strlen(version));
	h = mt_fnv1a(h, git, strlen(git));
	h = mt_fnv1a(h, torch, strlen(torch));
	h = mt_fnv1a(h, cxx, strlen(cxx));
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
		h = mt_fnv1a(h, flags[i], strlen(flags[i]) + 1);
	h = fnv_file(h, path);
	mt_path_join(path, sizeof path, torch, "include/c10/core/CachingDeviceAllocator.h");
	h = fnv_file(h, path);
	h = fnv_file(h, src);
	snprintf(path, sizeof path, "%.*s/torch_tracker.h", (int)(strrchr(src, '/') - src), src);
	h = fnv_file(h, path);
	mt_path_join(lib, sizeof lib, dir, "torch-tracker-%016llx.so", (unsigned long long)h);
	mt_path_join(failed, sizeof failed, dir, "torch-tracker-%016llx.failed", (unsigned long long)h);
	if (access(lib, R_OK) != 0) {
		bool before = read_line(failed, out, sizeof out);
		if (!before) {
			FILE *c = open_program(cxx, path, sizeof path);
			if (!c) { /* one may be installed: said each time */
				fprintf(stderr,
					"memtap: no C++ compiler (%s; set CXX) to build its tracker of torch "
					"%s: " NOT_TENSORS "\n",
					cxx, version);
				return;
			}
			fclose(c);
			if (!quiet)
				fprintf(stderr,
					"memtap: building its tracker of PyTorch's tensors for torch %s (once; kept in "
					"%s)\n",
					version, dir);
			if (build(cxx, lib, src, torch, out, sizeof out) == FAILED && (f = fopen(failed, "w"))) {
				fprintf(f, "%s\n", out);
				fclose(f);
			}
		}
		if (access(lib, R_OK) != 0) {
			if (named || !before)
				fprintf(stderr,
					"memtap: cannot build its tracker of torch %s (%s%s%s): " NOT_TENSORS "\n",
					version, out, before ? "; remove " : "", before ? failed : "");
			return;
		}
	}
	setenv("MEMTAP_TORCH_TRACKER", lib, 1);
}
