/* What each allocation was for: parameters, gradients, optimizer state, activations,
 * temporaries or other. Explicit tags win (memtap_tag_push/range); otherwise, in a trace
 * with NVTX phases, the allocation's phase and lifetime decide:
 *   made before the first forward and alive beyond it           -> params
 *   made in backward or an optimizer step, alive at the end (a failure cut it short),
 *   where its stack's earlier allocations were temporaries       -> temporaries
 *   made in backward and alive when the next optimizer phase starts -> grads
 *   made in the first optimizer phase and alive after it          -> optimizer
 *   made in forward and freed in backward                         -> activations
 *   freed inside the phase (forward/backward/optimizer) that made it -> temporaries
 *   anything else                                                 -> other
 * A phase is the innermost NVTX range whose name says forward (forward, fwd), backward
 * (backward, bwd) or optimizer (optim), pushed on the allocating thread or started with
 * a start/end range.
 *
 * A trace without NVTX phases whose stacks have names (a PyTorch snapshot, Python frames)
 * is read by its frames instead (source MT_SOURCE_FRAMES): each allocation's stack says
 * its phase (an optimizer's step, autograd's engine or a *Backward node (or no frames at
 * all where others have Python frames: stacks="python" records none for autograd's
 * thread), a module's
 * forward) or that it builds the model (a module's _apply/to/cuda, init, loading,
 * DataParallel's replicas); an allocation whose stack says nothing (a loss, a thread
 * without frames) is in the phase the last one that did said, and the snapshot's
 * external annotations (Optimizer.step#..., zero_grad) override both while open. Then:
 *   built by the model's code, or made before recording and never freed -> params
 *   made in an optimizer step and kept past it                          -> optimizer
 *   made in backward and kept past it                                   -> grads
 *   made in forward and freed in backward, or kept to the end           -> activations
 *   freed in the phase run that made it                                 -> temporaries
 *   made before recording and freed in backward (activations), in an optimizer step
 *   (optimizer: the old state an optimizer replaced) or zero_grad (grads); anything
 *   else                                                                -> other
 * and where torch's Adam family stepped with no state made, freed or said in the
 * trace, two of each three (four, gradients kept) frameless never-freed blocks of a
 * size made before recording are its state.
 * Each allocation's evidence (`evidence`: 2 its own frames, 1 a phase carried over or a
 * lifetime alone, 0 nothing) says how sure its category is. */
#ifndef MT_COMPOSITION_H
#define MT_COMPOSITION_H

#include "reader/reader.h"

enum mt_source { MT_SOURCE_NONE, MT_SOURCE_TAG, MT_SOURCE_INFERRED, MT_SOURCE_FRAMES };

/* What came after a stack's allocations made in a forward pass (mt_composition.after_forward) */
enum {
	MT_FORWARD_MADE = 1,	    /* some allocation of the stack was made in a forward */
	MT_FORWARD_BACKWARD = 2,    /* ... and a backward began after one, before the next forward */
	MT_FORWARD_NO_BACKWARD = 4, /* ... and the next forward began first: no backward for it */
	MT_FORWARD_PENDING = 8	    /* (while the pass runs) neither has come yet */
};

struct mt_composition {
	uint8_t *of;		/* per event index, an allocation's: what the three below read, one byte */
	uint8_t *after_forward; /* per stack: MT_FORWARD_* */
	size_t n;
	bool has_phases; /* the trace had NVTX phases to infer from */
	bool frames;	 /* ... or none, and is read by its frames */
};

/* Allocation event i's category (an enum mt_tag; MT_TAG_NONE for any other event or none
 * built), where it came from, and how sure it is (2 sure, 1 likely, 0 a guess). */
static inline uint8_t mt_composition_category(const struct mt_composition *c, size_t i)
{
	return c->of ? c->of[i] & 7 : MT_TAG_NONE;
}

/* The same as the composition's totals count it: MT_TAG_OTHER where none was decided. */
static inline uint8_t mt_composition_counted(const struct mt_composition *c, size_t i)
{
	return mt_composition_category(c, i) ? mt_composition_category(c, i) : MT_TAG_OTHER;
}

static inline enum mt_source mt_composition_source(const struct mt_composition *c, size_t i)
{
	return (enum mt_source)(c->of ? c->of[i] >> 3 & 3 : MT_SOURCE_NONE);
}

static inline uint8_t mt_composition_evidence(const struct mt_composition *c, size_t i)
{
	return c->of ? c->of[i] >> 5 & 3 : 0;
}

/* The whole trace at once... */
int mt_composition_build(struct mt_composition *c, const struct mt_trace *t);
/* ...or event by event, in order, inside other passes: start; a look at every event (in any
 * order) and ready; a step per event in time order (0 or an errno); then finish with the
 * first error (which it returns; the scan is freed). */
struct mt_composition_scan;
int mt_composition_start(struct mt_composition_scan **s, struct mt_composition *c, const struct mt_trace *t);
void mt_composition_look(struct mt_composition_scan *s, const struct mt_event *e);
void mt_composition_ready(struct mt_composition_scan *s);
int mt_composition_step(struct mt_composition_scan *s, const struct mt_event *e, size_t i); /* e is event i */
int mt_composition_finish(struct mt_composition_scan *s, int err);
void mt_composition_free(struct mt_composition *c);
/* Where each optimizer step begins, read by frames: the first allocation inside an
 * optimizer's step after allocations that said another phase. Event by event, in time
 * order, inside another pass: start (NULL: out of memory), a step per event, then finish,
 * which frees the scan and gives the event indices (malloc'd; *n of them; NULL: out of
 * memory). */
struct mt_steps_scan;
struct mt_steps_scan *mt_composition_steps_start(const struct mt_trace *t);
void mt_composition_steps_step(struct mt_steps_scan *s, const struct mt_event *e, size_t i); /* e is event i */
size_t *mt_composition_steps_finish(struct mt_steps_scan *s, size_t *n);
/* Whether a stack's frames load a checkpoint onto the device: torch.load (torch/serialization.py),
 * safetensors' loaders. */
bool mt_composition_loads(const struct mt_trace *t, uint32_t stack);

#endif
