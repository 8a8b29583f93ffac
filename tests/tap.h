/* A minimal TAP producer for C tests: ok(), is(), then return done(). */
#ifndef MT_TAP_H
#define MT_TAP_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

static int tap_count, tap_failed;

static void tap_ok(int pass, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void tap_ok(int pass, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", pass ? "ok" : "not ok", ++tap_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!pass) {
		printf("#   failed at %s:%d\n", file, line);
		tap_failed++;
	}
	fflush(stdout);
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* equality of integers, printing both sides when they differ */
#define is(got, want, ...)                                                                                             \
	do {                                                                                                           \
		long long g_ = (long long)(got), w_ = (long long)(want);                                               \
		tap_ok(g_ == w_, __FILE__, __LINE__, __VA_ARGS__);                                                     \
		if (g_ != w_)                                                                                          \
			printf("#   got %lld, want %lld\n", g_, w_);                                                   \
	} while (0)

static inline int done(void)
{
	printf("1..%d\n", tap_count);
	return tap_failed ? 1 : 0;
}

/* A repeatable stream of random numbers (xorshift64), for tests that check a structure
 * against a plain model over many operations. */
static inline uint64_t tap_random(void)
{
	static uint64_t state = 88172645463325252ull;

	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

#endif
