/* Composition by category: one pass over the trace (on its own, or event by event inside
 * the report's first pass) following every thread's NVTX range stack, noting for each
 * allocation the phase it was made in and what had happened by the time it was freed;
 * then the rules of composition.h. */
#include "analyze/composition.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/map.h"
#include "core/array.h"
#include "reader/progress.h"

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

/* What is known of one live allocation while the pass runs. */
struct life {
	size_t event;	      /* the event that made it */
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
	uint8_t tag; /* set later by memtap_tag_range */
};

struct pass {
	const struct mt_trace *t;
	struct stack *threads;
	size_t nthreads;
	struct stack ranges; /* start/end ranges, process-wide */
	uint8_t *open;	     /* per instance: still open */
	size_t ninstances, capinst;
	uint32_t opt_begun, forward_begun, first_opt_instance;
	bool first_forward_done;
	struct mt_map live; /* address (or VMM handle | 1<<63) -> slot in life + 1 */
	struct life *life;  /* live allocations */
	struct mt_slots slots;
	struct mt_composition *c;
	uint8_t *phase_of; /* per string id: its phase + 1, 0 until classified */
};

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

static int push(struct pass *p, struct stack *s, uint8_t phase)
{
	uint32_t inst = (uint32_t)p->ninstances;

	if (mt_grow((void **)&s->f, &s->cap, s->n, sizeof *s->f) ||
	    mt_grow((void **)&p->open, &p->capinst, p->ninstances, 1))
		return ENOMEM;
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

/* An allocation's life is over (or the trace is): its category is known. */
static void settle(struct pass *p, size_t slot)
{
	const struct life *l = &p->life[slot];
	uint8_t tag = l->tag ? l->tag : p->t->events[l->event].tag;

	if (tag) {
		p->c->category[l->event] = tag;
		p->c->source[l->event] = MT_SOURCE_TAG;
	} else {
		p->c->category[l->event] = p->c->has_phases ? infer(l) : MT_TAG_OTHER;
		p->c->source[l->event] = p->c->has_phases ? MT_SOURCE_INFERRED : MT_SOURCE_NONE;
	}
	mt_slot_give(&p->slots, slot);
}

static int made(struct pass *p, const struct mt_event *e, size_t i, uint64_t key)
{
	struct frame f = current(p, thread_stack(p, e->thread));
	size_t slot;
	uint64_t old;

	if (mt_map_get(&p->live, key, &old)) /* made again without a free seen: the first one's life is over */
		settle(p, old - 1);
	if ((slot = mt_slot_take(&p->slots, (void **)&p->life, sizeof *p->life)) == SIZE_MAX)
		return ENOMEM;
	p->life[slot] = (struct life){.event = i,
				      .phase = f.phase,
				      .instance = f.instance,
				      .before_forward = p->forward_begun == 0,
				      .first_optimizer = f.phase == PH_OPTIMIZER && f.instance == p->first_opt_instance,
				      .opt_seen = p->opt_begun};
	return mt_map_put(&p->live, key, slot + 1);
}

static void freed(struct pass *p, const struct mt_event *e, uint64_t key)
{
	uint64_t k;
	struct life *l;

	if (!mt_map_del(&p->live, key, &k))
		return;
	l = &p->life[k - 1];
	l->freed = true;
	l->freed_phase = current(p, thread_stack(p, e->thread)).phase;
	l->freed_in_instance = l->instance != UINT32_MAX && p->open[l->instance];
	l->alive_past_instance = l->instance != UINT32_MAX && !p->open[l->instance];
	l->alive_into_optimizer = p->opt_begun > l->opt_seen;
	l->alive_past_forward = p->first_forward_done;
	settle(p, k - 1);
}

int mt_composition_start(struct mt_composition_scan **out, struct mt_composition *c, const struct mt_trace *t)
{
	struct pass *p = calloc(1, sizeof *p);

	memset(c, 0, sizeof *c);
	*out = (struct mt_composition_scan *)p;
	if (!p)
		return ENOMEM;
	p->t = t;
	p->c = c;
	c->n = t->nevents;
	c->category = calloc(t->nevents + 1, 1);
	c->source = calloc(t->nevents + 1, 1);
	p->phase_of = calloc(t->nstrings + 1, 1);
	p->threads = calloc(t->nthreads + 1, sizeof *p->threads);
	p->nthreads = t->nthreads;
	if (!c->category || !c->source || !p->phase_of || !p->threads)
		return ENOMEM;
	for (size_t i = 0; i < t->nevents && !c->has_phases; i++)
		c->has_phases = t->events[i].kind == MT_EV_RANGE_PUSH || t->events[i].kind == MT_EV_RANGE_START;
	return 0;
}

int mt_composition_step(struct mt_composition_scan *scan, size_t i)
{
	struct pass *p = (struct pass *)scan;
	const struct mt_event *e = &p->t->events[i];
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
	case MT_EV_RANGE_START:
		return push(p, &p->ranges, phase_of(p, e->aux));
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
	case MT_EV_TAG_RANGE:
		if (mt_map_get(&p->live, e->addr, &k))
			p->life[k - 1].tag = e->tag;
		return 0;
	default:
		return 0;
	}
}

int mt_composition_finish(struct mt_composition_scan *scan, int err)
{
	struct pass *p = (struct pass *)scan;

	if (!p)
		return err ? err : ENOMEM;
	for (size_t i = 0; i < p->live.cap && !err; i++) /* alive at the end */
		if (p->live.used[i] == 1)
			settle(p, p->live.vals[i] - 1);
	for (size_t i = 0; p->threads && i < p->nthreads; i++)
		free(p->threads[i].f);
	free(p->threads);
	free(p->ranges.f);
	free(p->open);
	free(p->life);
	mt_slots_free(&p->slots);
	free(p->phase_of);
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

	for (size_t i = 0; i < t->nevents && !err; i++) {
		mt_progress("composition", i, t->nevents);
		err = mt_composition_step(s, i);
	}
	return mt_composition_finish(s, err);
}

void mt_composition_free(struct mt_composition *c)
{
	free(c->category);
	free(c->source);
	memset(c, 0, sizeof *c);
}
