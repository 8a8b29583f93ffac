/* The index pass's second thread. It starts at the first chunk header after the middle of
 * the file (found by its magic and a checksum that matches: a false find only costs sums
 * that are never taken, since a sum is taken only for the chunk at its very offset) and
 * sums up each EVENTS chunk from there to the end, in order, until the pass gets past
 * it. A sum is a function of the chunk's bytes alone; what depends on the trace so far
 * (the checksum kind, the tables' sizes) the pass checks when it takes it. Sums go into
 * blocks the pass frees as it passes them; the thread gives back the pages behind it. */
#define _GNU_SOURCE /* memmem */
#include "reader/ahead.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BLOCK 1024

struct block {
	struct mt_chunk_sum sum[BLOCK];
	atomic_size_t done;	    /* sums written */
	struct block *_Atomic next; /* once this one is full */
};

struct mt_ahead {
	pthread_t thread;
	const uint8_t *data;
	size_t size;
	atomic_size_t at; /* the pass's chunk */
	atomic_bool stop;
	struct block *first; /* the thread's start */
	struct block *cur;   /* the pass's */
	size_t k;	     /* in cur */
};

void mt_drop_read(const uint8_t *data, size_t to, size_t *dropped)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t from = ((uintptr_t)data + *dropped + page - 1) & ~(page - 1),
		  end = ((uintptr_t)data + to) & ~(page - 1);

	if (end < from + (16u << 20))
		return;
	madvise((void *)from, end - from, MADV_DONTNEED);
	*dropped = end - (uintptr_t)data;
}

/* The chunk header at off, if it is one (the reader's test), with its payload's checksum:
 * 1 CRC-32C, 2 IEEE, 0 neither; -1 when there is none there. */
static int header(const uint8_t *data, size_t size, size_t off, struct mt_chunk_header *h)
{
	const uint8_t *p = data + off + sizeof *h;

	if (size - off < sizeof *h)
		return -1;
	memcpy(h, data + off, sizeof *h);
	if (h->magic != MT_CHUNK_MAGIC || h->length > MT_CHUNK_MAX || h->reserved[0] || h->reserved[1] ||
	    h->reserved[2] || h->length > size - off - sizeof *h)
		return -1;
	return mt_crc32(0, p, h->length) == h->crc ? 1 : mt_crc32_ieee(0, p, h->length) == h->crc ? 2 : 0;
}

static void sum_up(struct mt_chunk_sum *s, const uint8_t *p, uint32_t length)
{
	struct mt_cursor c = {p, p + length, 0};
	struct mt_encoder st = {0, 0};
	struct mt_event e;

	s->dropped = mt_get_varint(&c);
	s->min = UINT64_MAX;
	s->whole = !c.bad;
	while (s->whole && c.p < c.end) {
		if (mt_decode_event(&c, &st, &e) || !mt_event_valid(&e)) {
			s->whole = false;
			break;
		}
		s->n++;
		s->min = e.time < s->min ? e.time : s->min;
		s->last = e.time > s->last ? e.time : s->last;
		s->max_stack = e.stack > s->max_stack ? e.stack : s->max_stack;
		s->max_phase = e.phase > s->max_phase ? e.phase : s->max_phase;
		if (mt_aux_is_string(e.kind) && e.aux > s->max_string)
			s->max_string = e.aux;
		if (s->n > 1 && e.thread == s->last_thread)
			continue;
		s->last_thread = e.thread;
		bool seen = false;
		for (int i = 0; i < s->nthreads && !seen; i++)
			seen = s->threads[i] == e.thread;
		if (!seen && s->nthreads == MT_AHEAD_THREADS)
			s->whole = false;
		else if (!seen)
			s->threads[s->nthreads++] = e.thread;
	}
}

static void *run(void *arg)
{
	struct mt_ahead *a = arg;
	struct mt_chunk_header h;
	struct block *b = a->first;
	size_t off = a->size / 2, dropped;
	const uint8_t *found;
	int crc = -1;

	/* the first header after the middle whose checksum matches (each candidate costs a
	   checksum: a damaged file's many wait no longer than one once the pass is done) */
	while (crc <= 0 && off < a->size && !atomic_load_explicit(&a->stop, memory_order_relaxed) &&
	       (found = memmem(a->data + off, a->size - off, &(uint32_t){MT_CHUNK_MAGIC}, 4)) != NULL) {
		off = (size_t)(found - a->data);
		if ((crc = header(a->data, a->size, off, &h)) <= 0)
			off++;
	}
	if (crc <= 0)
		return NULL;
	dropped = off;
	while (crc >= 0 && !atomic_load_explicit(&a->stop, memory_order_relaxed) &&
	       atomic_load_explicit(&a->at, memory_order_relaxed) < off) {
		if (h.type == MT_CHUNK_EVENTS) {
			size_t k = atomic_load_explicit(&b->done, memory_order_relaxed);
			if (k == BLOCK) {
				struct block *next = calloc(1, sizeof *next);
				if (!next)
					break;
				atomic_store_explicit(&b->next, next, memory_order_release);
				b = next;
				k = 0;
			}
			struct mt_chunk_sum *s = &b->sum[k];
			s->off = off;
			s->crc = (uint8_t)crc;
			if (crc)
				sum_up(s, a->data + off + sizeof h, h.length);
			atomic_store_explicit(&b->done, k + 1, memory_order_release);
		}
		off += sizeof h + h.length;
		mt_drop_read(a->data, off, &dropped);
		crc = header(a->data, a->size, off, &h);
	}
	return NULL;
}

struct mt_ahead *mt_ahead_start(const uint8_t *data, size_t size)
{
	struct mt_ahead *a = calloc(1, sizeof *a);
	pthread_attr_t attr;
	sigset_t all, was;
	bool started;

	if (!a || !(a->first = a->cur = calloc(1, sizeof *a->cur)) || pthread_attr_init(&attr)) {
		free(a ? a->first : NULL);
		free(a);
		return NULL;
	}
	a->data = data;
	a->size = size;
	mt_crc32(0, "", 0); /* the software checksums' tables made now, not raced for by two threads */
	mt_crc32_ieee(0, "", 0);
	sigfillset(&all); /* no signal of the process goes to it */
	pthread_attr_setstacksize(&attr, 256 << 10);
	pthread_sigmask(SIG_SETMASK, &all, &was);
	started = pthread_create(&a->thread, &attr, run, a) == 0;
	pthread_sigmask(SIG_SETMASK, &was, NULL);
	pthread_attr_destroy(&attr);
	if (!started) {
		free(a->first);
		free(a);
		return NULL;
	}
	return a;
}

const struct mt_chunk_sum *mt_ahead_take(struct mt_ahead *a, size_t off)
{
	atomic_store_explicit(&a->at, off, memory_order_relaxed);
	for (;;) {
		size_t done = atomic_load_explicit(&a->cur->done, memory_order_acquire);
		while (a->k < done && a->cur->sum[a->k].off < off)
			a->k++;
		if (a->k < done)
			return a->cur->sum[a->k].off == off ? &a->cur->sum[a->k] : NULL;
		struct block *next = a->k == BLOCK ? atomic_load_explicit(&a->cur->next, memory_order_acquire) : NULL;
		if (!next)
			return NULL;
		free(a->cur);
		a->cur = next;
		a->k = 0;
	}
}

void mt_ahead_stop(struct mt_ahead *a)
{
	if (!a)
		return;
	atomic_store(&a->stop, true);
	pthread_join(a->thread, NULL);
	while (a->cur) {
		struct block *next = atomic_load(&a->cur->next);
		free(a->cur);
		a->cur = next;
	}
	free(a);
}
