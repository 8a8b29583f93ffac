/* memtap replay: a trace's allocation sequence through caching-allocator policies on a
 * simulated device (src/analyze/simulate.c): what each would reserve, waste and fail. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/simulate.h"
#include "analyze/report.h"
#include "cli.h"
#include "core/units.h"

enum { WARM_OPS = 1000000 }; /* inputs shorter than this are replayed once untimed first */

const char replay_usage[] =
    "usage: memtap replay INPUT [--policy=P[,P...]] [--conf=K:V,...] [--capacity=SIZE]\n"
    "                     [--find-min-capacity] [--device=N] [--json]\n"
    "Replays the allocations and frees of INPUT (a memtap trace, a PyTorch memory snapshot or\n"
    "an RMM log) through caching-allocator policies on a simulated device, no GPU needed:\n"
    "  native      PyTorch's caching allocator (512-byte rounding, 2 MiB small and 20 MiB\n"
    "              mid-size segments, split rules; --conf takes PYTORCH_CUDA_ALLOC_CONF's keys\n"
    "              expandable_segments, max_split_size_mb, roundup_power2_divisions,\n"
    "              garbage_collection_threshold)\n"
    "  memtap      native's layout; a new segment past the peak first frees unused cached ones\n"
    "  memtap-vmm  native's layout, physical pages (2 MiB) mapped only under blocks handed\n"
    "              out, free ones moved where needed (VMM stitching); never reserves more\n"
    "              than native with the same settings (until native first runs out of\n"
    "              the device)\n"
    "  bump        no caching: every request its own device allocation (the lower bound)\n"
    "Default: all four. Per policy: peak reserved, allocated and requested, their ratio,\n"
    "allocations that fail (after the cache is released) at --capacity (at most 1 TiB;\n"
    "without it the device holds 1 TiB, more than any GPU, and a request past it fails), the\n"
    "smallest capacity that serves the whole sequence (--find-min-capacity, to 2 MiB) and the\n"
    "engine's time per operation (an input under a million operations timed on a second run,\n"
    "the first warming the process). A PyTorch snapshot's own segments at the end are shown\n"
    "beside native's; where the job released its cache (empty_cache, an OOM's retry), every\n"
    "policy releases at the same point; every caching policy runs with the job's own\n"
    "allocator_settings (expandable segments, max_split_size, roundup_power2_divisions),\n"
    "then --conf's. --device=N replays device N (default: the lowest device with allocations).\n"
    "--json prints all of it with the timeline.\n";

struct row {
	const char *policy;
	struct mt_cache_config cfg;
	struct mt_sim_result r;
	uint64_t min_capacity;
};

static void print_text(const char *path, int device, const struct mt_sim_input *in, const char *job,
		       const struct row *rows, size_t nrows, uint64_t capacity, bool find_min)
{
	char a[32], b[32], c[32], d[32], cap[32], times[32] = "once";
	bool ooms = capacity != 0; /* the column: at a capacity given, else where some allocation failed */

	for (size_t i = 0; i < nrows; i++)
		ooms |= rows[i].r.ooms != 0;
	printf("%s, device %d: %zu allocations and %zu frees (%s)\n", path, device, in->nops - in->frees - in->releases,
	       in->frees, in->blocks ? "a caching allocator's blocks" : "device allocations");
	if (in->releases > 1)
		snprintf(times, sizeof times, "%zu times", in->releases);
	if (in->releases)
		printf("the job released its cached segments %s (empty_cache or an OOM's retry); every policy releases "
		       "at the same points\n",
		       times);
	if (job[0])
		printf("native, memtap and memtap-vmm run with the job's own allocator settings: %s\n", job);
	mt_format_size(capacity ? capacity : MT_CACHE_DEVICE_MAX, cap, sizeof cap);
	printf("%-11s %14s %14s %14s %10s", "policy", "peak reserved", "peak allocated", "peak requested", "res/alloc");
	if (ooms)
		printf(" %14s", "OOMs");
	if (find_min)
		printf(" %14s", "min capacity");
	printf(" %8s\n", "ns/op");
	for (size_t i = 0; i < nrows; i++) {
		const struct mt_cache_stats *s = &rows[i].r.stats;

		mt_format_size(s->peak_reserved, a, sizeof a);
		mt_format_size(rows[i].r.peak_allocated, b, sizeof b);
		mt_format_size(rows[i].r.peak_requested, c, sizeof c);
		printf("%-11s %14s %14s %14s %10.4f", rows[i].policy, a, b, c,
		       rows[i].r.peak_allocated ? (double)s->peak_reserved / (double)rows[i].r.peak_allocated : 0);
		if (ooms)
			printf(" %14llu", (unsigned long long)rows[i].r.ooms);
		if (find_min)
			mt_format_size(rows[i].min_capacity, d, sizeof d), printf(" %14s", d);
		printf(" %8.0f\n", rows[i].r.ns_per_op);
	}
	if (capacity)
		printf("OOMs: allocations that fail on a %s device after the policy released its cache\n", cap);
	else if (ooms)
		printf("OOMs: allocations that fail on a device of %s, more than any holds (no --capacity given)\n",
		       cap);
	for (size_t i = 0; i < nrows && in->final_segments; i++)
		if (strcmp(rows[i].policy, "native") == 0) {
			mt_format_size(in->final_segments, a, sizeof a);
			mt_format_size(rows[i].r.stats.reserved, b, sizeof b);
			printf("segments at the end: %s in the trace, %s in the native replay%s\n", a, b,
			       in->final_segments == rows[i].r.stats.reserved ? " (the same)" : "");
		}
}

static void print_json(const char *path, int device, const struct mt_sim_input *in, const char *job,
		       const struct row *rows, size_t nrows, uint64_t capacity)
{
	printf("{\"input\":");
	mt_json_str(stdout, path);
	printf(",\"job_conf\":");
	mt_json_str(stdout, job);
	printf(",\"device\":%d,\"ops\":%zu,\"blocks\":%s,\"releases\":%zu,\"final_segments\":%llu,\"capacity\":%llu,"
	       "\"policies\":[",
	       device, in->nops, in->blocks ? "true" : "false", in->releases, (unsigned long long)in->final_segments,
	       (unsigned long long)capacity);
	for (size_t i = 0; i < nrows; i++) {
		const struct mt_sim_result *r = &rows[i].r;
		const struct mt_cache_stats *s = &r->stats;

		printf("%s{\"policy\":\"%s\",\"peak_reserved\":%llu,\"peak_allocated\":%llu,\"peak_requested\":%llu,"
		       "\"final_reserved\":%llu,\"segments\":%llu,\"hits\":%llu,\"ooms\":%llu,\"first_oom\":%lld,"
		       "\"retries\":%llu,\"stitched\":%llu,\"ns_per_op\":%.1f,\"min_capacity\":%llu,\"timeline\":[",
		       i ? "," : "", rows[i].policy, (unsigned long long)s->peak_reserved,
		       (unsigned long long)r->peak_allocated, (unsigned long long)r->peak_requested,
		       (unsigned long long)s->reserved, (unsigned long long)s->segments, (unsigned long long)s->hits,
		       (unsigned long long)r->ooms, r->ooms ? (long long)r->first_oom : -1LL,
		       (unsigned long long)s->retries, (unsigned long long)s->stitched, r->ns_per_op,
		       (unsigned long long)rows[i].min_capacity);
		for (size_t k = 0; k < r->nsamples; k++)
			printf("%s[%llu,%llu,%llu,%llu,%llu]", k ? "," : "", (unsigned long long)r->samples[k].op,
			       (unsigned long long)r->samples[k].reserved, (unsigned long long)r->samples[k].allocated,
			       (unsigned long long)r->samples[k].requested,
			       (unsigned long long)r->samples[k].largest_free);
		printf("]}");
	}
	printf("]}\n");
}

int cmd_replay(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"policy", 1, 0, 'p'}, {"conf", 1, 0, 'c'}, {"capacity", 1, 0, 'C'}, {"find-min-capacity", 0, 0, 'f'},
	    {"device", 1, 0, 'd'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'},	 {0, 0, 0, 0}};
	const char *policies = "native,memtap,memtap-vmm,bump", *conf = NULL, *bad;
	uint64_t capacity = 0;
	bool json = false, find_min = false, damaged;
	int device = -1, c, status;
	struct row rows[8];
	size_t nrows = 0;
	struct mt_trace t;
	struct mt_sim_input in;
	char *end, *list, job[128], max[32];

	while ((c = next_option(argc, argv, "h", longopts, "replay")) != -1) {
		switch (c) {
		case 'p':
			policies = optarg;
			break;
		case 'c':
			conf = optarg;
			break;
		case 'C':
			if (mt_parse_size(optarg, &capacity) || !capacity)
				die(EXIT_USAGE, "--capacity: '%s' is not a size (e.g. 80GiB)", optarg);
			if (capacity > MT_CACHE_DEVICE_MAX)
				die(EXIT_USAGE, "--capacity: %s is more than any device holds (%s)", optarg,
				    mt_format_size(MT_CACHE_DEVICE_MAX, max, sizeof max));
			break;
		case 'f':
			find_min = true;
			break;
		case 'd':
			device = (int)strtol(optarg, &end, 10);
			if (*end || device < 0 || device > 254)
				die(EXIT_USAGE, "--device: '%s' is not a device number", optarg);
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(replay_usage, stdout);
			return 0;
		}
	}
	if (optind + 1 != argc)
		die(EXIT_USAGE, "replay takes one input (see memtap replay --help)");
	damaged = load_trace(argv[optind], &t); /* each run walks it again */
	mt_sim_job_conf(&t, job, sizeof job);
	list = strdup(policies);
	for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		if (nrows == sizeof rows / sizeof *rows || mt_cache_preset(&rows[nrows].cfg, p))
			die(EXIT_USAGE, "--policy: unknown policy '%s' (native, memtap, memtap-vmm, bump)", p);
		/* native is the job's allocator, memtap and memtap-vmm its layout (with trim, with
		 * pages mapped only under blocks): the job's settings first, then --conf's */
		if (strcmp(p, "bump") && job[0] && mt_cache_configure(&rows[nrows].cfg, job, &bad))
			die(1, "%s: its allocator_settings give '%s', which memtap cannot use", argv[optind], bad);
		if (conf && mt_cache_configure(&rows[nrows].cfg, conf, &bad))
			die(EXIT_USAGE, "--conf: cannot use '%s'", bad);
		rows[nrows++].policy = p;
	}
	if (device < 0) /* a job on cuda:1 alone has nothing on device 0 */
		device = mt_sim_first_device(&t);
	if (mt_sim_input(&t, (uint8_t)device, NULL, &in))
		die(1, "out of memory reading %s", argv[optind]);
	if (!in.nops && !damaged) /* a damaged trace's one line already gave its count of events */
		fprintf(stderr, "memtap: %s has no device allocations on device %d\n", argv[optind], device);
	/* a short input is timed on its second run: the first pays for the memory the process
	 * touches first, which made whichever policy ran first look several times slower */
	for (size_t i = 0; i < nrows; i++)
		if ((in.nops < WARM_OPS && mt_sim_run(&in, &rows[i].cfg, capacity, true, &rows[i].r)) ||
		    mt_sim_run(&in, &rows[i].cfg, capacity, true, &rows[i].r) ||
		    (find_min && mt_sim_min_capacity(&in, &rows[i].cfg, 2u << 20, &rows[i].min_capacity)))
			die(1, "out of memory replaying %s", argv[optind]);
	if (json)
		print_json(argv[optind], device, &in, job, rows, nrows, capacity);
	else
		print_text(argv[optind], device, &in, job, rows, nrows, capacity, find_min);
	status = walked_status(&t, damaged);
	mt_sim_input_free(&in);
	mt_trace_free(&t);
	free(list);
	return status;
}
