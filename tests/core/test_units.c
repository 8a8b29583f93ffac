/* Size parsing and printing. */
#include <errno.h>
#include <string.h>

#include "../tap.h"
#include "core/units.h"

static uint64_t parse(const char *s, int *err)
{
	uint64_t v = 0;
	*err = mt_parse_size(s, &v);
	return v;
}

int main(void)
{
	int err;
	char buf[32];

	is(parse("4096", &err), 4096, "plain bytes");
	is(parse("80GiB", &err), 80ull << 30, "GiB");
	is(parse("80G", &err), 80ull << 30, "G is binary");
	is(parse("80GB", &err), 80000000000ull, "GB is decimal");
	is(parse("512k", &err), 512 << 10, "suffixes ignore case");
	is(parse("1.5GiB", &err), 3ull << 29, "fractions");
	is(parse("2 MiB", &err), 2 << 20, "space before the unit");
	parse("lots", &err);
	is(err, EINVAL, "words are refused");
	parse("12XB", &err);
	is(err, EINVAL, "unknown units are refused");
	parse("", &err);
	is(err, EINVAL, "empty text is refused");
	parse("-1", &err);
	is(err, EINVAL, "negative sizes are refused");
	parse("99999999999999999999", &err);
	is(err, ERANGE, "overflow is reported");
	parse("20000000T", &err);
	is(err, ERANGE, "overflow through the unit is reported");
	ok(strcmp(mt_format_size(3ull << 29, buf, sizeof buf), "1.50 GiB") == 0, "formats GiB: %s", buf);
	ok(strcmp(mt_format_size(100, buf, sizeof buf), "100 B") == 0, "formats bytes: %s", buf);
	return done();
}
