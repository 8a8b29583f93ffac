/* Composition by category: one pass over the trace (on its own, or event by event inside
 * the report's first pass) following every thread's NVTX range stack (or, read by its
 * frames, the phase its stacks say), noting for each allocation the phase it was made in
 * and what had happened by the time it was freed; then the rules of composition.h. A
 * stack's frames are read once (a byte per stack) from the trace's own names: a
 * snapshot's named frames, a recording's Python frames; no symbol files. */
#include "analyze/composition.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/map.h"
#include "core/array.h"
#include "core/replay.h"
#include "reader/progress.h"

enum phase { PH_NONE, PH_FORWARD, PH_BACKWARD, PH_OPTIMIZER, PH_ZERO_GRAD };

static bool has_word(const char *s, const char *w)
{
	size_t n = strlen(w);

	for (; *s; s++)
		if (strncasecmp(s, w, n) == 0)
			return true;
	return false;
}

static enum phase classify(const char *name)
{
	if (has_word(name, "zero_grad"))
		return PH_ZERO_GRAD;
	if (has_word(name, "backward") || has_word(name, "bwd"))
		return PH_BACKWARD;
	if (has_word(name, "forward") || has_word(name, "fwd"))
		return PH_FORWARD;
	if (has_word(name, "optim"))
		return PH_OPTIMIZER;
	return PH_NONE;
}

struct frame {
	uint8_t phase;
	uint32_t instance;
	uint32_t inner; /* (in a stack) the innermost classified frame at or below, UINT32_MAX: none */
};

struct stack {
	struct frame *f;
	size_t n, cap;
};

/* What is known of one live allocation while the pass runs. */
struct life {
	size_t event;	      /* the event that made it */
	uint64_t size, addr;  /* ... its size and address */
	uint32_t stack;	      /* ... its stack */
	uint8_t made_tag;     /* ... its tag */
	uint8_t phase;	      /* the phase it was made in */
	uint32_t instance;    /* that phase's instance */
	bool before_forward;  /* made before any forward phase began */
	bool first_optimizer; /* made in the first optimizer phase */
	uint32_t opt_seen;    /* optimizer phases begun when it was made */
	bool freed;
	uint8_t freed_phase;
	bool freed_in_instance; /* its phase instance was still open when it was freed */
	bool alive_past_instance;
	bool alive_into_optimizer; /* an optimizer phase began while it was alive */
	bool alive_past_forward;
	uint32_t bwd_seen;    /* backward phases ended when it was made */
	bool awaits_backward; /* made in forward, alive at the end, and no backward ended since:
				 the step stopped before its backward was done (an out-of-memory failure) */
	uint8_t tag;	      /* set later by memtap_tag_range */
	/* read by frames */
	bool unseen;	    /* made before recording began */
	bool workspace;	    /* its frames make a library's workspace (cuBLAS), not a tensor */
	bool kept_grad;	    /* made before recording, no frames: one of a parameter's two copies */
	uint8_t said;	    /* made before recording: what its own frames say (enum said), if any */
	bool builds;	    /* its frames build the model */
	bool grad_buffer;   /* its frames make a flat buffer of gradients (Megatron's) */
	bool heir;	    /* made in an optimizer step that then freed a parameter of its size: the
			       parameter's new value (p.data = p.data - lr * ...) */
	bool own;	    /* its phase came from its own frames (or an open annotation) */
	bool to_end;	    /* alive at the end of the trace */
	bool was_temporary; /* (to_end) its stack's earlier allocations were temporaries */
};

struct pass {
	const struct mt_trace *t;
	struct stack *threads;
	size_t nthreads;
	struct stack ranges; /* start/end ranges, process-wide */
	uint8_t *open;	     /* per instance: still open */
	size_t ninstances, capinst;
	uint32_t opt_begun, forward_begun, backward_done, first_opt_instance;
	bool first_forward_done;
	struct mt_map live; /* address (or VMM handle | 1<<63) -> slot in life + 1 */
	struct life *life;  /* live allocations */
	struct mt_slots slots;
	struct mt_composition *c;
	uint8_t *phase_of; /* per string id: its phase + 1, 0 until classified */
	/* read by frames */
	uint8_t *said;	    /* per stack: what its frames say (enum said) + 1, 0 until read */
	uint8_t *workspace; /* per stack, read with said: 1 if a library's workspace (cuBLAS) */
	/* per device (its own sequence: devices run side by side, or one after another in a
	 * snapshot without times): the phase the last stack that said one said, and its run */
	uint8_t fphase[MT_MAX_DEVICES];
	uint32_t finstance[MT_MAX_DEVICES];
	uint32_t oom_run;	   /* the run an allocation failed in: what it frees after is not its temporaries */
	bool python;		   /* some stack has Python frames */
	bool backward_ran;	   /* an allocation was made in a backward phase */
	bool grads_known;	   /* some allocation's category is gradients */
	bool adam;		   /* some stack is in torch's Adam family (two states per parameter, in place) */
	bool state_seen;	   /* some allocation's category is optimizer state */
	struct mt_map state_sizes; /* size -> optimizer state made before recording of that size */
	struct mt_map opt_made;	   /* read by frames: size -> the last allocation of that size made in
				      an optimizer step (its event + 1) */
	struct mt_map opt_addr;	   /* ... and its address */
	bool forward_only;	   /* no stack says backward or an optimizer: inference */
	/* what mt_composition_look learns of every event before the pass */
	bool snapshot;	      /* the trace is a PyTorch snapshot's */
	uint8_t *allocates;   /* per stack: it made an allocation */
	bool bare;	      /* an allocation made while recording had no frames */
	int grad_buffer_line; /* Megatron's _ParamAndGradBuffer.__init__: the line making its grad_data */
	uint8_t *temporary;   /* per stack: an allocation of it was a temporary */
	uint32_t *pending;    /* stacks with an allocation made in the forward now running */
	size_t npending, cappending;
};

/* What a stack's frames say. */
enum said { SAYS_NOTHING, SAYS_FORWARD, SAYS_BACKWARD, SAYS_OPTIMIZER, SAYS_ZERO_GRAD, SAYS_BUILDS, SAYS_GRADS };

static uint8_t phase_of(struct pass *p, uint64_t name)
{
	if (name >= p->t->nstrings)
		return PH_NONE;
	if (!p->phase_of[name])
		p->phase_of[name] = (uint8_t)(classify(mt_trace_string(p->t, name)) + 1);
	return p->phase_of[name] - 1;
}

/* The reader numbers threads densely (mt_trace.nthreads): the table is made once. */
static struct stack *thread_stack(struct pass *p, uint32_t thread)
{
	return thread < p->nthreads ? &p->threads[thread] : NULL;
}

/* A forward or a backward begins: what the forward before it made learns which came. */
static void begins(struct pass *p, uint8_t phase)
{
	uint8_t came = phase == PH_BACKWARD ? MT_FORWARD_BACKWARD : MT_FORWARD_NO_BACKWARD;

	if (phase != PH_FORWARD && phase != PH_BACKWARD)
		return;
	for (size_t i = 0; i < p->npending; i++)
		p->c->after_forward[p->pending[i]] =
		    (uint8_t)((p->c->after_forward[p->pending[i]] & ~MT_FORWARD_PENDING) | came);
	p->npending = 0;
}

static struct frame current(const struct pass *p, const struct stack *s);

static int push(struct pass *p, struct stack *s, uint8_t phase)
{
	uint32_t inst = (uint32_t)p->ninstances, below = s->n ? s->f[s->n - 1].inner : UINT32_MAX;

	if (mt_grow((void **)&s->f, &s->cap, s->n, sizeof *s->f) ||
	    mt_grow((void **)&p->open, &p->capinst, p->ninstances, 1))
		return ENOMEM;
	p->open[p->ninstances++] = 1;
	if (current(p, s).phase != phase) /* a module's forward inside the model's is not another */
		begins(p, phase);
	s->f[s->n] = (struct frame){phase, inst, phase != PH_NONE ? (uint32_t)s->n : below};
	s->n++;
	if (phase == PH_FORWARD)
		p->forward_begun++;
	if (phase == PH_OPTIMIZER && p->opt_begun++ == 0)
		p->first_opt_instance = inst;
	return 0;
}

static void pop(struct pass *p, struct stack *s)
{
	if (!s->n)
		return;
	s->n--;
	p->open[s->f[s->n].instance] = 0;
	if (s->f[s->n].phase == PH_FORWARD)
		p->first_forward_done = true;
	if (s->f[s->n].phase == PH_BACKWARD)
		p->backward_done++;
}

/* The innermost classified phase around an event of this thread. */
static struct frame current(const struct pass *p, const struct stack *s)
{
	if (s && s->n && s->f[s->n - 1].inner != UINT32_MAX)
		return s->f[s->f[s->n - 1].inner];
	if (p->ranges.n && p->ranges.f[p->ranges.n - 1].inner != UINT32_MAX)
		return p->ranges.f[p->ranges.f[p->ranges.n - 1].inner];
	return (struct frame){PH_NONE, UINT32_MAX, UINT32_MAX};
}

static uint8_t infer(const struct life *l)
{
	bool kept_past_instance = !l->freed || l->alive_past_instance;

	if (l->before_forward && (!l->freed || l->alive_past_forward))
		return MT_TAG_PARAMS;
	if (l->was_temporary && (l->phase == PH_BACKWARD || l->phase == PH_OPTIMIZER))
		return MT_TAG_TEMPORARIES; /* cut short by the end (a failure): as its stack's were */
	if (l->phase == PH_BACKWARD && (l->freed ? l->alive_into_optimizer : true))
		return MT_TAG_GRADS;
	if (l->first_optimizer && kept_past_instance)
		return MT_TAG_OPTIMIZER;
	if (l->phase == PH_FORWARD && ((l->freed && l->freed_phase == PH_BACKWARD) || l->awaits_backward))
		return MT_TAG_ACTIVATIONS;
	if (l->freed && l->freed_in_instance)
		return MT_TAG_TEMPORARIES;
	return MT_TAG_OTHER;
}

static uint8_t infer_frames(const struct life *l, bool forward_only, uint8_t *evidence)
{
	bool within = l->freed && l->freed_in_instance;

	*evidence = 1;
	if (l->workspace) { /* made in whatever phase first needed it, kept for the handle's life */
		*evidence = 2;
		return MT_TAG_OTHER;
	}
	if (l->unseen) {
		/* a snapshot keeps the frames of blocks still live at its end, even those made
		   before its trace began: an optimizer's state or a kept .grad says so itself */
		if (!l->freed && l->said == SAYS_OPTIMIZER)
			return MT_TAG_OPTIMIZER;
		if (!l->freed && (l->said == SAYS_BACKWARD || l->said == SAYS_GRADS))
			return MT_TAG_GRADS;
		if (!l->freed && l->kept_grad)
			return MT_TAG_GRADS;
		/* a layer's output a module's forward made and something kept (a KV cache, the
		   saved activations of a pass still to go back), not the model */
		if (!l->freed && l->said == SAYS_FORWARD)
			return MT_TAG_ACTIVATIONS;
		if (!l->freed)
			return MT_TAG_PARAMS;
		if (l->freed_phase == PH_BACKWARD)
			return MT_TAG_ACTIVATIONS;
		/* an optimizer that writes new state tensors frees the old ones in its step
		   (exp_avg = beta1 * exp_avg + ...); zero_grad frees gradients */
		if (l->freed_phase == PH_OPTIMIZER)
			return MT_TAG_OPTIMIZER;
		if (l->freed_phase == PH_ZERO_GRAD)
			return MT_TAG_GRADS;
		*evidence = 0;
		return MT_TAG_OTHER;
	}
	if (l->builds || l->grad_buffer) {
		*evidence = 2;
		return l->builds ? MT_TAG_PARAMS : MT_TAG_GRADS;
	}
	if (l->heir)
		return MT_TAG_PARAMS;
	*evidence = l->own ? 2 : 1;
	if (l->was_temporary && (l->phase == PH_BACKWARD || l->phase == PH_OPTIMIZER)) {
		*evidence = 1; /* cut short by the end (a failure): as its stack's were */
		return MT_TAG_TEMPORARIES;
	}
	switch (l->phase) {
	case PH_OPTIMIZER:
		return within ? MT_TAG_TEMPORARIES : MT_TAG_OPTIMIZER;
	case PH_BACKWARD:
		if (within)
			return MT_TAG_TEMPORARIES;
		*evidence = l->own && (l->alive_into_optimizer || l->to_end) ? 2 : 1;
		return MT_TAG_GRADS;
	case PH_FORWARD:
		if (l->freed && l->freed_phase == PH_BACKWARD)
			return MT_TAG_ACTIVATIONS;
		if (within && !forward_only) /* inference: a layer's output, freed by the next */
			return MT_TAG_TEMPORARIES;
		*evidence = 1;
		/* made by the loop, not the model (its frames say no phase), and kept past the
		   backward that followed: a loss kept for logging, not something backward needs */
		if (!l->own && !forward_only && l->alive_past_instance)
			return MT_TAG_OTHER;
		return MT_TAG_ACTIVATIONS;
	default:
		*evidence = 0;
		if (l->freed && l->freed_phase == PH_BACKWARD) {
			*evidence = 1;
			return MT_TAG_ACTIVATIONS;
		}
		return MT_TAG_OTHER;
	}
}

/* What the end needs to know of a settled allocation: gradients were seen; the sizes of
 * the optimizer state made before recording. */
static void note(struct pass *p, const struct life *l, uint8_t category)
{
	uint64_t n = 0, size = l->size;

	if (category == MT_TAG_GRADS && !l->kept_grad)
		p->grads_known = true;
	if (category == MT_TAG_OPTIMIZER)
		p->state_seen = true;
	if (category == MT_TAG_OPTIMIZER && l->unseen) {
		mt_map_get(&p->state_sizes, size, &n);
		/* out of memory: the pairing at the end sees fewer sizes, nothing worse */
		(void)mt_map_put(&p->state_sizes, size, n + 1);
	}
}

/* An allocation's life is over (or the trace is): its category is known. */
static void settle(struct pass *p, size_t slot)
{
	const struct life *l = &p->life[slot];
	uint8_t category = l->tag ? l->tag : l->made_tag, evidence = 2;
	enum mt_source source = MT_SOURCE_TAG;

	_Static_assert(MT_TAG_COUNT <= 8, "a category in three bits of mt_composition.of");
	if (!category && p->c->frames) {
		category = infer_frames(l, p->forward_only, &evidence);
		source = MT_SOURCE_FRAMES;
		note(p, l, category);
	} else if (!category) {
		category = p->c->has_phases ? infer(l) : MT_TAG_OTHER;
		source = p->c->has_phases ? MT_SOURCE_INFERRED : MT_SOURCE_NONE;
		evidence = p->c->has_phases;
	}
	p->c->of[l->event] = (uint8_t)(category | source << 3 | evidence << 5);
	if (category == MT_TAG_TEMPORARIES && l->stack && l->stack < p->t->nstacks)
		p->temporary[l->stack] = 1;
	mt_slot_give(&p->slots, slot);
}

/* At most n - 1 bytes of s (of at most len), read no further: snprintf's "%s" reads a
 * whole string, and a hostile snapshot's names are megabytes long. */
static void copy_name(char *out, size_t n, const char *s, size_t len)
{
	size_t k = s ? strnlen(s, len < n - 1 ? len : n - 1) : 0;

	if (k)
		memcpy(out, s, k);
	out[k] = '\0';
}

/* A frame's function, file and line, from the trace's own names (a snapshot's named
 * frames, a recording's Python frames "function\tfile\tline"); false for other frames. */
static bool names(const struct mt_trace *t, uint64_t addr, char *fn, size_t nfn, char *file, size_t nfile, int *line)
{
	const char *s, *tab, *tab2;

	if (t->nnamed) {
		if (!addr || addr > t->nnamed)
			return false;
		copy_name(fn, nfn, t->named[addr - 1].function, SIZE_MAX);
		copy_name(file, nfile, t->named[addr - 1].file, SIZE_MAX);
		*line = t->named[addr - 1].line;
		return true;
	}
	if (!(addr & MT_PYFRAME))
		return false;
	s = mt_trace_string(t, addr & 0xffffffffu);
	if (!(tab = strchr(s, '\t')) || !(tab2 = strchr(tab + 1, '\t')))
		return false;
	/* memtap keeps a function's qualified name (Block.forward); the rules read its own
	   name, as a snapshot's frames give it */
	for (const char *dot = memchr(s, '.', (size_t)(tab - s)); dot; dot = memchr(s, '.', (size_t)(tab - s)))
		s = dot + 1;
	copy_name(fn, nfn, s, (size_t)(tab - s));
	copy_name(file, nfile, tab + 1, (size_t)(tab2 - tab - 1));
	*line = atoi(tab2 + 1);
	return true;
}

static bool in_file(const char *file, const char *part)
{
	char alt[128];
	size_t i;

	if (strstr(file, part))
		return true;
	for (i = 0; part[i] && i + 1 < sizeof alt; i++) /* Windows paths */
		alt[i] = part[i] == '/' ? '\\' : part[i];
	alt[i] = '\0';
	return strstr(file, alt) != NULL;
}

static bool is_one_of(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(s, *list))
			return true;
	return false;
}

static bool is_param_and_grad_buffer(const char *fn, const char *file)
{
	return !strcmp(fn, "__init__") && in_file(file, "distributed/param_and_grad_buffer.py");
}

/* The line of Megatron's _ParamAndGradBuffer.__init__ that makes its grad_data: the last
 * of the lines there that allocate (param_data comes first, with the distributed
 * optimizer; frees there, of the parameters' old storage, come after), read from the
 * stacks of allocations (`allocates`, per stack); 0: none. */
static int grad_buffer_line(const struct mt_trace *t, const uint8_t *allocates)
{
	char fn[64], file[1024];
	int line, last = 0;

	for (size_t s = 1; s < t->nstacks; s++)
		for (uint32_t k = 0; allocates[s] && k < t->stacks[s].depth; k++)
			if (names(t, t->stacks[s].frames[k], fn, sizeof fn, file, sizeof file, &line) &&
			    is_param_and_grad_buffer(fn, file) && line > last)
				last = line;
	return last;
}

void mt_composition_look(struct mt_composition_scan *scan, const struct mt_event *e)
{
	struct pass *p = (struct pass *)scan;
	bool framed = e->stack && e->stack < p->t->nstacks;

	p->c->has_phases |= e->kind == MT_EV_RANGE_PUSH || (e->kind == MT_EV_RANGE_START && !p->snapshot);
	if (e->kind != MT_EV_ALLOC)
		return;
	p->allocates[framed ? e->stack : 0] = 1;
	p->bare |= !(e->flags & MT_ALLOC_UNSEEN) && !(framed && p->t->stacks[e->stack].depth);
}

/* What a stack's frames say, read once. */
static enum said stack_says(struct pass *p, uint32_t stack)
{
	static const char *const builders[] = {"_apply",
					       "to",
					       "cuda",
					       "convert",
					       "half",
					       "float",
					       "bfloat16",
					       "load_state_dict",
					       "_load_from_state_dict",
					       "register_parameter",
					       "register_buffer",
					       "reset_parameters",
					       NULL};
	static const char *const loaders[] = {"reset_parameters",
					      "from_pretrained",
					      "_load_state_dict_into_meta_model",
					      "set_module_tensor_to_device",
					      "load_checkpoint_and_dispatch",
					      NULL};
	const struct mt_trace *t = p->t;
	bool fwd = false, bwd = false, opt = false, zero = false, builds = false, kv = false, grads = false;
	unsigned inits = 0; /* Python __init__ frames: a module built of modules builds each */
	char fn[512], file[1024];
	int line;

	if (!stack || stack >= t->nstacks)
		return SAYS_NOTHING;
	if (p->said[stack])
		return (enum said)(p->said[stack] - 1);
	for (uint32_t i = 0; i < t->stacks[stack].depth; i++) {
		if (!names(t, t->stacks[stack].frames[i], fn, sizeof fn, file, sizeof file, &line))
			continue;
		if (p->workspace && (strstr(fn, "getNewWorkspace") || strstr(fn, "getCUDABlasLtWorkspace")))
			p->workspace[stack] = 1;
		if (in_file(file, "torch/optim/adam.py") || in_file(file, "torch/optim/adamw.py") ||
		    in_file(file, "torch/optim/nadam.py") || in_file(file, "torch/optim/radam.py") ||
		    in_file(file, "torch/optim/adamax.py"))
			p->adam = true;
		if (in_file(file, "torch/optim/") ||
		    ((!strcmp(fn, "step") || !strcmp(fn, "__init__")) && strstr(file, "optim")))
			*(!strcmp(fn, "zero_grad") ? &zero : &opt) = true;
		if (strstr(fn, "autograd::Engine::") || strstr(fn, "AccumulateGrad") ||
		    (strstr(fn, "Backward") && strstr(fn, "::apply")) || !strcmp(fn, "_engine_run_backward") ||
		    (!strcmp(fn, "backward") &&
		     (in_file(file, "torch/autograd/") || in_file(file, "torch/_tensor.py"))))
			bwd = true;
		if ((in_file(file, "torch/nn/modules/module.py") && is_one_of(fn, builders)) ||
		    in_file(file, "torch/nn/init.py") || in_file(file, "torch/nn/parallel/replicate.py") ||
		    is_one_of(fn, loaders) || (!strcmp(fn, "__init__") && in_file(file, "torch/nn/modules/")))
			builds = true;
		if (!strcmp(fn, "__init__") && strstr(file, ".py"))
			inits++;
		/* an inference engine's KV cache (vLLM's CacheEngine and _allocate_kv_cache,
		   SGLang's mem_cache pools, transformers' StaticCache), made up front in __init__:
		   what the forward passes keep, not the model */
		if (has_word(fn, "kv_cache") || has_word(fn, "kvcache") || has_word(file, "kv_cache") ||
		    in_file(file, "cache_engine.py") || in_file(file, "/mem_cache/") ||
		    in_file(file, "transformers/cache_utils.py"))
			kv = true;
		/* Megatron's flat buffers: _ParamAndGradBuffer makes its param_data (with the
		   distributed optimizer) and then its grad_data; older ones only gradients */
		if (is_param_and_grad_buffer(fn, file)) /* a line unknown (0) is not the last one */
			*(line && line == p->grad_buffer_line ? &grads : &builds) = true;
		if (!strcmp(fn, "__init__") &&
		    (in_file(file, "distributed/grad_buffer.py") || in_file(file, "megatron/model/distributed.py")))
			grads = true;
		/* PyTorch DDP's gradient buckets: its Reducer's flat buffers, made as DDP wraps the
		   model (torch/csrc/distributed/c10d/reducer.cpp's initialize_buckets, under
		   DistributedDataParallel._ddp_init_helper) */
		if (strstr(fn, "Reducer::initialize_buckets") ||
		    (!strcmp(fn, "_ddp_init_helper") && in_file(file, "torch/nn/parallel/distributed.py")))
			grads = true;
		if ((!strcmp(fn, "forward") && strstr(file, ".py")) ||
		    (in_file(file, "torch/nn/modules/module.py") && !strcmp(fn, "_call_impl")))
			fwd = true;
	}
	/* a model's own modules (a hand-written Linear under its Block under the model) make
	   their parameters in __init__ called from __init__ */
	builds = builds || inits >= 2;
	p->said[stack] = (uint8_t)(1 + (opt	 ? SAYS_OPTIMIZER
					: zero	 ? SAYS_ZERO_GRAD
					: bwd	 ? SAYS_BACKWARD
					: grads	 ? SAYS_GRADS
					: kv	 ? SAYS_FORWARD
					: builds ? SAYS_BUILDS
					: fwd	 ? SAYS_FORWARD
						 : SAYS_NOTHING));
	return (enum said)(p->said[stack] - 1);
}

/* Whether a stack's frames make a library's workspace (read with what they say). */
static bool is_workspace(struct pass *p, uint32_t stack)
{
	if (!stack || stack >= p->t->nstacks)
		return false;
	stack_says(p, stack);
	return p->workspace[stack];
}

/* The phase read by frames on device d changes: its run ends, another begins. */
static int frame_phase(struct pass *p, unsigned d, uint8_t phase)
{
	if (phase == p->fphase[d] && p->finstance[d] != UINT32_MAX)
		return 0;
	if (p->finstance[d] != UINT32_MAX)
		p->open[p->finstance[d]] = 0;
	if (mt_grow((void **)&p->open, &p->capinst, p->ninstances, 1))
		return ENOMEM;
	p->finstance[d] = (uint32_t)p->ninstances;
	p->open[p->ninstances++] = 1;
	p->fphase[d] = phase;
	begins(p, phase);
	if (phase == PH_OPTIMIZER)
		p->opt_begun++;
	return 0;
}

/* The phase an event of this thread is in, read by frames: an open annotation's, else the
 * last one a stack said. */
static struct frame frames_now(struct pass *p, const struct mt_event *e)
{
	struct frame f = current(p, thread_stack(p, e->thread));

	return f.phase != PH_NONE ? f : (struct frame){p->fphase[e->device], p->finstance[e->device]};
}

static int made(struct pass *p, const struct mt_event *e, size_t i, uint64_t key)
{
	struct frame f = current(p, thread_stack(p, e->thread));
	size_t slot;
	uint64_t *at;
	bool had, own = f.phase != PH_NONE, builds = false, grad_buffer = false;
	int r;

	if (f.phase == PH_BACKWARD)
		p->backward_ran = true;
	if (p->c->frames && !own) {
		enum said s =
		    e->kind == MT_EV_ALLOC && !(e->flags & MT_ALLOC_UNSEEN) ? stack_says(p, e->stack) : SAYS_NOTHING;
		static const uint8_t phase_said[] = {[SAYS_FORWARD] = PH_FORWARD,
						     [SAYS_BACKWARD] = PH_BACKWARD,
						     [SAYS_OPTIMIZER] = PH_OPTIMIZER,
						     [SAYS_ZERO_GRAD] = PH_ZERO_GRAD};
		/* no frames at all in a trace of Python stacks: a thread without Python, as
		   autograd's engine is (stacks="python" records none for it): backward, likely */
		bool bare = e->kind == MT_EV_ALLOC && !(e->flags & MT_ALLOC_UNSEEN) && p->python &&
			    (!e->stack || e->stack >= p->t->nstacks || !p->t->stacks[e->stack].depth);
		if (bare)
			s = SAYS_BACKWARD;
		builds = s == SAYS_BUILDS;
		grad_buffer = s == SAYS_GRADS;
		if (s != SAYS_NOTHING && s != SAYS_BUILDS && s != SAYS_GRADS) {
			if ((r = frame_phase(p, e->device, phase_said[s])))
				return r;
			own = !bare;
		}
		f = frames_now(p, e);
		if (f.phase == PH_BACKWARD)
			p->backward_ran = true;
	}

	if (!(at = mt_map_at(&p->live, key, &had)))
		return ENOMEM;
	if (had) /* made again without a free seen: the first one's life is over */
		settle(p, *at - 1);
	if ((slot = mt_slot_take(&p->slots, (void **)&p->life, sizeof *p->life)) == SIZE_MAX) {
		mt_map_del(&p->live, key, NULL);
		return ENOMEM;
	}
	*at = slot + 1;
	p->life[slot] =
	    (struct life){.event = i,
			  .size = e->size,
			  .addr = e->addr,
			  .stack = e->stack,
			  .made_tag = e->tag,
			  .said = (uint8_t)(p->c->frames && e->kind == MT_EV_ALLOC && (e->flags & MT_ALLOC_UNSEEN)
						? stack_says(p, e->stack)
						: SAYS_NOTHING),
			  .phase = f.phase,
			  .instance = f.instance,
			  .before_forward = p->forward_begun == 0,
			  .first_optimizer = f.phase == PH_OPTIMIZER && f.instance == p->first_opt_instance,
			  .opt_seen = p->opt_begun,
			  .bwd_seen = p->backward_done,
			  .unseen = e->kind == MT_EV_ALLOC && (e->flags & MT_ALLOC_UNSEEN),
			  .builds = builds,
			  .grad_buffer = grad_buffer,
			  .workspace = p->c->frames && e->kind == MT_EV_ALLOC && is_workspace(p, e->stack),
			  .own = own};
	if (p->c->frames && f.phase == PH_OPTIMIZER && e->kind == MT_EV_ALLOC &&
	    (mt_map_put(&p->opt_made, e->size, i + 1) || mt_map_put(&p->opt_addr, e->size, e->addr)))
		return ENOMEM;
	if (f.phase == PH_FORWARD && e->stack < p->t->nstacks &&
	    !(p->c->after_forward[e->stack] & MT_FORWARD_PENDING)) {
		if (mt_grow((void **)&p->pending, &p->cappending, p->npending, sizeof *p->pending))
			return ENOMEM;
		p->pending[p->npending++] = e->stack;
		p->c->after_forward[e->stack] |= MT_FORWARD_MADE | MT_FORWARD_PENDING;
	}
	return 0;
}

/* The allocation in slot i of the live map, NULL for an empty slot. */
static struct life *live_life(struct pass *p, size_t i)
{
	return p->live.used[i] == 1 ? &p->life[p->live.vals[i] - 1] : NULL;
}

/* An optimizer that writes a parameter anew (p.data = p.data - lr * ...) makes the new
 * value, then frees the old one: the last allocation of its size that step made, still
 * live, is the parameter now. */
static void inherit(struct pass *p, const struct mt_event *e, const struct life *old)
{
	struct frame f;
	uint64_t made, addr = 0, k;

	if (!p->c->frames || mt_composition_category(p->c, old->event) != MT_TAG_PARAMS ||
	    !mt_map_get(&p->opt_made, old->size, &made))
		return;
	mt_map_get(&p->opt_addr, old->size, &addr);
	f = frames_now(p, e);
	made--;
	if (f.phase != PH_OPTIMIZER || !mt_map_get(&p->live, addr, &k) || p->life[k - 1].event != made ||
	    p->life[k - 1].instance != f.instance)
		return;
	p->life[k - 1].heir = true;
}

static void freed(struct pass *p, const struct mt_event *e, uint64_t key)
{
	uint64_t k;
	struct life *l;

	if (!mt_map_del(&p->live, key, &k))
		return;
	l = &p->life[k - 1];
	l->freed = true;
	l->freed_phase = p->c->frames ? frames_now(p, e).phase : current(p, thread_stack(p, e->thread)).phase;
	l->freed_in_instance =
	    l->instance != UINT32_MAX && p->open[l->instance] && !(p->c->frames && l->instance == p->oom_run);
	l->alive_past_instance = l->instance != UINT32_MAX && !p->open[l->instance];
	l->alive_into_optimizer = p->opt_begun > l->opt_seen;
	l->alive_past_forward = p->first_forward_done;
	settle(p, k - 1);
	inherit(p, e, l);
}

int mt_composition_start(struct mt_composition_scan **out, struct mt_composition *c, const struct mt_trace *t)
{
	struct pass *p = calloc(1, sizeof *p);
	char backend[32];

	memset(c, 0, sizeof *c);
	*out = (struct mt_composition_scan *)p;
	if (!p)
		return ENOMEM;
	p->t = t;
	p->c = c;
	c->n = t->nevents;
	c->of = calloc(t->nevents + 1, 1);
	c->after_forward = calloc(t->nstacks + 1, 1);
	p->temporary = calloc(t->nstacks + 1, 1);
	p->said = calloc(t->nstacks + 1, 1);
	p->workspace = calloc(t->nstacks + 1, 1);
	p->allocates = calloc(t->nstacks + 1, 1);
	p->oom_run = UINT32_MAX;
	for (unsigned d = 0; d < MT_MAX_DEVICES; d++)
		p->finstance[d] = UINT32_MAX;
	p->phase_of = calloc(t->nstrings + 1, 1);
	p->threads = calloc(t->nthreads + 1, sizeof *p->threads);
	p->nthreads = t->nthreads;
	/* NVTX phases, or frames to read (a snapshot's annotations are ranges too, not NVTX) */
	p->snapshot = mt_trace_info(t, "backend", backend, sizeof backend) && !strcmp(backend, "pytorch-snapshot");
	if (!c->of || !c->after_forward || !p->temporary || !p->phase_of || !p->threads || !p->said || !p->workspace ||
	    !p->allocates)
		return ENOMEM;
	return 0;
}

void mt_composition_ready(struct mt_composition_scan *scan)
{
	struct pass *p = (struct pass *)scan;
	struct mt_composition *c = p->c;
	const struct mt_trace *t = p->t;
	char backend[32];
	bool untraced;

	/* a snapshot with no entries (taken without history) has no frames to read, unless its
	   blocks have theirs (a segments-only snapshot taken with history on) */
	untraced = p->snapshot && mt_trace_info(t, "time", backend, sizeof backend) && !strcmp(backend, "none") &&
		   !mt_trace_info(t, "history", backend, sizeof backend);
	for (size_t i = 1; i < t->nstacks && !c->has_phases && !c->frames && !untraced; i++)
		for (uint32_t k = 0; k < t->stacks[i].depth && !c->frames; k++)
			c->frames = t->nnamed || (t->stacks[i].frames[k] & MT_PYFRAME);
	for (size_t i = 0; i < t->nnamed && c->frames && !p->python; i++) /* a snapshot's .py frames */
		p->python = t->named[i].file && strlen(t->named[i].file) > 3 &&
			    !strcmp(t->named[i].file + strlen(t->named[i].file) - 3, ".py");
	for (size_t i = 1; i < t->nstacks && c->frames && !t->nnamed && !p->python; i++)
		for (uint32_t k = 0; k < t->stacks[i].depth && !p->python; k++)
			p->python = t->stacks[i].frames[k] & MT_PYFRAME;
	/* no stack says backward, an optimizer or zero_grad, and none is bare in a trace of
	 * Python stacks (autograd's engine thread): a forward-only run, whose forward frees
	 * its layers' outputs itself */
	if (c->frames)
		p->grad_buffer_line = grad_buffer_line(t, p->allocates);
	p->forward_only = c->frames;
	for (size_t i = 1; i < t->nstacks && p->forward_only; i++) {
		enum said s = stack_says(p, (uint32_t)i);
		p->forward_only = s != SAYS_BACKWARD && s != SAYS_OPTIMIZER && s != SAYS_ZERO_GRAD;
	}
	p->forward_only &= !(p->python && p->bare);
}

int mt_composition_step(struct mt_composition_scan *scan, const struct mt_event *e, size_t i)
{
	struct pass *p = (struct pass *)scan;
	struct stack *s;
	uint64_t k;

	switch (e->kind) {
	case MT_EV_RANGE_PUSH:
		if ((s = thread_stack(p, e->thread)))
			return push(p, s, phase_of(p, e->aux));
		return 0;
	case MT_EV_RANGE_POP:
		if ((s = thread_stack(p, e->thread)))
			pop(p, s);
		return 0;
	case MT_EV_RANGE_START: {
		uint8_t phase = phase_of(p, e->aux);
		int r = push(p, &p->ranges, phase);
		/* read by frames, an annotation's phase (Optimizer.step#..., zero_grad) ends the run
		   of the phase the stacks said before it */
		return r || !p->c->frames || phase == PH_NONE ? r : frame_phase(p, e->device, phase);
	}
	case MT_EV_RANGE_END:
		pop(p, &p->ranges);
		return 0;
	case MT_EV_ALLOC:
		return e->error ? 0 : made(p, e, i, e->addr);
	case MT_EV_FREE:
		if (!e->error)
			freed(p, e, e->addr);
		return 0;
	case MT_EV_VMM_CREATE:
		return made(p, e, i, e->aux | 1ull << 63);
	case MT_EV_VMM_RELEASE:
		/* for its purpose, physical memory's life ends with its handle's release
		   (PyTorch and NCCL unmap first) */
		if (!e->error)
			freed(p, e, e->aux | 1ull << 63);
		return 0;
	case MT_EV_ALLOC_FAILED:
		p->oom_run = p->c->frames ? frames_now(p, e).instance : UINT32_MAX;
		return 0;
	case MT_EV_TAG_RANGE:
		if (mt_map_get(&p->live, e->addr, &k))
			p->life[k - 1].tag = e->tag;
		return 0;
	default:
		return 0;
	}
}

/* A block made before recording that nothing said anything of: no frames, or none that say */
static bool mute(const struct life *l)
{
	return l->unseen && l->said == SAYS_NOTHING && !l->workspace;
}

/* torch's Adam, AdamW, NAdam, RAdam or Adamax (two state tensors per parameter, exp_avg and
 * exp_avg_sq or exp_inf, updated in place) stepped,
 * yet no optimizer state was made, freed or said in the trace: warm-up steps made it before
 * recording, and it is among the blocks made before recording that have no frames and live
 * to the end, which the rules call parameters (a public CS336 step of torch's Adam read
 * 38.09 GiB of parameters for a model of 12.70 GiB). Each parameter has then two state
 * tensors of its size, three copies of it in all, four where the gradients are among them
 * too (backward ran but made none: zero_grad(set_to_none=False)). Where the sizes whose
 * count is a multiple of that hold all but a sixteenth of those bytes (buffers aside), two
 * of each three (four) are the state; pair_kept_grads then finds the gradients. */
static int adam_state(struct pass *p)
{
	struct mt_map count = {0}, marked = {0};
	uint64_t copies = !p->grads_known && p->backward_ran ? 4 : 3, n, m, all = 0, fit = 0;
	int err = 0;

	if (!p->adam || !p->opt_begun || p->state_seen || p->state_sizes.count)
		return 0;
	for (int round = 0; round < 3 && !err; round++) /* count, weigh, mark */
		for (size_t i = 0; i < p->live.cap && !err; i++) {
			struct life *l;
			uint64_t size;
			if (!(l = live_life(p, i)))
				continue;
			size = l->size;
			if (!mute(l))
				continue;
			n = 0;
			mt_map_get(&count, size, &n);
			if (round == 0) {
				err = mt_map_put(&count, size, n + 1);
			} else if (round == 1) {
				all += size;
				fit += n % copies == 0 ? size : 0;
			} else if (n % copies == 0 && fit >= all - all / 16) {
				m = 0;
				mt_map_get(&marked, size, &m);
				if (m < n / copies * 2) {
					l->said = SAYS_OPTIMIZER;
					note(p, l, MT_TAG_OPTIMIZER);
					err = mt_map_put(&marked, size, m + 1);
				}
			}
		}
	mt_map_free(&marked);
	mt_map_free(&count);
	return err;
}

/* A backward ran, an optimizer stepped, yet no gradient was made or freed: the gradients
 * were there before recording and backward added into them (zero_grad(set_to_none=False),
 * or none). They are among the blocks made before recording that have no frames and live
 * to the end, which the rules call parameters: of each size the optimizer keeps state
 * for, there are then two copies per parameter, and half of them are gradients - when
 * there are at least as many as state tensors of that size (AdamW's two per parameter;
 * SGD's one with gradients kept elsewhere, a flat buffer, would be mistaken). */
static int pair_kept_grads(struct pass *p)
{
	struct mt_map count = {0}, marked = {0};
	uint64_t n, half, states = 0;
	int err = 0;

	for (size_t i = 0; i < p->live.cap; i++) { /* what the end will settle, as the rules will */
		const struct life *l;
		if (!(l = live_life(p, i)))
			continue;
		if (!l->workspace && (l->unseen ? l->said == SAYS_BACKWARD || l->said == SAYS_GRADS
						: l->phase == PH_BACKWARD || l->grad_buffer))
			p->grads_known = true;
		if (l->unseen && l->said == SAYS_OPTIMIZER)
			note(p, l, MT_TAG_OPTIMIZER);
		if (!l->unseen && l->phase == PH_OPTIMIZER && !l->heir && !l->builds && !l->workspace)
			p->state_seen = true; /* made in a step and kept: its state */
	}
	if ((err = adam_state(p)))
		return err;
	if (!p->backward_ran || !p->opt_begun || p->grads_known || !p->state_sizes.count)
		return 0;
	for (size_t i = 0; i < p->live.cap && !err; i++) {
		const struct life *l;
		uint64_t size;
		if (!(l = live_life(p, i)))
			continue;
		size = l->size;
		if (!mute(l) || !mt_map_get(&p->state_sizes, size, &n))
			continue;
		n = 0;
		mt_map_get(&count, size, &n);
		err = mt_map_put(&count, size, n + 1);
	}
	for (size_t i = 0; i < p->live.cap && !err; i++) { /* half of each size: counted down */
		struct life *l;
		uint64_t size;
		if (!(l = live_life(p, i)))
			continue;
		size = l->size;
		if (!mute(l) || !mt_map_get(&count, size, &n))
			continue;
		if (!mt_map_get(&marked, size, &half))
			half = 0;
		mt_map_get(&p->state_sizes, size, &states);
		if (n >= states && half < n / 2) { /* fewer: the state outnumbers them, no copies */
			l->kept_grad = true;
			err = mt_map_put(&marked, size, half + 1);
		}
	}
	mt_map_free(&marked);
	mt_map_free(&count);
	return err;
}

int mt_composition_finish(struct mt_composition_scan *scan, int err)
{
	struct pass *p = (struct pass *)scan;

	if (!p)
		return err ? err : ENOMEM;
	if (!err && p->c->frames)
		err = pair_kept_grads(p);
	for (size_t i = 0; i < p->live.cap && !err; i++) /* alive at the end */
		if (p->live.used[i] == 1) {
			struct life *l = &p->life[p->live.vals[i] - 1];

			l->to_end = true;
			l->alive_past_instance = l->instance != UINT32_MAX && !p->open[l->instance];
			l->awaits_backward = l->phase == PH_FORWARD && p->backward_done == l->bwd_seen;
			l->was_temporary = l->stack < p->t->nstacks && p->temporary[l->stack];
			settle(p, p->live.vals[i] - 1);
		}
	for (size_t i = 0; p->threads && i < p->nthreads; i++)
		free(p->threads[i].f);
	free(p->threads);
	free(p->ranges.f);
	free(p->open);
	free(p->life);
	mt_slots_free(&p->slots);
	free(p->phase_of);
	free(p->said);
	free(p->workspace);
	free(p->pending);
	free(p->temporary);
	free(p->allocates);
	mt_map_free(&p->state_sizes);
	mt_map_free(&p->opt_made);
	mt_map_free(&p->opt_addr);
	mt_map_free(&p->live);
	if (err)
		mt_composition_free(p->c);
	free(p);
	return err;
}

int mt_composition_build(struct mt_composition *c, const struct mt_trace *t)
{
	struct mt_composition_scan *s;
	int err = mt_composition_start(&s, c, t);
	const struct mt_event *batch;
	size_t i = 0, n;

	for (int pass = 0; pass < 2 && !err; pass++) { /* what it needs first, then its steps */
		struct mt_walk *w = mt_walk_start(t);
		err = w ? 0 : ENOMEM;
		while (!err && (n = mt_walk_next(w, &batch)) != 0)
			for (size_t k = 0; k < n && !err; k++) {
				if (pass == 0) {
					mt_composition_look(s, &batch[k]);
					continue;
				}
				mt_progress("composition", i, t->nevents);
				err = mt_composition_step(s, &batch[k], i++);
			}
		mt_walk_end(w);
		if (pass == 0 && !err)
			mt_composition_ready(s);
	}
	return mt_composition_finish(s, err);
}

void mt_composition_free(struct mt_composition *c)
{
	free(c->of);
	free(c->after_forward);
	memset(c, 0, sizeof *c);
}

struct mt_steps_scan {
	struct pass p; /* its stacks' answers alone */
	enum said last;
	size_t *idx, n, cap;
	bool failed;
};

struct mt_steps_scan *mt_composition_steps_start(const struct mt_trace *t)
{
	struct mt_steps_scan *s = calloc(1, sizeof *s);

	if (s && !(s->p.said = calloc(t->nstacks + 1, 1))) {
		free(s);
		return NULL;
	}
	if (s)
		s->p.t = t;
	return s;
}

void mt_composition_steps_step(struct mt_steps_scan *s, const struct mt_event *e, size_t i)
{
	enum said says;

	if (e->kind != MT_EV_ALLOC || e->error || (e->flags & MT_ALLOC_UNSEEN) || s->failed)
		return;
	says = stack_says(&s->p, e->stack);
	if (says == SAYS_NOTHING || says == SAYS_BUILDS || says == SAYS_GRADS)
		return;
	if (says == SAYS_OPTIMIZER && s->last != SAYS_OPTIMIZER) {
		s->failed = mt_grow((void **)&s->idx, &s->cap, s->n, sizeof *s->idx) != 0;
		if (!s->failed)
			s->idx[s->n++] = i;
	}
	s->last = says;
}

size_t *mt_composition_steps_finish(struct mt_steps_scan *s, size_t *n)
{
	size_t *idx = s->idx;

	*n = s->n;
	if (s->failed) {
		free(idx);
		idx = NULL;
	} else if (!idx) {
		idx = malloc(sizeof *idx);
	}
	free(s->p.said);
	free(s);
	return idx;
}

bool mt_composition_loads(const struct mt_trace *t, uint32_t stack)
{
	char fn[512], file[1024];
	int line;

	for (uint32_t i = 0; stack && stack < t->nstacks && i < t->stacks[stack].depth; i++)
		if (names(t, t->stacks[stack].frames[i], fn, sizeof fn, file, sizeof file, &line) &&
		    (in_file(file, "torch/serialization.py") || in_file(file, "safetensors/")))
			return true;
	return false;
}
