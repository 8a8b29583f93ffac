/* Runs a libFuzzer target without libFuzzer: each seed file as it is, then cut at
 * every length and put through seeded random mutations (bit flips, byte runs,
 * splices). Deterministic, so a failure reproduces; prints TAP. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t state = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

static uint8_t *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*size = (size_t)n;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1000;
	int n = 0;

	for (int i = 2; i < argc; i++) {
		size_t size = 0;
		uint8_t *seed = slurp(argv[i], &size), *buf;
		if (!seed) {
			printf("not ok %d - cannot read seed %s\n1..%d\n", ++n, argv[i], n);
			return 1;
		}
		buf = malloc(size + 64);
		LLVMFuzzerTestOneInput(seed, size);
		for (size_t cut = 0; cut < size; cut += 1 + size / 4096)
			LLVMFuzzerTestOneInput(seed, cut);
		for (long r = 0; r < rounds; r++) {
			size_t len = size;
			memcpy(buf, seed, size);
			for (int k = 0, edits = 1 + (int)(next() % 8); k < edits && len; k++) {
				size_t at = next() % len;
				switch (next() % 4) {
				case 0: buf[at] ^= (uint8_t)(1u << (next() % 8)); break;
				case 1: buf[at] = (uint8_t)next(); break;
				case 2: memset(buf + at, (int)(next() & 0xff), (len - at) < 8 ? len - at : 8); break;
				default: len = at; break;
				}
			}
			LLVMFuzzerTestOneInput(buf, len);
		}
		free(buf);
		free(seed);
		printf("ok %d - %s: whole, every cut and %ld mutations parsed without a crash\n", ++n, argv[i], rounds);
	}
	printf("1..%d\n", n);
	return 0;
}
