/* Opening the files memtap reads offline (traces, snapshots, logs, configs, scripts): a
 * regular file only. A FIFO, device, socket or directory is refused in one line without
 * being waited on or read, so that no path makes a command hang or read forever; a file
 * read whole into memory (a config) is read only up to a bound. */
#ifndef MT_FILE_H
#define MT_FILE_H

#include <stddef.h>
#include <stdint.h>

/* The most memtap reads of a config file (--model, --deepspeed): real ones are kilobytes,
 * and parsing one takes about 22 times its size in memory (a 64 MiB one, 1.4 GB). */
#define MT_FILE_CONFIG_MAX (16u << 20)

/* path opened for reading, when it is a regular file: 0 with *fd and *size (NULL: not
 * wanted); else *fd is -1, and an errno code (EISDIR; EINVAL: a FIFO, a device, a socket)
 * comes back with why, one line that names the path (why may be NULL when n is 0). */
int mt_file_open(const char *path, int *fd, uint64_t *size, char *why, size_t n);
/* The whole of the config file at path, at most MT_FILE_CONFIG_MAX bytes, in *text (NUL
 * after its *len bytes; free it). 0, or an errno code (EFBIG: larger) with why. */
int mt_file_read_config(const char *path, char **text, size_t *len, char *why, size_t n);

#endif
