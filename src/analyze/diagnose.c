/* What to change so that it fits (diagnose.h): the cause from the report's evidence, the
 * changes from the allocator's replay, the leak scan and the calibrated planner. */
#include "analyze/diagnose.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/plan_replay.h"
#include "analyze/simulate.h"
#include "core/array.h"

const char *const mt_cause_names[MT_CAUSE_COUNT] = {
    [MT_CAUSE_STEP] = "step",	      [MT_CAUSE_OPTIMIZER] = "optimizer_state",
    [MT_CAUSE_GROWTH] = "growth",     [MT_CAUSE_CHECKPOINT] = "checkpoint",
    [MT_CAUSE_POOLS] = "graph_pools", [MT_CAUSE_FRAGMENTATION] = "fragmentation",
    [MT_CAUSE_CACHE] = "cache",	      [MT_CAUSE_OUTSIDE] = "outside_allocator"};
const char *const mt_cause_words[MT_CAUSE_COUNT] = {
    [MT_CAUSE_STEP] = "the step needs more than the device",
    [MT_CAUSE_OPTIMIZER] = "the optimizer's state, made at the first step, leaves the next no room",
    [MT_CAUSE_GROWTH] = "memory grew across iterations",
    [MT_CAUSE_CHECKPOINT] = "a checkpoint loaded onto the device beside the model",
    [MT_CAUSE_POOLS] = "CUDA graphs' private pools",
    [MT_CAUSE_FRAGMENTATION] = "fragmentation",
    [MT_CAUSE_CACHE] = "the allocator's cache",
    [MT_CAUSE_OUTSIDE] = "memory outside what memtap saw"};
const char *const mt_growth_names[MT_GROWTH_COUNT] = {
    [MT_GROWTH_KEPT] = "kept", [MT_GROWTH_OUTPUT] = "output_kept", [MT_GROWTH_GRAPH] = "graph_kept"};
const char *const mt_growth_words[MT_GROWTH_COUNT] = {
    [MT_GROWTH_KEPT] = "something the code keeps every iteration (a list, a cache, a history)",
    [MT_GROWTH_OUTPUT] = "a forward's output kept every step after its backward: a loss or an output summed or "
			 "stored without .item() or .detach()",
    [MT_GROWTH_GRAPH] = "a forward no backward followed kept with its autograd graph, and the activations it "
			"saved: evaluation or inference without torch.no_grad(), its outputs or losses kept"};
const char *const mt_fix_names[MT_FIX_COUNT] = {[MT_FIX_ALLOCATOR] = "allocator",
						[MT_FIX_LEAK] = "leak",
						[MT_FIX_CHECKPOINT] = "checkpoint",
						[MT_FIX_POOLS] = "graph_pools",
						[MT_FIX_MICRO_BATCH] = "micro_batch",
						[MT_FIX_RECOMPUTE] = "recompute",
						[MT_FIX_PRECISION] = "precision",
						[MT_FIX_OPTIMIZER] = "optimizer",
						[MT_FIX_OFFLOAD] = "offload",
						[MT_FIX_ZERO] = "zero",
						[MT_FIX_FSDP] = "fsdp",
						[MT_FIX_LORA] = "lora",
						[MT_FIX_SEQUENCE] = "sequence",
						[MT_FIX_GPUS] = "gpus"};

/* The bytes the job could use: the capacity less what no hook saw. */
static double room(const struct mt_diagnosis *g)
{
	return (double)(g->capacity > g->outside ? g->capacity - g->outside : 0);
}

static struct mt_remedy *add(struct mt_diagnosis *g, enum mt_fix kind, double allocated, double reserved,
			     const char *cost, const char *how)
{
	struct mt_remedy *m;

	if (g->nremedies == MT_REMEDIES)
		return NULL;
	m = &g->remedy[g->nremedies++];
	*m = (struct mt_remedy){.kind = kind, .allocated = allocated, .reserved = reserved, .cost = cost, .how = how};
	m->fits = reserved <= room(g);
	return m;
}

/* ---- the cause ---- */

/* The bytes the leaks on device d grew by, and the stack that grew most. */
static uint64_t leaked(const struct mt_report *r, uint8_t d, uint32_t *stack)
{
	uint64_t bytes = 0, most = 0;

	for (size_t i = 0; i < r->leaks.n; i++) {
		const struct mt_leak *l = &r->leaks.items[i];
		uint64_t grown = l->growth * l->iterations;
		if (l->device != d)
			continue;
		bytes += grown;
		if (grown > most)
			most = grown, *stack = l->stack;
	}
	return bytes;
}

static enum mt_growth growth(const struct mt_report *r, uint32_t stack)
{
	uint8_t after = r->comp.after_forward && stack < r->trace->nstacks ? r->comp.after_forward[stack] : 0;

	return !(after & MT_FORWARD_MADE)	? MT_GROWTH_KEPT
	       : after & MT_FORWARD_BACKWARD	? MT_GROWTH_OUTPUT
	       : after & MT_FORWARD_NO_BACKWARD ? MT_GROWTH_GRAPH
						: MT_GROWTH_KEPT;
}

/* The first cause that holds. The bytes of a leak, a checkpoint or the optimizer's state
 * are the cause only where the live bytes and the request were more than the room and
 * would have fit without them; where they were not more, the room was there but not
 * usable (fragmentation) or not the job's (outside). */
static void judge(struct mt_diagnosis *g, const struct mt_report *r, const struct mt_oom *o,
		  const struct mt_frag_oom *fo)
{
	double live = (double)(g->allocated + g->request), space = room(g);
	uint64_t optimizer = g->composition[MT_TAG_OPTIMIZER], leak = leaked(r, g->device, &g->cause_stack);
	bool over = live > space;

	if (over && leak && live - (double)leak <= space)
		g->cause = MT_CAUSE_GROWTH, g->cause_bytes = leak, g->growth = growth(r, g->cause_stack);
	else if (over && o && o->loaded && live - (double)o->loaded <= space)
		g->cause = MT_CAUSE_CHECKPOINT, g->cause_bytes = o->loaded, g->cause_stack = o->loaded_stack;
	else if (over && g->pools && live - (double)g->pools <= space)
		g->cause = MT_CAUSE_POOLS, g->cause_bytes = g->pools;
	else if (fo && fo->fits == 1 && !(g->need_estimated && g->need > space)) /* not when the step can't fit */
		g->cause = MT_CAUSE_FRAGMENTATION, g->cause_bytes = fo->state.reserved - fo->state.allocated;
	else if (g->peak && !over)
		g->cause = MT_CAUSE_CACHE, g->cause_bytes = g->reserved - g->allocated;
	else if (!g->peak && g->outside >= g->request && g->outside * 20 > g->capacity)
		g->cause = MT_CAUSE_OUTSIDE, g->cause_bytes = g->outside;
	else if (over && !g->peak && optimizer && g->boundaries <= 2 && live - (double)optimizer <= space)
		g->cause = MT_CAUSE_OPTIMIZER, g->cause_bytes = optimizer;
	else
		g->cause = MT_CAUSE_STEP;
}

/* ---- allocator settings, by replaying the recorded allocations ---- */

static const struct {
	const char *conf, *cost;
} settings[] = {
    {"expandable_segments:True",
     "no cost in one process; memory shared with another process through CUDA IPC cannot come from expandable "
     "segments"},
    {"max_split_size_mb:512", "large cached blocks are no longer split: more of them go back to the device"},
};

/* The job's caching allocator: memtap's with the settings its trace noted, or PyTorch's
 * with a snapshot's own settings. */
struct allocator {
	char memtap[400], torch[128]; /* the settings, in mt_cache_configure's syntax */
	struct mt_cache_config config;
	bool known; /* memtap can model it */
};

static void job_allocator(const struct mt_report *r, struct allocator *a)
{
	const char *bad;

	/* memtap's allocator makes segments, and only a trace with segments has a cache to
	   replay: without them the walk that looks for its settings is spared */
	if (r->kinds[MT_EV_SEGMENT_ALLOC])
		mt_sim_memtap_conf(r->trace, a->memtap, sizeof a->memtap);
	else
		a->memtap[0] = '\0';
	mt_sim_job_conf(r->trace, a->torch, sizeof a->torch);
	a->known = !mt_cache_preset(&a->config, "native") && !mt_cache_configure(&a->config, a->memtap, &bad) &&
		   !mt_cache_configure(&a->config, a->torch, &bad);
}

/* Allocator settings, each replayed on the recorded allocations in the job's room: up
 * to a failure and its request, or the whole trace for a peak. Where the job's own
 * settings already serve them all, a failure's replay is not faithful (nothing is
 * offered), and a peak's says the allocator would free its cache and fit as it is. A
 * setting that fails says the reserve it would need without a limit. One walk of the
 * trace replays the job's allocator, each setting in the room and each without a limit. */
static int allocator_remedies(struct mt_diagnosis *g, const struct mt_report *r, const struct allocator *a)
{
	enum { N = sizeof settings / sizeof *settings };
	struct mt_trace cut = *r->trace;
	struct mt_sim_op failed = {.size = g->request};
	struct mt_cache_config c[1 + N];
	struct mt_sim_setup s[1 + 2 * N];
	struct mt_sim_result *res = NULL;
	struct mt_sim_input in;
	struct mt_remedy *m;
	size_t which[N], n = 0;
	const char *bad;
	int err;

	if (!g->peak)
		cut.nevents = g->event; /* what came before the failure, then its request */
	if ((err = mt_sim_input(&cut, g->device, g->peak ? NULL : &failed, &in)))
		return err;
	if (!in.blocks) {
		g->replay = "the job's allocations are not a caching allocator's blocks";
		goto out;
	}
	if (!a->known)
		goto out;
	c[0] = a->config;
	s[0] = (struct mt_sim_setup){&c[0], (uint64_t)room(g)};
	for (size_t i = 0; i < N; i++) {
		if (strstr(a->torch, settings[i].conf) || strstr(a->memtap, settings[i].conf)) /* the job's already */
			continue;
		c[1 + n] = a->config;
		if (mt_cache_configure(&c[1 + n], settings[i].conf, &bad))
			break;
		s[1 + 2 * n] = (struct mt_sim_setup){&c[1 + n], (uint64_t)room(g)};
		s[2 + 2 * n] = (struct mt_sim_setup){&c[1 + n], 0}; /* what it would need */
		which[n++] = i;
	}
	if (!(res = malloc((1 + 2 * n) * sizeof *res)) || (err = mt_sim_runs(&in, 1 + 2 * n, s, false, res))) {
		err = res ? err : ENOMEM;
		goto out;
	}
	if (!res[0].ooms && !g->peak) {
		g->replay = "the replay of the recorded allocations does not fail where the job did";
	} else if (!res[0].ooms) {
		if ((m = add(g, MT_FIX_ALLOCATOR, (double)res[0].peak_allocated, (double)res[0].stats.peak_reserved,
			     "nothing to change", "replayed")))
			snprintf(m->change, sizeof m->change,
				 "nothing: at this capacity the allocator frees its cache and retries, and every "
				 "allocation is served");
		goto out;
	}
	for (size_t k = 0; k < n && !g->replay; k++) {
		const struct mt_sim_result *at = &res[1 + 2 * k], *unbounded = &res[2 + 2 * k];
		size_t i = which[k];

		if (!(m = add(g, MT_FIX_ALLOCATOR, (double)at->peak_allocated, (double)at->stats.peak_reserved,
			      settings[i].cost, "replayed")))
			continue;
		m->fits = m->fits && !at->ooms;
		if (!g->peak && !g->step_finished && r->leaks.boundaries) { /* the first step, known to be */
			m->fits = false;
			m->cost =
			    "it serves this request, but the first step had not finished: the rest of the step is "
			    "not known (give --plan)";
		}
		if (at->ooms)
			m->reserved = (double)unbounded->stats.peak_reserved;
		if (a->memtap[0])
			snprintf(m->change, sizeof m->change, "memtap's allocator with -O alloc_conf=%s",
				 settings[i].conf);
		else
			snprintf(m->change, sizeof m->change, "PYTORCH_CUDA_ALLOC_CONF=%s%s%s", a->torch,
				 a->torch[0] ? "," : "", settings[i].conf);
		snprintf(m->options, sizeof m->options, "%s", settings[i].conf);
	}
out:
	free(res);
	mt_sim_input_free(&in);
	return err == EINVAL ? 0 : err;
}

/* ---- the training setup, by the calibrated planner ---- */

struct planner {
	const struct mt_plan_config *run;
	struct mt_plan_scale scale;
	bool cached;  /* the job had a caching allocator: its cache is added */
	double cache; /* ... as measured at the peak, where the step cannot be replayed */
	double room;  /* the job's room on the device, less what a caching allocator leaves unusable */
	const struct mt_cache_config *allocator; /* ... its settings, for the step's replay */
};

/* The setup `w` planned: false when it is not a setup the planner takes, or when its
 * allocated bytes alone are over `bound` (the cache's replay is then not run). Where the
 * job had a caching allocator, the planner's step is replayed through it in the room:
 * *fails when some allocation fails there (the reserve is then the replay's without a
 * limit), as the job would at the limit with its cache given back. */
static bool plan(const struct planner *p, struct mt_plan_config w, double bound, double *allocated, double *reserved,
		 bool *fails)
{
	struct mt_plan est;
	struct mt_plan_replay rp;

	*fails = false;
	if (mt_plan_check(&w))
		return false;
	mt_plan_compute(&w, &p->scale, &est);
	*allocated = *reserved = est.total;
	if (est.total > bound)
		return false;
	if (!p->cached)
		return true;
	if (mt_plan_replay(&w, (uint64_t)fmax(p->room - p->scale.other, 1), p->allocator, &rp)) {
		*reserved += p->cache;
		return true;
	}
	if ((*fails = rp.ooms > 0) && mt_plan_replay(&w, 0, p->allocator, &rp)) /* what it would need */
		return true;
	*reserved += (double)(rp.peak_reserved - rp.peak_allocated);
	return true;
}

/* Whether `w` fits the room, with its cache. */
static bool fits(const struct planner *p, const struct mt_plan_config *w)
{
	double allocated, reserved;
	bool fails;

	return plan(p, *w, p->room, &allocated, &reserved, &fails) && reserved <= p->room && !fails;
}

static struct mt_remedy *try(struct mt_diagnosis *g, const struct planner *p, const struct mt_plan_config *w,
			     enum mt_fix kind, const char *cost)
{
	double allocated, reserved;
	struct mt_remedy *m;
	bool fails;

	if (!plan(p, *w, INFINITY, &allocated, &reserved, &fails) ||
	    !(m = add(g, kind, allocated, reserved, cost, "planned")))
		return NULL;
	m->fits = reserved <= p->room && !fails;
	return m;
}

/* The largest n up to hi for which the setup with the field at `field` set to n x unit
 * fits (0: none), by bisection: more of it never needs less. */
static uint64_t largest(const struct planner *p, size_t field, uint64_t hi, uint64_t unit)
{
	struct mt_plan_config w = *p->run;
	uint64_t lo = 0;

	while (lo < hi) {
		uint64_t mid = (lo + hi + 1) / 2;
		*(uint64_t *)((char *)&w + field) = mid * unit;
		if (fits(p, &w))
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* The largest divisor of the run's micro-batch that fits (1 when none does): the global
 * batch stays whole with accumulation. */
static void micro_batch(struct mt_diagnosis *g, const struct planner *p)
{
	const struct mt_plan_config *c = p->run;
	struct mt_plan_config w = *c;
	uint64_t lo, m = 1;
	struct mt_remedy *x;

	if (!c->layers || !c->seq || c->micro_batch < 2)
		return;
	lo = largest(p, offsetof(struct mt_plan_config, micro_batch), c->micro_batch - 1, 1);
	for (uint64_t d = 1; d <= c->micro_batch / d; d++) /* divisors in pairs, to the square root */
		if (c->micro_batch % d == 0) {
			if (d <= lo && d > m)
				m = d;
			if (c->micro_batch / d <= lo && c->micro_batch / d > m)
				m = c->micro_batch / d;
		}
	w.micro_batch = m;
	if ((x = try(g, p, &w, MT_FIX_MICRO_BATCH, "more, smaller passes per batch: a little less throughput"))) {
		snprintf(x->change, sizeof x->change,
			 "micro-batch %llu instead of %llu, gradients accumulated over %llu of them (the same global "
			 "batch)",
			 (unsigned long long)m, (unsigned long long)c->micro_batch,
			 (unsigned long long)(c->micro_batch / m));
		snprintf(x->options, sizeof x->options, "--micro-batch %llu", (unsigned long long)m);
	}
}

/* The longest sequence, in steps of 64 tokens, that fits. */
static void sequence(struct mt_diagnosis *g, const struct planner *p)
{
	const struct mt_plan_config *c = p->run;
	struct mt_plan_config w = *c;
	struct mt_remedy *x;

	if (!c->layers || c->seq <= 64)
		return;
	w.seq = 64 * largest(p, offsetof(struct mt_plan_config, seq), (c->seq - 1) / 64, 64);
	if (w.seq &&
	    (x = try(g, p, &w, MT_FIX_SEQUENCE, "less context in each sample: what the model learns changes"))) {
		snprintf(x->change, sizeof x->change, "sequences of %llu tokens instead of %llu",
			 (unsigned long long)w.seq, (unsigned long long)c->seq);
		snprintf(x->options, sizeof x->options, "--seq %llu", (unsigned long long)w.seq);
	}
}

/* Adapters on a frozen base, then that base in 4 bits: fine-tuning's changes. */
static void lora(struct mt_diagnosis *g, const struct planner *p)
{
	static const struct {
		enum mt_quant base;
		const char *change, *options, *cost;
	} ways[] = {{MT_QUANT_NONE, "LoRA adapters of rank 16 on every linear layer, the base frozen (PEFT)",
		     "--lora-rank 16 --lora-modules all",
		     "only adapters train: a fine-tune, not pre-training, and it may learn less than a full one"},
		    {MT_QUANT_NF4,
		     "QLoRA: LoRA adapters of rank 16 on every linear layer, the frozen base in 4 bits (NF4)",
		     "--lora-rank 16 --lora-modules all --quantize nf4",
		     "only adapters train, on a base dequantized in every matrix multiply: slower, a little less "
		     "accurate"}};
	const struct mt_plan_config *c = p->run;
	struct mt_remedy *x = NULL;

	if (c->lora_rank || !c->layers || c->optimizer == MT_NO_OPTIMIZER)
		return;
	for (size_t i = 0; i < sizeof ways / sizeof *ways && !(x && x->fits); i++) {
		struct mt_plan_config w = *c;
		w.lora_rank = 16, w.quantize = ways[i].base;
		w.lora_modules = MT_LORA_Q | MT_LORA_K | MT_LORA_V | MT_LORA_O | MT_LORA_MLP;
		if ((x = try(g, p, &w, MT_FIX_LORA, ways[i].cost))) {
			snprintf(x->change, sizeof x->change, "%s", ways[i].change);
			snprintf(x->options, sizeof x->options, "%s", ways[i].options);
		}
	}
}

/* More GPUs: the fewest that fit, each number with the cheapest sharding that fits
 * there (ZeRO-1 before 3; FSDP stays FSDP). */
static void more_gpus(struct mt_diagnosis *g, const struct planner *p)
{
	const struct mt_plan_config *c = p->run;
	uint64_t step = c->tp * c->pp * (c->cp ? c->cp : 1), have = c->nodes * c->gpus_per_node;
	struct mt_plan_config w = *c;
	struct mt_remedy *x;

	for (uint64_t n = have + step; n <= 65536; n += step) {
		w.nodes = 1, w.gpus_per_node = n;
		for (w.zero = c->fsdp ? c->zero : c->zero > 1 ? c->zero : 1; w.zero <= 3 && !fits(p, &w); w.zero++)
			;
		if (w.zero > 3)
			continue;
		if ((x = try(g, p, &w, MT_FIX_GPUS, "more GPUs"))) {
			if (c->fsdp)
				snprintf(x->change, sizeof x->change, "%llu GPUs with FSDP", (unsigned long long)n);
			else
				snprintf(x->change, sizeof x->change, "%llu GPUs with ZeRO stage %d",
					 (unsigned long long)n, w.zero);
			snprintf(x->change + strlen(x->change), sizeof x->change - strlen(x->change),
				 ": the global batch %.3g times as large, unless the accumulation steps shrink as much",
				 (double)n / (double)have);
			snprintf(x->options, sizeof x->options, "--zero %d --gpus-per-node %llu", w.zero,
				 (unsigned long long)n);
		}
		return;
	}
}

static void setup_remedies(struct mt_diagnosis *g, const struct planner *p, double dp)
{
	const struct mt_plan_config *c = p->run;
	struct mt_plan_config w;
	struct mt_remedy *x;

	micro_batch(g, p);
	for (int k = MT_RECOMPUTE_SELECTIVE; k <= MT_RECOMPUTE_FULL && c->layers && c->seq; k++) {
		if ((int)c->recompute >= k && c->recompute != MT_RECOMPUTE_OP)
			continue;
		w = *c, w.recompute = (enum mt_recompute)k;
		if ((x = try(g, p, &w, MT_FIX_RECOMPUTE,
			     k == MT_RECOMPUTE_FULL
				 ? "each layer's forward run again in backward: about one more forward"
				 : "the attention's core recomputed in backward: a few percent more "
				   "compute"))) {
			snprintf(x->change, sizeof x->change, "%s activation recomputation (checkpointing)",
				 mt_plan_recompute_names[k]);
			snprintf(x->options, sizeof x->options, "--recompute %s", mt_plan_recompute_names[k]);
		}
	}
	if (c->precision == MT_FP32) { /* PyTorch's autocast, then DeepSpeed's and Megatron's mixed precision */
		static const struct {
			enum mt_precision to;
			const char *change, *option;
		} to16[] = {
		    {MT_AMP16, "bf16 autocast (torch.autocast): fp32 weights, 16-bit matrix multiplies",
		     "--precision amp-bf16"},
		    {MT_MIXED16, "bf16 with fp32 master weights (DeepSpeed's, Megatron's)", "--precision bf16"}};
		for (size_t i = 0; i < sizeof to16 / sizeof *to16; i++) {
			w = *c, w.precision = to16[i].to;
			if ((x = try(g, p, &w, MT_FIX_PRECISION,
				     "16-bit matrix multiplies (bf16 keeps fp32's range; fp16 needs loss scaling)"))) {
				snprintf(x->change, sizeof x->change, "%s", to16[i].change);
				snprintf(x->options, sizeof x->options, "%s", to16[i].option);
			}
		}
	}
	if (c->optimizer == MT_ADAM) {
		w = *c, w.optimizer = MT_ADAM8BIT;
		if ((x = try(g, p, &w, MT_FIX_OPTIMIZER,
			     "Adam's state quantized to 8 bits (bitsandbytes): another optimizer, watch the loss"))) {
			snprintf(x->change, sizeof x->change, "8-bit Adam (bitsandbytes.optim.AdamW8bit)");
			snprintf(x->options, sizeof x->options, "--optimizer adam8bit");
		}
	}
	if (c->fsdp && c->offload_params == MT_OFFLOAD_NONE && c->optimizer != MT_NO_OPTIMIZER) {
		w = *c, w.offload_params = MT_OFFLOAD_CPU;
		if ((x = try(g, p, &w, MT_FIX_OFFLOAD,
			     "FSDP's CPU offload: the parameters, gradients and optimizer's state in host memory, "
			     "each block's weights over PCIe in every forward and backward, the step on the CPU"))) {
			snprintf(x->change, sizeof x->change,
				 "FSDP's CPU offload (CPUOffloadPolicy, or FSDP1's CPUOffload(offload_params=True))");
			snprintf(x->options, sizeof x->options, "--offload-params cpu");
		}
	}
	if (!c->fsdp && c->offload_optimizer == MT_OFFLOAD_NONE && c->optimizer != MT_NO_OPTIMIZER &&
	    c->optimizer != MT_SGD) {
		w = *c, w.offload_optimizer = MT_OFFLOAD_CPU, w.zero = c->zero ? c->zero : 1;
		if ((x = try(g, p, &w, MT_FIX_OFFLOAD,
			     "the optimizer's step on the CPU: its state in host memory, the gradients and parameters "
			     "over PCIe every step"))) {
			snprintf(x->change, sizeof x->change,
				 "the optimizer's state offloaded to the CPU (DeepSpeed ZeRO-%d)", w.zero);
			snprintf(x->options, sizeof x->options, "--zero %d --offload-optimizer cpu", w.zero);
		}
		/* ZeRO-Infinity: the parameters too, gathered a layer at a time */
		if (x && !x->fits && c->offload_params == MT_OFFLOAD_NONE && !c->fsdp) {
			w.zero = 3, w.offload_params = MT_OFFLOAD_CPU;
			if ((x = try(g, p, &w, MT_FIX_OFFLOAD,
				     "the parameters and the optimizer's state in host memory, each layer's weights "
				     "over PCIe in every forward and backward"))) {
				snprintf(
				    x->change, sizeof x->change,
				    "the parameters and the optimizer's state offloaded to the CPU (DeepSpeed ZeRO-3)");
				snprintf(x->options, sizeof x->options,
					 "--zero 3 --offload-optimizer cpu --offload-params cpu");
			}
		}
	}
	for (int z = c->zero + 1; z <= 3 && dp > 1 && !c->fsdp; z++) {
		w = *c, w.zero = z;
		if ((x = try(g, p, &w, MT_FIX_ZERO,
			     z == 3
				 ? "the parameters gathered for every layer's forward and backward: more communication"
				 : "the gradients reduce-scattered instead of all-reduced"))) {
			snprintf(x->change, sizeof x->change, "ZeRO stage %d over the %.0f data-parallel GPUs", z, dp);
			snprintf(x->options, sizeof x->options, "--zero %d", z);
			if (x->fits)
				break;
		}
	}
	if (dp > 1 && !c->fsdp && c->zero < 3 && c->offload_optimizer == MT_OFFLOAD_NONE) {
		w = *c, w.fsdp = true, w.zero = 0;
		if ((x = try(g, p, &w, MT_FIX_FSDP,
			     "PyTorch's FSDP instead of DDP: each block's parameters gathered for its forward and "
			     "backward, more communication"))) {
			snprintf(x->change, sizeof x->change,
				 "FSDP (fully_shard per block, PyTorch) over the %.0f data-parallel GPUs", dp);
			snprintf(x->options, sizeof x->options, "--fsdp");
		}
	}
	lora(g, p);
	sequence(g, p);
	more_gpus(g, p);
}

/* The planner at the run's own setting, calibrated on the measured composition (the
 * peak of the steps before a failure's own, else its moment), and what the step needs
 * where it had not finished; false without --plan or a composition to calibrate on.
 * Where the step had not finished, what it had not made yet (measured below the model)
 * is the model's. */
static bool calibrate(struct mt_diagnosis *g, const struct mt_report *r, const struct allocator *a, struct planner *p,
		      double *dp)
{
	double measured[MT_PLAN_COMPONENTS], other;
	struct mt_plan est;

	*p = (struct planner){.run = r->plan, .allocator = a->known ? &a->config : NULL};
	if (!r->plan || !mt_report_components(g->measured, g->measured_total, measured, &other))
		return false;
	mt_plan_compute(r->plan, NULL, &est);
	if (!g->step_finished)
		mt_report_unfinished(&est, measured);
	mt_plan_calibrate(r->plan, measured, other, &p->scale);
	mt_plan_compute(r->plan, &p->scale, &est);
	p->cached = g->reserved > 0;
	p->cache = (double)mt_report_cache(r, g->device);
	/* under a caching allocator, the free space it could not use at the failure, and at
	 * least 2% of the room: its rounding and the order of a step's tensors are the job's,
	 * not the model's, and a change that fills the room to its last percent fails there */
	p->room = room(g) - (p->cached ? fmax((double)g->unusable, 0.02 * room(g)) : 0);
	g->planned = true;
	if (!g->step_finished && est.total > g->need)
		g->need = est.total, g->need_estimated = true;
	*dp = (double)est.dp;
	return true;
}

/* ---- each failure, each peak over the target ---- */

/* The code's own bytes, the cause's, given back: the peak without them. */
static void code_remedy(struct mt_diagnosis *g)
{
	static const struct {
		enum mt_cause cause;
		enum mt_fix fix;
		const char *change, *cost;
	} fixes[] = {
	    {MT_CAUSE_GROWTH, MT_FIX_LEAK, "stop keeping what grows every iteration (the stack above)",
	     "a change to the code that keeps it"},
	    {MT_CAUSE_CHECKPOINT, MT_FIX_CHECKPOINT,
	     "load the checkpoint to the CPU (map_location='cpu') and copy it into the model, or free it once "
	     "loaded (the stack above)",
	     "a change to the load"},
	    {MT_CAUSE_POOLS, MT_FIX_POOLS,
	     "free the graphs' pools while they are not replayed (delete the graphs; torch.compile: "
	     "torch._dynamo.reset(), or a mode without CUDA graphs), or capture them into one shared pool "
	     "(torch.cuda.graph_pool_handle())",
	     "the graphs captured again, or replayed from one pool"},
	};
	double after = g->need - (double)g->cause_bytes;

	for (size_t i = 0; i < sizeof fixes / sizeof *fixes; i++) {
		struct mt_remedy *m;
		if (fixes[i].cause != g->cause || !(m = add(g, fixes[i].fix, after, after, fixes[i].cost, "measured")))
			continue;
		m->stack = g->cause_stack;
		snprintf(m->change, sizeof m->change, "%s", fixes[i].change);
	}
}

static int diagnose(struct mt_diagnosis *g, const struct mt_report *r, const struct allocator *a,
		    const struct mt_oom *o, const struct mt_frag_oom *fo)
{
	struct planner p;
	double dp = 1;
	bool planned;
	int err = 0;

	g->need = (double)(g->allocated + g->request);
	planned = calibrate(g, r, a, &p, &dp);
	judge(g, r, o, fo);
	if (g->cause == MT_CAUSE_GROWTH || g->cause == MT_CAUSE_CHECKPOINT || g->cause == MT_CAUSE_POOLS)
		code_remedy(g);
	if (g->reserved && g->cause != MT_CAUSE_GROWTH && g->need_estimated && g->need > room(g))
		g->replay = "the step, estimated, needs more than the device: a setting that serves this request "
			    "would not serve the rest of the step";
	else if (g->reserved && g->cause != MT_CAUSE_GROWTH)
		err = allocator_remedies(g, r, a);
	if (planned && g->cause != MT_CAUSE_GROWTH)
		setup_remedies(g, &p, dp);
	return err;
}

int mt_diagnose(const struct mt_report *r, struct mt_diagnosis **out, size_t *n)
{
	struct allocator a;
	size_t cap = 0;
	int err = 0;

	*out = NULL, *n = 0;
	if (!r->noom && !r->target) /* nothing to diagnose */
		return 0;
	job_allocator(r, &a);
	for (size_t k = 0; k < r->noom && !err && *n < MT_DIAGNOSED; k++) {
		const struct mt_oom *o = &r->oom[k];
		const struct mt_event *ev = &o->ev;
		const struct mt_frag_oom *fo = mt_fragment_oom(&r->frag, o->event);
		/* what memtap saw held on the device: the live allocations, the segments whole */
		uint64_t seen = o->allocated + (fo ? fo->state.reserved - fo->state.requested : 0);
		struct mt_diagnosis *g;
		if (ev->error != 2 || ev->device == MT_NO_DEVICE)
			continue; /* not out of memory */
		if (mt_grow((void **)out, &cap, *n, sizeof **out))
			return ENOMEM;
		g = &(*out)[(*n)++];
		*g = (struct mt_diagnosis){.event = o->event,
					   .time = ev->time,
					   .device = ev->device,
					   /* a snapshot's failure says only what was free */
					   .capacity = ev->aux2	 ? ev->aux2
						       : ev->aux ? seen + ev->aux
								 : r->end.dev[ev->device].capacity,
					   .request = ev->size,
					   .allocated = o->allocated,
					   .reserved = fo ? fo->state.reserved : 0,
					   .composition = o->composition,
					   .measured = o->composition,
					   .measured_total = o->allocated,
					   .boundaries = o->iterations};
		g->step_finished = mt_oom_after_a_step(o);
		g->pools = (fo ? fo->state.pools : 0) + o->graphs;
		g->unusable = fo ? fo->state.reserved - fo->state.allocated : 0;
		if (g->step_finished && o->before)
			g->measured = o->before_composition, g->measured_total = o->before;
		if (ev->aux2 && ev->aux2 - ev->aux > seen) /* what the driver said was used, less what memtap saw */
			g->outside = ev->aux2 - ev->aux - seen;
		err = diagnose(g, r, &a, o, fo);
	}
	for (int d = 0; d < MT_MAX_DEVICES && r->target && !err; d++) {
		const struct mt_device_state *s = &r->end.dev[d];
		uint64_t held = s->peak_reserved > s->peak ? s->peak_reserved : s->peak;
		struct mt_diagnosis *g;
		bool failed = false;
		for (size_t k = 0; k < *n; k++) /* a failure there says more */
			failed |= (*out)[k].device == d;
		if (!s->peak || held <= r->target || failed)
			continue;
		if (mt_grow((void **)out, &cap, *n, sizeof **out))
			return ENOMEM;
		g = &(*out)[(*n)++];
		*g = (struct mt_diagnosis){.event = s->peak_event,
					   .time = s->peak_time,
					   .peak = true,
					   .device = (uint8_t)d,
					   .capacity = r->target,
					   .allocated = s->peak,
					   .reserved = s->peak_reserved,
					   .composition = r->composition[d],
					   .measured = r->composition[d],
					   .measured_total = s->peak,
					   .boundaries = r->leaks.boundaries,
					   .step_finished =
					       r->composition[d][MT_TAG_OPTIMIZER] > 0 || r->leaks.boundaries >= 2};
		err = diagnose(g, r, &a, NULL, NULL);
	}
	if (err) {
		free(*out);
		*out = NULL, *n = 0;
	}
	return err;
}
