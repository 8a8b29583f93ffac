/* The caching allocator's knobs: presets (native, memtap, memtap-vmm, bump), the
 * PYTORCH_CUDA_ALLOC_CONF syntax read and written back, and the rounding of a request to
 * its block size (PyTorch's rules, with roundup_power2_divisions). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine.h"

int mt_cache_preset(struct mt_cache_config *c, const char *name)
{
	/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp) */
	*c = (struct mt_cache_config){
	    .min_block = 512,
	    .small_size = 1 * MIB,
	    .small_segment = 2 * MIB,
	    .mid_segment = 20 * MIB,
	    .min_large = 10 * MIB,
	    .large_round = 2 * MIB,
	    .max_split = UINT64_MAX,
	    .split_remainder = 1 * MIB,
	    .oversize = 20 * MIB,
	    .cache = true,
	    .granule = 2 * MIB,
	};
	if (strcmp(name, "native") == 0)
		return 0;
	if (strcmp(name, "bump") == 0) {
		c->cache = false;
		return 0;
	}
	if (strcmp(name, "memtap-vmm") == 0) {
		/* native's segments and splits, as address ranges with pages only under blocks */
		c->stitch = true;
		return 0;
	}
	if (strcmp(name, "memtap") != 0)
		return EINVAL;
	/* memtap: native's segments and splits; cached segments nothing uses go back before
	 * a new one would raise the peak */
	c->trim = true;
	return 0;
}

static bool parse_bool(const char *v, size_t n, bool *out)
{
	if ((n == 4 && strncasecmp(v, "true", 4) == 0) || (n == 1 && *v == '1'))
		return *out = true, true;
	if ((n == 5 && strncasecmp(v, "false", 5) == 0) || (n == 1 && *v == '0'))
		return *out = false, true;
	return false;
}

static bool parse_num(const char *v, size_t n, double *out)
{
	char buf[32], *end;

	if (n == 0 || n >= sizeof buf)
		return false;
	memcpy(buf, v, n);
	buf[n] = 0;
	*out = strtod(buf, &end);
	return *end == 0 && *out >= 0;
}

static int set_key(struct mt_cache_config *c, const char *k, size_t kn, const char *v, size_t vn)
{
	double x;
	bool f;
#define KEY(s) (kn == sizeof(s) - 1 && strncmp(k, s, kn) == 0)
	if (KEY("expandable_segments") || KEY("stitch") || KEY("tag_pools") || KEY("caching") || KEY("trim")) {
		if (!parse_bool(v, vn, &f))
			return EINVAL;
		if (KEY("stitch"))
			c->stitch = f;
		else if (KEY("trim"))
			c->trim = f;
		else if (KEY("tag_pools"))
			c->tag_pools = f;
		else if (KEY("caching"))
			c->cache = f;
		else
			c->expandable = f;
		return 0;
	}
	if (!parse_num(v, vn, &x))
		return EINVAL;
	if (KEY("max_split_size_mb"))
		c->max_split = x * MIB < 20.0 * MIB ? 20 * MIB : (uint64_t)(x * MIB);
	else if (KEY("roundup_power2_divisions"))
		c->power2_divisions = (unsigned)x;
	else if (KEY("garbage_collection_threshold") && x < 1)
		c->gc_threshold = x;
	else if (KEY("granule_mb") && x >= 2 && (uint64_t)x % 2 == 0)
		c->granule = (uint64_t)x * MIB;
	else if (KEY("limit_mb"))
		c->limit = (uint64_t)(x * MIB);
	else
		return EINVAL;
	return 0;
#undef KEY
}

int mt_cache_configure(struct mt_cache_config *c, const char *conf, const char **bad)
{
	for (const char *p = conf; p && *p;) {
		const char *end = strchr(p, ','), *colon;
		size_t n = end ? (size_t)(end - p) : strlen(p);

		colon = memchr(p, ':', n);
		if (!colon || set_key(c, p, (size_t)(colon - p), colon + 1, n - (size_t)(colon - p) - 1)) {
			*bad = p;
			return EINVAL;
		}
		p += n + (end ? 1 : 0);
	}
	return 0;
}

int mt_cache_describe(const struct mt_cache_config *c, char *buf, size_t n)
{
	static const char *const tf[2] = {"False", "True"};
	int k = snprintf(buf, n,
			 "caching:%s,expandable_segments:%s,stitch:%s,tag_pools:%s,trim:%s,roundup_power2_divisions:%u,"
			 "garbage_collection_threshold:%.15g,limit_mb:%.15g",
			 tf[c->cache], tf[c->expandable], tf[c->stitch], tf[c->tag_pools], tf[c->trim],
			 c->power2_divisions, c->gc_threshold, (double)c->limit / MIB);

	if (c->max_split != UINT64_MAX && k >= 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, ",max_split_size_mb:%.15g", (double)c->max_split / MIB);
	return k;
}

uint64_t mt_cache_round(const struct mt_cache_config *c, uint64_t size)
{
	unsigned d = c->power2_divisions;

	if (size < c->min_block)
		return c->min_block;
	if (d > 1 && size > c->min_block * d && (size & (size - 1)) != 0) {
		/* PyTorch's roundup_power2_next_division: the power-of-two interval below
		 * size split in d (a power of two) equal steps */
		uint64_t floor = 1ull << (63 - __builtin_clzll(size));
		uint64_t step = floor >> (31 - __builtin_clz(d));

		if (step == 0)
			return floor << 1;
		return (size & ~(step - 1)) == size ? size : (size & ~(step - 1)) + step;
	}
	return align_up(size, c->min_block);
}
