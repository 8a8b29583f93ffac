/* A memtap trace of any length without running a job, written as the recorder's writer
 * lays one out (docs/FORMAT.md): `gen_trace OUT EVENTS [THREADS [SEED [SHAPE]]]`.
 *
 * THREADS threads (default 4) each allocate and free on device 0 through 24 call stacks,
 * holding up to 48 allocations, an event every 1 to 8 us (thread k: k % 3 + 1 times that;
 * about 1M events a second from 4 threads, a busy job). Every 100 ms a drain writes each
 * thread's events since the last, one run per thread, in a chunk of its own (cut at 2
 * MiB), the delta encoding restarted in each, as the writer does. SHAPE, letters:
 *   f  fast: an event every 50 to 500 ns and a drain every millisecond (many chunks)
 *   s  stragglers: 1 event in 5,000 is stamped up to 5 ms before its place (a thread
 *      preempted between the stamp and the push: it goes out in a later drain)
 *   S  the same, up to 300 ms: every chunk reaches far back in time (a walk holds many)
 *   b  a thread going backwards: 1 event in 1,000 is stamped before its thread's previous
 *   t  ties: times rounded down to 100 us, so events meet at equal times, across threads
 *      and chunks, a chunk's lowest time among them
 *   c  cut short: no END chunk, and half a chunk after the last
 * The bench's traces for the report at 100M and 1B events, and test_stream's inputs. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/format.h"

#define STACKS 24
#define LIVE 48
#define CHUNK (2u << 20)
#define MAXTHREADS 64

struct thread {
	uint64_t clock, prev, next_addr, live[LIVE], size[LIVE];
	unsigned nlive, stack[LIVE];
};

static FILE *out;
static uint64_t rng = 88172645463325252ull;

static uint64_t draw(uint64_t n) /* xorshift64: the same trace for the same seed */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng % n;
}

static void *grow(void *old, size_t old_cap, size_t new_cap)
{
	(void)old_cap;
	return realloc(old, new_cap);
}

static void chunk(uint8_t type, const struct mt_buf *b, bool cut)
{
	struct mt_chunk_header h = {.magic = MT_CHUNK_MAGIC, .type = type, .length = (uint32_t)b->len};

	h.crc = mt_crc32(0, b->data, b->len);
	fwrite(&h, sizeof h, 1, out);
	fwrite(b->data, 1, cut ? b->len / 2 : b->len, out);
}

static void tables(struct mt_buf *b)
{
	b->len = 0;
	mt_buf_bytes(b, "memtap_version=0.1.0\nbackend=preload\nhost=gen_trace\n", 52);
	chunk(MT_CHUNK_INFO, b, false);
	b->len = 0;
	for (unsigned s = 1; s <= STACKS; s++) {
		mt_buf_varint(b, s);
		mt_buf_varint(b, 8);
		for (unsigned f = 0; f < 8; f++) /* frames as deltas: a made-up return address each */
			mt_buf_zigzag(b, f ? 0x40 + (int64_t)s : 0x400000 + 0x100 * (int64_t)s);
	}
	chunk(MT_CHUNK_STACKS, b, false);
}

/* The thread's next event: an allocation while it holds few, else a free of one it holds. */
static struct mt_event next_event(struct thread *th, unsigned index, const char *shape)
{
	struct mt_event e = {.thread = index + 1, .device = 0};

	e.time = th->clock;
	if (strpbrk(shape, "sS") && draw(5000) == 0) {
		uint64_t back = draw(strchr(shape, 'S') ? 300000000 : 5000000);
		e.time -= back < e.time ? back : 0;
	} else if (strchr(shape, 'b') && draw(1000) == 0 && th->prev > 1000)
		e.time = th->prev - draw(1000);
	if (strchr(shape, 't'))
		e.time -= e.time % 100000;
	th->prev = e.time;
	if (th->nlive < LIVE / 2 || (th->nlive < LIVE && draw(2))) {
		unsigned k = th->nlive++;
		th->size[k] = 512 * (1 + draw(1u << 16));
		th->live[k] = ((uint64_t)(index + 1) << 40) + th->next_addr;
		th->next_addr += th->size[k];
		th->stack[k] = 1 + (unsigned)draw(STACKS);
		e.kind = MT_EV_ALLOC;
		e.flags = MT_API_RUNTIME;
		e.addr = th->live[k];
		e.size = th->size[k];
		e.stack = th->stack[k];
		return e;
	}
	unsigned k = (unsigned)draw(th->nlive);
	e.kind = MT_EV_FREE;
	e.addr = th->live[k];
	e.size = th->size[k];
	e.stack = th->stack[k];
	th->nlive--;
	th->live[k] = th->live[th->nlive];
	th->size[k] = th->size[th->nlive];
	th->stack[k] = th->stack[th->nlive];
	return e;
}

int main(int argc, char **argv)
{
	struct thread th[MAXTHREADS] = {0};
	struct mt_buf b = {.grow = grow};
	struct mt_encoder st = {0, 0};
	unsigned long long events, written = 0;
	unsigned threads = argc > 3 ? (unsigned)atoi(argv[3]) : 4;
	const char *shape = argc > 5 ? argv[5] : "";
	bool fast = strchr(shape, 'f') != NULL;
	uint64_t every = fast ? 1000000 : 100000000; /* between drains */

	if (argc < 3 || threads < 1 || threads > MAXTHREADS || !(out = fopen(argv[1], "wb"))) {
		fprintf(stderr, "usage: gen_trace OUT EVENTS [THREADS(1-%d) [SEED [SHAPE]]]\n", MAXTHREADS);
		return 2;
	}
	events = strtoull(argv[2], NULL, 10);
	rng += argc > 4 ? strtoull(argv[4], NULL, 10) : 0;
	fwrite(MT_FILE_MAGIC "\x01\0\0\0\0\0\0\0", 1, 16, out);
	tables(&b);
	b.len = 0;
	for (uint64_t drain = every; written < events; drain += every) {
		for (unsigned i = 0; i < threads && written < events; i++)
			for (; th[i].clock < drain && written < events; written++) {
				struct mt_event e = next_event(&th[i], i, shape);
				th[i].clock += (fast ? 50 + draw(451) : 1000 + draw(7001)) * (i % 3 + 1);
				if (!b.len) {
					mt_buf_varint(&b, 0); /* events dropped so far */
					st = (struct mt_encoder){0, 0};
				}
				mt_encode_event(&b, &st, &e);
				if (b.len > CHUNK) {
					chunk(MT_CHUNK_EVENTS, &b, false);
					b.len = 0;
				}
			}
		if (b.len && written < events) {
			chunk(MT_CHUNK_EVENTS, &b, false);
			b.len = 0;
		}
	}
	if (b.len)
		chunk(MT_CHUNK_EVENTS, &b, strchr(shape, 'c') != NULL);
	if (!strchr(shape, 'c')) {
		b.len = 0;
		mt_buf_varint(&b, 0);
		mt_buf_varint(&b, written);
		mt_buf_varint(&b, 0);
		mt_buf_varint(&b, 0);
		mt_buf_varint(&b, 0);
		chunk(MT_CHUNK_END, &b, false);
	}
	free(b.data);
	return fclose(out) ? 1 : 0;
}
