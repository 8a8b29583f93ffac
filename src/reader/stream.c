/* An opened trace's events, given out in time order from its file without holding them all.
 *
 * mt_trace_read's order is a stable sort by time: by (time, place in the file). The writer
 * puts each drain's events, one run per thread, into chunks that decode on their own, and a
 * chunk's times have no bound (an event stamped before a drain may be published after it).
 * So the index pass (reader.c, as it checks every event) notes each EVENTS chunk's place,
 * checksum, valid events and lowest time. A walk opens chunks in order of their lowest
 * time, cuts each into the runs whose times do not go back (a thread's, mostly), and
 * merges the open runs by (time, place), opening every chunk whose lowest time is not
 * after an event before giving that event out. Each event with a smaller key is then in an
 * open chunk, so the order is the sort's, event for event, and memory is the chunks whose
 * times overlap the walk's place: those of a drain or two, and a straggler's. A batch is
 * a stretch of one run, given out where it lies, not copied. A second thread reads,
 * checks and decodes the chunks in the order the walk opens them, two ahead at most,
 * while the walk merges and its caller analyses: decoding is half of a walk's work. */
#include "reader/stream.h"
#include "core/array.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct chunk {
	uint64_t off; /* of the payload in the file */
	uint64_t min; /* the lowest time */
	uint32_t length, crc, n;
};

struct mt_index {
	int fd;
	bool ieee;
	struct chunk *chunks;
	size_t n, cap;
	struct chunk open;   /* the chunk being indexed */
	uint64_t last;	     /* the highest time */
	struct mt_map ranks; /* a recorded thread index -> the reader's (mt_trace.threads) */
	uint32_t last_id;    /* the index pass: the last thread seen, known to be in ranks */
	char *problem;	     /* the opened trace's (a copy of the trace, cut, says it there too) */
};

struct mt_index *mt_index_new(int fd, char *problem)
{
	struct mt_index *x = calloc(1, sizeof *x);

	if (x)
		x->fd = fd, x->problem = problem;
	return x;
}

void mt_index_free(struct mt_index *x)
{
	if (!x)
		return;
	close(x->fd);
	free(x->chunks);
	mt_map_free(&x->ranks);
	free(x);
}

int mt_index_event(struct mt_index *x, const struct mt_event *e)
{
	if (!x->open.n || e->time < x->open.min)
		x->open.min = e->time;
	x->last = e->time > x->last ? e->time : x->last;
	x->open.n++;
	if (e->thread == x->last_id)
		return 0;
	x->last_id = e->thread;
	return e->thread && !mt_map_get(&x->ranks, e->thread, NULL) ? mt_map_put(&x->ranks, e->thread, 0) : 0;
}

int mt_index_sum(struct mt_index *x, const struct mt_chunk_sum *s)
{
	if (s->n)
		x->open = (struct chunk){.min = s->min, .n = s->n};
	x->last = s->last > x->last ? s->last : x->last;
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i] && !mt_map_get(&x->ranks, s->threads[i], NULL) &&
		    mt_map_put(&x->ranks, s->threads[i], 0))
			return ENOMEM;
	x->last_id = s->last_thread;
	return 0;
}

int mt_index_chunk(struct mt_index *x, uint64_t off, uint32_t length, uint32_t crc, bool ieee)
{
	struct chunk c = x->open;

	x->open = (struct chunk){0};
	x->ieee = ieee;
	if (!c.n)
		return 0;
	if (mt_grow((void **)&x->chunks, &x->cap, x->n, sizeof *x->chunks))
		return ENOMEM;
	c.off = off;
	c.length = length;
	c.crc = crc;
	x->chunks[x->n++] = c;
	return 0;
}

static int by_id(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int mt_index_threads(struct mt_index *x, uint32_t **ids, size_t *n)
{
	size_t k = 1;

	if (!(*ids = malloc((x->ranks.count + 1) * sizeof **ids)))
		return ENOMEM;
	(*ids)[0] = 0;
	for (size_t i = 0; i < x->ranks.cap; i++)
		if (x->ranks.used[i] == 1)
			(*ids)[k++] = (uint32_t)x->ranks.keys[i];
	qsort(*ids + 1, k - 1, sizeof **ids, by_id);
	for (size_t i = 1; i < k; i++)
		if (mt_map_put(&x->ranks, (*ids)[i], i)) {
			free(*ids);
			return ENOMEM;
		}
	*n = k;
	return 0;
}

uint64_t mt_index_first_time(const struct mt_index *x)
{
	uint64_t first = UINT64_MAX;

	for (size_t i = 0; i < x->n; i++)
		first = x->chunks[i].min < first ? x->chunks[i].min : first;
	return x->n ? first : 0;
}

uint64_t mt_index_last_time(const struct mt_index *x)
{
	return x->last;
}

/* ---- the walk ---- */

#define BATCH 4096

/* An open chunk's events, decoded; freed when its last run is spent. */
struct decoded {
	size_t runs; /* not spent yet */
	/* where each run ends (the decoder finds them while the events are in its cache:
	 * reading every time again on the walk's side was a third of its merging) */
	uint32_t *ends, nends;
	struct mt_event e[];
};

struct run {	       /* events of an open chunk in order of time, as they lie in the file */
	uint64_t time; /* e[at]'s, kept here for the heap's compares */
	const struct mt_event *e;
	size_t at, n;
	uint64_t place; /* in the file (chunk << 32 | first event): ties go to the earlier */
	struct decoded *of;
};

struct pending { /* a chunk not open yet */
	uint64_t min;
	size_t chunk;
};

/* Decoding on a second thread, while the walk merges and the analyses read: chunks in the
 * walk's order, at most AHEAD decoded and not taken yet. */
#define AHEAD 2

struct decoded_slot {
	struct decoded *d;
	int r; /* as decode */
};

struct decoder {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t decoded, taken; /* chunks, in the walk's order, decoded; taken by the walk */
	bool stop;
	struct decoded_slot slot[AHEAD]; /* chunk k in slot k % AHEAD */
	uint8_t *payload;		 /* the thread's chunk as read */
	size_t cap;
};

struct mt_walk {
	const struct mt_trace *t;
	size_t at;	       /* in memory: the next event; from a file: the next chunk to open, in `order` */
	size_t given;	       /* from a file: events given out (t->nevents at most: a caller may cut it) */
	bool failed;	       /* from a file: out of memory, or a chunk that changed; nothing more */
	struct pending *order; /* chunks by (lowest time, place) */
	struct run *heap;      /* open runs, the one with the earliest next event first */
	size_t nheap, capheap;
	struct decoder *decoder; /* NULL: chunks are decoded as they are opened */
	uint8_t *payload;	 /* a chunk as read, without the decoding thread */
	size_t cap;
	struct decoded *spent;	      /* the events given out last, of a chunk now spent: freed at the next call */
	const struct mt_event *batch; /* mt_walk_one's: the batch it gives from, and how far */
	size_t nbatch, inbatch;
};

static int by_lowest(const void *a, const void *b)
{
	const struct pending *x = a, *y = b;

	if (x->min != y->min)
		return x->min < y->min ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

static void *decode_ahead(void *arg);

/* The decoding thread's state freed, once the thread has ended (or never began). */
static void decoder_free(struct mt_walk *w)
{
	struct decoder *a = w->decoder;

	for (size_t k = 0; k < AHEAD; k++)
		free(a->slot[k].d);
	free(a->payload);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a);
	w->decoder = NULL;
}

/* The decoding thread, when one can be had (else the walk decodes each chunk itself): no
 * signal of the process goes to it, and its stack is small (a decode needs little). */
static void start_decoder(struct mt_walk *w)
{
	struct decoder *a = calloc(1, sizeof *a);
	pthread_attr_t attr;
	sigset_t all, was;
	bool started;

	if (!a || pthread_attr_init(&attr)) {
		free(a);
		return;
	}
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	w->decoder = a;
	sigfillset(&all);
	pthread_attr_setstacksize(&attr, 256 << 10);
	pthread_sigmask(SIG_SETMASK, &all, &was);
	started = pthread_create(&a->thread, &attr, decode_ahead, w) == 0;
	pthread_sigmask(SIG_SETMASK, &was, NULL);
	pthread_attr_destroy(&attr);
	if (!started)
		decoder_free(w);
}

struct mt_walk *mt_walk_start(const struct mt_trace *t)
{
	struct mt_walk *w = calloc(1, sizeof *w);
	struct mt_index *x = t->index;

	if (!w)
		return NULL;
	w->t = t;
	if (!x)
		return w;
	if (x->n && !(w->order = malloc(x->n * sizeof *w->order))) {
		free(w);
		return NULL;
	}
	for (size_t i = 0; i < x->n; i++)
		w->order[i] = (struct pending){x->chunks[i].min, i};
	if (x->n)
		qsort(w->order, x->n, sizeof *w->order, by_lowest);
	if (x->n > 1)
		start_decoder(w);
	return w;
}

void mt_walk_end(struct mt_walk *w)
{
	if (!w)
		return;
	if (w->decoder) {
		pthread_mutex_lock(&w->decoder->lock);
		w->decoder->stop = true;
		pthread_cond_broadcast(&w->decoder->cond);
		pthread_mutex_unlock(&w->decoder->lock);
		pthread_join(w->decoder->thread, NULL);
		decoder_free(w);
	}
	for (size_t i = 0; i < w->nheap; i++)
		if (--w->heap[i].of->runs == 0)
			free(w->heap[i].of);
	free(w->heap);
	free(w->order);
	free(w->payload);
	free(w->spent);
	free(w);
}

/* Whether an event at time x of the run at place comes before run b's next (places differ). */
static bool ahead(uint64_t x, uint64_t place, const struct run *b)
{
	return x < b->time || (x == b->time && place < b->place);
}

static bool before(const struct run *a, const struct run *b)
{
	return ahead(a->time, a->place, b);
}

/* The heap's sifts move the run once, into the hole the others leave. */
static void sift_down(struct mt_walk *w, size_t i)
{
	struct run r = w->heap[i];

	for (size_t l; (l = 2 * i + 1) < w->nheap; i = l) {
		if (l + 1 < w->nheap && before(&w->heap[l + 1], &w->heap[l]))
			l++;
		if (!before(&w->heap[l], &r))
			break;
		w->heap[i] = w->heap[l];
	}
	w->heap[i] = r;
}

static void sift_up(struct mt_walk *w, size_t i)
{
	struct run r = w->heap[i];

	for (; i && before(&r, &w->heap[(i - 1) / 2]); i = (i - 1) / 2)
		w->heap[i] = w->heap[(i - 1) / 2];
	w->heap[i] = r;
}

/* What ended a walk early, said once in the opened trace's problem: its events are read
 * through its walks, so the problem is theirs to write. The walk gives nothing more. */
static int fail(struct mt_walk *w, const char *why, int r)
{
	char *problem = w->t->index->problem;

	if (!problem[0])
		snprintf(problem, sizeof w->t->problem, "%s", why);
	w->failed = true;
	return r;
}

/* A file that changed since it was indexed. */
static int changed(struct mt_walk *w, const struct chunk *c)
{
	char why[96];

	snprintf(why, sizeof why, "the chunk at byte %llu changed while the trace was read",
		 (unsigned long long)c->off);
	return fail(w, why, -1);
}

/* Reads and decodes chunk c into *out, through *payload (grown to fit): 0, -1 (the file
 * changed), or ENOMEM. Each event is checked again against the tables: the checksum alone
 * would let a file rewritten under the walk put anything in the analyses. Touches nothing
 * of the walk's: the decoding thread calls it too. */
static int decode(const struct mt_trace *t, const struct chunk *c, uint8_t **payload, size_t *cap, struct decoded **out)
{
	const struct mt_index *x = t->index;
	struct mt_encoder st = {0, 0};
	struct decoded *d;
	struct mt_cursor cur;
	uint32_t id = 0;
	uint64_t rank = 0;
	char why[160];

	if (mt_grow((void **)payload, cap, c->length, 1) ||
	    !(d = malloc(sizeof *d + c->n * sizeof *d->e + c->n * sizeof *d->ends)))
		return ENOMEM;
	d->ends = (uint32_t *)(d->e + c->n);
	d->nends = 0;
	if (pread(x->fd, *payload, c->length, (off_t)c->off) != (ssize_t)c->length ||
	    (x->ieee ? mt_crc32_ieee(0, *payload, c->length) : mt_crc32(0, *payload, c->length)) != c->crc) {
		free(d);
		return -1;
	}
	cur = (struct mt_cursor){*payload, *payload + c->length, 0};
	mt_get_varint(&cur); /* the drops so far: read in the index pass */
	d->runs = 0;
	for (struct mt_event *e = d->e; e < d->e + c->n; e++) {
		if (mt_decode_event(&cur, &st, e) || mt_trace_check_event(t, e, why, sizeof why)) {
			free(d);
			return -1;
		}
		if (e->thread != id) {
			id = e->thread;
			rank = 0;
			mt_map_get(&x->ranks, id, &rank);
		}
		e->thread = (uint32_t)rank;
		if (e > d->e && e->time < e[-1].time)
			d->ends[d->nends++] = (uint32_t)(e - d->e);
	}
	if (c->n)
		d->ends[d->nends++] = c->n;
	*out = d;
	return 0;
}

/* The decoding thread: the chunks in the walk's order, AHEAD at most past the one the walk
 * takes next; it stops at the first that fails. */
static void *decode_ahead(void *arg)
{
	struct mt_walk *w = arg;
	struct decoder *a = w->decoder;
	const struct mt_index *x = w->t->index;
	int r = 0;

	pthread_mutex_lock(&a->lock);
	while (!a->stop && !r && a->decoded < x->n) {
		size_t k = a->decoded;
		struct decoded *d = NULL;
		if (k - a->taken >= AHEAD) {
			pthread_cond_wait(&a->cond, &a->lock);
			continue;
		}
		pthread_mutex_unlock(&a->lock);
		r = decode(w->t, &x->chunks[w->order[k].chunk], &a->payload, &a->cap, &d);
		pthread_mutex_lock(&a->lock);
		a->slot[k % AHEAD] = (struct decoded_slot){d, r};
		a->decoded++;
		pthread_cond_broadcast(&a->cond);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* The chunk the walk opens next (w->order[w->at]), decoded: from the decoding thread when
 * there is one. As decode. */
static int take(struct mt_walk *w, struct decoded **d)
{
	struct decoder *a = w->decoder;
	size_t k = w->at;
	int r;

	if (!a)
		return decode(w->t, &w->t->index->chunks[w->order[k].chunk], &w->payload, &w->cap, d);
	pthread_mutex_lock(&a->lock);
	while (a->decoded <= k)
		pthread_cond_wait(&a->cond, &a->lock);
	*d = a->slot[k % AHEAD].d;
	r = a->slot[k % AHEAD].r;
	a->slot[k % AHEAD].d = NULL;
	a->taken = k + 1;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	return r;
}

/* Opens the next chunk in order: its runs in order of time onto the heap. 0, -1 (the file
 * changed: noted), or ENOMEM. */
static int open_chunk(struct mt_walk *w)
{
	const size_t i = w->order[w->at].chunk;
	struct decoded *d;
	size_t start = 0;
	int r = take(w, &d);

	w->at++;
	if (r)
		return r == ENOMEM ? ENOMEM : changed(w, &w->t->index->chunks[i]);
	for (size_t j = 0; j < d->nends; j++) {
		size_t k = d->ends[j];
		if (mt_grow((void **)&w->heap, &w->capheap, w->nheap, sizeof *w->heap)) {
			if (!d->runs)
				free(d);
			return ENOMEM;
		}
		w->heap[w->nheap++] =
		    (struct run){d->e[start].time, d->e + start, 0, k - start, (uint64_t)i << 32 | start, d};
		sift_up(w, w->nheap - 1);
		d->runs++;
		start = k;
	}
	return 0;
}

size_t mt_walk_next(struct mt_walk *w, const struct mt_event **batch)
{
	const struct mt_trace *t = w->t;
	const struct mt_event *e;
	struct run *top;
	uint64_t next; /* the lowest time of the chunks not open */
	size_t n = 1;

	if (!t->index) {
		n = t->nevents - w->at < BATCH ? t->nevents - w->at : BATCH;
		*batch = n ? t->events + w->at : NULL;
		w->at += n;
		return n;
	}
	free(w->spent);
	w->spent = NULL;
	/* open every chunk that may hold an event before the earliest one open */
	while (!w->failed && w->at < t->index->n &&
	       (!w->nheap || w->order[w->at].min <= w->heap[0].e[w->heap[0].at].time))
		if (open_chunk(w) == ENOMEM)
			fail(w, "out of memory reading the trace", ENOMEM);
	if (w->failed || !w->nheap || w->given == t->nevents)
		return 0;
	/* the earliest run's events go out, as they lie in it, while they come before every
	 * other run's next and every chunk not open */
	top = &w->heap[0];
	e = top->e + top->at;
	next = w->at < t->index->n ? w->order[w->at].min : UINT64_MAX;
	while (n < BATCH && top->at + n < top->n && w->given + n < t->nevents && e[n].time < next &&
	       (w->nheap < 2 || ahead(e[n].time, top->place, &w->heap[1])) &&
	       (w->nheap < 3 || ahead(e[n].time, top->place, &w->heap[2])))
		n++;
	w->given += n;
	*batch = e;
	top->at += n;
	if (top->at == top->n) { /* spent: its chunk's events, when it was the last run, go at the next call */
		if (--top->of->runs == 0)
			w->spent = top->of;
		w->heap[0] = w->heap[--w->nheap];
	} else {
		top->time = e[n].time;
	}
	sift_down(w, 0);
	return n;
}

const struct mt_event *mt_walk_one(struct mt_walk *w)
{
	if (w->inbatch == w->nbatch) {
		w->nbatch = mt_walk_next(w, &w->batch);
		w->inbatch = 0;
	}
	return w->inbatch < w->nbatch ? &w->batch[w->inbatch++] : NULL;
}
