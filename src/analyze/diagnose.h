/* What to change so that it fits (docs/REPORT.md, "What to change"): for each
 * out-of-memory failure, and for each device whose peak is over the capacity `memtap
 * report --gpu-mem` names, the cause read from the evidence the report gathered, and the
 * changes that would make the job fit, in the order of what they cost the user, each
 * with the peak it predicts and how that was predicted:
 *   - allocator settings: the recorded allocations replayed up to the failure, the
 *     failed request last, under each setting (analyze/simulate.c);
 *   - the code's own bytes given back: a leak's growth, from the report's leak scan; a
 *     checkpoint loaded onto the device; CUDA graphs' private pools;
 *   - the training setup (micro-batch with accumulation, recomputation, precision,
 *     optimizer offload, ZeRO, more GPUs): the planner calibrated on the measured
 *     composition (report --plan gives the model and setup), the cache from the planner's
 *     step replayed through the allocator where the job had one. */
#ifndef MT_DIAGNOSE_H
#define MT_DIAGNOSE_H

#include "analyze/report.h"

enum mt_cause {
	MT_CAUSE_STEP,		/* the step needs more than the device */
	MT_CAUSE_OPTIMIZER,	/* the optimizer's state, made at the first step, leaves the next no room */
	MT_CAUSE_GROWTH,	/* memory grew across iterations: a leak */
	MT_CAUSE_CHECKPOINT,	/* a checkpoint loaded onto the device beside the live model */
	MT_CAUSE_POOLS,		/* CUDA graphs' private pools (torch.compile's reduce-overhead) */
	MT_CAUSE_FRAGMENTATION, /* free in the allocator's segments, not in one block */
	MT_CAUSE_CACHE,		/* a peak: the tensors fit, the allocator's reserve does not */
	MT_CAUSE_OUTSIDE,	/* the device's memory held where no hook saw it */
	MT_CAUSE_COUNT
};
/* What grew, where the cause is growth: by what came after the growing stack's
 * allocations made in a forward (analyze/composition.h's after_forward). */
enum mt_growth {
	MT_GROWTH_KEPT,	  /* made outside a forward: something kept every iteration */
	MT_GROWTH_OUTPUT, /* made in a forward a backward followed: an output or loss kept */
	MT_GROWTH_GRAPH,  /* made in a forward no backward followed: a graph kept, no torch.no_grad() */
	MT_GROWTH_COUNT
};
extern const char *const mt_growth_names[MT_GROWTH_COUNT]; /* in the JSON */
extern const char *const mt_growth_words[MT_GROWTH_COUNT]; /* in a line */
extern const char *const mt_cause_names[MT_CAUSE_COUNT];   /* in the JSON */
extern const char *const mt_cause_words[MT_CAUSE_COUNT];   /* in a line */

/* Changes, cheapest for the user first: a setting before a code change, a code change
 * before a slower step, that before more GPUs. */
enum mt_fix {
	MT_FIX_ALLOCATOR,
	MT_FIX_LEAK,
	MT_FIX_CHECKPOINT,
	MT_FIX_POOLS,
	MT_FIX_MICRO_BATCH,
	MT_FIX_RECOMPUTE,
	MT_FIX_PRECISION,
	MT_FIX_OPTIMIZER,
	MT_FIX_OFFLOAD,
	MT_FIX_ZERO,
	MT_FIX_FSDP,
	MT_FIX_LORA,
	MT_FIX_SEQUENCE,
	MT_FIX_GPUS,
	MT_FIX_COUNT
};
extern const char *const mt_fix_names[MT_FIX_COUNT];

struct mt_remedy {
	enum mt_fix kind;
	char change[256];	    /* in words */
	char options[96];	    /* memtap plan's --what-if options, or the PYTORCH_CUDA_ALLOC_CONF */
	double allocated, reserved; /* the peak predicted after the change */
	bool fits;
	const char *cost; /* what it costs the user */
	const char *how;  /* how the peak was predicted: "replayed", "measured" or "planned" */
	uint32_t stack;	  /* a leak's stack */
};

#define MT_REMEDIES 16

struct mt_diagnosis {
	size_t event;  /* the failed allocation, or the peak's event (peak) */
	uint64_t time; /* ... its time */
	bool peak;     /* the peak against report --gpu-mem, not a failure */
	uint8_t device;
	uint64_t capacity;	     /* what it had to fit in: the failure's total, or --gpu-mem */
	uint64_t outside;	     /* of it, held where no hook saw (the driver's count less memtap's) */
	uint64_t request;	     /* asked for at the failure */
	uint64_t allocated;	     /* live then (at the peak: the peak) */
	uint64_t reserved;	     /* a caching allocator's segments then (0: none known) */
	uint64_t pools;		     /* ... in private pools, and CUDA graphs' memory nodes live then */
	uint64_t unusable;	     /* ... free in them, unused at a failure: planned changes keep it spare */
	const uint64_t *composition; /* live then, by what it was for (MT_TAG_*) */
	/* what calibrates the planner: the peak of the steps before a failure's own, else the
	 * failure's moment, or the peak */
	const uint64_t *measured;
	uint64_t measured_total;
	size_t boundaries;  /* iteration boundaries passed before it */
	bool step_finished; /* a whole step ran before it: the optimizer's state was live, or two
			     * boundaries had passed */
	enum mt_cause cause;
	uint64_t cause_bytes;  /* the cause's bytes: the optimizer's state, the leak, the checkpoint, the
				* pools, free in segments, outside */
	uint32_t cause_stack;  /* the leak's or the checkpoint's stack */
	enum mt_growth growth; /* what grew, where the cause is growth */
	double need;	       /* what the step needs, allocated */
	bool need_estimated;   /* ... by the planner, the step having not finished; else a lower bound */
	bool planned;	       /* the planner said it (report --plan) */
	const char *replay;    /* why the allocator's replay was not run, or NULL */
	struct mt_remedy remedy[MT_REMEDIES];
	size_t nremedies;
};

#define MT_DIAGNOSED 16 /* failures diagnosed, the first: each replays the trace up to it */

/* The first MT_DIAGNOSED out-of-memory failures' diagnoses, then each device over
 * r->target (its peak reserved, or allocated without segments) where none failed. *out is
 * malloc'd. 0 or ENOMEM. */
int mt_diagnose(const struct mt_report *r, struct mt_diagnosis **out, size_t *n);

#endif
