/* Composition by category: one pass over the trace following every thread's NVTX range
 * stack, noting for each allocation the phase it was made in and what had happened by
 * the time it was freed; then the rules of composition.h. */
#include "analyze/composition.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/map.h"

enum phase { PH_NONE, PH_FORWARD, PH_BACKWARD, PH_OPTIMIZER };

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
};

struct stack {
	struct frame *f;
	size_t n, cap;
};

/* What is known of one allocation while the pass runs. */
struct life {
	uint8_t phase;         /* the phase it was made in */
	uint32_t instance;     /* that phase's instance */
	bool before_forward;   /* made before any forward phase began */
	bool first_optimizer;  /* made in the first optimizer phase */
	uint32_t opt_seen;     /* optimizer phases begun when it was made */
	bool freed;
	uint8_t freed_phase;
	bool freed_in_instance; /* its phase instance was still open when it was freed */
	bool alive_past_instance;
	bool alive_into_optimizer; /* an optimizer phase began while it was alive */
	bool alive_past_forward;
	uint8_t tag;           /* set later by memtap_tag_range */
};

struct pass {
	const struct mt_trace *t;
	struct stack *threads;
	size_t nthreads;
	struct stack ranges; /* start/end ranges, process-wide */
	uint8_t *open;       /* per instance: still open */
	size_t ninstances, capinst;
	uint32_t opt_begun, forward_begun, first_opt_instance;
	bool first_forward_done;
	struct mt_map live;  /* address (or VMM handle | 1<<63) -> event index + 1 */
	struct life *life;   /* per event index */
};

static struct stack *thread_stack(struct pass *p, uint32_t thread)
{
	if (thread >= p->nthreads) {
		size_t n = thread + 16;
		struct stack *s = realloc(p->threads, n * sizeof *s);
		if (!s)
			return NULL;
		memset(s + p->nthreads, 0, (n - p->nthreads) * sizeof *s);
		p->threads = s;
		p->nthreads = n;
	}
	return &p->threads[thread];
}

static int push(struct pass *p, struct stack *s, uint8_t phase)
{
	uint32_t inst = (uint32_t)p->ninstances;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		struct frame *f = realloc(s->f, cap * sizeof *f);
		if (!f)
			return ENOMEM;
		s->f = f;
		s->cap = cap;
	}
	if (p->ninstances == p->capinst) {
		size_t cap = p->capinst ? 2 * p->capinst : 1024;
		uint8_t *o = realloc(p->open, cap);
		if (!o)
			return ENOMEM;
		p->open = o;
		p->capinst = cap;
	}
	p->open[p->ninstances++] = 1;
	s->f[s->n++] = (struct frame){phase, inst};
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
}

/* The innermost classified phase around an event of this thread. */
static struct frame current(const struct pass *p, const struct stack *s)
{
	for (size_t i = s ? s->n : 0; i-- > 0;)
		if (s->f[i].phase != PH_NONE)
			return s->f[i];
	for (size_t i = p->ranges.n; i-- > 0;)
		if (p->ranges.f[i].phase != PH_NONE)
			return p->ranges.f[i];
	return (struct frame){PH_NONE, UINT32_MAX};
}

static void made(struct pass *p, const struct mt_event *e, size_t i, uint64_t key)
{
	struct frame f = current(p, thread_stack(p, e->thread));

	p->life[i] = (struct life){.tag = 0, .phase = f.phase, .instance = f.instance, .before_forward = p->forward_begun == 0,
				   .first_optimizer = f.phase == PH_OPTIMIZER && f.instance == p->first_opt_instance,
				   .opt_seen = p->opt_begun};
	mt_map_put(&p->live, key, i + 1);
}

static void freed(struct pass *p, const struct mt_event *e, uint64_t key)
{
	uint64_t i;
	struct life *l;

	if (!mt_map_del(&p->live, key, &i))
		return;
	l = &p->life[i - 1];
	l->freed = true;
	l->freed_phase = current(p, thread_stack(p, e->thread)).phase;
	l->freed_in_instance = l->instance != UINT32_MAX && p->open[l->instance];
	l->alive_past_instance = l->instance != UINT32_MAX && !p->open[l->instance];
	l->alive_into_optimizer = p->opt_begun > l->opt_seen;
	l->alive_past_forward = p->first_forward_done;
}

static uint8_t infer(const struct life *l)
{
	bool kept_past_instance = !l->freed || l->alive_past_instance;

	if (l->before_forward && (!l->freed || l->alive_past_forward))
		return MT_TAG_PARAMS;
	if (l->phase == PH_BACKWARD && (l->freed ? l->alive_into_optimizer : true))
		return MT_TAG_GRADS;
	if (l->first_optimizer && kept_past_instance)
		return MT_TAG_OPTIMIZER;
	if (l->phase == PH_FORWARD && l->freed && l->freed_phase == PH_BACKWARD)
		return MT_TAG_ACTIVATIONS;
	if (l->freed && l->freed_in_instance)
		return MT_TAG_TEMPORARIES;
	return MT_TAG_OTHER;
}

int mt_composition_build(struct mt_composition *c, const struct mt_trace *t)
{
	struct pass p = {.t = t};
	int err = 0;

	memset(c, 0, sizeof *c);
	c->n = t->nevents;
	c->category = calloc(t->nevents + 1, 1);
	c->source = calloc(t->nevents + 1, 1);
	p.life = calloc(t->nevents + 1, sizeof *p.life);
	if (!c->category || !c->source || !p.life) {
		err = ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t->nevents && !err; i++) {
		const struct mt_event *e = &t->events[i];
		struct stack *s;
		uint64_t k;

		switch (e->kind) {
		case MT_EV_RANGE_PUSH:
			if ((s = thread_stack(&p, e->thread)))
				err = push(&p, s, (uint8_t)classify(mt_trace_string(t, e->aux)));
			c->has_phases = true;
			break;
		case MT_EV_RANGE_POP:
			if ((s = thread_stack(&p, e->thread)))
				pop(&p, s);
			break;
		case MT_EV_RANGE_START:
			err = push(&p, &p.ranges, (uint8_t)classify(mt_trace_string(t, e->aux)));
			c->has_phases = true;
			break;
		case MT_EV_RANGE_END:
			pop(&p, &p.ranges);
			break;
		case MT_EV_ALLOC:
			if (!e->error)
				made(&p, e, i, e->addr);
			break;
		case MT_EV_FREE:
			if (!e->error)
				freed(&p, e, e->addr);
			break;
		case MT_EV_VMM_CREATE:
			made(&p, e, i, e->aux | 1ull << 63);
			break;
		case MT_EV_VMM_RELEASE:
			/* for its purpose, physical memory's life ends with its handle's release
			   (PyTorch and NCCL unmap first) */
			if (!e->error)
				freed(&p, e, e->aux | 1ull << 63);
			break;
		case MT_EV_TAG_RANGE:
			if (mt_map_get(&p.live, e->addr, &k))
				p.life[k - 1].tag = e->tag;
			break;
		default:
			break;
		}
	}
	for (size_t i = 0; i < t->nevents; i++) {
		const struct mt_event *e = &t->events[i];
		if (e->kind != MT_EV_ALLOC && e->kind != MT_EV_VMM_CREATE)
			continue;
		uint8_t tag = p.life[i].tag ? p.life[i].tag : e->tag;
		if (tag) {
			c->category[i] = tag;
			c->source[i] = MT_SOURCE_TAG;
		} else {
			c->category[i] = c->has_phases ? infer(&p.life[i]) : MT_TAG_OTHER;
			c->source[i] = c->has_phases ? MT_SOURCE_INFERRED : MT_SOURCE_NONE;
		}
	}
out:
	for (size_t i = 0; i < p.nthreads; i++)
		free(p.threads[i].f);
	free(p.threads);
	free(p.ranges.f);
	free(p.open);
	free(p.life);
	mt_map_free(&p.live);
	if (err)
		mt_composition_free(c);
	return err;
}

void mt_composition_free(struct mt_composition *c)
{
	free(c->category);
	free(c->source);
	memset(c, 0, sizeof *c);
}
