/* `memtap replay`'s engine: a trace's allocation sequence (memtap's own, an imported
 * PyTorch snapshot or RMM log) run through a caching-allocator policy on a simulated
 * device, no GPU needed. Per device: peak reserved, allocated and requested, the
 * reserved/allocated timeline, the allocations that would fail at a capacity, and the
 * smallest capacity that serves the whole sequence. */
#ifndef MT_SIMULATE_H
#define MT_SIMULATE_H

#include "cache/cache.h"
#include "reader/reader.h"
#include "core/map.h"

#define MT_SIM_SAMPLES 64

/* A segment the job itself reserved, in trace order: where a replay's segment of its size
 * goes, so that a best fit breaks ties between blocks of one size (by address) as the
 * job's allocator did. */
struct mt_sim_place {
	uint64_t addr, size;
};

struct mt_sim_places;

/* A simulated device for the engine: segments and physical pages are charged against
 * `capacity` (0: unlimited); a segment (or address range) goes at one of the job's own
 * `places` of its size that overlaps none held, else at a counter's address past all of
 * them, so no two held ever overlap; events complete at once. One thread at a time. */
struct mt_sim_device {
	uint64_t capacity, used, next_addr, next_handle;
	struct mt_sim_places *places; /* the job's segments (NULL: none) */
};

void mt_sim_device_init(struct mt_sim_device *d, uint64_t capacity, struct mt_cache_backend *b);

/* One allocation, free or release, in trace order. An allocation has a slot that no
 * other allocation live with it has (its op's index, where the caller makes the ops),
 * and a free names the slot of what it frees. A release is the job's own return of
 * cached memory (empty_cache, an OOM's retry): in a PyTorch snapshot, where the allocator
 * freed segments. */
struct mt_sim_op {
	uint64_t size; /* allocation: bytes asked for; free, release: 0 */
	uint64_t stream;
	size_t slot;
	bool free, release;
};

/* The sequence: `ops` (a plan's step, made by the caller), or a trace's, which each run
 * makes op by op as it walks the trace again: a replay holds what is live then, not one
 * op per event (a trace's ops are the events of its device that allocate and free). */
struct mt_sim_input {
	struct mt_sim_op *ops;	      /* NULL with a trace */
	const struct mt_trace *trace; /* NULL with ops; it must outlive the input */
	uint8_t device;
	struct mt_sim_op then; /* with a trace and then_too: one more op after the trace's */
	bool then_too;
	size_t nops, frees, releases; /* ops, and how many are frees and releases */
	struct mt_sim_place *places;  /* a PyTorch snapshot's segments, in the job's order */
	size_t nplaces;
	uint64_t final_segments; /* reserved at the end as the trace says (0: unknown) */
	bool blocks;		 /* the trace's allocations are a caching allocator's blocks */
	bool releases_are_frees; /* its segment frees are the job's releases (a PyTorch snapshot) */
};

struct mt_sim_sample {
	uint64_t op, reserved, allocated, requested, largest_free;
};

struct mt_sim_result {
	struct mt_cache_stats stats; /* at the end, with peak reserved */
	uint64_t peak_allocated, peak_requested;
	uint64_t ooms, first_oom; /* allocations that failed (first_oom: its op index) */
	double ns_per_op;
	struct mt_sim_sample samples[MT_SIM_SAMPLES];
	size_t nsamples;
};

/* A snapshot's own allocator_settings (its torch.* INFO lines) in PYTORCH_CUDA_ALLOC_CONF's
 * syntax: expandable segments, max_split_size, and roundup_power2_divisions where one value
 * holds for every interval; "" where there are none (other settings are not modelled). */
void mt_sim_job_conf(const struct mt_trace *t, char *out, size_t n);
/* memtap's own caching allocator's settings, as the trace noted them when it started
 * ("memtap.allocator DEVICE start SETTINGS", in mt_cache_configure's syntax: its policy
 * whole); "" where the job had none. */
void mt_sim_memtap_conf(const struct mt_trace *t, char *out, size_t n);
/* The lowest device the trace allocated on (a snapshot taken on cuda:1 alone), else 0. */
int mt_sim_first_device(const struct mt_trace *t);
/* The device's allocations and frees in `t` (its caching allocator's blocks when it has
 * them, else every device allocation), then `then` (NULL: nothing more), and a PyTorch
 * snapshot's segments: one walk of `t` counts them. 0 or ENOMEM. */
int mt_sim_input(const struct mt_trace *t, uint8_t device, const struct mt_sim_op *then, struct mt_sim_input *in);
void mt_sim_input_free(struct mt_sim_input *in);
/* The sequence through config `c` on a device of `capacity` bytes (0: MT_CACHE_DEVICE_MAX,
 * more than any device holds: the engine's work stays bounded by what a device could hold,
 * memtap-vmm's pages included). An allocation that fails is skipped, with its free. Each
 * engine call is timed (ns_per_op) only when `timed`: two clock reads an op were a
 * quarter of a diagnosis. 0, ENOMEM or EINVAL. */
int mt_sim_run(const struct mt_sim_input *in, const struct mt_cache_config *c, uint64_t capacity, bool timed,
	       struct mt_sim_result *r);
/* The same for n setups at once, results[k] for setups[k]: one walk of a trace serves
 * them all. */
struct mt_sim_setup {
	const struct mt_cache_config *config;
	uint64_t capacity;
};
int mt_sim_runs(const struct mt_sim_input *in, size_t n, const struct mt_sim_setup *setups, bool timed,
		struct mt_sim_result *results);
/* The smallest capacity, to `step` bytes, at which no allocation fails: bisection between
 * the peak allocated and the peak reserved without a limit. */
int mt_sim_min_capacity(const struct mt_sim_input *in, const struct mt_cache_config *c, uint64_t step,
			uint64_t *capacity);

#endif
