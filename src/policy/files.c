/* Where policies write: the policy folder (memtap.append, memtap.snapshot) and the run
 * directory (snapshot_all, the event log, the rank files). A file is reached from its
 * folder's descriptor one component at a time without following a symbolic link, and is
 * written only when it is a regular file with one name: a FIFO could block, a device or
 * a symbolic link reach elsewhere, and a second name (a hard link planted in the folder)
 * could be a file outside it. Nothing a policy writes lands outside its folder. What
 * policies write in all is counted against a quota (policy_output): a write past it is
 * refused and counted, said when the quota is first reached and again at exit. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/engine.h"
#include "core/units.h"

/* A file's problem, or 0 when policies may write it. */
static int unfit(const struct stat *st)
{
	if (S_ISLNK(st->st_mode))
		return -ELOOP;
	if (!S_ISREG(st->st_mode))
		return MT_POL_NOT_REGULAR;
	return st->st_nlink > 1 ? MT_POL_LINKED : 0;
}

/* The folder that holds `rel`'s last component, reached from `dir` one component at a
 * time without following a symbolic link or climbing out (..): its descriptor (the last
 * component in `*last`), or -errno or MT_POL_CLIMBS. */
static int walk(const char *dir, const char *rel, bool make_folders, const char **last)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), next, err;
	const char *p = rel, *slash;
	char part[1024];

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
		if (strcmp(part, "..") == 0) {
			close(fd);
			return MT_POL_CLIMBS;
		}
		if (make_folders)
			mkdirat(fd, part, 0755); /* if it is there already, or cannot be, the open says */
		next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		err = errno;
		close(fd);
		fd = next;
		errno = err;
	}
	*last = p;
	return fd < 0 ? -errno : fd;
}

int mt_pol_open_in(const char *dir, const char *rel, int flags, mode_t mode, bool make_folders)
{
	const char *name;
	int fd = walk(dir, rel, make_folders, &name), file, err;
	struct stat st;

	if (fd < 0)
		return fd;
	/* looked at before it is opened (a FIFO's open could block), and again after */
	if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (err = unfit(&st))) {
		close(fd);
		return err;
	}
	file = openat(fd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
	err = errno;
	close(fd);
	if (file < 0)
		return -err;
	if (fstat(file, &st) != 0 || (err = unfit(&st))) {
		close(file);
		return err ? err : MT_POL_NOT_REGULAR;
	}
	return file;
}

static void remove_in(const char *dir, const char *rel)
{
	const char *name;
	int fd = walk(dir, rel, false, &name);

	if (fd >= 0) {
		unlinkat(fd, name, 0);
		close(fd);
	}
}

/* ---- the output quota (policy_output), on the policy thread ---- */

static struct {
	uint64_t written, refused;
} out;

int mt_pol_snapshot_in(const char *dir, const char *rel, const char *path, mode_t mode, bool make_folders,
		       uint64_t *bytes)
{
	struct stat st;
	int fd, r;

	*bytes = 0;
	if ((r = mt_pol_output_fits(1)))
		return r;
	if ((fd = mt_pol_open_in(dir, rel, O_WRONLY | O_CREAT | O_EXCL, mode, make_folders)) < 0)
		return fd;
	/* one larger than what is left of the quota is refused before a byte is written */
	r = mt_pol.host->snapshot(fd, path, mt_pol_output_left());
	if (r == EFBIG)
		r = mt_pol_output_fits(mt_pol_output_left() + 1);
	if (!r && fstat(fd, &st) != 0)
		r = errno;
	if (close(fd) != 0 && !r)
		r = errno;
	if (!r && !(r = mt_pol_output_fits((uint64_t)st.st_size))) {
		*bytes = (uint64_t)st.st_size;
		mt_pol_output_wrote(*bytes);
		return 0;
	}
	remove_in(dir, rel);
	return r;
}

uint64_t mt_pol_output_left(void)
{
	uint64_t quota = mt_pol.host->output;

	return !quota ? UINT64_MAX : out.written < quota ? quota - out.written : 0;
}

int mt_pol_output_fits(uint64_t bytes)
{
	uint64_t quota = mt_pol.host->output;
	char q[32];

	if (!quota || (bytes <= quota && out.written <= quota - bytes))
		return 0;
	if (!out.refused++)
		mt_pol_say("policies reached policy_output=%s: what they write from now on is refused",
			   mt_format_size(quota, q, sizeof q));
	return MT_POL_OVER_QUOTA;
}

void mt_pol_output_wrote(uint64_t bytes)
{
	out.written += bytes;
}

uint64_t mt_pol_output_written(void)
{
	return out.written;
}

void mt_pol_output_said(void)
{
	char w[32];

	if (out.refused)
		mt_pol_say("policies wrote %s into files; %llu writes refused past policy_output",
			   mt_format_size(out.written, w, sizeof w), (unsigned long long)out.refused);
}

const char *mt_pol_why(int code)
{
	switch (code) {
	case MT_POL_NOT_REGULAR:
		return "not a regular file; policies write only regular files";
	case MT_POL_LINKED:
		return "a hard link (the file has another name, maybe outside the folder): not written";
	case MT_POL_OVER_QUOTA:
		return "over the quota of what policies may write (policy_output)";
	case MT_POL_CLIMBS:
		return "a path that climbs out of its folder (..)";
	case -ELOOP:
	case -ENOTDIR:
		return "a symbolic link on the way (not followed) or not a folder";
	default:
		return strerror(code < 0 ? -code : code);
	}
}
