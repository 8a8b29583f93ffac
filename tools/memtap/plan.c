/* memtap plan: will a training job fit, and what to change so it does (analyze/plan.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/plan.h"
#include "memtap.h"
#include "util/units.h"

static const char plan_usage[] =
	"usage: memtap plan [MODEL] [SETUP] [--gpu-mem SIZE] [--json]\n"
	"       memtap plan --estimator deepspeed-zero2|deepspeed-zero3 --params N [--largest-layer N]\n"
	"                   [--nodes N] [--gpus-per-node N]\n"
	"Device memory per GPU of a training job, by component, at its peak. Counts take k, M, B, T\n"
	"(powers of 1000); sizes take GiB/GB (80GiB = 80 x 2^30 bytes, 80GB = 80 x 10^9).\n"
	"MODEL, an architecture (GPT-style decoder, biases, learned positions):\n"
	"  --layers N --hidden N --heads N --vocab N --seq N --micro-batch N\n"
	"  --ffn N (default 4 x hidden)  --query-groups N (default heads)  --untied (output layer)\n"
	"or parameter counts alone (model states only, no activations):\n"
	"  --params N [--largest-layer N]\n"
	"SETUP:\n"
	"  --precision fp32|bf16|fp16   bf16/fp16 keep fp32 master weights (default bf16)\n"
	"  --optimizer adam|adamw|adam8bit|sgd|none   sgd: with momentum (default adamw)\n"
	"  --zero 0-3  --nodes N  --gpus-per-node N  --tp N  --pp N  --sp\n"
	"  --recompute none|selective|full   --offload-optimizer  --offload-params\n"
	"OUTPUT:\n"
	"  --gpu-mem SIZE   whether it fits, the largest micro-batch and the fewest GPUs that do\n"
	"  --json           the same as JSON (docs/PLAN.md)\n"
	"  --estimator deepspeed-zero2|deepspeed-zero3   DeepSpeed's estimate_zero*_all_cold table\n";

static uint64_t count(const char *opt, const char *text)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	switch (*end) {
	case 'k': case 'K': v *= 1e3; end++; break;
	case 'M': v *= 1e6; end++; break;
	case 'B': case 'G': v *= 1e9; end++; break;
	case 'T': v *= 1e12; end++; break;
	}
	if (errno || end == text || *end || !(v >= 0) || v > 1e18 || v != floor(v))
		die(EXIT_USAGE, "%s takes a whole non-negative count, not '%s'", opt, text);
	return (uint64_t)v;
}

static int pick(const char *opt, const char *text, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(text, names[i]))
			return i;
	die(EXIT_USAGE, "%s does not take '%s' (see memtap plan --help)", opt, text);
}

static double gib(double bytes)
{
	return bytes / (1024.0 * 1024 * 1024);
}

static const char *const precisions[] = {"fp32", "bf16", "fp16", NULL};
static const char *const optimizers[] = {"adam", "adamw", "adam8bit", "sgd", "none", NULL};
static const char *const recomputes[] = {"none", "selective", "full", NULL};

/* DeepSpeed's estimate_zero2/3_model_states_mem_needs_all_cold, as it prints them */
static void deepspeed_table(int stage, const struct mt_plan_config *c)
{
	double cpu, gpu, p = (double)c->params, l = (double)c->largest_layer;

	printf("Estimated memory needed for params, optim states and gradients for a:\n"
	       "HW: Setup with %llu node%s, %llu GPU%s per node.\n", (unsigned long long)c->nodes,
	       c->nodes == 1 ? "" : "s", (unsigned long long)c->gpus_per_node, c->gpus_per_node == 1 ? "" : "s");
	if (stage == 2) {
		printf("SW: Model with %lluM total params.\n  per CPU  |  per GPU |   Options\n",
		       (unsigned long long)(p / 1e6));
		for (int offload = 1; offload >= 0; offload--) {
			mt_plan_deepspeed_zero2(p, c->gpus_per_node, c->nodes, offload, 1.5, &cpu, &gpu);
			printf(" %7.2fGB | %6.2fGB | offload_optimizer=%s\n", gib(cpu), gib(gpu), offload ? "cpu " : "none");
		}
		return;
	}
	printf("SW: Model with %lluM total params, %lluM largest layer params.\n  per CPU  |  per GPU |   Options\n",
	       (unsigned long long)(p / 1e6), (unsigned long long)(l / 1e6));
	for (int offload = 1; offload >= 0; offload--)
		for (int params = 1; params >= 0; params--) {
			if (!offload && params)
				continue;
			for (int zero_init = 1; zero_init >= 0; zero_init--) {
				mt_plan_deepspeed_zero3(p, l, c->gpus_per_node, c->nodes, offload, params, zero_init, 1.5,
							&cpu, &gpu);
				printf(" %7.2fGB | %6.2fGB | offload_param=%s, offload_optimizer=%s, zero_init=%d\n", gib(cpu),
				       gib(gpu), params ? "cpu " : "none", offload ? "cpu " : "none", zero_init);
			}
		}
}

static double total_with(struct mt_plan_config c, int zero, int recompute, uint64_t micro_batch, uint64_t gpus)
{
	struct mt_plan p;

	c.zero = zero;
	c.recompute = recompute;
	if (micro_batch)
		c.micro_batch = micro_batch;
	if (gpus) {
		c.nodes = 1;
		c.gpus_per_node = gpus;
	}
	if (mt_plan_check(&c))
		return INFINITY;
	mt_plan_compute(&c, &p);
	return p.total;
}

/* The largest micro-batch that fits, 0 if none (1 to 65536). */
static uint64_t largest_micro_batch(const struct mt_plan_config *c, double mem)
{
	uint64_t lo = 0, hi = 65536;

	if (!c->layers)
		return 0;
	while (lo < hi) {
		uint64_t mid = (lo + hi + 1) / 2;
		if (total_with(*c, c->zero, c->recompute, mid, 0) <= mem)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* The fewest GPUs (a multiple of tp x pp, up to 65536) that fit, 0 if none. */
static uint64_t fewest_gpus(const struct mt_plan_config *c, double mem)
{
	for (uint64_t g = c->tp * c->pp; g <= 65536; g += c->tp * c->pp)
		if (total_with(*c, c->zero, c->recompute, 0, g) <= mem)
			return g;
	return 0;
}

static void print_text(const struct mt_plan_config *c, const struct mt_plan *p, double mem)
{
	const char *rows[] = {"params", "grads", "optimizer", "activations", "temporaries"};
	const double vals[] = {p->params, p->grads, p->optimizer, p->activations, p->temporaries};
	static const char *const optimizer_text[] = {"Adam/AdamW", "8-bit Adam", "SGD with momentum", "no optimizer"};

	printf("model: %.1fM parameters (%llu), largest layer %.1fM\n", (double)c->params / 1e6,
	       (unsigned long long)c->params, (double)c->largest_layer / 1e6);
	printf("setup: %s, %s, ZeRO-%d, %llu GPUs (dp %llu x tp %llu x pp %llu%s), recompute %s%s%s\n",
	       c->precision == MT_FP32 ? "fp32" : "16-bit with fp32 master weights", optimizer_text[c->optimizer],
	       c->zero, (unsigned long long)(c->nodes * c->gpus_per_node), (unsigned long long)p->dp,
	       (unsigned long long)c->tp, (unsigned long long)c->pp, c->sp ? ", sp" : "", recomputes[c->recompute],
	       c->offload_optimizer ? ", optimizer offloaded" : "", c->offload_params ? ", params offloaded" : "");
	printf("per GPU at its peak (%s), GiB = 2^30 bytes:\n", p->moment);
	for (int i = 0; i < 5; i++)
		printf("  %-12s %10.2f GiB\n", rows[i], gib(vals[i]));
	printf("  %-12s %10.2f GiB\n", "total", gib(p->total));
	if (p->cpu > 0)
		printf("host memory per node for what is offloaded: %.2f GiB\n", gib(p->cpu));
	if (c->layers) {
		printf("total per GPU by ZeRO stage and recomputation (GiB):\n  %-6s %10s %10s %10s\n", "", "none",
		       "selective", "full");
		for (int z = 0; z <= 3; z++) {
			printf("  ZeRO-%d", z);
			for (int r = 0; r < 3; r++)
				printf(" %10.2f", gib(total_with(*c, z, r, 0, 0)));
			printf("\n");
		}
	}
	if (mem > 0) {
		uint64_t b = largest_micro_batch(c, mem), g = fewest_gpus(c, mem);
		printf("on a %.2f GiB GPU: %s (%.2f GiB %s)\n", gib(mem), p->total <= mem ? "fits" : "does not fit",
		       gib(fabs(mem - p->total)), p->total <= mem ? "to spare" : "short");
		if (c->layers && b)
			printf("  largest micro-batch that fits: %llu\n", (unsigned long long)b);
		else if (c->layers)
			printf("  no micro-batch fits\n");
		if (g)
			printf("  fewest GPUs that fit: %llu\n", (unsigned long long)g);
		else
			printf("  no number of GPUs up to 65536 fits at ZeRO-%d (tp %llu, pp %llu)\n", c->zero,
			       (unsigned long long)c->tp, (unsigned long long)c->pp);
	}
}

static void print_json(const struct mt_plan_config *c, const struct mt_plan *p, double mem)
{
	printf("{\n  \"memtap_plan\": 1,\n  \"params\": %llu,\n  \"largest_layer_params\": %llu,\n  \"dp\": %llu,\n",
	       (unsigned long long)c->params, (unsigned long long)c->largest_layer, (unsigned long long)p->dp);
	printf("  \"moment\": \"%s\",\n  \"per_gpu_bytes\": {\"params\": %.0f, \"grads\": %.0f, \"optimizer\": %.0f, "
	       "\"activations\": %.0f, \"temporaries\": %.0f, \"total\": %.0f},\n", p->moment, p->params, p->grads,
	       p->optimizer, p->activations, p->temporaries, p->total);
	printf("  \"layer_activation_bytes\": %.0f,\n", c->layers ? mt_plan_layer_activations(c) : 0.0);
	printf("  \"cpu_bytes_per_node\": %.0f,\n  \"table\": [", p->cpu);
	for (int z = 0, first = 1; z <= 3 && c->layers; z++)
		for (int r = 0; r < 3; r++, first = 0)
			printf("%s{\"zero\": %d, \"recompute\": \"%s\", \"total_bytes\": %.0f}", first ? "" : ", ", z,
			       recomputes[r], total_with(*c, z, r, 0, 0));
	printf("]");
	if (mem > 0)
		printf(",\n  \"gpu_mem_bytes\": %.0f,\n  \"fits\": %s,\n  \"largest_micro_batch\": %llu,\n"
		       "  \"fewest_gpus\": %llu", mem, p->total <= mem ? "true" : "false",
		       (unsigned long long)largest_micro_batch(c, mem), (unsigned long long)fewest_gpus(c, mem));
	printf("\n}\n");
}

int cmd_plan(int argc, char **argv)
{
	enum { O_LAYERS = 256, O_HIDDEN, O_HEADS, O_GROUPS, O_FFN, O_VOCAB, O_SEQ, O_MB, O_UNTIED, O_PARAMS, O_LARGEST,
	       O_PREC, O_OPT, O_RECOMP, O_ZERO, O_NODES, O_GPN, O_TP, O_PP, O_SP, O_OFF_OPT, O_OFF_PARAMS, O_MEM,
	       O_JSON, O_EST };
	static const struct option longopts[] = {
		{"layers", 1, 0, O_LAYERS}, {"hidden", 1, 0, O_HIDDEN}, {"heads", 1, 0, O_HEADS},
		{"query-groups", 1, 0, O_GROUPS}, {"ffn", 1, 0, O_FFN}, {"vocab", 1, 0, O_VOCAB}, {"seq", 1, 0, O_SEQ},
		{"micro-batch", 1, 0, O_MB}, {"untied", 0, 0, O_UNTIED}, {"params", 1, 0, O_PARAMS},
		{"largest-layer", 1, 0, O_LARGEST}, {"precision", 1, 0, O_PREC}, {"optimizer", 1, 0, O_OPT},
		{"recompute", 1, 0, O_RECOMP}, {"zero", 1, 0, O_ZERO}, {"nodes", 1, 0, O_NODES},
		{"gpus-per-node", 1, 0, O_GPN}, {"tp", 1, 0, O_TP}, {"pp", 1, 0, O_PP}, {"sp", 0, 0, O_SP},
		{"offload-optimizer", 0, 0, O_OFF_OPT}, {"offload-params", 0, 0, O_OFF_PARAMS},
		{"gpu-mem", 1, 0, O_MEM}, {"json", 0, 0, O_JSON}, {"estimator", 1, 0, O_EST}, {"help", 0, 0, 'h'},
		{0, 0, 0, 0}};
	static const char *const estimators[] = {"deepspeed-zero2", "deepspeed-zero3", NULL};
	struct mt_plan_config c = {.precision = MT_MIXED16, .optimizer = MT_ADAM, .nodes = 1, .gpus_per_node = 1};
	struct mt_plan p;
	uint64_t mem = 0, zero;
	int o, estimator = -1;
	bool json = false;
	const char *problem;

	while ((o = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (o) {
		case O_LAYERS: c.layers = count("--layers", optarg); break;
		case O_HIDDEN: c.hidden = count("--hidden", optarg); break;
		case O_HEADS: c.heads = count("--heads", optarg); break;
		case O_GROUPS: c.query_groups = count("--query-groups", optarg); break;
		case O_FFN: c.ffn = count("--ffn", optarg); break;
		case O_VOCAB: c.vocab = count("--vocab", optarg); break;
		case O_SEQ: c.seq = count("--seq", optarg); break;
		case O_MB: c.micro_batch = count("--micro-batch", optarg); break;
		case O_UNTIED: c.untied = true; break;
		case O_PARAMS: c.params = count("--params", optarg); break;
		case O_LARGEST: c.largest_layer = count("--largest-layer", optarg); break;
		case O_PREC: c.precision = pick("--precision", optarg, precisions) ? MT_MIXED16 : MT_FP32; break;
		case O_OPT: {
			static const enum mt_optimizer map[] = {MT_ADAM, MT_ADAM, MT_ADAM8BIT, MT_SGD_MOMENTUM,
								MT_NO_OPTIMIZER};
			c.optimizer = map[pick("--optimizer", optarg, optimizers)];
			break;
		}
		case O_RECOMP: c.recompute = pick("--recompute", optarg, recomputes); break;
		case O_ZERO:
			if ((zero = count("--zero", optarg)) > 3)
				die(EXIT_USAGE, "--zero takes a stage from 0 to 3, not %s", optarg);
			c.zero = (int)zero;
			break;
		case O_NODES: c.nodes = count("--nodes", optarg); break;
		case O_GPN: c.gpus_per_node = count("--gpus-per-node", optarg); break;
		case O_TP: c.tp = count("--tp", optarg); break;
		case O_PP: c.pp = count("--pp", optarg); break;
		case O_SP: c.sp = true; break;
		case O_OFF_OPT: c.offload_optimizer = true; break;
		case O_OFF_PARAMS: c.offload_params = true; break;
		case O_MEM:
			if (mt_parse_size(optarg, &mem) || !mem)
				die(EXIT_USAGE, "--gpu-mem takes a size such as 80GiB, not '%s'", optarg);
			break;
		case O_JSON: json = true; break;
		case O_EST: estimator = pick("--estimator", optarg, estimators); break;
		case 'h': fputs(plan_usage, stdout); return 0;
		default: fputs(plan_usage, stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc)
		die(EXIT_USAGE, "memtap plan takes options only, not '%s' (see --help)", argv[optind]);
	if ((problem = mt_plan_check(&c)))
		die(EXIT_USAGE, "%s", problem);
	if (estimator >= 0) {
		deepspeed_table(estimator == 0 ? 2 : 3, &c);
		return 0;
	}
	mt_plan_compute(&c, &p);
	if (json)
		print_json(&c, &p, (double)mem);
	else
		print_text(&c, &p, (double)mem);
	return 0;
}
