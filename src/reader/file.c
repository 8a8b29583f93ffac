/* Regular files only (file.h). The kind of a path is read from the file opened, never
 * from a look before the open, so that what is refused is what would have been read. */
#include "reader/file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t mode)
{
	return S_ISDIR(mode)	? "a directory"
	       : S_ISFIFO(mode) ? "a FIFO"
	       : S_ISCHR(mode)	? "a character device"
	       : S_ISBLK(mode)	? "a block device"
	       : S_ISSOCK(mode) ? "a socket"
				: "a special file";
}

int mt_file_open(const char *path, int *fd, uint64_t *size, char *why, size_t n)
{
	struct stat st;
	int r;

	/* O_NONBLOCK: opening a FIFO does not wait for a writer (reads of a regular file
	 * ignore the flag) */
	*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &st) != 0) {
		r = errno;
		snprintf(why, n, "cannot read %s: %s", path, strerror(r));
	} else if (!S_ISREG(st.st_mode)) {
		r = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		snprintf(why, n, "%s is %s, not a regular file", path, kind(st.st_mode));
	} else {
		if (size)
			*size = (uint64_t)st.st_size;
		return 0;
	}
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
	return r;
}

int mt_file_read_config(const char *path, char **text, size_t *len, char *why, size_t n)
{
	uint64_t size;
	size_t got = 0;
	int fd, r;

	*text = NULL;
	*len = 0;
	if ((r = mt_file_open(path, &fd, &size, why, n)))
		return r;
	if (size > MT_FILE_CONFIG_MAX) {
		snprintf(why, n, "%s is %" PRIu64 " bytes, more than a config file memtap reads (%u MiB)", path, size,
			 MT_FILE_CONFIG_MAX >> 20);
		close(fd);
		return EFBIG;
	}
	if (!(*text = malloc(size + 1))) {
		snprintf(why, n, "out of memory reading %s", path);
		close(fd);
		return ENOMEM;
	}
	/* the size it had when opened: a file growing meanwhile is not read past it */
	while (got < size && !r) {
		ssize_t k = read(fd, *text + got, size - got);
		if (k > 0)
			got += (size_t)k;
		else if (k == 0)
			break; /* shorter than it was: what it holds now */
		else if (errno != EINTR)
			r = errno;
	}
	close(fd);
	if (r) {
		snprintf(why, n, "cannot read %s: %s", path, strerror(r));
		free(*text);
		*text = NULL;
		return r;
	}
	(*text)[got] = '\0';
	*len = got;
	return 0;
}
