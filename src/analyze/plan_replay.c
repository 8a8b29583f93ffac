/* The modeled step through the caching allocator (plan_replay.h): the planner's
 * sequence becomes `memtap replay`'s input, one op per allocation and free. */
#include "analyze/plan_replay.h"

#include <stdlib.h>
#include <string.h>

#include "analyze/simulate.h"

struct ops {
	struct mt_sim_input in;
	uint32_t *index; /* id -> its allocation's op */
	size_t cap, icap;
	bool failed;
};

static bool grow(struct ops *o, uint32_t id)
{
	if (o->in.nops == o->cap) {
		struct mt_sim_op *p = realloc(o->in.ops, (o->cap = o->cap ? 2 * o->cap : 4096) * sizeof *p);
		if (!p)
			return false;
		o->in.ops = p;
	}
	if (id >= o->icap) {
		size_t n = o->icap ? 2 * o->icap : 4096;
		uint32_t *p;
		while (n <= id)
			n *= 2;
		if (!(p = realloc(o->index, n * sizeof *p)))
			return false;
		memset(p + o->icap, 0, (n - o->icap) * sizeof *p);
		o->index = p, o->icap = n;
	}
	return true;
}

static void on_alloc(void *ctx, uint32_t id, uint64_t bytes, uint64_t stream)
{
	struct ops *o = ctx;

	if (o->failed || !grow(o, id)) {
		o->failed = true;
		return;
	}
	o->index[id] = (uint32_t)o->in.nops;
	o->in.ops[o->in.nops] = (struct mt_sim_op){.size = bytes, .stream = stream, .slot = o->in.nops};
	o->in.nops++;
}

static void on_free(void *ctx, uint32_t id)
{
	struct ops *o = ctx;

	if (o->failed || id >= o->icap || !grow(o, 0)) {
		o->failed = true;
		return;
	}
	o->in.ops[o->in.nops] = (struct mt_sim_op){.free = true, .slot = o->index[id]};
	o->in.ops[o->in.nops].stream = o->in.ops[o->index[id]].stream;
	o->in.nops++;
}

const char *mt_plan_replay(const struct mt_plan_config *c, uint64_t capacity, const struct mt_cache_config *allocator,
			   struct mt_plan_replay *out)
{
	struct ops o = {0};
	struct mt_plan_sink sink = {&o, on_alloc, on_free};
	struct mt_cache_config native;
	struct mt_sim_result *r;
	const char *why;

	memset(out, 0, sizeof *out);
	if ((why = mt_plan_steps(c, MT_PLAN_REPLAY_STEPS, &sink)) == NULL && o.failed)
		why = "out of memory building the step's allocations";
	if (!why && !(r = malloc(sizeof *r)))
		why = "out of memory replaying the step";
	if (!why) {
		mt_cache_preset(&native, "native");
		if (mt_sim_run(&o.in, allocator ? allocator : &native, capacity, false, r))
			why = "out of memory replaying the step";
		out->peak_allocated = r->peak_allocated;
		out->peak_reserved = r->stats.peak_reserved;
		out->ops = o.in.nops;
		out->ooms = r->ooms;
		free(r);
	}
	free(o.in.ops);
	free(o.index);
	return why;
}
