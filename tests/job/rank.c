/* One rank of a job for the whole-job tests, on simgpu: `rank MIB MODE [ARG]`.
 * With RANK_BEFORE_MIB set, first allocates that many MiB and frees them (a peak before
 * what it holds). Allocates MIB MiB with cudaMalloc, then:
 *   wait DIR   once its policy thread counts it as the rank (RUN/.memtap/rank-R exists;
 *              RUN is $MEMTAP_DIR, R is $RANK), writes DIR/ready-R, then waits until its
 *              snapshot of another rank's OOM exists (RUN/snapshots/<id>/rank-R.trace) or
 *              DIR/stop does; then allocates RANK_AFTER_MIB MiB more when that is set (its
 *              peak after the OOM), frees and exits 0
 *   oom MIB2   asks for MIB2 MiB more, which a cap refuses; exits 1 when it was refused
 *   die DIR    its trace written so far (memtap_snapshot to DIR/dying-R.trace drains it),
 *              then ends itself with SIGKILL: no end record
 * The waits have no time limit of their own: the tests' runner has one. */
#include <cuda_runtime.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtap.h"

static int has_snapshot(const char *run, const char *rank)
{
	char path[4096], file[4400];
	struct dirent *e;
	DIR *d;
	int found = 0;

	snprintf(path, sizeof path, "%s/snapshots", run);
	if (!(d = opendir(path)))
		return 0;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof file, "%s/%s/rank-%s.trace", path, e->d_name, rank);
		found = access(file, F_OK) == 0;
	}
	closedir(d);
	return found;
}

int main(int argc, char **argv)
{
	const char *rank = getenv("RANK") ? getenv("RANK") : "0", *run = getenv("MEMTAP_DIR");
	void *p = NULL, *more = NULL;
	char path[4096];

	if (argc < 3) {
		fprintf(stderr, "usage: rank MIB wait DIR | oom MIB | die DIR\n");
		return 2;
	}
	if (getenv("RANK_BEFORE_MIB")) {
		if (cudaMalloc(&more, (size_t)atol(getenv("RANK_BEFORE_MIB")) << 20) != cudaSuccess)
			return 3;
		cudaFree(more);
		more = NULL;
	}
	if (cudaMalloc(&p, (size_t)atol(argv[1]) << 20) != cudaSuccess)
		return 3;
	if (!strcmp(argv[2], "die") && argc > 3) {
		snprintf(path, sizeof path, "%s/dying-%s.trace", argv[3], rank);
		memtap_snapshot(path);
		raise(SIGKILL);
	}
	if (!strcmp(argv[2], "oom") && argc > 3)
		return cudaMalloc(&more, (size_t)atol(argv[3]) << 20) == cudaErrorMemoryAllocation ? 1 : 4;
	if (strcmp(argv[2], "wait") || argc < 4 || !run)
		return 2;
	snprintf(path, sizeof path, "%s/.memtap/rank-%s", run, rank);
	while (access(path, F_OK) != 0)
		usleep(5000);
	snprintf(path, sizeof path, "%s/ready-%s", argv[3], rank);
	fclose(fopen(path, "w"));
	snprintf(path, sizeof path, "%s/stop", argv[3]);
	while (!has_snapshot(run, rank) && access(path, F_OK) != 0)
		usleep(5000);
	if (getenv("RANK_AFTER_MIB") && cudaMalloc(&more, (size_t)atol(getenv("RANK_AFTER_MIB")) << 20) != cudaSuccess)
		return 3;
	cudaFree(more);
	cudaFree(p);
	return 0;
}
