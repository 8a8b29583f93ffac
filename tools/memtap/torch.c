/* memtap run's part in recording PyTorch's tensors: find the torch the job's Python would
 * import (without importing it), and build src/recorder/torch_tracker.cc against its own
 * headers once per torch (kept in memtap's cache folder), for libmemtap.so to attach
 * (src/recorder/torch.c). Whatever fails is said in one line and the job runs anyway,
 * with torch's segments recorded and not its tensors. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/path.h"
#include "cli.h"

extern char **environ;

/* the tracker's build: frame pointers, for memtap's walk over its frames (recorder/stack.c) */
#define FLAGS "-std=c++17", "-O2", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-w"
#define NOT_TENSORS "memtap records torch's segments, not its tensors"

/* Runs argv with its output (both streams) in out; its exit status, or -1. */
static int run_quietly(char *const argv[], char *out, size_t len)
{
	char path[] = "/tmp/memtap-torch-XXXXXX";
	posix_spawn_file_actions_t fa;
	int fd = mkstemp(path), status = -1;
	ssize_t n = 0;
	pid_t pid;

	out[0] = '\0';
	if (fd < 0)
		return -1;
	unlink(path);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd, STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, fd, STDERR_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) == 0 && waitpid(pid, &status, 0) == pid &&
	    lseek(fd, 0, SEEK_SET) == 0 && (n = read(fd, out, len - 1)) > 0)
		out[n] = '\0';
	posix_spawn_file_actions_destroy(&fa);
	close(fd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The Python that runs the command: the command itself, or the one its #! line names. */
static bool python_of(const char *cmd, char *out, size_t len)
{
	const char *base = strrchr(cmd, '/') ? strrchr(cmd, '/') + 1 : cmd;
	char path[PATH_MAX], line[256], *p, *end;
	FILE *f = NULL;

	if (strncmp(base, "python", 6) == 0) {
		snprintf(out, len, "%s", cmd);
		return true;
	}
	if (strchr(cmd, '/'))
		f = fopen(cmd, "r");
	for (const char *dirs = getenv("PATH"); !f && dirs && *dirs;
	     dirs += strcspn(dirs, ":") + (dirs[strcspn(dirs, ":")] != 0)) {
		snprintf(path, sizeof path, "%.*s/%s", (int)strcspn(dirs, ":"), dirs, cmd);
		f = access(path, X_OK) == 0 ? fopen(path, "r") : NULL;
	}
	if (!f)
		return false;
	p = fgets(line, sizeof line, f);
	fclose(f);
	if (!p || strncmp(line, "#!", 2) != 0 || !strstr(line, "python"))
		return false;
	p = line + 2 + strspn(line + 2, " \t");
	end = p + strcspn(p, " \t\n");
	if (end - p >= 4 && strncmp(end - 4, "/env", 4) == 0) { /* #!/usr/bin/env python3 */
		p = end + strspn(end, " \t");
		end = p + strcspn(p, " \t\n");
	}
	if (strncmp(strrchr(p, '/') && strrchr(p, '/') < end ? strrchr(p, '/') + 1 : p, "python", 6) != 0)
		return false;
	snprintf(out, len, "%.*s", (int)(end - p), p);
	return true;
}

/* `name = '...'` in torch/version.py */
static bool version_field(const char *text, const char *name, char *out, size_t len)
{
	const char *p = strstr(text, name), *q;

	if (!p || !(p = strpbrk(p, "'\"")) || !(q = strchr(p + 1, *p)))
		return false;
	snprintf(out, len, "%.*s", (int)(q - p - 1), p + 1);
	return true;
}

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t fnv_file(uint64_t h, const char *path)
{
	char buf[8192];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return h;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		h = fnv(h, buf, n);
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
	return mkdir(out, 0755) == 0 || errno == EEXIST;
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

/* Compiles the tracker into lib; false with the compiler's first error in out. */
static bool build(const char *lib, const char *src, const char *torch, char *out, size_t len)
{
	const char *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "c++";
	char tmp[PATH_MAX + 96], ilib[PATH_MAX + 64], iinc[PATH_MAX + 16], icuda[PATH_MAX + 2], cuda[PATH_MAX];
	char *argv[] = {(char *)cxx, FLAGS, "-o", tmp, (char *)src, ilib, iinc, icuda, NULL};

	snprintf(tmp, sizeof tmp, "%s.%d", lib, (int)getpid());
	snprintf(ilib, sizeof ilib, "-DMEMTAP_TORCH_LIB=\"%s/lib/libc10_cuda.so\"", torch);
	snprintf(iinc, sizeof iinc, "-I%s/include", torch);
	if (cuda_include(torch, cuda, sizeof cuda))
		snprintf(icuda, sizeof icuda, "-I%s", cuda);
	else
		argv[sizeof argv / sizeof argv[0] - 2] = NULL;
	if (run_quietly(argv, out, len) == 0 && rename(tmp, lib) == 0)
		return true;
	unlink(tmp);
	first_error(out);
	if (!out[0])
		snprintf(out, len, "%s failed", cxx);
	return false;
}

void torch_prepare(const char *cmd, bool quiet)
{
	char python[PATH_MAX], out[16384], torch[PATH_MAX], version[64] = "", git[64] = "", path[PATH_MAX],
							    src[PATH_MAX], dir[PATH_MAX], lib[PATH_MAX + 64],
							    failed[PATH_MAX + 64];
	char *find[] = {python, "-c",
			"import importlib.util as u\n"
			"s = u.find_spec('torch')\n"
			"print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')",
			NULL};
	const char *env = getenv("MEMTAP_TORCH_TRACKER"), *const flags[] = {FLAGS};
	/* a command that is not Python (a shell script, a launcher) may start it: the Python
	   on the PATH is asked, and only what memtap does is said */
	bool named = python_of(cmd, python, sizeof python);
	int major = 0, minor = 0;
	uint64_t h = 0xcbf29ce484222325ull;
	FILE *f;
	size_t n;

	if (env && *env)
		return;
	if (!named)
		snprintf(python, sizeof python, "python3");
	if (run_quietly(find, out, sizeof out) != 0 || out[0] != '/')
		return; /* no torch for that Python */
	snprintf(torch, sizeof torch, "%.*s", (int)strcspn(out, "\n"), out);
	mt_path_join(path, sizeof path, torch, "version.py");
	if (!(f = fopen(path, "r")))
		return;
	n = fread(out, 1, sizeof out - 1, f);
	out[n] = '\0';
	fclose(f);
	version_field(out, "__version__", version, sizeof version);
	version_field(out, "git_version", git, sizeof git);
	if (sscanf(version, "%d.%d", &major, &minor) != 2)
		return;
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
	/* one build per torch and tracker source: the name says which; a build that failed
	   is not tried again for them */
	h = fnv(h, version, strlen(version));
	h = fnv(h, git, strlen(git));
	h = fnv(h, torch, strlen(torch));
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
		h = fnv(h, flags[i], strlen(flags[i]) + 1);
	h = fnv_file(h, src);
	snprintf(path, sizeof path, "%.*s/torch_tracker.h", (int)(strrchr(src, '/') - src), src);
	h = fnv_file(h, path);
	mt_path_join(lib, sizeof lib, dir, "torch-tracker-%016llx.so", (unsigned long long)h);
	mt_path_join(failed, sizeof failed, dir, "torch-tracker-%016llx.failed", (unsigned long long)h);
	if (access(lib, R_OK) != 0) {
		bool before = read_line(failed, out, sizeof out);
		if (!before) {
			if (!quiet)
				fprintf(stderr,
					"memtap: building its tracker of PyTorch's tensors for torch %s (once; kept in "
					"%s)\n",
					version, dir);
			if (!build(lib, src, torch, out, sizeof out) && (f = fopen(failed, "w"))) {
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
