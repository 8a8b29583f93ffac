/* Runs a libFuzzer target without libFuzzer: each seed file (or every file of a seed
 * directory) as it is, then cut at up to 256 lengths and put through seeded random
 * mutations (bit flips, byte runs, cuts). Deterministic, so a failure reproduces; prints
 * TAP, one line per seed. usage: standalone ROUNDS SEED|DIR... [--rounds=N SEED|DIR...] */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t state = 0x9e3779b97f4a7c15ull;
static int n;

static uint64_t next(void)
{
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

/* Each input in a buffer of its own exact size, as libFuzzer gives it, so that ASan sees a
 * read one byte past the end (a cut of a seed would otherwise be followed by the rest). */
static void run(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);

	if (!copy)
		abort();
	memcpy(copy, data, size);
	LLVMFuzzerTestOneInput(copy, size);
	free(copy);
}

static uint8_t *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)len + 1);
		if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
			free(buf);
			buf = NULL;
		}
		*size = (size_t)len;
	}
	fclose(f);
	return buf;
}

static int one_seed(const char *path, long rounds)
{
	size_t size = 0;
	uint8_t *seed = slurp(path, &size), *buf;

	n++;
	if (!seed || !(buf = malloc(size + 64))) {
		printf("not ok %d - cannot read seed %s\n", n, path);
		free(seed);
		return 1;
	}
	run(seed, size);
	for (size_t cut = 0; cut < size; cut += 1 + size / 256)
		run(seed, cut);
	for (long r = 0; r < rounds; r++) {
		size_t len = size;
		memcpy(buf, seed, size);
		for (int k = 0, edits = 1 + (int)(next() % 8); k < edits && len; k++) {
			size_t at = next() % len;
			switch (next() % 4) {
			case 0:
				buf[at] ^= (uint8_t)(1u << (next() % 8));
				break;
			case 1:
				buf[at] = (uint8_t)next();
				break;
			case 2:
				memset(buf + at, (int)(next() & 0xff), (len - at) < 8 ? len - at : 8);
				break;
			default:
				len = at;
				break;
			}
		}
		run(buf, len);
	}
	free(buf);
	free(seed);
	printf("ok %d - %s: whole, cut and %ld mutations read without a crash\n", n, path, rounds);
	fflush(stdout);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory's files in name order, so the run is the same everywhere. */
static int one_dir(const char *dir, long rounds)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char **names = NULL;
	size_t count = 0;
	int failed = 0;

	while (d && (de = readdir(d))) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (de->d_name[0] == '.' || stat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		names = realloc(names, (count + 1) * sizeof *names);
		names[count++] = strdup(path);
	}
	if (d)
		closedir(d);
	qsort(names, count, sizeof *names, by_name);
	for (size_t i = 0; i < count; i++) {
		failed |= one_seed(names[i], rounds);
		free(names[i]);
	}
	free(names);
	return failed;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1000;
	int failed = 0;

	for (int i = 2; i < argc; i++) {
		struct stat st;
		if (!strncmp(argv[i], "--rounds=", 9))
			rounds = atol(argv[i] + 9);
		else
			failed |= stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? one_dir(argv[i], rounds)
										 : one_seed(argv[i], rounds);
	}
	printf("1..%d\n", n);
	return failed;
}
