/* A folder and a name joined with one '/' (core/path.h), and its length as snprintf's. */
#include <string.h>

#include "../tap.h"
#include "core/path.h"

#define joins(dir, name, want)                                                                                         \
	do {                                                                                                           \
		char out_[64];                                                                                         \
		int n_ = mt_path_join(out_, sizeof out_, dir, "%s", name);                                             \
		ok(!strcmp(out_, want) && n_ == (int)strlen(want), "'%s' + '%s' = '%s' (%s)", dir, name, want, out_);  \
	} while (0)

int main(void)
{
	char small[8];

	joins("runs", "rank-0.trace", "runs/rank-0.trace");
	joins("runs/", "rank-0.trace", "runs/rank-0.trace");
	joins("runs//", "rank-0.trace", "runs/rank-0.trace");
	joins("/", "tmp", "/tmp");
	joins("", "tmp", "/tmp");      /* as "%s/%s" made it */
	joins("a//b/", "c", "a//b/c"); /* only the end: the folder is as given */
	is(mt_path_join(small, sizeof small, "runs/", "rank-%d.trace", 12), 18, "cut short: the length it needed");
	ok(!strcmp(small, "runs/ra"), "cut short: terminated (%s)", small);
	is(mt_path_join(small, 3, "runs", "x"), 6, "cut inside the folder: the length it needed");
	ok(!strcmp(small, "ru"), "cut inside the folder: terminated (%s)", small);
	return done();
}
