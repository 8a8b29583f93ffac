/* The recorder's cost, measured inside one program so the baseline runs on the same
 * machine at the same moment: `recorder_bench MODE PAIRS [THREADS]` descends to a
 * fixed stack depth (24 frames below main, as in the issue), then allocates and frees
 * PAIRS times and prints the nanoseconds per pair. MODE:
 *   cuda    cudaMalloc + cudaFree of 4 KiB (run with and without memtap)
 *   malloc  malloc + free of 4 KiB (run with and without heaptrack)
 *   oom     a cudaMalloc past the device's capacity, that fails (PAIRS of them; with and
 *           without an on_oom policy: the time from the failure to the application)
 * With THREADS > 1 every thread does PAIRS pairs (the throughput figure). A second
 * line gives the process's peak resident memory. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEPTH 24

static const char *mode;
static long pairs;
static volatile int sink;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The process's peak resident memory, from the kernel: "peak_rss_kib N". */
static void print_peak_rss(void)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "VmHWM:", 6) == 0)
			printf("peak_rss_kib %ld\n", strtol(line + 6, NULL, 10));
	if (f)
		fclose(f);
}

static __attribute__((noinline)) void loop(void)
{
	if (mode[0] == 'o') {
		for (long i = 0; i < pairs; i++) {
			void *p;
			if (cudaMalloc(&p, (size_t)1 << 50) != cudaErrorMemoryAllocation)
				abort();
			cudaGetLastError();
		}
	} else if (mode[0] == 'c') {
		for (long i = 0; i < pairs; i++) {
			void *p;
			if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
				abort();
		}
	} else {
		for (long i = 0; i < pairs; i++) {
			void *volatile p = malloc(4096);
			free(p);
		}
	}
}

/* Each level is a real frame: noinline, and work after the call so it is not a tail call. */
static __attribute__((noinline)) int descend(int depth)
{
	if (depth == 0) {
		loop();
		return 0;
	}
	int r = descend(depth - 1);
	sink = r;
	return r + 1;
}

static void *thread_main(void *arg)
{
	(void)arg;
	descend(DEPTH - 2); /* thread start and thread_main count as frames too */
	return NULL;
}

int main(int argc, char **argv)
{
	int threads;
	double t0, t1;
	void *warm;

	if (argc < 3) {
		fprintf(stderr, "usage: recorder_bench cuda|malloc|oom PAIRS [THREADS]\n");
		return 2;
	}
	mode = argv[1];
	pairs = atol(argv[2]);
	threads = argc > 3 ? atoi(argv[3]) : 1;
	if (mode[0] == 'c' && (cudaMalloc(&warm, 4096) != cudaSuccess || cudaFree(warm) != cudaSuccess))
		return 1; /* first use initialises the device: keep it out of the timing */
	t0 = now();
	if (threads <= 1) {
		descend(DEPTH - 3); /* main, __libc_start_call_main and __libc_start_main: 24 in all */
	} else {
		pthread_t *t = calloc((size_t)threads, sizeof *t);
		for (int i = 0; i < threads; i++)
			pthread_create(&t[i], NULL, thread_main, NULL);
		for (int i = 0; i < threads; i++)
			pthread_join(t[i], NULL);
		free(t);
	}
	t1 = now();
	printf("%.1f\n", (t1 - t0) / (double)pairs);
	print_peak_rss();
	return 0;
}
