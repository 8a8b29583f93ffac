/* Size parsing and printing shared by simgpu, simtrain and memtap's options.
 * Pure functions: no allocation, no global state, safe in injected code. */
#include "units.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

struct suffix {
	const char *text;
	uint64_t scale;
};

static const struct suffix suffixes[] = {
    {"", 1},
    {"B", 1},
    {"K", 1ull << 10},
    {"Ki", 1ull << 10},
    {"KiB", 1ull << 10},
    {"M", 1ull << 20},
    {"Mi", 1ull << 20},
    {"MiB", 1ull << 20},
    {"G", 1ull << 30},
    {"Gi", 1ull << 30},
    {"GiB", 1ull << 30},
    {"T", 1ull << 40},
    {"Ti", 1ull << 40},
    {"TiB", 1ull << 40},
    {"KB", 1000ull},
    {"MB", 1000000ull},
    {"GB", 1000000000ull},
    {"TB", 1000000000000ull},
};

static int scale_of(const char *s, uint64_t *scale)
{
	while (*s == ' ')
		s++;
	for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
		if (strcasecmp(s, suffixes[i].text) == 0) {
			*scale = suffixes[i].scale;
			return 0;
		}
	}
	return EINVAL;
}

int mt_parse_size(const char *text, uint64_t *out)
{
	uint64_t whole = 0, scale;
	uint64_t frac = 0, frac_div = 1;
	const char *p = text;

	if (!text || !out)
		return EINVAL;
	while (*p == ' ')
		p++;
	if (*p < '0' || *p > '9')
		return EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (whole > (UINT64_MAX - 9) / 10)
			return ERANGE;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return EINVAL;
		for (; *p >= '0' && *p <= '9'; p++) {
			if (frac_div < 1000000000000ull) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				frac_div *= 10;
			}
		}
	}
	if (scale_of(p, &scale))
		return EINVAL;
	if (whole > UINT64_MAX / scale)
		return ERANGE;
	/* scale <= 2^40 and frac < frac_div <= 10^12: the product fits when done in two steps */
	*out = whole * scale + (uint64_t)((double)frac / (double)frac_div * (double)scale);
	return 0;
}

char *mt_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < sizeof unit / sizeof unit[0]) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}
