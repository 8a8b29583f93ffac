/* The writer thread: drains every thread's ring at least every flush_ms, encodes the
 * events with the strings, stacks and modules they refer to into checksummed chunks,
 * and appends them to the trace file. It is the only code that touches memtap's files,
 * and it has a descriptor table, working directory and root of its own (prim.h,
 * mtp_own_files): nothing the job does to its descriptors or directories (close_range,
 * dup2, chdir, chroot) reaches the trace, and nothing memtap opens takes a number in the
 * job's table; threads it makes for memtap (the policy thread) share its table.
 * Other threads ask it for work (a drain now, a snapshot, the final END, a crash's
 * flush, an exec's END) through atomic counters and futexes, which a signal handler may
 * use: no thread of the job ever holds a lock the writer waits for, nor waits for one a
 * hook may hold. It blocks all signals. At exit (and before an exec) it writes an END
 * chunk with the events written and those dropped, by reason; anything recorded later
 * is drained the same way, and each such drain ends with a new END. Its two buffers are
 * mapped once at start and never grow, so a drain cannot fail for memory. A write that
 * fails (full disk) is said once, with the file's name; the partial chunk is cut off
 * again, and later events are counted as dropped for the write. When the job's own
 * threads have all ended (main called pthread_exit) it ends the process, as glibc would
 * once the last thread was gone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "policy/policy.h"
#include "recorder/mtp.h"
#include "core/path.h"

#define MAX_MODULES 4096
#define MAX_OWN 8	    /* threads of memtap's: the writer, the policy thread, ... */
#define ENDER (MAX_OWN - 1) /* the last: the one that ends a process whose main called pthread_exit */
#define END_MAX (16 + 10 * (4 + MT_DROP_COUNT)) /* an END chunk's payload at most: varints */
#define STALLED_MS 2000 /* a pipe's reader that takes no byte for this long has stopped reading */
/* a writer that does no round for this long is stuck: longer than a pipe's stall, after
   which the writer goes on and counts what it cannot write as such */
#define STUCK_NS ((STALLED_MS + 1000) * 1000000ull)
/* The writer's stack, whatever the job's ulimit -s (threads take theirs from it): its
 * deepest road (a drain that feeds the policy engine, the header's lines) takes tens of KiB. */
#define WRITER_STACK (2u << 20)
/* The thread that ends the process runs the job's exit handlers: a main thread's room. */
#define ENDER_STACK (8u << 20)

/* What a thread asks of the writer beyond a drain; one at a time (w.post). */
enum ask_kind { ASK_NONE, ASK_SNAPSHOT, ASK_SPAWN };

struct ask {
	int fd; /* a snapshot into this descriptor of memtap's own table, or -1: into path */
	const char *path;
	long tid;	     /* the asking thread, whose directory and root the path is from */
	uint64_t limit;	     /* a snapshot larger than this is refused before it is written */
	void *(*fn)(void *); /* a thread of memtap's: fn(arg) on a stack of `stack` bytes */
	void *arg;
	size_t stack;
	pthread_t *thread;
	int result; /* 0 or an errno */
};

static struct writer {
	/* held by the writer thread while it works, and by a fork (which thus finds it idle);
	   no other thread takes it, except to do the writer's work when there is no writer */
	pthread_mutex_t lock;
	pthread_cond_t ready; /* the writer thread reached its loop (fork waits for it) */
	pthread_t thread;
	bool running;	/* a writer thread was made */
	bool starting;	/* it was made and is not in its loop yet (atomic) */
	bool own_table; /* it has its own descriptor table (else it shares the job's) */
	/* asking: a thread bumps `asked` (its round), rings `bell` and sleeps on `served`
	   until the writer has done that round */
	uint32_t bell, asked, served;
	uint32_t stalled;     /* 1 + `served` when a full ring's wait for a round timed out; 0: never */
	bool stop_asked;      /* the process is exiting: the END chunk */
	pthread_mutex_t post; /* one ask with arguments at a time */
	struct ask ask;
	int asking; /* its kind: set by the asker (release), back to ASK_NONE once done */
	/* threads in an exec (atomic: a signal handler's exec may interrupt an ask, so no lock):
	   while there is one, the writer has written the END and writes nothing after it */
	uint32_t execs;
	bool parked;
	/* the last round asked when the writer found itself parked: the END is written, which
	   is what an exec waits for (it may have asked after the round that parked began) */
	uint32_t parked_for;
	uint64_t end_at;
	bool closed;   /* the END chunk is written: later drains end with a new one */
	bool sleeping; /* the writer waits for its bell (a wake rings it only then) */
	bool any;      /* something was recorded, or dropped (atomic: at_exit reads it) */
	/* the file */
	int fd;
	bool failed;  /* a write failed (or the file could not be made): nothing more is written */
	bool warned;  /* the failure was said */
	bool regular; /* a regular file: a failed write can be cut off again */
	char path[4096];
	char problem[256]; /* what kept the trace from the disk, for memtap run's status */
	dev_t dev;	   /* the trace's identity, for a writer without a table of its own */
	ino_t ino;
	struct mt_buf events, table;
	uint32_t strings_done, stacks_done;
	uint64_t written;		    /* events in the file */
	uint64_t size;			    /* bytes of whole chunks in the file */
	uint64_t drops_said[MT_DROP_COUNT]; /* the counts of the last DROPS chunk */
	unsigned long long adds, subs;	    /* dl_iterate_phdr counters at the last module scan */
	uint64_t module_key[MAX_MODULES];
	size_t nmodules;
	/* memtap's own threads, by kernel id: the job's are the others */
	long own[MAX_OWN];
	/* the job's main thread called pthread_exit: the writer looks (in /proc, through
	   descriptors opened at start) for the moment only memtap's threads are left, and
	   wakes the thread the main one left to end the process */
	bool main_gone;
	bool main_exited, ender_made; /* main called pthread_exit; its ender thread was made */
	uint32_t end_now;	      /* futex */
	int proc_stat, proc_task;
	int status_fd; /* memtap run's status line for this process, made at start */
} w = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .ready = PTHREAD_COND_INITIALIZER,
       .post = PTHREAD_MUTEX_INITIALIZER,
       .fd = -1,
       .proc_stat = -1,
       .proc_task = -1,
       .status_fd = -1};

/* Says once that the trace cannot be written, and where. */
static void write_failed(int err)
{
	const char *why = err == ETIMEDOUT ? "its reader stopped reading" : strerror(err);

	w.failed = true;
	if (!w.warned)
		mtp_warn("cannot write %s: %s; events from now on are counted as lost", w.path, why);
	if (!w.problem[0])
		snprintf(w.problem, sizeof w.problem, "could not be written: %s", why);
	w.warned = true;
}

/* Without a descriptor table of its own (unshare refused), the trace's descriptor is a
 * number in the job's table, which the job may close and give to a file of its own: each
 * write first checks that it is still the file memtap made (a narrow window remains). */
static bool still_mine(void)
{
	struct stat st;

	if (w.own_table || (fstat(w.fd, &st) == 0 && st.st_dev == w.dev && st.st_ino == w.ino))
		return true;
	w.failed = true;
	if (!w.warned)
		mtp_warn("the job took memtap's descriptor of %s; events from now on are counted as lost", w.path);
	if (!w.problem[0])
		snprintf(w.problem, sizeof w.problem, "was taken from memtap by the job (its descriptor)");
	w.warned = true;
	return false;
}

/* Writes a whole chunk; on failure errno says why and *wrote how much went out. */
static bool put_chunk(int fd, uint8_t type, const struct mt_buf *b, ssize_t *wrote)
{
	struct mt_chunk_header h = {.magic = MT_CHUNK_MAGIC, .type = type, .length = (uint32_t)b->len};
	struct iovec iov[2] = {{&h, sizeof h}, {b->data, b->len}}, *v = iov;
	int nv = 2;

	h.crc = mt_crc32(0, b->data, b->len);
	*wrote = 0;
	while (nv > 0) {
		ssize_t n = writev(fd, v, nv);
		if (n < 0 && errno == EINTR)
			continue;
		/* a pipe or a device (opened non-blocking) whose reader does not read: a bounded
		   wait, never one that holds the writer, and so the job's exit, for good */
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (poll(&p, 1, STALLED_MS) > 0)
				continue;
			errno = ETIMEDOUT;
		}
		if (n <= 0) {
			if (n == 0)
				errno = ENOSPC;
			return false;
		}
		*wrote += n;
		/* a short write: the rest, whose failure then says why */
		for (; nv > 0 && (size_t)n >= v->iov_len; v++, nv--)
			n -= (ssize_t)v->iov_len;
		if (nv > 0) {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	return true;
}

/* Appends a chunk to the trace; false when it is not in the file. */
static bool write_chunk(uint8_t type, const struct mt_buf *b)
{
	ssize_t n;
	int err;

	if (w.failed || w.fd < 0 || !still_mine())
		return false;
	if (put_chunk(w.fd, type, b, &n)) {
		w.size += (uint64_t)n;
		return true;
	}
	/* a partial chunk would fail its checksum; cut it off, so that an END chunk may
	   still fit in the room it took */
	err = errno;
	if (n > 0 && w.regular && ftruncate(w.fd, (off_t)w.size) != 0)
		w.regular = false;
	write_failed(err);
	return false;
}

static void begin(struct mt_buf *b)
{
	b->len = 0;
}

#define CHUNK_FULL (MT_CHUNK_MAX / 2) /* a chunk this long is written: the rest of the buffer is headroom */

/* ---- modules: what is mapped, so stacks can be symbolized offline ---- */

struct scan {
	struct mt_buf *b;
	unsigned long long adds, subs;
};

static void build_id(const struct dl_phdr_info *info, char *out, size_t len)
{
	out[0] = '\0';
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const uint8_t *p, *end;
		if (ph->p_type != PT_NOTE)
			continue;
		p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const void *)p;
			const uint8_t *desc = p + sizeof *n + ((n->n_namesz + 3) & ~3u);
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(p + sizeof *n, "GNU", 4) == 0) {
				size_t k = 0;
				for (uint32_t j = 0; j < n->n_descsz && k + 3 < len; j++)
					k += (size_t)snprintf(out + k, len - k, "%02x", desc[j]);
				return;
			}
			p = desc + ((n->n_descsz + 3) & ~3u);
		}
	}
}

static int scan_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan *s = arg;
	uintptr_t lo, hi;
	char path[4096], id[128];
	const char *name = info->dlpi_name;
	uint64_t key;
	size_t n;

	(void)size;
	s->adds = info->dlpi_adds;
	s->subs = info->dlpi_subs;
	if (!mtp_load_bounds(info, &lo, &hi))
		return 0;
	if (!name || !*name) {
		ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1);
		if (k <= 0)
			return 0;
		path[k] = '\0';
		name = path;
	}
	key = (uint64_t)lo * 0x9e3779b97f4a7c15ull ^ (uint64_t)hi;
	for (size_t i = 0; i < w.nmodules; i++)
		if (w.module_key[i] == key)
			return 0;
	if (w.nmodules == MAX_MODULES)
		return 0;
	w.module_key[w.nmodules++] = key;
	if (s->b->len > CHUNK_FULL) {
		write_chunk(MT_CHUNK_MODULES, s->b);
		begin(s->b);
	}
	build_id(info, id, sizeof id);
	n = strlen(name);
	mt_buf_varint(s->b, n);
	mt_buf_bytes(s->b, name, n);
	n = strlen(id);
	mt_buf_varint(s->b, n);
	mt_buf_bytes(s->b, id, n);
	mt_buf_varint(s->b, info->dlpi_addr);
	mt_buf_varint(s->b, lo);
	mt_buf_varint(s->b, hi - lo);
	return 0;
}

static void scan_modules(void)
{
	struct scan s = {&w.table, 0, 0};

	begin(&w.table);
	dl_iterate_phdr(scan_one, &s);
	w.adds = s.adds;
	w.subs = s.subs;
	if (w.table.len)
		write_chunk(MT_CHUNK_MODULES, &w.table);
}

static int counters(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	((unsigned long long *)arg)[0] = info->dlpi_adds;
	((unsigned long long *)arg)[1] = info->dlpi_subs;
	return 1; /* the counters are the same in every entry: one is enough */
}

static void check_modules(void)
{
	unsigned long long c[2] = {0, 0};

	dl_iterate_phdr(counters, c);
	if (c[0] != w.adds || c[1] != w.subs)
		scan_modules();
}

/* ---- strings and stacks interned since the last drain ---- */

static void write_table(struct mtp_table *t, uint32_t *done, uint8_t type)
{
	uint32_t count = mtp_table_count(t);

	if (count == *done)
		return;
	begin(&w.table);
	for (uint32_t id = *done + 1; id <= count; id++) {
		size_t len;
		const uint8_t *p = mtp_table_get(t, id, &len);
		if (w.table.len > CHUNK_FULL) {
			write_chunk(type, &w.table);
			begin(&w.table);
		}
		mt_buf_varint(&w.table, id);
		if (type == MT_CHUNK_STRINGS) {
			mt_buf_varint(&w.table, len);
			mt_buf_bytes(&w.table, p, len);
		} else {
			uint64_t prev = 0, f;
			mt_buf_varint(&w.table, len / sizeof f);
			for (size_t i = 0; i < len; i += sizeof f) {
				memcpy(&f, p + i, sizeof f);
				mt_buf_zigzag(&w.table, (int64_t)(f - prev));
				prev = f;
			}
		}
	}
	*done = count;
	write_chunk(type, &w.table);
}

/* ---- draining the rings ---- */

/* Events dropped so far, by reason, and in all. */
static uint64_t drops_now(uint64_t *by)
{
	uint64_t all = 0;

	for (int i = 0; i < MT_DROP_COUNT; i++)
		by[i] = __atomic_load_n(&mtp_drops[i], __ATOMIC_RELAXED);
	for (struct mtp_log *l = __atomic_load_n(&mtp_logs, __ATOMIC_ACQUIRE); l; l = l->next) {
		uint64_t stunted = __atomic_load_n(&l->stunted, __ATOMIC_RELAXED);
		by[MT_DROP_RING_FULL] += __atomic_load_n(&l->dropped, __ATOMIC_RELAXED) - stunted;
		by[MT_DROP_MEMORY] += stunted;
	}
	for (int i = 0; i < MT_DROP_COUNT; i++)
		all += by[i];
	return all;
}

static uint64_t dropped_now(void)
{
	uint64_t by[MT_DROP_COUNT];

	return drops_now(by);
}

/* How often the job's threads waited for the writer to make room in a full ring, and how
 * many nanoseconds in all. */
static uint64_t waits_now(uint64_t *ns)
{
	uint64_t n = 0;

	*ns = 0;
	for (struct mtp_log *l = __atomic_load_n(&mtp_logs, __ATOMIC_ACQUIRE); l; l = l->next) {
		n += __atomic_load_n(&l->waits, __ATOMIC_RELAXED);
		*ns += __atomic_load_n(&l->waited_ns, __ATOMIC_RELAXED);
	}
	return n;
}

static void put_drops(struct mt_buf *b, const uint64_t *by)
{
	mt_buf_varint(b, MT_DROP_COUNT);
	for (int i = 0; i < MT_DROP_COUNT; i++)
		mt_buf_varint(b, by[i]);
}

/* A DROPS chunk when a count changed: a trace cut short still says why events are missing. */
static void write_drops(void)
{
	uint64_t by[MT_DROP_COUNT];

	drops_now(by);
	if (!memcmp(by, w.drops_said, sizeof by))
		return;
	begin(&w.table);
	put_drops(&w.table, by);
	if (write_chunk(MT_CHUNK_DROPS, &w.table))
		memcpy(w.drops_said, by, sizeof by);
}

static void flush_events(struct mt_encoder *st, size_t *count)
{
	if (*count == 0)
		return;
	/* what these events refer to goes first */
	write_table(&mtp_strings, &w.strings_done, MT_CHUNK_STRINGS);
	write_table(&mtp_stacks, &w.stacks_done, MT_CHUNK_STACKS);
	write_drops();
	if (write_chunk(MT_CHUNK_EVENTS, &w.events))
		w.written += *count;
	else
		mtp_drop(MT_DROP_WRITE, *count);
	*count = 0;
	*st = (struct mt_encoder){0, 0};
}

static void start_events(void)
{
	begin(&w.events);
	mt_buf_varint(&w.events, dropped_now());
}

/* A thread that ended, drained: its log leaves the registry and its memory goes back. */
static void free_log(struct mtp_log *l)
{
	struct mtp_log *prev = __atomic_load_n(&mtp_logs, __ATOMIC_ACQUIRE);

	/* only the writer unlinks; threads only push at the head, so the head needs a CAS */
	if (prev == l &&
	    __atomic_compare_exchange_n(&mtp_logs, &prev, l->next, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		goto unlinked;
	/* a thread pushed a new head meanwhile, or l is further down: unlink it from its predecessor */
	while (prev && prev->next != l)
		prev = prev->next;
	if (!prev)
		return;
	prev->next = l->next;
unlinked:
	mtp_drop(MT_DROP_RING_FULL, l->dropped - l->stunted);
	mtp_drop(MT_DROP_MEMORY, l->stunted);
	mtp_unmap(l->first, l->first->bytes);
	mtp_unmap(l->block, MTP_BLOCK_BYTES);
}

static bool file_ready(void);

/* Hands a ring's events [from, to) to the policy engine, before the slots are released. */
static void feed(const struct mtp_ring *r, uint64_t from, uint64_t to, uint64_t now)
{
	const struct mt_policy_engine *p = __atomic_load_n(&mtp_policy, __ATOMIC_ACQUIRE);

	while (p && from != to) {
		uint64_t i = from & r->mask, n = to - from;
		if (n > r->mask + 1 - i)
			n = r->mask + 1 - i; /* up to where the ring wraps */
		p->feed(&r->slot[i], n, now);
		from += n;
	}
}

struct drain {
	struct mt_encoder st;
	size_t count, total;
	uint64_t now;
	bool write; /* false: nowhere to write, the events are counted as lost */
};

/* Everything a ring holds now, into the events chunk (written whenever it is full). */
static void take(struct drain *d, struct mtp_ring *r)
{
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), tail = r->tail, fed = tail;

	if (!d->write) {
		feed(r, tail, head, d->now);
		mtp_drop(MT_DROP_WRITE, head - tail);
		__atomic_store_n(&r->tail, head, __ATOMIC_RELEASE);
		return;
	}
	for (; tail != head; tail++) {
		size_t before = w.events.len;
		/* what the reader would reject is refused here, so that it poisons nothing after it */
		if (!mt_event_valid(&r->slot[tail & r->mask])) {
			mtp_drop(MT_DROP_INVALID, 1);
			continue;
		}
		mt_encode_event(&w.events, &d->st, &r->slot[tail & r->mask]);
		if (w.events.len > before)
			d->count++;
		else /* no room: cannot happen with CHUNK_FULL's headroom, but counted if it does */
			mtp_drop(MT_DROP_MEMORY, 1);
		if (w.events.len > CHUNK_FULL) {
			feed(r, fed, tail + 1, d->now);
			fed = tail + 1;
			__atomic_store_n(&r->tail, tail + 1, __ATOMIC_RELEASE);
			d->total += d->count;
			flush_events(&d->st, &d->count);
			start_events();
		}
	}
	feed(r, fed, tail, d->now);
	__atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);
}

/* Returns how many events it wrote. Called by the writer (w.lock held). */
static size_t drain(void)
{
	struct drain d = {.now = mtp_now()};
	struct mtp_log *l, *next;
	const struct mt_policy_engine *policy = __atomic_load_n(&mtp_policy, __ATOMIC_ACQUIRE);

	for (l = __atomic_load_n(&mtp_logs, __ATOMIC_ACQUIRE); l; l = l->next)
		if (__atomic_load_n(&l->first->newer, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&l->first->head, __ATOMIC_ACQUIRE) != l->first->tail)
			break;
	if (!l && w.fd < 0)
		return 0; /* nothing recorded yet: no file yet */
	d.write = file_ready() && !w.failed;
	if (d.write) {
		check_modules();
		start_events();
	}
	for (l = __atomic_load_n(&mtp_logs, __ATOMIC_ACQUIRE); l; l = next) {
		bool orphan = __atomic_load_n(&l->orphan, __ATOMIC_ACQUIRE);
		next = l->next;
		/* oldest first; a replaced ring (newer seen before its head is read) is drained
		   to its end and freed */
		for (;;) {
			struct mtp_ring *r = l->first, *newer = __atomic_load_n(&r->newer, __ATOMIC_ACQUIRE);
			take(&d, r);
			if (!newer)
				break;
			l->first = newer;
			mtp_unmap(r, r->bytes);
		}
		if (orphan)
			free_log(l);
	}
	if (d.write) {
		d.total += d.count;
		flush_events(&d.st, &d.count);
	}
	if (policy)
		policy->feed(NULL, 0, d.now); /* the drain is complete */
	return d.total;
}

static void expand(const char *pattern, char *out, size_t len)
{
	char host[256] = "", num[32];
	const char *rank = mtp_rank();
	size_t k = 0;

	if (!rank)
		rank = "0";
	gethostname(host, sizeof host - 1);
	for (const char *p = pattern; *p && k + 1 < len; p++) {
		const char *add = NULL;
		if (*p != '%' || !p[1]) {
			out[k++] = *p;
			continue;
		}
		switch (*++p) {
		case 'p':
			snprintf(num, sizeof num, "%d", (int)getpid());
			add = num;
			break;
		case 'r':
			add = rank;
			break;
		case 'h':
			add = host;
			break;
		case '%':
			add = "%";
			break;
		default: /* not a placeholder: keep it as written */
			snprintf(num, sizeof num, "%%%c", *p);
			add = num;
		}
		for (; *add && k + 1 < len; add++)
			out[k++] = *add;
	}
	out[k] = '\0';
}

/* Creates the file 0600, never over an existing one: a taken name gets .1, .2, ...
 * A name that is a device, a pipe or a socket (-o /dev/null) is written as it is. */
static int create(void)
{
	char base[sizeof w.path - 16];
	struct stat st;

	expand(mtp_opt.output, base, sizeof base);
	if (mtp_opt.dir[0] && mkdir(mtp_opt.dir, 0755) != 0 && errno != EEXIST) /* the first rank makes it */
		mtp_warn("cannot make the run directory %s: %s", mtp_opt.dir, strerror(errno));
	if (stat(base, &st) == 0 && S_ISDIR(st.st_mode)) {
		errno = EISDIR;
	} else if (stat(base, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* a pipe without a reader fails here rather than holding the writer forever, and
		   one whose reader stops reading is waited for a bounded time (put_chunk) */
		snprintf(w.path, sizeof w.path, "%s", base);
		if ((w.fd = open(w.path, O_WRONLY | O_CLOEXEC | O_APPEND | O_NONBLOCK)) >= 0)
			return 0;
	} else {
		for (int i = 0; i < 1000; i++) {
			if (i == 0)
				snprintf(w.path, sizeof w.path, "%s", base);
			else
				snprintf(w.path, sizeof w.path, "%s.%d", base, i);
			/* read back by snapshots */
			w.fd = open(w.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_APPEND, 0600);
			if (w.fd >= 0) {
				if (i > 0)
					mtp_warn("%s exists; writing %s instead", base, w.path);
				w.regular = true;
				return 0;
			}
			if (errno != EEXIST)
				break;
		}
	}
	snprintf(w.path, sizeof w.path, "%s", base);
	snprintf(w.problem, sizeof w.problem, "could not be created: %s", strerror(errno));
	mtp_warn("cannot create trace %s: %s; recording is off, and what it records is counted as lost", base,
		 strerror(errno));
	w.warned = true;
	return -1;
}

static void info_line(struct mt_buf *b, const char *key, const char *value)
{
	mt_buf_bytes(b, key, strlen(key));
	mt_buf_u8(b, '=');
	for (const char *p = value; p && *p; p++)
		mt_buf_u8(b, *p == '\n' ? ' ' : (uint8_t)*p);
	mt_buf_u8(b, '\n');
}

static void info_number(struct mt_buf *b, const char *key, unsigned long long v)
{
	char num[32];

	snprintf(num, sizeof num, "%llu", v);
	info_line(b, key, num);
}

static void write_header(void)
{
	char host[256] = "", cmd[4096];
	struct timespec real;
	uint64_t start_real;
	int fd;
	ssize_t n = 0;
	struct mt_buf *b = &w.table;
	static const char *const launcher[][2] = {{"rank", "RANK"},
						  {"local_rank", "LOCAL_RANK"},
						  {"world_size", "WORLD_SIZE"},
						  {"rank", "OMPI_COMM_WORLD_RANK"},
						  {"local_rank", "OMPI_COMM_WORLD_LOCAL_RANK"},
						  {"world_size", "OMPI_COMM_WORLD_SIZE"},
						  {"rank", "PMIX_RANK"},
						  {"rank", "SLURM_PROCID"},
						  {"local_rank", "SLURM_LOCALID"},
						  {"world_size", "SLURM_NTASKS"}};
	bool seen[3] = {false, false, false};

	if ((n = write(w.fd, MT_FILE_MAGIC "\x01\0\0\0\0\0\0\0", 16)) != 16) {
		/* a full disk before the first byte: say so, and where */
		if (n > 0 && w.regular && ftruncate(w.fd, 0) != 0)
			w.regular = false;
		write_failed(n < 0 ? errno : ENOSPC);
		return;
	}
	w.size = 16;
	begin(b);
	gethostname(host, sizeof host - 1);
	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, cmd, sizeof cmd - 1);
		close(fd);
	}
	for (ssize_t i = 0; i < n; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	cmd[n > 0 ? n - 1 : 0] = '\0';
	clock_gettime(CLOCK_REALTIME, &real);
	/* the wall-clock time that goes with start_monotonic_ns */
	start_real = (uint64_t)real.tv_sec * 1000000000ull + (uint64_t)real.tv_nsec - (mtp_now() - mtp_start_ns);
	info_line(b, "memtap_version", PACKAGE_VERSION);
	info_number(b, "format", MT_FORMAT_VERSION);
	info_line(b, "backend", "preload");
	info_number(b, "pid", (unsigned long long)getpid());
	info_number(b, "ppid", (unsigned long long)getppid());
	info_line(b, "host", host);
	for (size_t i = 0; i < sizeof launcher / sizeof launcher[0]; i++) {
		const char *v = getenv(launcher[i][1]);
		int slot = launcher[i][0][0] == 'r' ? 0 : launcher[i][0][0] == 'l' ? 1 : 2;
		if (v && !seen[slot]) {
			info_line(b, launcher[i][0], v);
			seen[slot] = true;
		}
	}
	if (mtp_opt.dir[0])
		info_line(b, "run_dir", mtp_opt.dir);
	info_line(b, "cmdline", cmd);
	info_number(b, "start_realtime_ns", (unsigned long long)start_real);
	info_number(b, "start_monotonic_ns", (unsigned long long)mtp_start_ns);
	info_number(b, "depth", (unsigned long long)mtp_opt.depth);
	info_number(b, "ring", (unsigned long long)mtp_opt.ring);
	info_number(b, "max_memory", (unsigned long long)mtp_opt.max_memory);
	write_chunk(MT_CHUNK_INFO, b);
}

/* The file is made when there is a first event to put in it, so processes that never
 * touch the GPU (shells, launchers) leave no trace behind. Called with w.lock held. */
static bool file_ready(void)
{
	struct stat st;

	if (w.fd >= 0 || w.failed)
		return w.fd >= 0 && !w.failed;
	if (create()) {
		w.failed = true;
		return false;
	}
	if (fstat(w.fd, &st) == 0) {
		w.dev = st.st_dev;
		w.ino = st.st_ino;
	}
	write_header();
	scan_modules();
	return true;
}

/* ---- the END chunk, and what memtap run learns of it ---- */

/* The totals: events dropped in all, events written, the drops by reason, then the waits
 * for room in a full ring and their nanoseconds. An END chunk is tried even after a failed
 * write: cutting off the partial chunk made room. */
static bool write_end_to(int fd)
{
	uint64_t by[MT_DROP_COUNT], all = drops_now(by), ns, waits = waits_now(&ns);
	ssize_t n;

	begin(&w.table);
	mt_buf_varint(&w.table, all);
	mt_buf_varint(&w.table, w.written);
	put_drops(&w.table, by);
	mt_buf_varint(&w.table, waits);
	mt_buf_varint(&w.table, ns);
	return put_chunk(fd, MT_CHUNK_END, &w.table, &n);
}

/* memtap run's status folder (the status option): this process's file. With a table
 * of its own the writer makes it at start, before the job could forbid opening files (a
 * seccomp filter), and keeps it; without, it opens it when it writes, as the trace. */
static int status_file(void)
{
	char path[4096];

	if (w.status_fd >= 0 || !mtp_opt.status[0])
		return w.status_fd;
	mt_path_join(path, sizeof path, mtp_opt.status, "%d", (int)getpid());
	return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* What this process recorded and where it went, even when the trace itself is gone
 * (never made, or deleted while written), for memtap run's summary; empty until then. */
static void write_status(void)
{
	char line[sizeof w.path + sizeof w.problem + 128];
	int n, fd = status_file();

	if (fd < 0)
		return;
	n = snprintf(line, sizeof line, "written=%llu\ndropped=%llu\ntrace=%s\nproblem=%s\n",
		     (unsigned long long)w.written, (unsigned long long)dropped_now(), w.path, w.problem);
	if (n >= (int)sizeof line)
		n = (int)sizeof line - 1;
	if (pwrite(fd, line, (size_t)n, 0) != n || ftruncate(fd, n) != 0) {
		/* memtap run then summarizes from the trace alone */
	}
	if (fd != w.status_fd)
		close(fd);
}

/* Called by the writer: END in the trace. A process whose events were all dropped still
 * gets a file, which says so. Returns the file's size before the END chunk. */
static uint64_t write_end(void)
{
	uint64_t at = w.size;
	struct stat st;

	if (w.fd < 0 && !w.failed && dropped_now())
		file_ready();
	/* (a pipe that failed is not tried again: its reader stopped reading) */
	if (w.fd >= 0 && w.size >= 16 && (w.regular || !w.failed) && write_end_to(w.fd))
		w.size = at + sizeof(struct mt_chunk_header) + w.table.len;
	if (w.regular && !w.problem[0] && fstat(w.fd, &st) == 0 && st.st_nlink == 0) {
		snprintf(w.problem, sizeof w.problem, "was deleted while it was written");
		mtp_warn("the trace %s was deleted while it was written: its events are gone with it", w.path);
	}
	write_status();
	return at;
}

/* ---- what other threads ask of the writer ---- */

/* A path the job gave (memtap_snapshot), opened as the asking thread would: from its
 * working directory and root as they are now (/proc/self/task/TID), not the writer's,
 * which are as they were at start; never past its root (openat2's RESOLVE_IN_ROOT: a
 * chrooted job's "../x" stays inside, as it would for the job). Without /proc, or
 * openat2, from the writer's own view. */
static int open_as_job(const char *path, long tid)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
	struct open_how how = {.flags = flags, .mode = 0600, .resolve = RESOLVE_IN_ROOT};
	char at[64], root[PATH_MAX], cwd[PATH_MAX], inside[2 * PATH_MAX];
	const char *name = path;
	ssize_t nr, nc;
	size_t lr;
	int dirfd, fd, err;

	snprintf(at, sizeof at, "/proc/self/task/%ld/root", tid);
	if ((dirfd = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return open(path, flags, 0600);
	if (path[0] != '/') {
		/* the thread's directory as a path inside its root, when it is inside */
		nr = readlink(at, root, sizeof root - 1);
		snprintf(at, sizeof at, "/proc/self/task/%ld/cwd", tid);
		nc = readlink(at, cwd, sizeof cwd - 1);
		lr = nr == 1 ? 0 : (size_t)nr; /* a root of "/" adds nothing to strip */
		if (nr <= 0 || nc <= 0 || (size_t)nc < lr || memcmp(cwd, root, lr) ||
		    ((size_t)nc != lr && cwd[lr] != '/') || (nc > 10 && !memcmp(cwd + nc - 10, " (deleted)", 10))) {
			close(dirfd); /* a directory outside its root (chroot without chdir), or deleted */
			if ((dirfd = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
				return open(path, flags, 0600);
			fd = openat(dirfd, path, flags, 0600);
			goto done;
		}
		cwd[nc] = '\0';
		snprintf(inside, sizeof inside, "%s/%s", cwd + lr, path);
		name = inside;
	}
	fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	if (fd < 0 && errno == ENOSYS)
		fd = openat(dirfd, name[0] == '/' ? name + 1 : name, flags, 0600);
done:
	err = errno;
	close(dirfd);
	errno = err;
	return fd;
}

/* The trace so far, with an END chunk of its own, into a descriptor of memtap's (-1:
 * into the job's path); the running trace is left as it is. */
static int snapshot(int out, const char *path, long tid, uint64_t limit)
{
	int r = 0, mine = -1;
	off_t off = 0;
	ssize_t n;

	if (w.fd < 0 || !w.regular)
		return EIO;
	if (w.size + sizeof(struct mt_chunk_header) + END_MAX > limit)
		return EFBIG;
	if (out < 0 && (out = mine = open_as_job(path, tid)) < 0)
		return errno;
	/* copied through the table buffer, free between drains */
	while ((n = pread(w.fd, w.table.data, w.table.cap, off)) > 0) {
		if (write(out, w.table.data, (size_t)n) != n) {
			r = errno ? errno : EIO;
			break;
		}
		off += n;
	}
	if (n < 0)
		r = errno;
	if (r == 0 && !write_end_to(out))
		r = errno ? errno : EIO;
	if (mine >= 0 && close(mine) != 0 && r == 0)
		r = errno;
	return r;
}

/* memtap's own threads: made by the writer, they share its descriptor table. */
static struct {
	void *(*fn)(void *);
	void *arg;
} spawned[MAX_OWN];

static void *own_thread(void *arg)
{
	size_t i = (size_t)(uintptr_t)arg;
	void *r;

	__atomic_store_n(&w.own[i], mtp_gettid(), __ATOMIC_RELEASE);
	mtp_warn_privately = w.own_table;
	r = spawned[i].fn(spawned[i].arg);
	__atomic_store_n(&w.own[i], 0, __ATOMIC_RELEASE);
	__atomic_store_n(&spawned[i].fn, NULL, __ATOMIC_RELEASE);
	return r;
}

/* Runs with every signal blocked (the writer's mask, or the caller's for the moment). */
static int spawn(pthread_t *thread, size_t stack, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	sigset_t all, old;
	size_t i;
	int r;

	for (i = 1; i < ENDER; i++) {
		void *(*none)(void *) = NULL;
		if (__atomic_compare_exchange_n(&spawned[i].fn, &none, fn, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			break;
	}
	if (i == ENDER)
		return EAGAIN;
	spawned[i].arg = arg;
	pthread_attr_init(&a);
	if (stack)
		pthread_attr_setstacksize(&a, stack);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(thread, &a, own_thread, (void *)(uintptr_t)i);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (r)
		__atomic_store_n(&spawned[i].fn, NULL, __ATOMIC_RELEASE);
	return r;
}

static void answer(int result)
{
	w.ask.result = result;
	__atomic_store_n(&w.asking, ASK_NONE, __ATOMIC_RELEASE);
}

/* One round of the writer's work, with w.lock held: a drain, then what was asked. False
 * while an exec is under way: nothing is done, and those waiting for a drain wait on. */
static bool serve(size_t *wrote)
{
	int kind = __atomic_load_n(&w.asking, __ATOMIC_ACQUIRE);
	uint64_t size = w.size, dropped;

	if (w.parked) {
		if (__atomic_load_n(&w.execs, __ATOMIC_ACQUIRE))
			return false;
		/* every exec failed: the END goes again, and recording goes on */
		if (w.fd >= 0 && w.size > w.end_at && w.regular && ftruncate(w.fd, (off_t)w.end_at) == 0)
			w.size = size = w.end_at;
		w.parked = false;
	}
	dropped = dropped_now();
	*wrote = drain();
	if (!w.any && (w.fd >= 0 || dropped))
		__atomic_store_n(&w.any, true, __ATOMIC_RELEASE);
	if (__atomic_load_n(&w.execs, __ATOMIC_ACQUIRE)) {
		/* the image is about to go, and no atexit handler will run: END now, and nothing
		   after it unless the exec fails (what was asked waits till then) */
		w.end_at = w.fd >= 0 || dropped_now() ? write_end() : w.size;
		w.parked = true;
		return true;
	}
	switch (kind) {
	case ASK_SNAPSHOT:
		answer(snapshot(w.ask.fd, w.ask.path, w.ask.tid, w.ask.limit));
		break;
	case ASK_SPAWN:
		answer(spawn(w.ask.thread, w.ask.stack, w.ask.fn, w.ask.arg));
		break;
	}
	if (__atomic_load_n(&w.stop_asked, __ATOMIC_ACQUIRE) && !w.closed) {
		write_end();
		w.closed = true;
		__atomic_store_n(&mtp_state, MTP_CLOSED, __ATOMIC_RELEASE);
	} else if (w.closed && (w.size != size || dropped_now() != dropped)) {
		write_end(); /* after the END: what came later, then a new END, so the last END's totals hold */
	}
	return true;
}

/* ---- the job's threads all gone ---- */

static bool own_tid(long tid)
{
	for (size_t i = 0; i < MAX_OWN; i++)
		if (__atomic_load_n(&w.own[i], __ATOMIC_ACQUIRE) == tid)
			return true;
	return false;
}

/* /proc's view of this process, opened at start (a job may forbid opening files later);
 * without a table of its own the writer opens them when it looks, and closes them. */
static int proc_file(int *kept, const char *path, int flags)
{
	if (*kept >= 0 && lseek(*kept, 0, SEEK_SET) == 0)
		return *kept;
	return w.own_table ? -1 : open(path, O_RDONLY | O_CLOEXEC | flags);
}

static void proc_done(int fd, int kept)
{
	if (fd >= 0 && fd != kept)
		close(fd);
}

/* The job's own threads have all ended, the main one with pthread_exit (it stays a zombie
 * until the process ends): glibc would end the process now, with status 0, but memtap's
 * threads would keep it alive for good. */
static bool job_gone(void)
{
	char buf[4096];
	const char *state;
	long pid = getpid(), others = 0;
	ssize_t n;
	int fd = proc_file(&w.proc_stat, "/proc/self/stat", 0);

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof buf - 1);
	proc_done(fd, w.proc_stat);
	buf[n > 0 ? n : 0] = '\0';
	/* "pid (name) state ...": the name may hold anything, the state follows the last ')' */
	if (!(state = strrchr(buf, ')')) || state[1] != ' ' || state[2] != 'Z')
		return false;
	if ((fd = proc_file(&w.proc_task, "/proc/self/task", O_DIRECTORY)) < 0)
		return false;
	while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
		for (ssize_t at = 0; at < n;) {
			const struct dirent64 *d = (const void *)(buf + at);
			long tid = strtol(d->d_name, NULL, 10);
			at += d->d_reclen;
			others += tid > 0 && tid != pid && !own_tid(tid);
		}
	}
	proc_done(fd, w.proc_task);
	return n == 0 && others == 0;
}

/* The thread the main one leaves (made in the job's descriptor table, directory and
 * root, every signal blocked): it ends the process as glibc would have, with status 0,
 * running the job's exit handlers where they would have run. */
static void *end_process(void *slot)
{
	__atomic_store_n((long *)slot, mtp_gettid(), __ATOMIC_RELEASE);
	while (!__atomic_load_n(&w.end_now, __ATOMIC_ACQUIRE))
		mtp_futex_wait(&w.end_now, 0, 0);
	exit(0);
}

/* The thread that ends the process, made once, by a thread of the job's (so in its
 * descriptor table, directory and root): the main one as it leaves, or, where the writer
 * was not running yet, the one whose first event starts it after that. Without a writer
 * no thread of memtap's keeps the process alive. */
static void make_ender(void)
{
	pthread_t t;
	pthread_attr_t a;
	sigset_t all, old;

	pthread_mutex_lock(&w.lock); /* a writer still starting opens /proc first */
	while (__atomic_load_n(&w.starting, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&w.ready, &w.lock);
	pthread_mutex_unlock(&w.lock);
	if (!__atomic_load_n(&w.running, __ATOMIC_SEQ_CST) ||
	    __atomic_exchange_n(&w.ender_made, true, __ATOMIC_ACQ_REL))
		return;
	if (w.proc_stat < 0 && w.own_table) {
		mtp_warn("the main thread called pthread_exit, and memtap cannot see this process's threads (no /proc "
			 "at start): the process will not end by itself when the others have");
		return;
	}
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, ENDER_STACK);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, &a, end_process, &w.own[ENDER]) == 0) {
		/* counted as memtap's from the start: its id is set before the writer looks */
		while (!__atomic_load_n(&w.own[ENDER], __ATOMIC_ACQUIRE))
			mtp_cpu_relax();
		__atomic_store_n(&w.main_gone, true, __ATOMIC_RELEASE);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
}

void mtp_writer_main_gone(void)
{
	/* seen by a writer's start after this (mtp_writer_start), or this sees that start */
	__atomic_store_n(&w.main_exited, true, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&w.starting, __ATOMIC_SEQ_CST) || __atomic_load_n(&w.running, __ATOMIC_SEQ_CST))
		make_ender();
}

/* ---- the writer thread ---- */

static void *writer_main(void *arg)
{
	uint64_t pause_ms = mtp_opt.flush_ms, looked = mtp_now();

	(void)arg;
	prctl(PR_SET_NAME, "memtap-writer"); /* as ps and top show it */
	if (!(w.own_table = mtp_own_files()))
		mtp_warn(
		    "memtap's writer cannot have a descriptor table of its own (unshare: %s): a job that closes or "
		    "replaces its descriptors may take the trace's",
		    strerror(errno));
	mtp_warn_privately = w.own_table;
	__atomic_store_n(&w.own[0], mtp_gettid(), __ATOMIC_RELEASE);
	if (w.own_table) {
		w.proc_stat = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
		w.proc_task = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		w.status_fd = status_file();
	}
	pthread_mutex_lock(&w.lock);
	__atomic_store_n(&w.starting, false, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&w.ready);
	for (;;) {
		uint32_t bell = __atomic_load_n(&w.bell, __ATOMIC_SEQ_CST);
		uint32_t want = __atomic_load_n(&w.asked, __ATOMIC_ACQUIRE);
		size_t wrote = 0;
		if (serve(&wrote))
			__atomic_store_n(&w.served, want, __ATOMIC_RELEASE);
		else
			__atomic_store_n(&w.parked_for, want, __ATOMIC_RELEASE);
		mtp_futex_wake(&w.served);
		/* busy rings: come back soon; quiet ones: the full interval */
		pause_ms = wrote > mtp_opt.ring / 8 ? 1 : mtp_opt.flush_ms;
		if (__atomic_load_n(&w.main_gone, __ATOMIC_ACQUIRE) && !__atomic_load_n(&w.end_now, __ATOMIC_ACQUIRE) &&
		    mtp_now() - looked >= mtp_opt.flush_ms * 1000000ull) {
			looked = mtp_now();
			if (job_gone()) {
				__atomic_store_n(&w.end_now, 1, __ATOMIC_RELEASE);
				mtp_futex_wake(&w.end_now);
			}
		}
		pthread_mutex_unlock(&w.lock);
		if (want == __atomic_load_n(&w.asked, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&w.sleeping, true, __ATOMIC_SEQ_CST);
			mtp_futex_wait(&w.bell, bell, pause_ms * 1000000ull);
			__atomic_store_n(&w.sleeping, false, __ATOMIC_SEQ_CST);
		}
		pthread_mutex_lock(&w.lock);
	}
	return NULL;
}

void mtp_writer_wake(void)
{
	__atomic_add_fetch(&w.bell, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&w.sleeping, __ATOMIC_SEQ_CST))
		mtp_futex_wake(&w.bell);
}

static bool on_writer(void)
{
	return w.running && pthread_equal(pthread_self(), w.thread);
}

/* Asks the writer for a round and waits until it is done, at most ns nanoseconds (0: no
 * limit): true when it was done. Without a writer thread the caller does the round. An
 * exec's round is done once the writer is parked: the END is written. */
static bool await_round(uint64_t ns, bool exec)
{
	uint64_t until = ns ? mtp_now() + ns : 0;
	uint32_t n;

	if (!w.running) {
		size_t wrote;
		pthread_mutex_lock(&w.lock);
		serve(&wrote);
		pthread_mutex_unlock(&w.lock);
		return true;
	}
	if (on_writer())
		return false; /* it cannot wait for itself: its next round takes what is there */
	n = __atomic_add_fetch(&w.asked, 1, __ATOMIC_ACQ_REL);
	mtp_writer_wake();
	for (;;) {
		uint32_t s = __atomic_load_n(&w.served, __ATOMIC_ACQUIRE);
		uint64_t now;
		if ((int32_t)(s - n) >= 0 ||
		    (exec && (int32_t)(__atomic_load_n(&w.parked_for, __ATOMIC_ACQUIRE) - n) >= 0))
			return true;
		if (ns && (now = mtp_now()) >= until)
			return false;
		mtp_futex_wait(&w.served, s, ns ? until - now : 0);
	}
}

/* A thread's ring is full: it sleeps until the writer's next round has drained it, for as
 * long as the writer keeps working. A writer that does no round in STUCK_NS is stuck (a
 * write that does not return, a lock the sleeping thread itself holds): false then, and
 * at once while it stays stuck, so the event is dropped rather than the job held. False too
 * when no round can come: no writer thread, an exec under way, the writer itself. */
bool mtp_writer_await_room(void)
{
	uint32_t stalled = __atomic_load_n(&w.stalled, __ATOMIC_RELAXED);
	int err = errno;
	bool done;

	if (!w.running || on_writer() || __atomic_load_n(&w.execs, __ATOMIC_ACQUIRE) ||
	    (stalled && stalled - 1 == __atomic_load_n(&w.served, __ATOMIC_ACQUIRE)))
		return false;
	if (!(done = await_round(STUCK_NS, false)))
		__atomic_store_n(&w.stalled, __atomic_load_n(&w.served, __ATOMIC_ACQUIRE) + 1, __ATOMIC_RELAXED);
	errno = err;
	return done;
}

/* An ask with arguments: w.post is held by the caller, never the writer itself. */
static int ask(int kind, struct ask a)
{
	if (on_writer())
		return EDEADLK;
	w.ask = a;
	__atomic_store_n(&w.asking, kind, __ATOMIC_RELEASE);
	while (__atomic_load_n(&w.asking, __ATOMIC_ACQUIRE) != ASK_NONE)
		await_round(0, false);
	return w.ask.result;
}

static bool thread_pending; /* its thread is made at the first event (mtp_writer_start_pending) */

int mtp_writer_start(bool now)
{
	pthread_attr_t a;
	sigset_t all, old;
	int r;

	/* both buffers at once, before any thread's ring: a drain never runs out of memory */
	if (!w.events.data) {
		w.events = (struct mt_buf){.data = mtp_map(MT_CHUNK_MAX), .cap = MT_CHUNK_MAX};
		w.table = (struct mt_buf){.data = mtp_map(MT_CHUNK_MAX), .cap = MT_CHUNK_MAX};
		if (!w.events.data || !w.table.data) {
			mtp_warn("max_memory=%llu leaves no room for the writer's buffers; recording is off",
				 (unsigned long long)mtp_opt.max_memory);
			return -1;
		}
	}
	if (!now) {
		__atomic_store_n(&thread_pending, true, __ATOMIC_RELEASE);
		return 0;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	__atomic_store_n(&w.starting, true, __ATOMIC_SEQ_CST);
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, WRITER_STACK);
	r = pthread_create(&w.thread, &a, writer_main, NULL);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) { /* said to whoever waits for the start (make_ender, a fork) */
		pthread_mutex_lock(&w.lock);
		__atomic_store_n(&w.starting, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&w.ready);
		pthread_mutex_unlock(&w.lock);
	}
	__atomic_store_n(&w.running, r == 0, __ATOMIC_SEQ_CST);
	/* its own table, directory and root are copies of the job's as they are now, before
	   the job's main runs and perhaps changes them (chroot) */
	pthread_mutex_lock(&w.lock);
	while (__atomic_load_n(&w.starting, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&w.ready, &w.lock);
	pthread_mutex_unlock(&w.lock);
	if (r)
		mtp_warn("cannot start the writer thread: %s; events are written when a thread asks, and at exit",
			 strerror(r));
	else if (__atomic_load_n(&w.main_exited, __ATOMIC_SEQ_CST)) /* main left before this first event */
		make_ender();
	return 0;
}

/* The END chunk: every ring drained, the totals written. Events made later still reach
 * the file (each late record waits for a round: mtp_writer_sync). No lock is taken: an
 * exit from a signal handler that interrupted a hook finds nothing held. */
void mtp_writer_stop(void)
{
	__atomic_store_n(&w.stop_asked, true, __ATOMIC_RELEASE);
	await_round(0, false);
}

void mtp_writer_sync(void)
{
	await_round(0, false);
}

bool mtp_writer_has_events(void)
{
	await_round(0, false);
	return __atomic_load_n(&w.any, __ATOMIC_ACQUIRE);
}

int mtp_writer_spawn(pthread_t *thread, size_t stack, void *(*fn)(void *), void *arg)
{
	int r;

	if (!w.running)
		return spawn(thread, stack, fn, arg);
	pthread_mutex_lock(&w.post);
	r = ask(ASK_SPAWN, (struct ask){.fn = fn, .arg = arg, .stack = stack, .thread = thread});
	pthread_mutex_unlock(&w.post);
	return r;
}

/* ---- exec: the image is about to be replaced; no atexit handler will run ---- */

void mtp_writer_exec_begin(void)
{
	__atomic_add_fetch(&w.execs, 1, __ATOMIC_ACQ_REL);
	await_round(0, true);
}

void mtp_writer_exec_failed(void)
{
	__atomic_sub_fetch(&w.execs, 1, __ATOMIC_ACQ_REL);
	await_round(0, false);
}

/* ---- fork: the child inherits a copy of everything but the writer thread ---- */

void mtp_writer_atfork_prepare(void)
{
	pthread_mutex_lock(&w.lock);
	/* a writer thread still starting may hold the C library's or a sanitizer's locks (its
	 * stack, its thread-local memory): a child forked then can block on them for good
	 * (ASan CI: the fork workload's child hung, forked just after its writer was made).
	 * Holding w.lock, the writer is waiting for work, inside no allocator. */
	while (__atomic_load_n(&w.starting, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&w.ready, &w.lock);
	/* a fork from a signal handler that interrupted this thread's own interning does not
	   wait for itself: the child goes on with that insert too */
	if (!mtp_self.interning) {
		pthread_mutex_lock(&mtp_stacks.lock);
		pthread_mutex_lock(&mtp_strings.lock);
	}
	mtp_stack_atfork_prepare();
}

void mtp_writer_atfork_parent(void)
{
	mtp_stack_atfork_parent();
	if (!mtp_self.interning) {
		pthread_mutex_unlock(&mtp_strings.lock);
		pthread_mutex_unlock(&mtp_stacks.lock);
	}
	pthread_mutex_unlock(&w.lock);
}

void mtp_writer_atfork_child(bool keep)
{
	mtp_stack_atfork_child();
	pthread_mutex_init(&mtp_strings.lock, NULL);
	pthread_mutex_init(&mtp_stacks.lock, NULL);
	pthread_mutex_init(&w.lock, NULL);
	pthread_mutex_init(&w.post, NULL);
	pthread_cond_init(&w.ready, NULL);
	/* the parent's trace is in the writer's own table, not in this one: its number may
	   be one of the job's here, never to be closed (without a table of its own, the
	   writer shared the job's: that copy is the child's to give back) */
	if (w.fd >= 0 && !w.own_table)
		close(w.fd);
	w.fd = -1;
	w.running = w.starting = w.own_table = w.sleeping = w.main_gone = w.main_exited = w.ender_made = false;
	w.end_now = 0;
	w.proc_stat = w.proc_task = w.status_fd = -1; /* the parent writer's, in its own table */
	w.bell = w.asked = w.served = w.parked_for = 0;
	w.stop_asked = w.parked = w.closed = w.any = false;
	w.execs = 0;
	memset(&w.ask, 0, sizeof w.ask);
	w.asking = ASK_NONE;
	memset(w.own, 0, sizeof w.own);
	memset(spawned, 0, sizeof spawned);
	w.failed = w.warned = w.regular = false;
	w.path[0] = w.problem[0] = '\0';
	w.written = w.size = 0;
	memset(w.drops_said, 0, sizeof w.drops_said);
	w.strings_done = w.stacks_done = 0;
	w.nmodules = 0;
	w.adds = w.subs = 0;
	if (keep) {
		__atomic_store_n(&thread_pending, true, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&mtp_state, MTP_OFF, __ATOMIC_RELEASE);
}

void mtp_writer_start_pending(void)
{
	if (__atomic_exchange_n(&thread_pending, false, __ATOMIC_ACQ_REL))
		mtp_writer_start(true);
}

/* ---- a crash: write what the buffers hold ---- */

/* The process ends when the signal handler returns, the writer thread with it: the
 * handler waits for one round of the writer's, a second at most (the writer may be in
 * the middle of a long write). A crash on the writer thread leaves its buffers as they are. */
void mtp_writer_crash_flush(void)
{
	if (!on_writer())
		await_round(1000000000ull, false);
}

/* ---- snapshots: the trace so far, with an END chunk, in a file of its own ---- */

int mtp_writer_snapshot_fd(int fd, uint64_t limit)
{
	int r;

	pthread_mutex_lock(&w.post);
	r = ask(ASK_SNAPSHOT, (struct ask){.fd = fd, .limit = limit});
	pthread_mutex_unlock(&w.post);
	return r;
}

int mtp_writer_snapshot(const char *path)
{
	int r;

	pthread_mutex_lock(&w.post);
	r = ask(ASK_SNAPSHOT, (struct ask){.fd = -1, .path = path, .tid = mtp_gettid(), .limit = UINT64_MAX});
	pthread_mutex_unlock(&w.post);
	return r;
}
