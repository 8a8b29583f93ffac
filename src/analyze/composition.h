/* What each allocation was for: parameters, gradients, optimizer state, activations,
 * temporaries or other. Explicit tags win (memtap_tag_push/range); otherwise the
 * allocation's NVTX phase and lifetime decide:
 *   made before the first forward and alive beyond it           -> params
 *   made in backward and alive when the next optimizer phase starts -> grads
 *   made in the first optimizer phase and alive after it          -> optimizer
 *   made in forward and freed in backward                         -> activations
 *   freed inside the phase (forward/backward/optimizer) that made it -> temporaries
 *   anything else                                                 -> other
 * A phase is the innermost NVTX range whose name says forward (forward, fwd), backward
 * (backward, bwd) or optimizer (optim), pushed on the allocating thread or started with
 * a start/end range. */
#ifndef MT_COMPOSITION_H
#define MT_COMPOSITION_H

#include "reader/reader.h"

enum mt_source { MT_SOURCE_NONE, MT_SOURCE_TAG, MT_SOURCE_INFERRED };

struct mt_composition {
	uint8_t *category; /* per event index: an enum mt_tag (only allocation events matter) */
	uint8_t *source;   /* per event index: an enum mt_source */
	size_t n;
	bool has_phases; /* the trace had NVTX phases to infer from */
};

/* The whole trace at once... */
int mt_composition_build(struct mt_composition *c, const struct mt_trace *t);
/* ...or event by event, in order, inside another pass: start, a step per event (0 or
 * an errno), then finish with the first error (which it returns; the scan is freed). */
struct mt_composition_scan;
int mt_composition_start(struct mt_composition_scan **s, struct mt_composition *c, const struct mt_trace *t);
int mt_composition_step(struct mt_composition_scan *s, size_t i);
int mt_composition_finish(struct mt_composition_scan *s, int err);
void mt_composition_free(struct mt_composition *c);

#endif
