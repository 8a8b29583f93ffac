/* What the CUDA test programs share: CHECK stops the program with the call and the
 * error's name; ERROR_IS holds a call to the error simgpu answers, and TRUE a condition:
 * each stops the program with what it got, or under CHECK_GO_ON=1 (tests/gpu/run, on a
 * real driver: every answer that differs, in one run) says so and goes on. EXPECT prints
 * "expect SIZE", one line for each allocation the program's source makes and frees, which
 * test_cuda.py looks for, once each, in memtap's trace. */
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                                    \
	do {                                                                                                           \
		cudaError_t e_ = (call);                                                                               \
		if (e_ != cudaSuccess) {                                                                               \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_));           \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

static inline void check_failed(void)
{
	const char *on = getenv("CHECK_GO_ON");

	if (!on || *on != '1')
		exit(1);
}

#define TRUE(cond)                                                                                                     \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "%s:%d: not true: %s\n", __FILE__, __LINE__, #cond);                           \
			check_failed();                                                                                \
		}                                                                                                      \
	} while (0)

#define ERROR_IS(call, want)                                                                                           \
	do {                                                                                                           \
		cudaError_t e_ = (call);                                                                               \
		if (e_ != (want)) {                                                                                    \
			fprintf(stderr, "%s:%d: not true: %s == %s (got %s)\n", __FILE__, __LINE__, #call, #want,      \
				cudaGetErrorName(e_));                                                                 \
			check_failed();                                                                                \
		}                                                                                                      \
	} while (0)

#define EXPECT(size) printf("expect %zu\n", (size_t)(size))

#endif
