/* memtap plan: will a training job fit, and what to change so it does (core/plan.h).
 * From a description, a DeepSpeed config, or a measured run that calibrates the model. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/plan.h"
#include "core/text.h"
#include "analyze/plan_replay.h"
#include "analyze/report.h"
#include "cli.h"
#include "plan/config.h"
#include "core/path.h"
#include "core/units.h"
#include "reader/file.h"

static const char plan_usage[] =
    "usage: memtap plan [--model config.json|DIR] [MODEL] [SETUP] [--deepspeed FILE] [--gpu-mem SIZE|GPU] [--json]\n"
    "       memtap plan TRACE [MODEL] [SETUP of the run] [--what-if SETUP] [--gpu-mem SIZE|GPU] [--json]\n"
    "       memtap plan --estimator deepspeed-zero2|deepspeed-zero3|megatron [MODEL] [SETUP] [--json]\n"
    "Device memory per GPU of a training job, by component, at its peak. Counts take k, M, B, T\n"
    "(powers of 1000); sizes take GiB/GB (80GiB = 80 x 2^30 bytes, 80GB = 80 x 10^9).\n"
    "MODEL: a Hugging Face config.json (--model), an architecture (--layers N --hidden N --heads N\n"
    "--vocab N and the options below: a GPT-style decoder with biases and learned positions\n"
    "unless they say otherwise), or parameter counts alone (--params N [--largest-layer N]).\n"
    "--seq N --micro-batch N add the activations; without them, model states only. Options\n"
    "given override --model and --deepspeed. FRAMEWORK OVERHEAD (CUDA context, library\n"
    "workspaces, the allocator's cache) is --overhead SIZE, or learned from a measured run.\n"
    "A MEASURED RUN: TRACE is a memtap trace of the job, described by the options before\n"
    "--what-if; its composition at the peak calibrates the model (and what no component\n"
    "holds becomes framework overhead), and the options after --what-if change the setup.\n";

static const char plan_usage_own[] =
    "  --model FILE|DIR    a Hugging Face config.json (or a folder with one): the architecture\n"
    "  --deepspeed FILE    the setup a DeepSpeed config describes, read as DeepSpeed reads it\n"
    "  --device N          the measured device whose peak to use (default: the highest peak)\n"
    "  --gpu-mem SIZE|GPU  whether it fits, the largest micro-batch and the fewest GPUs that do;\n";
static const char plan_usage_after_gpus[] =
    "  --reserved          also the caching allocator's reserved peak: the modeled step's\n"
    "                      allocations replayed through PyTorch's native policy (memtap replay)\n"
    "  --json              the same as JSON (docs/PLAN.md)\n"
    "  --lua               the model and setup as a memtap.plan{} table, for a job's policy\n"
    "                      (which reads no config file)\n"
    "  --estimator deepspeed-zero2|deepspeed-zero3   DeepSpeed's estimate_zero*_all_cold table\n"
    "  --estimator megatron   Megatron-LM's theoretical memory (--zero 1 = distributed optimizer)\n";

/* The GPUs --gpu-mem knows by name, with their total device memory as nvidia-smi reports
 * it, MiB, and their compute capability x 10. */
#define GPUS(X)                                                                                                        \
	X("a100-40gb", 40960, 80)                                                                                      \
	X("a100-80gb", 81920, 80)                                                                                      \
	X("h100", 81559, 90)                                                                                           \
	X("h200", 143771, 90)                                                                                          \
	X("v100-16gb", 16384, 70)                                                                                      \
	X("v100-32gb", 32768, 70)                                                                                      \
	X("l4", 23034, 89)                                                                                             \
	X("a10", 23028, 86)                                                                                            \
	X("l40s", 46068, 89)                                                                                           \
	X("rtx4090", 24564, 89)
#define GPU_NAME(name, mib, arch) name,
#define GPU_MIB(name, mib, arch) mib,
#define GPU_ARCH(name, mib, arch) arch,
const char *const plan_gpus[] = {GPUS(GPU_NAME) NULL};
static const uint64_t gpu_mib[] = {GPUS(GPU_MIB)};
static const uint64_t gpu_arch[] = {GPUS(GPU_ARCH)};
#undef GPU_NAME
#undef GPU_MIB
#undef GPU_ARCH

/* The usage, the planner's options from their table, then the command's own */
void plan_help(FILE *f)
{
	fputs(plan_usage, f);
	fprintf(f, "OPTIONS (a memtap.plan{} table takes the same names with '_'):\n");
	for (const struct mt_plan_option *o = mt_plan_options; o->name; o++) {
		char name[48];
		size_t i;
		for (i = 0; o->name[i] && i < sizeof name - 1; i++)
			name[i] = o->name[i] == '_' ? '-' : o->name[i];
		name[i] = '\0';
		fprintf(f, "  --%-18s %s\n", name, o->help);
	}
	fputs(plan_usage_own, f);
	fputs("                      GPU:", f);
	for (size_t i = 0; plan_gpus[i]; i++)
		fprintf(f, " %s", plan_gpus[i]);
	fprintf(f, "\n%s", plan_usage_after_gpus);
}

static uint64_t count(const char *opt, const char *text)
{
	uint64_t v;

	if (!mt_plan_parse_count(text, &v))
		die(EXIT_USAGE, "%s takes a whole non-negative count, not '%s'", opt, text);
	return v;
}

static double gib(double bytes)
{
	return bytes / (1024.0 * 1024 * 1024);
}

const char *const plan_estimators[] = {"deepspeed-zero2", "deepspeed-zero3", "megatron", NULL};

uint64_t plan_gpu_mem(const char *text)
{
	struct mt_near near = {.word = text};
	char names[512] = "", starting[256] = "";
	size_t k = 0, ks = 0;
	uint64_t mem;

	for (size_t i = 0; plan_gpus[i]; i++) {
		if (!strcasecmp(text, plan_gpus[i]))
			return gpu_mib[i] << 20;
		mt_near_offer(&near, plan_gpus[i]);
		k += (size_t)snprintf(names + k, k < sizeof names ? sizeof names - k : 0, "%s%s", k ? ", " : "",
				      plan_gpus[i]);
		if (!strncasecmp(text, plan_gpus[i], strlen(text)))
			ks += (size_t)snprintf(starting + ks, ks < sizeof starting ? sizeof starting - ks : 0, "%s%s",
					       ks ? " or " : "", plan_gpus[i]);
	}
	if (!mt_parse_size(text, &mem) && mem >= 1u << 20)
		return mem;
	if (!mt_parse_size(text, &mem) && mem)
		die(EXIT_USAGE, "--gpu-mem %s is %s bytes: give its unit (%sGiB)", text, text, text);
	if (starting[0] || (near.best && strpbrk(text, "0123456789"))) /* GPUs' names have numbers */
		die(EXIT_USAGE, "--gpu-mem: no GPU '%s'; did you mean %s?", text, starting[0] ? starting : near.best);
	die(EXIT_USAGE, "--gpu-mem takes a size such as 80GiB or a GPU (%s), not '%s'", names, text);
}

struct plan_args {
	struct mt_plan_config c; /* as given: mt_plan_check fills in the rest on a copy */
	uint64_t mem;
	bool json, lua, reserved, gpus_given, tp_given;
	const char *ds_path; /* --deepspeed, read into ds */
	struct ds_config ds;
	bool micro_given, micro_batches_given, recompute_given; /* on the command line, over the DeepSpeed config's */
	int estimator, device;
	const char *trace;
};

/* A Hugging Face config.json (or a folder holding one) onto c's model; dtype gets its
 * torch_dtype ("" when none) */
static void hf_config_read(const char *path, struct mt_plan_config *c, char *dtype, size_t n)
{
	struct hf_config hf;
	int err = mt_plan_read_model(path, c, &hf);

	if (err)
		die(err == ENOMEM ? 1 : EXIT_USAGE, "%s", hf.err);
	snprintf(dtype, n, "%s", hf.dtype);
	fprintf(stderr, "memtap: %s: %s%s%s\n", hf.file, hf.model_type, hf.note[0] ? ": " : "", hf.note);
}

/* A DeepSpeed config file onto c, or exit with why not; its notes wait for its batch
 * sizes (ds_batch), so that a refused config is one line. */
static void ds_config_read(const char *path, const struct ds_context *x, struct mt_plan_config *c, struct ds_config *ds)
{
	int err = mt_plan_read_deepspeed(path, x, c, ds);

	if (err)
		die(err == ENOMEM ? 1 : EXIT_USAGE, "%s", ds->err);
}

/* The planner's options (core/plan_options.def) as --options, then the command's own. */
enum { O_TABLE = 256, O_DS = 512, O_MEM, O_JSON, O_LUA, O_EST, O_DEVICE, O_MODEL, O_RESERVED };

static const struct option *long_options(void)
{
	static struct option all[128];
	static char dashed[128][32];
	static const struct option own[] = {{"deepspeed", 1, 0, O_DS},	{"model", 1, 0, O_MODEL},
					    {"gpu-mem", 1, 0, O_MEM},	{"json", 0, 0, O_JSON},
					    {"lua", 0, 0, O_LUA},	{"reserved", 0, 0, O_RESERVED},
					    {"estimator", 1, 0, O_EST}, {"device", 1, 0, O_DEVICE},
					    {"help", 0, 0, 'h'},	{0, 0, 0, 0}};
	size_t k = 0;

	if (all[0].name)
		return all;
	for (const struct mt_plan_option *o = mt_plan_options; o->name; o++, k++) {
		for (size_t i = 0; i < sizeof dashed[k] - 1 && o->name[i]; i++)
			dashed[k][i] = o->name[i] == '_' ? '-' : o->name[i];
		all[k] = (struct option){dashed[k], o->kind != MT_PLAN_OPT_FLAG, 0, O_TABLE + (int)k};
	}
	memcpy(&all[k], own, sizeof own);
	return all;
}

/* Parses options onto a: the model's config.json first, then a DeepSpeed config (its
 * "auto" values resolved from the options and the model), then the options given,
 * which override both. */
static void parse(int argc, char **argv, struct plan_args *a, bool what_if)
{
	const struct option *longopts = long_options();
	struct mt_plan_config *c = &a->c, cli = *c;
	struct ds_context x = {0};
	const char *model = NULL, *deepspeed = NULL;
	char why[256], shown[64], dtype[32] = "";
	uint64_t v;
	bool quantize_given = false;
	int o;

	optind = 0;
	while ((o = next_option(argc, argv, "h", longopts, "plan")) != -1) {
		if (o == O_DS)
			deepspeed = optarg;
		else if (o == O_MODEL)
			model = optarg;
		else if (o >= O_TABLE && o < O_DS) { /* what the command line says, for "auto" */
			const struct mt_plan_option *p = &mt_plan_options[o - O_TABLE];
			if (mt_plan_set(&cli, p, optarg ? optarg : "true", p->name, why, sizeof why))
				continue; /* said in the second pass */
			if (!strcmp(p->name, "precision")) {
				x.precision_given = true;
				x.precision = cli.precision == MT_FP32 ? 0 : strstr(optarg, "fp16") ? 2 : 1;
				x.precision_text = optarg;
			}
			if (!strcmp(p->name, "zero")) {
				x.zero_given = true;
				x.zero = cli.zero;
			}
			x.micro_batch_given |= !strcmp(p->name, "micro_batch");
			x.recompute_given |= !strcmp(p->name, "recompute");
			x.micro_batches_given |= !strcmp(p->name, "micro_batches");
			quantize_given |= !strcmp(p->name, "quantize");
		}
	}
	if (model)
		hf_config_read(model, c, dtype, sizeof dtype);
	if (deepspeed) {
		x.micro_batch = cli.micro_batch;
		x.micro_batches = cli.micro_batches;
		x.hidden = c->hidden ? c->hidden : cli.hidden;
		mt_plan_ds_context_model(&x, dtype);
		ds_config_read(deepspeed, &x, c, &a->ds);
		a->ds_path = deepspeed;
		a->micro_given = x.micro_batch_given;
		a->micro_batches_given = x.micro_batches_given;
		a->recompute_given = x.recompute_given;
	}
	optind = 0;
	while ((o = next_option(argc, argv, "h", longopts, "plan")) != -1) {
		if (o >= O_TABLE && o < O_DS) {
			const struct mt_plan_option *p = &mt_plan_options[o - O_TABLE];
			snprintf(shown, sizeof shown, "--%s", longopts[o - O_TABLE].name);
			if (mt_plan_set(c, p, optarg ? optarg : "true", shown, why, sizeof why))
				die(EXIT_USAGE, "%s", why);
			if (!strcmp(p->name, "nodes") || !strcmp(p->name, "gpus_per_node"))
				a->gpus_given = true;
			a->tp_given |= !strcmp(p->name, "tp");
			continue;
		}
		switch (o) {
		case O_DS:
		case O_MODEL:
			break;
		case O_MEM:
			a->mem = plan_gpu_mem(optarg);
			for (size_t i = 0; plan_gpus[i] && !a->c.gpu_arch; i++) /* a GPU named: its architecture */
				if (!strcasecmp(optarg, plan_gpus[i]))
					a->c.gpu_arch = gpu_arch[i];
			break;
		case O_JSON:
			a->json = true;
			break;
		case O_LUA:
			a->lua = true;
			break;
		case O_RESERVED:
			a->reserved = true;
			break;
		case O_EST:
			a->estimator = choose("plan", "--estimator", optarg, plan_estimators);
			break;
		case O_DEVICE:
			if ((v = count("--device", optarg)) >= MT_MAX_DEVICES)
				die(EXIT_USAGE, "--device takes a device number below %d", MT_MAX_DEVICES);
			a->device = (int)v;
			break;
		case 'h':
			plan_help(stdout);
			exit(0);
		}
	}
	/* transformers trains a quantized model only through adapters (its Trainer refuses
	 * "purely quantized models"): the config's quantization waits for --lora-rank */
	if (model && c->quantize && !quantize_given && !c->lora_rank) {
		fprintf(stderr,
			"memtap: %s: its quantization_config applies with LoRA adapters (--lora-rank): "
			"planned unquantized\n",
			model);
		c->quantize = MT_QUANT_NONE;
	}
	if (optind < argc && (what_if || a->trace || optind + 1 < argc))
		die(EXIT_USAGE, "memtap plan takes one trace and options, not '%s' (see --help)", argv[argc - 1]);
	if (optind < argc)
		a->trace = argv[optind];
}

/* A DeepSpeed config's batch sizes as DeepSpeed derives and checks them over the GPUs
 * given (else those its batch keys imply), and what a config's micro-batch or
 * recomputation becomes without an architecture or a sequence: model states only. */
static void ds_batch(const struct plan_args *a, struct mt_plan_config *c, bool say)
{
	struct mt_plan_given given = {a->gpus_given, a->tp_given, a->micro_given, a->micro_batches_given,
				      a->recompute_given};
	uint64_t dropped;
	bool needs_micro;
	char note[512], err[512];

	if (mt_plan_deepspeed_batch(a->ds_path, &a->ds, &given, c, &needs_micro, &dropped, note, sizeof note, err,
				    sizeof err))
		die(EXIT_USAGE, "%s", err);
	if (needs_micro)
		die(EXIT_USAGE,
		    "--seq %llu needs a micro-batch: %s leaves it \"auto\" (the Hugging Face Trainer fills it from "
		    "--per_device_train_batch_size): give --micro-batch N",
		    (unsigned long long)c->seq, a->ds_path);
	if (say && a->ds.notes[0])
		fprintf(stderr, "memtap: %s: read as DeepSpeed reads it: %s\n", a->ds_path, a->ds.notes);
	if (say && a->ds.ignored[0])
		fprintf(stderr, "memtap: %s: ignoring keys that do not change the plan: %s\n", a->ds_path,
			a->ds.ignored);
	if (say && a->ds.unmodelled[0])
		fprintf(stderr, "memtap: %s: not modelled (memory counted without them): %s\n", a->ds_path,
			a->ds.unmodelled);
	if (note[0] && say)
		fprintf(stderr, "memtap: %s: %s\n", a->ds_path, note);
	if (dropped && say)
		fprintf(
		    stderr,
		    "memtap: %s: micro-batch %llu: give --seq N for its activations; model states only without it\n",
		    a->ds_path, (unsigned long long)dropped);
}

/* The description with what the architecture implies, or exit with why it is impossible;
 * say: print the notes on how a DeepSpeed config's batch was read (once per setup). */
static struct mt_plan_config checked(const struct plan_args *a, bool say)
{
	struct mt_plan_config c = a->c;
	const char *problem;

	if (a->ds_path)
		ds_batch(a, &c, say);
	if ((problem = mt_plan_check(&c)))
		die(EXIT_USAGE, "%s", problem);
	return c;
}

void plan_setup_from_text(const char *text, struct mt_plan_config *out)
{
	struct plan_args a = {.c = MT_PLAN_DEFAULTS, .estimator = -1, .device = -1};
	char *copy = strdup(text), *argv[65] = {"report --plan"}, *save = NULL;
	int argc = 1;

	for (char *w = strtok_r(copy, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
		if (argc < 64)
			argv[argc++] = w;
	parse(argc, argv, &a, true);
	free(copy); /* nothing in a points into it */
	*out = checked(&a, true);
}

/* ---- estimators as their authors print them ---- */

/* DeepSpeed's estimate_zero2/3_model_states_mem_needs_all_cold, as printed (or as JSON) */
static void deepspeed_table(int stage, const struct mt_plan_config *c, bool json)
{
	double cpu, gpu, p = (double)c->params, l = (double)c->largest_layer, f = c->buffer_factor;
	const char *sep = "";

	if (stage == 3 && !c->largest_layer)
		die(EXIT_USAGE,
		    "DeepSpeed's estimate_zero3_model_states_mem_needs_all_cold needs the largest layer's parameters "
		    "(it raises TypeError without largest_layer_params): give --largest-layer N or the architecture");
	if (json) {
		printf("{\"memtap_plan\": 1, \"estimator\": \"deepspeed-zero%d\", \"params\": %llu, ", stage,
		       (unsigned long long)c->params);
		if (stage == 3)
			printf("\"largest_layer_params\": %llu, ", (unsigned long long)c->largest_layer);
		printf("\"nodes\": %llu, \"gpus_per_node\": %llu, \"additional_buffer_factor\": %.17g, \"rows\": [",
		       (unsigned long long)c->nodes, (unsigned long long)c->gpus_per_node, f);
	} else {
		printf("Estimated memory needed for params, optim states and gradients for a:\n"
		       "HW: Setup with %llu node%s, %llu GPU%s per node.\n",
		       (unsigned long long)c->nodes, c->nodes == 1 ? "" : "s", (unsigned long long)c->gpus_per_node,
		       c->gpus_per_node == 1 ? "" : "s");
		if (stage == 2)
			printf("SW: Model with %lluM total params.\n", (unsigned long long)(p / 1e6));
		else
			printf("SW: Model with %lluM total params, %lluM largest layer params.\n",
			       (unsigned long long)(p / 1e6), (unsigned long long)(l / 1e6));
		printf("  per CPU  |  per GPU |   Options\n");
	}
	for (int offload = 1; offload >= 0; offload--)
		for (int params = stage == 3; params >= 0; params--) {
			if (!offload && params)
				continue;
			for (int zero_init = stage == 3; zero_init >= 0; zero_init--) {
				if (stage == 2)
					mt_plan_deepspeed_zero2(p, c->gpus_per_node, c->nodes, offload, f, &cpu, &gpu);
				else
					mt_plan_deepspeed_zero3(p, l, c->gpus_per_node, c->nodes, offload, params,
								zero_init, f, &cpu, &gpu);
				if (json) {
					printf("%s{\"cpu_bytes\": %.0f, \"gpu_bytes\": %.0f, \"offload_optimizer\": "
					       "\"%s\"",
					       sep, cpu, gpu, offload ? "cpu" : "none");
					if (stage == 3)
						printf(", \"offload_param\": \"%s\", \"zero_init\": %d",
						       params ? "cpu" : "none", zero_init);
					printf("}");
					sep = ", ";
				} else if (stage == 2) {
					printf(" %7.2fGB | %6.2fGB | offload_optimizer=%s\n", gib(cpu), gib(gpu),
					       offload ? "cpu " : "none");
				} else {
					printf(" %7.2fGB | %6.2fGB | offload_param=%s, offload_optimizer=%s, "
					       "zero_init=%d\n",
					       gib(cpu), gib(gpu), params ? "cpu " : "none", offload ? "cpu " : "none",
					       zero_init);
				}
			}
		}
	if (json)
		printf("]}\n");
}

/* Megatron-LM's report_theoretical_memory line, then what it assumed */
static void megatron(const struct mt_plan_config *c, bool json)
{
	struct mt_megatron m;
	double mb = 1024.0 * 1024;

	if (!c->layers)
		die(EXIT_USAGE, "the Megatron estimator needs the architecture (--layers ...)");
	if (c->fsdp || c->lora_rank || c->precision == MT_AMP16 || c->offload_optimizer || c->offload_params)
		die(EXIT_USAGE, "Megatron's estimator models neither FSDP, LoRA, autocast nor offload; memtap plan "
				"without --estimator does");
	mt_plan_megatron(c, &m);
	if (json) {
		printf("{\"memtap_plan\": 1, \"estimator\": \"megatron\", \"padded_vocab\": %llu, \"ffn_hidden_size\": "
		       "%llu, "
		       "\"total_params\": %.0f, \"active_params\": %.0f, \"most_loaded_shard_params\": %.17g, "
		       "\"weight_and_optimizer_bytes\": %.17g, \"activation_bytes\": %.17g, \"total_bytes\": %.17g}\n",
		       (unsigned long long)m.padded_vocab, (unsigned long long)m.ffn, m.total_params, m.active_params,
		       m.most_loaded, m.weights, m.activations, m.weights + m.activations);
		return;
	}
	printf("Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f MB, total=%.2f MB\n",
	       m.weights / mb, m.activations / mb, m.weights / mb + m.activations / mb);
	printf("(Megatron-LM theoretical_memory_usage.py at %s: MB = 2^20 bytes; padded vocabulary %llu; ffn %llu; "
	       "%s; %s)\n",
	       MT_MEGATRON_COMMIT, (unsigned long long)m.padded_vocab, (unsigned long long)m.ffn,
	       c->zero ? "distributed optimizer" : "18 bytes per parameter",
	       c->sp && c->recompute == MT_RECOMPUTE_SELECTIVE ? "selective recomputation with SP"
							       : "activations as without SP, plus 5%");
}

/* ---- the caching allocator's reserved memory ---- */

struct reserved {
	struct mt_plan_replay r;
	double cache, total; /* the cache at the peak; the planned total with it */
	double room;	     /* the device's bytes for the allocator (0: no --gpu-mem) */
	uint64_t ooms;	     /* allocations that failed within room: the step does not fit */
};

/* The modeled step replayed through PyTorch's allocator policy: what it reserves beyond
 * what it allocates at its peak is the cache, added to the planned peak. The device's
 * capacity (less the framework's bytes) bounds it, as a real device makes the allocator
 * free its cache and retry. When allocations fail within it, the step does not fit: the
 * figures are then the replay's without the bound, and the failures are said. */
static void replay_reserved(const struct mt_plan_config *c, const struct mt_plan *p, double mem, struct reserved *out)
{
	const char *why;

	out->room = mem > p->framework ? mem - p->framework : 0;
	if (mem > 0 && out->room < 1)
		out->room = 1; /* the framework alone fills the device: nothing is left */
	why = mt_plan_replay(c, (uint64_t)out->room, NULL, &out->r);
	if (!why && (out->ooms = out->r.ooms))
		why = mt_plan_replay(c, 0, NULL, &out->r);
	if (why)
		die(EXIT_USAGE, "--reserved: %s", why);
	out->cache = (double)(out->r.peak_reserved - out->r.peak_allocated);
	out->total = p->total + out->cache;
}

static void print_reserved(const struct reserved *x)
{
	printf("reserved by PyTorch's caching allocator at its peak (replayed, native policy): %.2f GiB\n"
	       "  the planned total and %.2f GiB of cache (the replay: %.2f GiB allocated, %.2f GiB reserved)\n",
	       gib(x->total), gib(x->cache), gib((double)x->r.peak_allocated), gib((double)x->r.peak_reserved));
	if (x->ooms)
		printf("  within the %.2f GiB --gpu-mem leaves it, %llu of the replay's allocations failed: it does "
		       "not fit "
		       "(the figures above are without that limit)\n",
		       gib(x->room), (unsigned long long)x->ooms);
}

/* ---- the plan and what to change ---- */

static double total_with(struct mt_plan_config c, const struct mt_plan_scale *s, uint64_t micro_batch, uint64_t gpus)
{
	struct mt_plan p;

	if (micro_batch)
		c.micro_batch = micro_batch;
	if (gpus) {
		c.nodes = 1;
		c.gpus_per_node = gpus;
	}
	if (mt_plan_check(&c))
		return INFINITY;
	mt_plan_compute(&c, s, &p);
	return p.total;
}

/* The largest micro-batch that fits, 0 if none (1 to 65536). */
static uint64_t largest_micro_batch(const struct mt_plan_config *c, const struct mt_plan_scale *s, double mem)
{
	uint64_t lo = 0, hi = 65536;

	if (!c->layers || !c->seq) /* model states only: no micro-batch to size */
		return 0;
	while (lo < hi) {
		uint64_t mid = (lo + hi + 1) / 2;
		if (total_with(*c, s, mid, 0) <= mem)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* The fewest GPUs (a multiple of tp x pp, up to 65536) that fit, 0 if none. */
static uint64_t fewest_gpus(const struct mt_plan_config *c, const struct mt_plan_scale *s, double mem)
{
	for (uint64_t g = c->tp * c->pp; g <= 65536; g += c->tp * c->pp)
		if (total_with(*c, s, 0, g) <= mem)
			return g;
	return 0;
}

static void print_setup(const char *label, const struct mt_plan_config *c)
{
	char text[256];

	mt_plan_describe(c, text, sizeof text);
	printf("%s: %s\n", label, text);
}

/* The framework's named parts, those it has */
static void print_framework(const struct mt_plan *p)
{
	const struct {
		const char *name;
		double bytes;
	} parts[] = {
	    {"the CUDA context", p->context}, {"NCCL's buffers", p->nccl}, {"PyTorch's cuBLAS workspaces", p->cublas}};
	const char *sep = "    of which";

	for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
		if (parts[i].bytes > 0) {
			printf("%s %s %.2f GiB", sep, parts[i].name, gib(parts[i].bytes));
			sep = ",";
		}
	if (*sep == ',')
		printf(" (docs/PLAN.md)\n");
}

/* What the plan only approximates, a line each; as a JSON list with json */
static void print_approximations(const struct mt_plan_config *c, bool json)
{
	const char *approx[8];
	size_t n = mt_plan_approximations(c, approx, 8);

	if (json)
		printf("  \"approximations\": [");
	for (size_t i = 0; i < n; i++) {
		if (json) {
			printf("%s", i ? ", " : "");
			mt_json_str(stdout, approx[i]);
		} else {
			printf("%s%s\n", i ? "  " : "approximated (docs/PLAN.md):\n  ", approx[i]);
		}
	}
	if (json)
		printf("],\n");
}

static void print_plan(const struct mt_plan_config *c, const struct mt_plan_scale *s, const struct mt_plan *p,
		       double mem)
{
	double table[4][3];

	printf("per GPU at its peak (%s), GiB = 2^30 bytes%s:\n", p->moment,
	       s ? ", projected from the measurement" : "");
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		printf("  %-12s %10.2f GiB\n", mt_plan_component_names[j], gib(p->bytes[j]));
	if (p->framework > 0)
		printf("  %-12s %10.2f GiB\n", "framework", gib(p->framework));
	print_framework(p);
	printf("  %-12s %10.2f GiB\n", "total", gib(p->total));
	print_approximations(c, false);
	if (p->paged > 0)
		printf("paged optimizer state, in CUDA managed memory outside the total (on the GPU while there is "
		       "room, evicted to the host when not): %.2f GiB\n",
		       gib(p->paged));
	if (p->cpu > 0)
		printf("host memory per node for what is offloaded: %.2f GiB\n", gib(p->cpu));
	if (p->nvme > 0)
		printf("NVMe per node for what is offloaded: %.2f GiB\n", gib(p->nvme));
	if (c->layers) {
		mt_plan_table(c, s, table);
		printf("total per GPU by ZeRO stage and recomputation (GiB):\n  %-6s %10s %10s %10s\n", "", "none",
		       "selective", "full");
		for (int z = 0; z <= 3; z++)
			printf("  ZeRO-%d %10.2f %10.2f %10.2f\n", z, gib(table[z][0]), gib(table[z][1]),
			       gib(table[z][2]));
	}
	if (mem > 0) {
		uint64_t b = largest_micro_batch(c, s, mem), g = fewest_gpus(c, s, mem);
		printf("on a %.2f GiB GPU: %s (%.2f GiB %s)\n", gib(mem), p->total <= mem ? "fits" : "does not fit",
		       gib(fabs(mem - p->total)), p->total <= mem ? "to spare" : "short");
		if (c->layers && c->seq && b)
			printf("  largest micro-batch that fits: %llu\n", (unsigned long long)b);
		else if (c->layers && c->seq)
			printf("  no micro-batch fits\n");
		if (g)
			printf("  fewest GPUs that fit: %llu\n", (unsigned long long)g);
		else
			printf("  no number of GPUs up to 65536 fits at ZeRO-%d (tp %llu, pp %llu)\n", c->zero,
			       (unsigned long long)c->tp, (unsigned long long)c->pp);
	}
}

static void json_bytes(const char *name, const double *bytes, double framework, double total)
{
	printf("  \"%s\": {", name);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		printf("\"%s\": %.0f, ", mt_plan_component_names[j], bytes[j]);
	printf("\"framework\": %.0f, \"total\": %.0f},\n", framework, total);
}

/* Every option's value, as the planner used it: "setup": {"layers": 32, "precision": "bf16", ...} */
static void print_setup_json(const struct mt_plan_config *c)
{
	const char *sep = "";
	char text[64];

	printf("  \"setup\": {");
	for (const struct mt_plan_option *o = mt_plan_options; o->name; o++, sep = ", ") {
		mt_plan_get(c, o, text, sizeof text);
		if (o->kind == MT_PLAN_OPT_COUNT || o->kind == MT_PLAN_OPT_SIZE || o->kind == MT_PLAN_OPT_REAL ||
		    o->kind == MT_PLAN_OPT_ZERO || o->kind == MT_PLAN_OPT_FLAG)
			printf("%s\"%s\": %s", sep, o->name, text);
		else
			printf("%s\"%s\": \"%s\"", sep, o->name, text);
	}
	printf("},\n");
}

/* The options that differ from the planner's defaults, as a table memtap.plan{} takes. */
static void print_lua(const struct mt_plan_config *c)
{
	const struct mt_plan_config none = MT_PLAN_DEFAULTS;
	const char *sep = "";
	char text[64], was[64];

	printf("{");
	for (const struct mt_plan_option *o = mt_plan_options; o->name; o++) {
		mt_plan_get(c, o, text, sizeof text);
		mt_plan_get(&none, o, was, sizeof was);
		if (!strcmp(text, was))
			continue;
		if (o->kind == MT_PLAN_OPT_COUNT || o->kind == MT_PLAN_OPT_SIZE || o->kind == MT_PLAN_OPT_REAL ||
		    o->kind == MT_PLAN_OPT_ZERO || o->kind == MT_PLAN_OPT_FLAG)
			printf("%s%s = %s", sep, o->name, text);
		else
			printf("%s%s = \"%s\"", sep, o->name, text);
		sep = ", ";
	}
	printf("}\n");
}

static void print_json(const struct mt_plan_config *c, const struct mt_plan_scale *s, const struct mt_plan *p,
		       double mem, const struct reserved *x)
{
	double table[4][3];

	printf("  \"params\": %llu,\n  \"largest_layer_params\": %llu,\n  \"trainable_params\": %llu,\n"
	       "  \"expert_params\": %llu,\n  \"dp\": %llu,\n  \"moment\": \"%s\",\n",
	       (unsigned long long)c->params, (unsigned long long)c->largest_layer, (unsigned long long)c->trainable,
	       (unsigned long long)c->expert_params, (unsigned long long)p->dp, p->moment);
	print_setup_json(c);
	json_bytes("per_gpu_bytes", p->bytes, p->framework, p->total);
	printf("  \"paged_optimizer_bytes\": %.0f,\n", p->paged);
	print_approximations(c, true);
	printf("  \"framework_bytes\": {\"cuda_context\": %.0f, \"nccl\": %.0f, \"cublas_workspaces\": %.0f},\n",
	       p->context, p->nccl, p->cublas);
	if (x)
		printf(
		    "  \"reserved\": {\"total_bytes\": %.0f, \"cache_bytes\": %.0f, \"replay_allocated_bytes\": %llu, "
		    "\"replay_reserved_bytes\": %llu, \"failed_within_gpu_mem\": %llu},\n",
		    x->total, x->cache, (unsigned long long)x->r.peak_allocated, (unsigned long long)x->r.peak_reserved,
		    (unsigned long long)x->ooms);
	printf("  \"layer_activation_bytes\": %.0f,\n", c->layers ? mt_plan_layer_activations(c) : 0.0);
	printf("  \"cpu_bytes_per_node\": %.0f,\n  \"nvme_bytes_per_node\": %.0f,\n  \"table\": [", p->cpu, p->nvme);
	mt_plan_table(c, s, table);
	for (int z = 0, first = 1; z <= 3 && c->layers; z++)
		for (int r = 0; r < 3; r++, first = 0)
			printf(isinf(table[z][r]) ? "%s{\"zero\": %d, \"recompute\": \"%s\", \"total_bytes\": null}"
						  : "%s{\"zero\": %d, \"recompute\": \"%s\", \"total_bytes\": %.0f}",
			       first ? "" : ", ", z, mt_plan_recompute_names[r], table[z][r]);
	printf("]");
	if (mem > 0)
		printf(",\n  \"gpu_mem_bytes\": %.0f,\n  \"fits\": %s,\n  \"largest_micro_batch\": %llu,\n"
		       "  \"fewest_gpus\": %llu",
		       mem, p->total <= mem ? "true" : "false", (unsigned long long)largest_micro_batch(c, s, mem),
		       (unsigned long long)fewest_gpus(c, s, mem));
	printf("\n}\n");
}

/* ---- a measured run ---- */

struct measured {
	double bytes[MT_PLAN_COMPONENTS], other, peak;
	int device;
	bool damaged;
};

static void measure(const char *path, int device, struct measured *m)
{
	struct mt_trace t;
	struct mt_report r;

	m->damaged = read_trace(path, &t);
	if (mt_report_build(&r, &t, &(struct mt_report_options){0}))
		die(1, "out of memory while reading %s", path);
	if ((m->device = mt_report_measured(&r, device, m->bytes, &m->other)) < 0)
		die(1,
		    "%s: nothing at the peak of %s is known as parameters, gradients, optimizer state or activations "
		    "(no NVTX phases or memtap tags): a measured plan needs them",
		    path, device < 0 ? "any device" : "that device");
	m->peak = (double)r.end.dev[m->device].peak;
	mt_report_free(&r);
	mt_trace_free(&t);
}

/* What a measured number of bytes per parameter is made of. */
static const char *explain(enum mt_component j, double per_param)
{
	static const struct {
		enum mt_component j;
		double bytes;
		const char *text;
	} known[] = {{MT_PLAN_PARAMS, 2, "16-bit values"},
		     {MT_PLAN_PARAMS, 4, "fp32 values"},
		     {MT_PLAN_PARAMS, 6, "16-bit values and an fp32 copy"},
		     {MT_PLAN_OPTIMIZER, 2, "8-bit Adam moments"},
		     {MT_PLAN_OPTIMIZER, 4, "SGD momentum or fp32 master weights"},
		     {MT_PLAN_OPTIMIZER, 6, "8-bit Adam moments plus fp32 master weights"},
		     {MT_PLAN_OPTIMIZER, 8, "fp32 Adam moments, or SGD momentum plus fp32 master weights"},
		     {MT_PLAN_OPTIMIZER, 12, "fp32 Adam moments plus fp32 master weights"},
		     {MT_PLAN_OPTIMIZER, 16, "fp32 Adam moments, master weights and gradients"}};

	if (per_param < 0.01)
		return "none at the peak";
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (known[i].j == j && fabs(per_param - known[i].bytes) <= 0.02 * known[i].bytes)
			return known[i].text;
	return "not a layout memtap knows";
}

static void print_measured(const char *path, const struct measured *m, const struct mt_plan_config *run)
{
	struct mt_plan_scale s;
	double total = run->overhead;

	mt_plan_calibrate(run, m->bytes, m->other, &s);
	printf("measured: %s, device %d, peak %.2f GiB\n", path, m->device, gib(m->peak));
	print_setup("the run", run);
	printf("at the peak, GiB = 2^30 bytes:     measured  estimated      gap (the model at its %s)\n", s.moment);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++) {
		total += s.at[j];
		printf("  %-30s %10.2f %10.2f", mt_plan_component_names[j], gib(m->bytes[j]), gib(s.at[j]));
		if (s.at[j] > 0)
			printf(" %+7.1f%%", 100 * (m->bytes[j] - s.at[j]) / s.at[j]);
		else
			printf(" %8s", "");
		if (j == MT_PLAN_PARAMS || j == MT_PLAN_OPTIMIZER) {
			double per = m->bytes[j] / mt_plan_params_on_gpu(run, (enum mt_component)j);
			printf("  %.2f bytes/param: %s", per, explain((enum mt_component)j, per));
		}
		printf("\n");
	}
	printf("  %-30s %10.2f %10s\n", "other (framework, untagged)", gib(m->other), "-");
	printf("  %-30s %10.2f %10.2f (%s)\n", "total", gib(m->peak), gib(total), s.moment);
}

static void print_measured_json(const char *path, const struct measured *m, const struct mt_plan_config *run)
{
	struct mt_plan est;
	struct mt_plan_scale s;

	mt_plan_compute(run, NULL, &est);
	printf("  \"measured\": {\"trace\": ");
	mt_json_str(stdout, path);
	printf(", \"device\": %d, \"peak_bytes\": %.0f, \"bytes\": {", m->device, m->peak);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		printf("\"%s\": %.0f, ", mt_plan_component_names[j], m->bytes[j]);
	printf("\"other\": %.0f}, \"bytes_per_param\": {\"params\": %.4f, \"optimizer\": %.4f}},\n", m->other,
	       m->bytes[MT_PLAN_PARAMS] / mt_plan_params_on_gpu(run, MT_PLAN_PARAMS),
	       m->bytes[MT_PLAN_OPTIMIZER] / mt_plan_params_on_gpu(run, MT_PLAN_OPTIMIZER));
	json_bytes("estimated_at_run_bytes", est.bytes, est.framework, est.total);
	mt_plan_calibrate(run, m->bytes, m->other, &s);
	printf("  \"compared_at\": ");
	mt_json_str(stdout, s.moment);
	printf(",\n");
}

int cmd_plan(int argc, char **argv)
{
	struct plan_args run = {.c = MT_PLAN_DEFAULTS, .estimator = -1, .device = -1}, target;
	struct mt_plan_config c, rc;
	struct mt_plan_scale scale, *s = NULL;
	struct measured m;
	struct reserved x;
	struct mt_plan p;
	int split = argc;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--what-if")) {
			split = i;
			break;
		}
	parse(split, argv, &run, false);
	target = run;
	if (split < argc)
		parse(argc - split, argv + split, &target, true);
	if (split < argc && !run.trace)
		die(EXIT_USAGE, "--what-if projects a measured run: give its trace first (see --help)");
	rc = checked(&run, split < argc); /* without --what-if, target is run: said once */
	c = checked(&target, true);
	if (target.lua) { /* as given, DeepSpeed's batch derived: nothing a field changed later derives */
		struct mt_plan_config given = target.c;
		if (target.ds_path)
			ds_batch(&target, &given, false);
		print_lua(&given);
		return 0;
	}
	if (target.estimator == 2) {
		megatron(&c, target.json);
		return 0;
	}
	if (target.estimator >= 0) {
		deepspeed_table(target.estimator == 0 ? 2 : 3, &c, target.json);
		return 0;
	}
	if (run.trace) {
		measure(run.trace, run.device, &m);
		mt_plan_calibrate(&rc, m.bytes, m.other, &scale);
		s = &scale;
	}
	mt_plan_compute(&c, s, &p);
	if (target.reserved)
		replay_reserved(&c, &p, (double)target.mem, &x);
	if (target.json) {
		printf("{\n  \"memtap_plan\": 1,\n");
		if (s)
			print_measured_json(run.trace, &m, &rc);
		print_json(&c, s, &p, (double)target.mem, target.reserved ? &x : NULL);
	} else {
		if (s) {
			print_measured(run.trace, &m, &rc);
			if (split < argc)
				print_setup("what if", &c);
		} else {
			printf("model: %.1fM parameters (%llu), largest layer %.1fM\n", (double)c.params / 1e6,
			       (unsigned long long)c.params, (double)c.largest_layer / 1e6);
			print_setup("setup", &c);
		}
		print_plan(&c, s, &p, (double)target.mem);
		if (target.reserved)
			print_reserved(&x);
	}
	return s && m.damaged ? EXIT_DAMAGED : 0;
}
