/* Where policies write: the policy folder (memtap.append, memtap.snapshot) and the run
 * directory (snapshot_all, the event log, the rank files). A file is reached from its
 * folder's descriptor one component at a time without following a symbolic link, and is
 * written only when it is a regular file with one name: a FIFO could block, a device or
 * a symbolic link reach elsewhere, and a second name (a hard link planted in the folder)
 * could be a file outside it. Nothing a policy writes lands outside its folder. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/engine.h"

/* A file's problem, or 0 when policies may write it. */
static int unfit(const struct stat *st)
{
	if (S_ISLNK(st->st_mode))
		return -ELOOP;
	if (!S_ISREG(st->st_mode))
		return MT_POL_NOT_REGULAR;
	return st->st_nlink > 1 ? MT_POL_LINKED : 0;
}

int mt_pol_open_in(const char *dir, const char *rel, int flags, mode_t mode, bool make_folders)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), next, err;
	const char *p = rel, *slash;
	char part[1024];
	struct stat st;

	while (fd >= 0 && (slash = strchr(p, '/'))) {
		size_t n = (size_t)(slash - p);
		if (n >= sizeof part) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(part, p, n);
		part[n] = '\0';
		p = slash + 1;
		if (!n || strcmp(part, ".") == 0)
			continue;
		if (make_folders)
			mkdirat(fd, part, 0755); /* if it is there already, or cannot be, the open says */
		next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		err = errno;
		close(fd);
		fd = next;
		errno = err;
	}
	if (fd < 0)
		return -errno;
	/* looked at before it is opened (a FIFO's open could block), and again after */
	if (fstatat(fd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && (err = unfit(&st))) {
		close(fd);
		return err;
	}
	next = openat(fd, p, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
	err = errno;
	close(fd);
	if (next < 0)
		return -err;
	if (fstat(next, &st) != 0 || (err = unfit(&st))) {
		close(next);
		return err ? err : MT_POL_NOT_REGULAR;
	}
	return next;
}

const char *mt_pol_why(int code)
{
	switch (code) {
	case MT_POL_NOT_REGULAR:
		return "not a regular file; policies write only regular files";
	case MT_POL_LINKED:
		return "a hard link (the file has another name, maybe outside the folder): not written";
	case -ELOOP:
	case -ENOTDIR:
		return "a symbolic link on the way (not followed) or not a folder";
	default:
		return strerror(code < 0 ? -code : code);
	}
}
