/* A folder and a name joined with one '/' (core/path.h). No allocation: the recorder
 * joins paths while the job starts. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/path.h"

int mt_path_join(char *out, size_t size, const char *dir, const char *fmt, ...)
{
	size_t n = strlen(dir), k;
	va_list ap;
	int r;

	while (n && dir[n - 1] == '/')
		n--;
	k = (size_t)snprintf(out, size, "%.*s/", (int)n, dir);
	va_start(ap, fmt);
	r = vsnprintf(k < size ? out + k : NULL, k < size ? size - k : 0, fmt, ap);
	va_end(ap);
	return r < 0 ? r : (int)k + r;
}
