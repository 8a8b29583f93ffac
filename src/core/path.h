/* Paths made from a folder and a name: one '/' between them however the folder was
 * given ("runs/", "/"), so that no file name or message reads "runs//rank-0.trace". */
#ifndef MT_PATH_H
#define MT_PATH_H

#include <stddef.h>

/* dir, then '/', then the name fmt makes, into out (size bytes, always terminated when
 * size > 0); dir's trailing slashes are not repeated ("/" stays the root). Returns the
 * length the whole path needs, as snprintf does: size or more means it was cut. */
int mt_path_join(char *out, size_t size, const char *dir, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
