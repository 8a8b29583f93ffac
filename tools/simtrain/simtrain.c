/* simtrain: the device-memory behaviour of transformer training steps, issued through
 * the CUDA runtime API with NVTX ranges around every phase and layer, so it runs on
 * simgpu or, unchanged, on a real GPU. It never touches the memory it allocates.
 * It keeps its own ledger of every allocation by category and reports that ground
 * truth (peak, composition at the peak, counts) as JSON for tests to compare with. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <getopt.h>
#include <nvtx3/nvToolsExt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtap.h"
#include "model.h"
#include "core/units.h"

#define NOINLINE __attribute__((noinline))

enum cat { CAT_PARAMS, CAT_GRADS, CAT_OPTIMIZER, CAT_ACTIVATIONS, CAT_TEMPORARIES, CAT_OTHER, NCAT };
static const char *const cat_names[NCAT] = {"params", "grads", "optimizer", "activations", "temporaries", "other"};

struct tensor {
	void *ptr;
	uint64_t bytes;
	enum cat cat;
};

static struct options {
	struct model m;
	int iters, device;
	uint64_t leak;
	int leak_from;		/* the first iteration that leaks */
	int leak_in;		/* where: LEAK_FORWARD, LEAK_OPTIMIZER or LEAK_EVAL */
	uint64_t compute_ms;	/* time each layer's forward and backward takes */
	const char *hold_until; /* after training, memory held until this file exists */
	bool async, teardown, tag;
	const char *json;
} opt = {.iters = 3, .leak_from = 1, .teardown = true};

/* The ground truth: what is live, the peak and what it was made of, and measured sizes. */
static struct ledger {
	uint64_t live[NCAT], total, peak, peak_cat[NCAT];
	int peak_iter;
	const char *peak_phase;
	uint64_t allocs, frees, live_count;
	uint64_t params_bytes, grads_bytes, optimizer_bytes, activation_bytes, layer_activation_bytes;
	bool oom;
	uint64_t oom_size;
	int oom_iter;
	const char *oom_phase;
} led;

static const char *phase = "init";
static int iteration; /* 0 during init, 1..iters while training */
static cudaStream_t stream;

static void write_json(FILE *f);

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("simtrain: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static void finish_json(void)
{
	FILE *f;

	if (!opt.json)
		return;
	f = strcmp(opt.json, "-") == 0 ? stdout : fopen(opt.json, "w");
	if (!f)
		die("cannot write %s: %s", opt.json, strerror(errno));
	write_json(f);
	if (f != stdout && fclose(f) != 0)
		die("cannot write %s: %s", opt.json, strerror(errno));
}

static NOINLINE void out_of_memory(uint64_t bytes, cudaError_t e)
{
	char sz[32];

	led.oom = true;
	led.oom_size = bytes;
	led.oom_iter = iteration;
	led.oom_phase = phase;
	fprintf(stderr, "simtrain: %s allocating %s in %s (iteration %d): %s\n", cudaGetErrorName(e),
		mt_format_size(bytes, sz, sizeof sz), phase, iteration, cudaGetErrorString(e));
	finish_json();
	exit(1);
}

static NOINLINE struct tensor tensor_new(enum cat cat, uint64_t bytes)
{
	struct tensor t = {NULL, bytes, cat};
	cudaError_t e;

	if (opt.tag) /* simtrain's categories are memtap's, in the same order */
		memtap_tag_push((int)cat + MEMTAP_PARAMS);
	e = opt.async ? cudaMallocAsync(&t.ptr, bytes, stream) : cudaMalloc(&t.ptr, bytes);
	if (opt.tag)
		memtap_tag_pop();

	if (e != cudaSuccess)
		out_of_memory(bytes, e);
	led.allocs++;
	led.live_count++;
	led.live[cat] += bytes;
	led.total += bytes;
	if (led.total > led.peak) {
		led.peak = led.total;
		memcpy(led.peak_cat, led.live, sizeof led.live);
		led.peak_iter = iteration;
		led.peak_phase = phase;
	}
	return t;
}

static NOINLINE void tensor_free(struct tensor *t)
{
	cudaError_t e;

	if (!t->ptr)
		return;
	e = opt.async ? cudaFreeAsync(t->ptr, stream) : cudaFree(t->ptr);
	if (e != cudaSuccess)
		die("freeing a %s tensor failed: %s", cat_names[t->cat], cudaGetErrorString(e));
	led.frees++;
	led.live_count--;
	led.live[t->cat] -= t->bytes;
	led.total -= t->bytes;
	t->ptr = NULL;
}

/* ---- the model's tensors ------------------------------------------------------------- */

static uint64_t nparams;
static uint64_t *numels;
static struct tensor *params, *grads, *opt_state; /* opt_state: nparams x state count */
static uint64_t nstate;

/* Saved activations of one transformer layer, in the order forward makes them
 * (Korthikanti et al., section 4.1): with 16-bit values they add up to
 * sb(18h + 4f) + 5as^2b bytes. `score` marks the attention-score tensors that selective
 * recomputation does not keep. */
enum { NACT = 15 };
struct act_shape {
	uint64_t bytes[NACT];
	bool score[NACT];
};

static struct act_shape layer_shape(const struct model *m)
{
	uint64_t e = param_elem(m), sbh = m->seq * m->batch * m->hidden, sbf = m->seq * m->batch * m->ffn;
	uint64_t ass = m->heads * m->seq * m->seq * m->batch;
	struct act_shape s = {
	    /* ln1 in, qkv in, q, k, v, softmax out, softmax dropout mask, dropout out, proj in,
	       attention dropout mask, ln2 in, fc1 in, gelu in, fc2 in, mlp dropout mask */
	    {sbh * e, sbh * e, sbh * e, sbh * e, sbh * e, ass * e, ass, ass * e, sbh * e, sbh, sbh * e, sbh * e,
	     sbf * e, sbf * e, sbh},
	    {false, false, false, false, false, true, true, true},
	};
	return s;
}

static struct tensor (*saved)[NACT]; /* per layer */
static struct tensor emb_out, lnf_in, head_in, logits;
static struct tensor *leaks;
static uint64_t nleaks;

static void push(const char *name)
{
	nvtxRangePushA(name);
}

static void pop(void)
{
	nvtxRangePop();
}

static void layer_range(uint64_t l)
{
	char name[32];

	snprintf(name, sizeof name, "layer.%llu", (unsigned long long)l);
	push(name);
}

static uint64_t first_param_of_layer(uint64_t l)
{
	return 2 + 12 * l;
}

/* ZeRO-3 keeps only a shard of each parameter; a layer's full weights are gathered
 * into a temporary buffer while the layer runs. */
static NOINLINE struct tensor gather_layer_params(uint64_t l)
{
	uint64_t n = 0;

	if (opt.m.zero < 3 || opt.m.dp <= 1)
		return (struct tensor){0};
	for (uint64_t i = first_param_of_layer(l); i < first_param_of_layer(l + 1); i++)
		n += numels[i];
	return tensor_new(CAT_TEMPORARIES, n * param_elem(&opt.m));
}

static NOINLINE void alloc_params(void)
{
	for (uint64_t i = 0; i < nparams; i++)
		params[i] = tensor_new(CAT_PARAMS, shard(&opt.m, numels[i], 3) * param_elem(&opt.m));
	led.params_bytes = led.live[CAT_PARAMS];
}

/* A tensor a buggy training loop keeps every step (leak injection): a forward's output
 * kept after its backward, a buffer the optimizer's step keeps, or an evaluation's
 * forward run without torch.no_grad() whose output (and graph) is kept. */
enum { LEAK_FORWARD, LEAK_OPTIMIZER, LEAK_EVAL };
static const char *const leak_places[] = {"forward", "optimizer", "eval"};

static NOINLINE void stash_debug_tensor(int where)
{
	if (opt.leak && iteration >= opt.leak_from && where == opt.leak_in)
		leaks[nleaks++] = tensor_new(CAT_OTHER, opt.leak);
}

static NOINLINE void embedding_forward(void)
{
	push("embedding");
	emb_out = tensor_new(CAT_ACTIVATIONS, opt.m.seq * opt.m.batch * opt.m.hidden * param_elem(&opt.m));
	stash_debug_tensor(LEAK_FORWARD);
	pop();
}

/* A layer's compute: nothing is allocated meanwhile, as on a GPU waiting for its kernels. */
static void compute(void)
{
	if (opt.compute_ms)
		usleep((useconds_t)(opt.compute_ms * 1000));
}

static NOINLINE void layer_forward(uint64_t l)
{
	struct act_shape s = layer_shape(&opt.m);
	struct tensor gathered = gather_layer_params(l);
	struct tensor scratch[NACT] = {{0}};
	struct tensor qkv_out;
	uint64_t before = led.live[CAT_ACTIVATIONS];

	layer_range(l);
	for (int i = 0; i < NACT; i++) {
		/* what recomputation does not keep is made and dropped inside the layer */
		bool keep = opt.m.recompute == RC_NONE || i == 0 || (opt.m.recompute == RC_SELECTIVE && !s.score[i]);
		if (i == 2) /* the fused QKV output, split into q, k and v */
			qkv_out = tensor_new(CAT_TEMPORARIES, 3 * s.bytes[2]);
		if (keep)
			saved[l][i] = tensor_new(CAT_ACTIVATIONS, s.bytes[i]);
		else
			scratch[i] = tensor_new(CAT_TEMPORARIES, s.bytes[i]);
		if (i == 4)
			tensor_free(&qkv_out);
	}
	for (int i = 0; i < NACT; i++)
		tensor_free(&scratch[i]);
	tensor_free(&gathered);
	compute();
	if (l == 0 && iteration == 1)
		led.layer_activation_bytes = led.live[CAT_ACTIVATIONS] - before;
	pop();
}

static NOINLINE void head_forward(void)
{
	uint64_t sb = opt.m.seq * opt.m.batch, e = param_elem(&opt.m);

	push("head");
	lnf_in = tensor_new(CAT_ACTIVATIONS, sb * opt.m.hidden * e);
	head_in = tensor_new(CAT_ACTIVATIONS, sb * opt.m.hidden * e);
	logits = tensor_new(CAT_ACTIVATIONS, sb * opt.m.vocab * 4); /* fp32 for the loss */
	pop();
}

static NOINLINE void forward(void)
{
	phase = "forward";
	push("forward");
	embedding_forward();
	for (uint64_t l = 0; l < opt.m.layers; l++)
		layer_forward(l);
	head_forward();
	if (iteration == 1)
		led.activation_bytes = led.live[CAT_ACTIVATIONS];
	pop();
}

/* Gradients appear as backward reaches each parameter and live until zero_grad. Under
 * ZeRO-2/3 each layer's full gradient is a temporary reduced into the kept shard. */
static NOINLINE void make_grads(uint64_t first, uint64_t end)
{
	struct tensor bucket = {0};
	uint64_t full = 0;

	for (uint64_t i = first; i < end; i++)
		full += numels[i];
	if (opt.m.zero >= 2 && opt.m.dp > 1)
		bucket = tensor_new(CAT_TEMPORARIES, full * param_elem(&opt.m));
	for (uint64_t i = first; i < end; i++)
		if (!grads[i].ptr)
			grads[i] = tensor_new(CAT_GRADS, shard(&opt.m, numels[i], 2) * param_elem(&opt.m));
	tensor_free(&bucket);
}

static NOINLINE void head_backward(void)
{
	uint64_t sb = opt.m.seq * opt.m.batch;
	struct tensor dlogits;

	push("head");
	dlogits = tensor_new(CAT_TEMPORARIES, sb * opt.m.vocab * 4);
	make_grads(nparams - (opt.m.untied ? 3 : 2), nparams);
	if (!opt.m.untied)
		make_grads(0, 1); /* tied: the output layer's gradient lands on the embedding */
	tensor_free(&dlogits);
	tensor_free(&logits);
	tensor_free(&head_in);
	tensor_free(&lnf_in);
	pop();
}

static NOINLINE void layer_backward(uint64_t l)
{
	struct act_shape s = layer_shape(&opt.m);
	struct tensor gathered = gather_layer_params(l);
	struct tensor recomputed[NACT] = {{0}};
	struct tensor dx, dffn;

	layer_range(l);
	for (int i = 1; i < NACT; i++)
		if (!saved[l][i].ptr)
			recomputed[i] = tensor_new(CAT_TEMPORARIES, s.bytes[i]);
	dx = tensor_new(CAT_TEMPORARIES, s.bytes[0]);
	dffn = tensor_new(CAT_TEMPORARIES, s.bytes[12]);
	make_grads(first_param_of_layer(l), first_param_of_layer(l + 1));
	tensor_free(&dffn);
	tensor_free(&dx);
	compute();
	for (int i = 0; i < NACT; i++) {
		tensor_free(&recomputed[i]);
		tensor_free(&saved[l][i]);
	}
	tensor_free(&gathered);
	pop();
}

static NOINLINE void embedding_backward(void)
{
	push("embedding");
	make_grads(0, 2);
	tensor_free(&emb_out);
	pop();
}

static NOINLINE void backward(void)
{
	phase = "backward";
	push("backward");
	head_backward();
	for (uint64_t l = opt.m.layers; l-- > 0;)
		layer_backward(l);
	embedding_backward();
	if (iteration == 1)
		led.grads_bytes = led.live[CAT_GRADS];
	pop();
}

/* Optimizer state (fp32 moments, and a master copy under mixed precision) is created
 * by the first step and kept; each update works through an fp32 temporary. */
static NOINLINE void optimizer_step(void)
{
	for (uint64_t i = 0; i < nparams; i++) {
		uint64_t n = shard(&opt.m, numels[i], 1);
		for (uint64_t k = 0; k < nstate; k++)
			if (!opt_state[i * nstate + k].ptr)
				opt_state[i * nstate + k] = tensor_new(CAT_OPTIMIZER, n * 4);
		if (nstate) {
			struct tensor update = tensor_new(CAT_TEMPORARIES, n * 4);
			tensor_free(&update);
		}
	}
	if (iteration == 1)
		led.optimizer_bytes = led.live[CAT_OPTIMIZER];
}

static NOINLINE void zero_grad(void)
{
	for (uint64_t i = 0; i < nparams; i++)
		tensor_free(&grads[i]);
}

static void optimizer(void)
{
	phase = "optimizer";
	push("optimizer");
	optimizer_step();
	stash_debug_tensor(LEAK_OPTIMIZER);
	zero_grad();
	pop();
}

/* An evaluation after the step: a forward with no backward. */
static void evaluate(void)
{
	if (opt.leak_in != LEAK_EVAL)
		return;
	push("eval");
	push("forward");
	stash_debug_tensor(LEAK_EVAL);
	pop();
	pop();
}

static NOINLINE void teardown(void)
{
	phase = "teardown";
	for (uint64_t i = 0; i < nparams * nstate; i++)
		tensor_free(&opt_state[i]);
	for (uint64_t i = 0; i < nparams; i++)
		tensor_free(&params[i]);
}

static void train(void)
{
	push("init");
	alloc_params();
	pop();
	for (iteration = 1; iteration <= opt.iters; iteration++) {
		push("iteration");
		nvtxMarkA("step");
		forward();
		backward();
		optimizer();
		evaluate();
		if (opt.async && cudaStreamSynchronize(stream) != cudaSuccess)
			die("cudaStreamSynchronize failed");
		pop();
	}
	iteration = opt.iters;
	/* a rank of a scripted job stays, its memory held, until told (at most a minute) */
	for (int i = 0; opt.hold_until && i < 6000 && access(opt.hold_until, F_OK) != 0; i++)
		usleep(10000);
	if (opt.teardown)
		teardown();
}

/* ---- reporting -------------------------------------------------------------------------- */

static void write_json(FILE *f)
{
	const struct model *m = &opt.m;

	fprintf(f, "{\n  \"simtrain\": 1,\n");
	fprintf(
	    f,
	    "  \"config\": {\"preset\": \"%s\", \"layers\": %llu, \"hidden\": %llu, \"heads\": %llu, \"ffn\": %llu, "
	    "\"vocab\": %llu, \"seq\": %llu, \"batch\": %llu, \"tied\": %s, \"precision\": \"%s\", "
	    "\"optimizer\": \"%s\", \"recompute\": \"%s\", \"zero\": %d, \"dp\": %llu, \"iters\": %d, "
	    "\"leak_bytes\": %llu, \"api\": \"%s\", \"device\": %d},\n",
	    m->preset ? m->preset : "custom", (unsigned long long)m->layers, (unsigned long long)m->hidden,
	    (unsigned long long)m->heads, (unsigned long long)m->ffn, (unsigned long long)m->vocab,
	    (unsigned long long)m->seq, (unsigned long long)m->batch, m->untied ? "false" : "true",
	    precision_names[m->precision], optimizer_names[m->optimizer], recompute_names[m->recompute], m->zero,
	    (unsigned long long)m->dp, opt.iters, (unsigned long long)opt.leak, opt.async ? "async" : "malloc",
	    opt.device);
	fprintf(f, "  \"param_count\": %llu,\n", (unsigned long long)model_param_count(m));
	fprintf(f,
		"  \"sizes\": {\"params\": %llu, \"grads\": %llu, \"optimizer\": %llu, \"activations\": %llu, "
		"\"layer_activations\": %llu},\n",
		(unsigned long long)led.params_bytes, (unsigned long long)led.grads_bytes,
		(unsigned long long)led.optimizer_bytes, (unsigned long long)led.activation_bytes,
		(unsigned long long)led.layer_activation_bytes);
	fprintf(f, "  \"peak\": {\"bytes\": %llu, \"iteration\": %d, \"phase\": \"%s\", \"categories\": {",
		(unsigned long long)led.peak, led.peak_iter, led.peak_phase ? led.peak_phase : "init");
	for (int c = 0; c < NCAT; c++)
		fprintf(f, "%s\"%s\": %llu", c ? ", " : "", cat_names[c], (unsigned long long)led.peak_cat[c]);
	fprintf(f, "}},\n");
	fprintf(f, "  \"allocs\": %llu,\n  \"frees\": %llu,\n", (unsigned long long)led.allocs,
		(unsigned long long)led.frees);
	fprintf(f, "  \"live_at_exit\": {\"bytes\": %llu, \"count\": %llu},\n", (unsigned long long)led.total,
		(unsigned long long)led.live_count);
	if (led.oom)
		fprintf(f, "  \"oom\": {\"size\": %llu, \"iteration\": %d, \"phase\": \"%s\"}\n}\n",
			(unsigned long long)led.oom_size, led.oom_iter, led.oom_phase);
	else
		fprintf(f, "  \"oom\": null\n}\n");
}

static void summary(FILE *f)
{
	char sz[32];

	fprintf(f, "simtrain: %s, %.1fM parameters, %s, %s, recompute %s, ZeRO-%d of %llu, %d iterations\n",
		opt.m.preset ? opt.m.preset : "custom", (double)model_param_count(&opt.m) / 1e6,
		precision_names[opt.m.precision], optimizer_names[opt.m.optimizer], recompute_names[opt.m.recompute],
		opt.m.zero, (unsigned long long)opt.m.dp, opt.iters);
	fprintf(f, "peak %s in iteration %d, %s:\n", mt_format_size(led.peak, sz, sizeof sz), led.peak_iter,
		led.peak_phase ? led.peak_phase : "init");
	for (int c = 0; c < NCAT; c++)
		fprintf(f, "  %-12s %12s\n", cat_names[c], mt_format_size(led.peak_cat[c], sz, sizeof sz));
	fprintf(f, "allocations %llu, frees %llu, live at exit %s\n", (unsigned long long)led.allocs,
		(unsigned long long)led.frees, mt_format_size(led.total, sz, sizeof sz));
}

/* ---- command line --------------------------------------------------------------------------- */

static const char usage[] =
    "usage: simtrain [options]\n"
    "Issues the device allocations of transformer training steps through the CUDA runtime.\n"
    "  --preset NAME         model shape: tiny, gpt2-small, gpt-1.3b, gpt-7b (default tiny)\n"
    "  --layers N --hidden N --heads N --ffn N --vocab N --seq N --batch N\n"
    "                        override the preset's shape\n"
    "  --untied              separate output head instead of tied embeddings\n"
    "  --precision P         fp32, bf16 or fp16 (default bf16, fp32 master weights)\n"
    "  --optimizer O         adam, adamw, sgd (with momentum) or none (default adamw)\n"
    "  --recompute R         activation recomputation: none, selective or full (default none)\n"
    "  --zero S --dp D       emulate one rank of ZeRO stage S (0-3) over D data-parallel ranks\n"
    "  --leak SIZE           keep a buffer of SIZE every iteration (leak injection)\n"
    "  --leak-from N         ... from iteration N on (default 1)\n"
    "  --leak-in WHERE       ... made in the forward (kept after its backward), the\n"
    "                        optimizer's step, or an evaluation's forward (no backward)\n"
    "                        after each step: forward, optimizer or eval (default forward)\n"
    "  --iters N             training iterations (default 3)\n"
    "  --compute-ms N        each layer's forward and backward take N ms (default 0)\n"
    "  --hold-until FILE     after training, hold the memory until FILE exists (at most 60 s)\n"
    "  --device N            CUDA device (default 0)\n"
    "  --api A               malloc (cudaMalloc) or async (cudaMallocAsync on a stream)\n"
    "  --no-teardown         exit without freeing parameters and optimizer state\n"
    "  --tag                 tag every allocation with its category through memtap's API\n"
    "  --json FILE           write the ground truth as JSON to FILE (- for standard output)\n"
    "  --list-presets        print the preset names\n"
    "Sizes take K/M/G/T (powers of 1024) or KB/MB/GB (powers of 1000).\n";

static int pick(const char *what, const char *value, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(value, names[i]) == 0)
			return i;
	die("unknown %s '%s' (see --help)", what, value);
	return -1;
}

static uint64_t number(const char *what, const char *value)
{
	uint64_t n;

	if (mt_parse_size(value, &n) != 0 || n == 0)
		die("--%s needs a positive number, not '%s'", what, value);
	return n;
}

static void parse(int argc, char **argv)
{
	enum {
		O_LAYERS = 256,
		O_HIDDEN,
		O_HEADS,
		O_FFN,
		O_VOCAB,
		O_SEQ,
		O_BATCH,
		O_UNTIED,
		O_PRECISION,
		O_OPTIMIZER,
		O_RECOMPUTE,
		O_ZERO,
		O_DP,
		O_LEAK,
		O_LEAK_FROM,
		O_LEAK_IN,
		O_ITERS,
		O_DEVICE,
		O_API,
		O_NO_TEARDOWN,
		O_JSON,
		O_LIST,
		O_PRESET,
		O_TAG,
		O_COMPUTE,
		O_HOLD
	};
	static const struct option longopts[] = {{"preset", 1, 0, O_PRESET},
						 {"layers", 1, 0, O_LAYERS},
						 {"hidden", 1, 0, O_HIDDEN},
						 {"heads", 1, 0, O_HEADS},
						 {"ffn", 1, 0, O_FFN},
						 {"vocab", 1, 0, O_VOCAB},
						 {"seq", 1, 0, O_SEQ},
						 {"batch", 1, 0, O_BATCH},
						 {"untied", 0, 0, O_UNTIED},
						 {"precision", 1, 0, O_PRECISION},
						 {"optimizer", 1, 0, O_OPTIMIZER},
						 {"recompute", 1, 0, O_RECOMPUTE},
						 {"zero", 1, 0, O_ZERO},
						 {"dp", 1, 0, O_DP},
						 {"leak", 1, 0, O_LEAK},
						 {"leak-from", 1, 0, O_LEAK_FROM},
						 {"leak-in", 1, 0, O_LEAK_IN},
						 {"iters", 1, 0, O_ITERS},
						 {"device", 1, 0, O_DEVICE},
						 {"api", 1, 0, O_API},
						 {"no-teardown", 0, 0, O_NO_TEARDOWN},
						 {"json", 1, 0, O_JSON},
						 {"list-presets", 0, 0, O_LIST},
						 {"tag", 0, 0, O_TAG},
						 {"compute-ms", 1, 0, O_COMPUTE},
						 {"hold-until", 1, 0, O_HOLD},
						 {"help", 0, 0, 'h'},
						 {0, 0, 0, 0}};
	static const char *const apis[] = {"malloc", "async"};
	int c;

	opt.m.precision = PREC_BF16;
	opt.m.optimizer = OPT_ADAMW;
	opt.m.dp = 1;
	model_preset(&opt.m, "tiny");
	/* the preset first, so explicit shape options override it wherever they stand */
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--preset") == 0 && model_preset(&opt.m, argv[i + 1]) != 0)
			die("unknown preset '%s' (see --list-presets)", argv[i + 1]);
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_PRESET:
			break;
		case O_LAYERS:
			opt.m.layers = number("layers", optarg);
			opt.m.preset = NULL;
			break;
		case O_HIDDEN:
			opt.m.hidden = number("hidden", optarg);
			opt.m.preset = NULL;
			break;
		case O_HEADS:
			opt.m.heads = number("heads", optarg);
			opt.m.preset = NULL;
			break;
		case O_FFN:
			opt.m.ffn = number("ffn", optarg);
			opt.m.preset = NULL;
			break;
		case O_VOCAB:
			opt.m.vocab = number("vocab", optarg);
			opt.m.preset = NULL;
			break;
		case O_SEQ:
			opt.m.seq = number("seq", optarg);
			opt.m.preset = NULL;
			break;
		case O_BATCH:
			opt.m.batch = number("batch", optarg);
			opt.m.preset = NULL;
			break;
		case O_UNTIED:
			opt.m.untied = true;
			break;
		case O_PRECISION:
			opt.m.precision = (enum precision)pick("precision", optarg, precision_names, 3);
			break;
		case O_OPTIMIZER:
			opt.m.optimizer = (enum optimizer)pick("optimizer", optarg, optimizer_names, 4);
			break;
		case O_RECOMPUTE:
			opt.m.recompute = (enum recompute)pick("recompute mode", optarg, recompute_names, 3);
			break;
		case O_ZERO:
			if (strlen(optarg) != 1 || optarg[0] < '0' || optarg[0] > '3')
				die("--zero takes a stage from 0 to 3, not '%s'", optarg);
			opt.m.zero = optarg[0] - '0';
			break;
		case O_DP:
			opt.m.dp = number("dp", optarg);
			break;
		case O_LEAK:
			opt.leak = number("leak", optarg);
			break;
		case O_LEAK_FROM:
			opt.leak_from = (int)number("leak-from", optarg);
			break;
		case O_LEAK_IN:
			opt.leak_in = pick("leak-in", optarg, leak_places, 3);
			break;
		case O_ITERS:
			opt.iters = (int)number("iters", optarg);
			break;
		case O_COMPUTE:
			opt.compute_ms = number("compute-ms", optarg);
			break;
		case O_HOLD:
			opt.hold_until = optarg;
			break;
		case O_DEVICE:
			if (mt_parse_size(optarg, &(uint64_t){0}) != 0)
				die("--device needs a device number, not '%s'", optarg);
			opt.device = atoi(optarg);
			break;
		case O_API:
			opt.async = pick("api", optarg, apis, 2) == 1;
			break;
		case O_NO_TEARDOWN:
			opt.teardown = false;
			break;
		case O_TAG:
			opt.tag = true;
			break;
		case O_JSON:
			opt.json = optarg;
			break;
		case O_LIST:
			model_list_presets();
			exit(0);
		case 'h':
			fputs(usage, stdout);
			exit(0);
		default:
			fputs(usage, stderr);
			exit(2);
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (see --help)", argv[optind]);
	if (opt.m.hidden % opt.m.heads)
		die("--hidden (%llu) must be a multiple of --heads (%llu)", (unsigned long long)opt.m.hidden,
		    (unsigned long long)opt.m.heads);
	if (opt.m.zero > 0 && opt.m.dp < 2)
		fprintf(stderr, "simtrain: note: ZeRO-%d with --dp 1 partitions nothing\n", opt.m.zero);
}

static void *table(uint64_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p)
		die("out of host memory");
	return p;
}

int main(int argc, char **argv)
{
	cudaError_t e;
	FILE *report;

	parse(argc, argv);
	if ((e = cudaSetDevice(opt.device)) != cudaSuccess)
		die("cannot use CUDA device %d: %s", opt.device, cudaGetErrorString(e));
	if (opt.async && (e = cudaStreamCreate(&stream)) != cudaSuccess)
		die("cudaStreamCreate failed: %s", cudaGetErrorString(e));
	nparams = 0;
	for (uint64_t n; model_param(&opt.m, nparams, &n, &(const char *){0});)
		nparams++;
	numels = table(nparams, sizeof *numels);
	for (uint64_t i = 0; i < nparams; i++)
		model_param(&opt.m, i, &numels[i], &(const char *){0});
	nstate = opt_state_elems(&opt.m);
	params = table(nparams, sizeof *params);
	grads = table(nparams, sizeof *grads);
	opt_state = table(nparams * nstate, sizeof *opt_state);
	saved = table(opt.m.layers, sizeof *saved);
	leaks = table((uint64_t)opt.iters, sizeof *leaks);
	train();
	if (opt.async && cudaStreamSynchronize(stream) != cudaSuccess)
		die("cudaStreamSynchronize failed");
	report = opt.json && strcmp(opt.json, "-") == 0 ? stderr : stdout;
	summary(report);
	finish_json();
	return 0;
}
