/* The planner's reserved memory: the modeled training step's allocations
 * (mt_plan_steps) run through the caching allocator's engine (PyTorch's native policy,
 * or a job's own settings) on a simulated device, as `memtap replay` runs a trace. What the replay adds
 * to the planner's allocated peak is the allocator's cache at its peak: blocks freed,
 * kept and not reusable by what comes next (sizes that do not fit, other streams). */
#ifndef MT_PLAN_REPLAY_H
#define MT_PLAN_REPLAY_H

#include <stdint.h>

#include "core/plan.h"

#define MT_PLAN_REPLAY_STEPS 3 /* steady state: the optimizer's state is made in the first */

struct mt_plan_replay {
	uint64_t peak_allocated, peak_reserved; /* of the replayed sequence */
	uint64_t ops;
	uint64_t ooms; /* allocations that failed under the capacity */
};

struct mt_cache_config;

/* NULL, or one line saying why the setup cannot be replayed. capacity: the device's
 * bytes for the allocator (0: unlimited); allocator: its settings (NULL: PyTorch's
 * native policy as it ships). */
const char *mt_plan_replay(const struct mt_plan_config *c, uint64_t capacity, const struct mt_cache_config *allocator,
			   struct mt_plan_replay *out);

#endif
