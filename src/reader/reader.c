/* The trace reader: walks the chunks, checks each checksum, decodes strings, stacks,
 * modules and events, and stops at the first bad or missing byte, keeping everything
 * before it. Memory is plain malloc: this runs in the memtap tool, not in the job. */
#include "reader/reader.h"
#include "core/assert.h"
#include "core/array.h"
#include "core/map.h"
#include "reader/ahead.h"
#include "reader/file.h"
#include "reader/progress.h"
#include "reader/stream.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every block the trace owns hangs off one list, freed together. */
struct block {
	struct block *next;
	max_align_t data[];
};

void *mt_trace_own(struct mt_trace *t, size_t n)
{
	struct block *b = calloc(1, sizeof *b + n);

	if (!b)
		return NULL;
	b->next = t->mem;
	t->mem = b;
	return b->data;
}

static void note(struct mt_trace *t, const char *fmt, ...)
{
	va_list ap;

	if (t->problem[0])
		return;
	va_start(ap, fmt);
	vsnprintf(t->problem, sizeof t->problem, fmt, ap);
	va_end(ap);
}

/* Grows *arr (of elem-byte items) so index `need` fits, zeroing the new items when asked
 * (tables indexed by id); plain realloc, freed at the end. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem, bool zero)
{
	size_t old = *cap;
	int r = mt_grow(arr, cap, need, elem);

	if (!r && zero)
		memset((char *)*arr + old * elem, 0, (*cap - old) * elem);
	return r;
}

static int fit(void **arr, size_t *cap, size_t need, size_t elem)
{
	return grow(arr, cap, need, elem, true);
}

static int fit_events(struct mt_trace *t)
{
	return grow((void **)&t->events, &t->cap_events, t->nevents, sizeof *t->events, false);
}

static char *own_string(struct mt_trace *t, const uint8_t *p, size_t n)
{
	char *s = mt_trace_own(t, n + 1);

	if (s)
		memcpy(s, p, n);
	return s;
}

/* Table ids come in order from 1, as the writer numbers them: a table is never larger
 * than the file that holds it. */
static int read_strings(struct mt_trace *t, struct mt_cursor *c, size_t off)
{
	while (c->p < c->end && !c->bad) {
		uint64_t id = mt_get_varint(c), n = mt_get_varint(c);
		if (c->bad || n > (uint64_t)(c->end - c->p))
			return -1;
		if (id != t->nstrings) {
			note(t, "corrupt chunk at byte %zu: string %llu where string %zu was due", off,
			     (unsigned long long)id, t->nstrings);
			return -1;
		}
		if (fit((void **)&t->strings, &t->cap_strings, id, sizeof *t->strings))
			return ENOMEM;
		if (!(t->strings[id] = own_string(t, c->p, n)))
			return ENOMEM;
		c->p += n;
		t->nstrings = id + 1;
	}
	return c->bad ? -1 : 0;
}

static int read_stacks(struct mt_trace *t, struct mt_cursor *c, size_t off)
{
	while (c->p < c->end && !c->bad) {
		uint64_t id = mt_get_varint(c), depth = mt_get_varint(c), prev = 0;
		uint64_t *frames;
		if (c->bad)
			return -1;
		if (id != t->nstacks) {
			note(t, "corrupt chunk at byte %zu: stack %llu where stack %zu was due", off,
			     (unsigned long long)id, t->nstacks);
			return -1;
		}
		/* each frame takes at least a byte: a depth the chunk cannot hold allocates nothing */
		if (depth > MT_MAX_DEPTH || depth > (uint64_t)(c->end - c->p)) {
			note(t, "corrupt chunk at byte %zu: stack %llu claims %llu frames", off, (unsigned long long)id,
			     (unsigned long long)depth);
			return -1;
		}
		if (fit((void **)&t->stacks, &t->cap_stacks, id, sizeof *t->stacks))
			return ENOMEM;
		frames = mt_trace_own(t, (depth ? depth : 1) * sizeof *frames);
		if (!frames)
			return ENOMEM;
		for (uint64_t i = 0; i < depth; i++) {
			prev += (uint64_t)mt_get_zigzag(c);
			frames[i] = prev;
		}
		t->stacks[id] = (struct mt_stack){(uint32_t)depth, frames};
		t->nstacks = id + 1;
	}
	return c->bad ? -1 : 0;
}

static int read_modules(struct mt_trace *t, struct mt_cursor *c, size_t off)
{
	while (c->p < c->end && !c->bad) {
		struct mt_module m;
		uint64_t n = mt_get_varint(c), size;
		if (c->bad || n > (uint64_t)(c->end - c->p))
			return -1;
		if (!(m.path = own_string(t, c->p, n)))
			return ENOMEM;
		c->p += n;
		n = mt_get_varint(c);
		if (c->bad || n > (uint64_t)(c->end - c->p))
			return -1;
		if (!(m.build_id = own_string(t, c->p, n)))
			return ENOMEM;
		c->p += n;
		m.base = mt_get_varint(c);
		m.start = mt_get_varint(c);
		size = mt_get_varint(c);
		if (c->bad)
			return -1;
		if (size > MT_MAX_SIZE || m.start + size < m.start) {
			note(t, "corrupt chunk at byte %zu: a module of %llu bytes at 0x%llx", off,
			     (unsigned long long)size, (unsigned long long)m.start);
			return -1;
		}
		m.end = m.start + size;
		if (fit((void **)&t->modules, &t->cap_modules, t->nmodules, sizeof *t->modules))
			return ENOMEM;
		t->modules[t->nmodules++] = m;
	}
	return c->bad ? -1 : 0;
}

static size_t count(size_t ids) /* entries of a table whose id 0 is "none" */
{
	return ids ? ids - 1 : 0;
}

const char *mt_trace_event_problem(const struct mt_trace *t, const struct mt_event *e, char *buf, size_t len)
{
	bool stack = e->stack && e->stack >= t->nstacks; /* 0 is none */
	bool phase = e->phase && e->phase >= t->nstrings;
	const char *kind, *a;

	if (mt_event_invalid(e, buf, len))
		return buf;
	kind = e->kind < MT_EV_COUNT ? mt_kind_names[e->kind] : "unknown";
	a = strchr("aeiou", kind[0]) ? "an" : "a";
	if (stack)
		snprintf(buf, len, "%s %s event refers to stack %u; the trace has %zu", a, kind, e->stack,
			 count(t->nstacks));
	else if (phase)
		snprintf(buf, len, "%s %s event's phase refers to string %u; the trace has %zu", a, kind, e->phase,
			 count(t->nstrings));
	else
		snprintf(buf, len, "%s %s event refers to string %llu; the trace has %zu", a, kind,
			 (unsigned long long)e->aux, count(t->nstrings));
	return buf;
}

/* An EVENTS chunk's events, into t->events, or for an opened trace only checked and
 * indexed; a bad event ends the chunk and the reading, what came before it kept. */
static int read_events(struct mt_trace *t, struct mt_cursor *c, size_t off, uint32_t crc)
{
	struct mt_encoder st = {0, 0};
	const uint8_t *payload = c->p;
	uint64_t dropped = mt_get_varint(c);
	struct mt_event one;
	char why[160];
	int r = 0;

	if (c->bad)
		return -1;
	if (dropped > t->dropped)
		t->dropped = dropped;
	while (c->p < c->end) {
		struct mt_event *e = &one;
		if (!t->index && fit_events(t))
			return ENOMEM;
		if (!t->index)
			e = &t->events[t->nevents];
		if (mt_decode_event(c, &st, e)) {
			r = -1;
			break;
		}
		if (mt_trace_check_event(t, e, why, sizeof why)) {
			note(t, "corrupt chunk at byte %zu: %s", off, why);
			r = -1;
			break;
		}
		if (t->index && mt_index_event(t->index, e))
			return ENOMEM;
		t->nevents++;
	}
	if (t->index &&
	    mt_index_chunk(t->index, off + sizeof(struct mt_chunk_header), (uint32_t)(c->end - payload), crc, t->ieee))
		return ENOMEM;
	return r;
}

/* Drops by reason (END and DROPS chunks): a count, then that many counts; reasons this
 * reader does not know are left out. */
static void read_drops(struct mt_trace *t, struct mt_cursor *c)
{
	uint64_t n = mt_get_varint(c);

	for (uint64_t i = 0; i < n && !c->bad; i++) {
		uint64_t v = mt_get_varint(c);
		if (!c->bad && i < MT_DROP_COUNT)
			t->drops[i] = v;
	}
}

static int start_tables(struct mt_trace *t)
{
	if (fit((void **)&t->strings, &t->cap_strings, 0, sizeof *t->strings) ||
	    fit((void **)&t->stacks, &t->cap_stacks, 0, sizeof *t->stacks))
		return ENOMEM;
	t->strings[0] = "";
	t->nstrings = t->nstacks = 1;
	return 0;
}

static int by_index(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- building a trace in memory, for importers ---- */

int mt_trace_add_event(struct mt_trace *t, const struct mt_event *e)
{
	if (fit_events(t))
		return ENOMEM;
	t->events[t->nevents++] = *e;
	return 0;
}

uint32_t mt_trace_add_string(struct mt_trace *t, const char *s)
{
	if ((!t->strings && start_tables(t)) ||
	    fit((void **)&t->strings, &t->cap_strings, t->nstrings, sizeof *t->strings))
		return 0;
	t->strings[t->nstrings] = own_string(t, (const uint8_t *)s, strlen(s));
	return t->strings[t->nstrings] ? (uint32_t)t->nstrings++ : 0;
}

uint32_t mt_trace_add_stack(struct mt_trace *t, const uint64_t *frames, uint32_t depth)
{
	uint64_t *copy;

	if ((!t->stacks && start_tables(t)) || fit((void **)&t->stacks, &t->cap_stacks, t->nstacks, sizeof *t->stacks))
		return 0;
	copy = mt_trace_own(t, (depth ? depth : 1) * sizeof *copy);
	if (!copy)
		return 0;
	memcpy(copy, frames, depth * sizeof *copy);
	t->stacks[t->nstacks] = (struct mt_stack){depth, copy};
	return (uint32_t)t->nstacks++;
}

uint32_t mt_trace_add_named(struct mt_trace *t, const char *function, const char *file, int line)
{
	if (fit((void **)&t->named, &t->cap_named, t->nnamed, sizeof *t->named))
		return 0;
	t->named[t->nnamed] = (struct mt_named_frame){function, file, line};
	return (uint32_t)++t->nnamed;
}

/* Events get dense thread numbers in the recorder's order, [0] staying 0, so a per-thread
 * table is never larger than the trace: a recorded index can be any 32-bit number (a
 * forked child keeps its parent's), and damage can make it anything. */
static int number_threads(struct mt_trace *t)
{
	uint32_t max = 0, *rank, *ids;
	size_t n = 1;
	struct mt_map seen = {0};

	for (size_t i = 0; i < t->nevents; i++)
		max = t->events[i].thread > max ? t->events[i].thread : max;
	if (max <= t->nevents) { /* the usual case: a table as large as the highest index */
		if (!(rank = calloc((size_t)max + 1, sizeof *rank)))
			return ENOMEM;
		for (size_t i = 0; i < t->nevents; i++)
			rank[t->events[i].thread] = 1;
		for (uint32_t k = 1; k <= max; k++)
			n += rank[k];
		if (!(ids = malloc(n * sizeof *ids))) {
			free(rank);
			return ENOMEM;
		}
		ids[0] = rank[0] = 0;
		for (uint32_t k = 1, next = 1; k <= max; k++)
			if (rank[k])
				ids[next] = k, rank[k] = next++;
		for (size_t i = 0; i < t->nevents; i++)
			t->events[i].thread = rank[t->events[i].thread];
		free(rank);
	} else { /* sparse: the indices in use, sorted, each event's found by bisection */
		for (size_t i = 0; i < t->nevents; i++)
			if (t->events[i].thread && !mt_map_get(&seen, t->events[i].thread, NULL) &&
			    mt_map_put(&seen, t->events[i].thread, n++)) {
				mt_map_free(&seen);
				return ENOMEM;
			}
		if (!(ids = malloc(n * sizeof *ids))) {
			mt_map_free(&seen);
			return ENOMEM;
		}
		ids[0] = 0;
		for (size_t k = 0; k < seen.cap; k++)
			if (seen.used[k] == 1)
				ids[seen.vals[k]] = (uint32_t)seen.keys[k];
		mt_map_free(&seen);
		qsort(ids + 1, n - 1, sizeof *ids, by_index);
		for (size_t i = 0; i < t->nevents; i++) {
			size_t lo = 0, hi = n;
			while (hi - lo > 1) {
				size_t mid = lo + (hi - lo) / 2;
				if (ids[mid] <= t->events[i].thread)
					lo = mid;
				else
					hi = mid;
			}
			t->events[i].thread = (uint32_t)lo;
		}
	}
	free(t->threads);
	t->threads = ids;
	t->nthreads = n;
	return 0;
}

int mt_trace_finish(struct mt_trace *t)
{
	int r = number_threads(t);

	for (size_t i = 0; i < t->nevents && MT_DEBUG >= 2; i++) /* what was checked as it was read */
		mt_assert(t->events[i].stack < (t->nstacks ? t->nstacks : 1) && t->events[i].thread < t->nthreads);

	return r ? r : mt_sort_events(t->events, t->nevents);
}

/* An EVENTS chunk of an opened trace that the index pass's second thread summed up is
 * taken as read_events would read it, unless an event names what the tables do not hold
 * or the sum leaves the chunk to the pass: then the pass reads it itself. */
static bool usable(const struct mt_trace *t, const struct mt_chunk_sum *s)
{
	return s && s->whole && s->crc == (t->ieee ? 2 : 1) && t->chunks &&
	       (!s->max_stack || s->max_stack < t->nstacks) && (!s->max_phase || s->max_phase < t->nstrings) &&
	       (!s->max_string || s->max_string < t->nstrings);
}

static int take_sum(struct mt_trace *t, const struct mt_chunk_sum *s, const struct mt_chunk_header *h, size_t at)
{
	t->chunks++;
	t->dropped = s->dropped > t->dropped ? s->dropped : t->dropped;
	t->nevents += s->n;
	return mt_index_sum(t->index, s) ? ENOMEM
					 : mt_index_chunk(t->index, at + sizeof *h, h->length, h->crc, t->ieee);
}

/* Whole chunks from data (which starts at a chunk), appended to t; *used: the bytes of
 * the whole chunks read. 0, ENOMEM, or -1 when a chunk is damaged (noted) or, with
 * `partial`, cut short: the rest is not read. With `ahead`, the second half's EVENTS
 * chunks come summed up. */
static int read_from(struct mt_trace *t, const uint8_t *data, size_t size, size_t base, bool partial, size_t *used,
		     struct mt_ahead *ahead)
{
	size_t off = 0, dropped = 0;
	int r = 0;
	/* the last whole chunk was an END: a chunk cut short after it is what an exit leaves
	   when the process ends while memtap writes what other threads made after the END
	   (uncounted, docs/RECORDER.md); the trace is whole as of that END */
	bool after_end = false;

	while (off < size) {
		struct mt_chunk_header h;
		struct mt_cursor c;

		if (mt_progress_hook)
			mt_progress_hook("reading", base + off, base + size);
		if (size - off < sizeof h) {
			if (!partial && !after_end)
				note(t, "cut short: %zu stray bytes after the last whole chunk", size - off);
			break;
		}
		memcpy(&h, data + off, sizeof h);
		if (h.magic != MT_CHUNK_MAGIC || h.length > MT_CHUNK_MAX || h.reserved[0] || h.reserved[1] ||
		    h.reserved[2]) {
			note(t, "corrupt chunk header at byte %zu", base + off);
			r = -1;
			break;
		}
		if (h.length > size - off - sizeof h) {
			if (!partial && !after_end)
				note(t, "cut short: the chunk at byte %zu is incomplete", base + off);
			break;
		}
		after_end = h.type == MT_CHUNK_END;
		if (ahead && h.type == MT_CHUNK_EVENTS) {
			const struct mt_chunk_sum *s = mt_ahead_take(ahead, off);
			if (usable(t, s)) {
				if (take_sum(t, s, &h, base + off))
					return ENOMEM;
				off += sizeof h + h.length;
				mt_drop_read(data, off, &dropped);
				continue;
			}
		}
		c = (struct mt_cursor){data + off + sizeof h, data + off + sizeof h + h.length, 0};
		/* a trace's first chunk says which checksum it uses: memtap wrote IEEE CRC-32
		 * until 2026-11-21, CRC-32C since (docs/FORMAT.md) */
		if (!t->chunks && mt_crc32(0, c.p, h.length) != h.crc && mt_crc32_ieee(0, c.p, h.length) == h.crc)
			t->ieee = true;
		t->chunks++;
		if ((t->ieee ? mt_crc32_ieee(0, c.p, h.length) : mt_crc32(0, c.p, h.length)) != h.crc) {
			note(t, "corrupt chunk at byte %zu (checksum mismatch)", base + off);
			r = -1;
			break;
		}
		switch (h.type) {
		case MT_CHUNK_INFO:
			if (!(t->info = own_string(t, c.p, h.length)))
				return ENOMEM;
			break;
		case MT_CHUNK_STRINGS:
			r = read_strings(t, &c, base + off);
			break;
		case MT_CHUNK_STACKS:
			r = read_stacks(t, &c, base + off);
			break;
		case MT_CHUNK_MODULES:
			r = read_modules(t, &c, base + off);
			break;
		case MT_CHUNK_EVENTS:
			r = read_events(t, &c, base + off, h.crc);
			break;
		case MT_CHUNK_END: {
			uint64_t dropped = mt_get_varint(&c);
			if (!c.bad && dropped > t->dropped)
				t->dropped = dropped;
			t->complete = !c.bad;
			/* later writers add the events written, the drops by reason, then the waits */
			if (!c.bad && c.p < c.end) {
				t->written = mt_get_varint(&c);
				if (c.p < c.end)
					read_drops(t, &c);
				if (!c.bad && c.p < c.end) {
					uint64_t waits = mt_get_varint(&c), ns = mt_get_varint(&c);
					if (!c.bad) {
						t->waits = waits;
						t->waited_ns = ns;
					}
				}
			}
			break;
		}
		case MT_CHUNK_DROPS:
			read_drops(t, &c);
			break;
		default: /* the checksum covers the payload only: a newer memtap's kind, or damage */
			note(t, "a chunk of unknown type %u at byte %zu (a newer memtap's, or damaged): skipped",
			     h.type, base + off);
			break;
		}
		if (r == ENOMEM)
			return ENOMEM;
		if (r) {
			note(t, "corrupt chunk contents at byte %zu", base + off);
			r = -1;
			break;
		}
		off += sizeof h + h.length;
		if (t->index && t->mapped)
			mt_drop_read(data, off, &dropped);
	}
	*used = off;
	return r;
}

static int read_chunks(struct mt_trace *t, const uint8_t *data, size_t size, size_t base, bool partial, size_t *used)
{
	/* a second thread for a trace opened to be walked (one of 64 MiB or more, unless
	   told), from 1 MiB (a few hundred chunks) up */
	struct mt_ahead *ahead = t->index && t->mapped && size >= (1u << 20) ? mt_ahead_start(data, size) : NULL;
	int r = read_from(t, data, size, base, partial, used, ahead);

	mt_ahead_stop(ahead);
	return r;
}

/* The file header: 0, or EINVAL with the problem noted. */
static int check_header(struct mt_trace *t, const uint8_t *data, size_t size)
{
	static const char lfs[] = "version https://git-lfs.github.com/spec/";

	if (size >= sizeof lfs - 1 && memcmp(data, lfs, sizeof lfs - 1) == 0) {
		note(t, "a Git LFS pointer, not the file it stands for (git lfs pull fetches it)");
		return EINVAL;
	}
	if (size >= 2 && data[0] == 0x80) { /* only a follower gets here: parse reads pickles */
		note(t, "a PyTorch snapshot, not a trace being written: memtap report, export and replay read it");
		return EINVAL;
	}
	if (size < 16 || memcmp(data, MT_FILE_MAGIC, 8) != 0) {
		note(t, "not a memtap trace (no memtap header)");
		return EINVAL;
	}
	if (data[8] != MT_FORMAT_VERSION) {
		note(t, "trace format version %u; this memtap reads version %u", data[8], MT_FORMAT_VERSION);
		return EINVAL;
	}
	return 0;
}

static int parse(struct mt_trace *t, const uint8_t *data, size_t size)
{
	size_t used;

	if (mt_is_rmm_log(data, size))
		return mt_trace_from_rmm(data, size, t);
	/* a pickle (protocol 2 and later start with PROTO; 0 and 1 end with STOP): a PyTorch snapshot */
	if (size >= 2 &&
	    (data[0] == 0x80 || (data[size - 1] == '.' && (size < 8 || memcmp(data, MT_FILE_MAGIC, 8) != 0))))
		return mt_trace_from_torch(data, size, t);
	if (check_header(t, data, size))
		return EINVAL;
	if (start_tables(t))
		return ENOMEM;
	if (read_chunks(t, data + 16, size - 16, 16, false, &used) == ENOMEM)
		return ENOMEM;
	if (!t->complete)
		note(t, "cut short: the trace was not closed (the process was killed or is still running)");
	return t->index ? mt_index_threads(t->index, &t->threads, &t->nthreads) : mt_trace_finish(t);
}

int mt_trace_feed(struct mt_trace *t, const uint8_t *data, size_t size, size_t base, size_t *used)
{
	int r;

	*used = 0;
	if (base == 0) {
		if (size < 16) /* the header is not all written yet, or a short file */
			return memcmp(data, MT_FILE_MAGIC, size < 8 ? size : 8) ? check_header(t, data, size) : 0;
		if (check_header(t, data, size))
			return EINVAL;
		if (!t->strings && start_tables(t))
			return ENOMEM;
		r = read_chunks(t, data + 16, size - 16, 16, true, used);
		*used += 16;
	} else {
		r = read_chunks(t, data, size, base, true, used);
	}
	return r == ENOMEM ? ENOMEM : r ? EILSEQ : 0;
}

/* mt_trace_read, or with `open` mt_trace_open: the file is kept open for the walk. */
static int load(const char *path, struct mt_trace *t, bool open)
{
	uint64_t size;
	void *data;
	int fd, r;

	memset(t, 0, sizeof *t);
	t->path = path;
	if ((r = mt_file_open(path, &fd, &size, t->problem, sizeof t->problem)) != 0)
		return r;
	if (size == 0) {
		close(fd);
		note(t, "%s is empty", path);
		return EINVAL;
	}
	data = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (data == MAP_FAILED) {
		r = errno;
		close(fd);
		note(t, "cannot read %s: %s", path, strerror(r));
		return r;
	}
	if (open && size >= 8 && memcmp(data, MT_FILE_MAGIC, 8) == 0) {
		if (!(t->index = mt_index_new(fd, t->problem))) {
			close(fd);
			munmap(data, size);
			return ENOMEM;
		}
	} else {
		close(fd);
	}
	t->mapped = true;
	r = parse(t, data, size);
	t->mapped = false;
	munmap(data, size);
	if (r) { /* refused: the one line names the file (a damaged trace's note is said with its counts) */
		char why[sizeof t->problem];
		memcpy(why, t->problem, sizeof why);
		snprintf(t->problem, sizeof t->problem, "%s: %s", path, why[0] ? why : strerror(r));
	}
	return r;
}

int mt_trace_read(const char *path, struct mt_trace *t)
{
	return load(path, t, false);
}

int mt_trace_open(const char *path, struct mt_trace *t)
{
	return load(path, t, true);
}

int mt_trace_load(const char *path, struct mt_trace *t)
{
	const char *how = getenv("MEMTAP_READ");
	struct stat st;
	bool whole = how && (!strcmp(how, "memory") || !strcmp(how, "file"))
			 ? !strcmp(how, "memory")
			 : stat(path, &st) != 0 || st.st_size < (64 << 20);

	return load(path, t, !whole);
}

int mt_trace_parse(const void *data, size_t size, const char *name, struct mt_trace *t)
{
	memset(t, 0, sizeof *t);
	t->path = name;
	return parse(t, data, size);
}

void mt_trace_free(struct mt_trace *t)
{
	struct block *b = t->mem;

	while (b) {
		struct block *next = b->next;
		free(b);
		b = next;
	}
	free(t->events);
	free(t->strings);
	free(t->stacks);
	free(t->modules);
	free(t->named);
	free(t->threads);
	mt_index_free(t->index);
	memset(t, 0, sizeof *t);
}

const char *mt_trace_info(const struct mt_trace *t, const char *key, char *buf, size_t len)
{
	size_t k = strlen(key);

	for (const char *p = t->info; p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		if (n > k && strncmp(p, key, k) == 0 && p[k] == '=') {
			size_t v = n - k - 1;
			if (v >= len)
				v = len - 1;
			memcpy(buf, p + k + 1, v);
			buf[v] = '\0';
			return buf;
		}
		p = eol ? eol + 1 : p + n;
	}
	return NULL;
}

uint64_t mt_trace_start(const struct mt_trace *t)
{
	char buf[32];

	if (mt_trace_info(t, "start_monotonic_ns", buf, sizeof buf))
		return strtoull(buf, NULL, 10);
	if (t->index)
		return mt_index_first_time(t->index);
	return t->nevents ? t->events[0].time : 0;
}

uint64_t mt_trace_end(const struct mt_trace *t)
{
	if (t->index)
		return mt_index_last_time(t->index);
	return t->nevents ? t->events[t->nevents - 1].time : 0;
}

uint32_t mt_trace_thread(const struct mt_trace *t, uint32_t thread)
{
	return thread < t->nthreads ? t->threads[thread] : thread;
}

const char *mt_trace_string(const struct mt_trace *t, uint64_t id)
{
	return id < t->nstrings && t->strings[id] ? t->strings[id] : "";
}
