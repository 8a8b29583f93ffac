/* What the CUDA test programs share: CHECK stops the program with the call and the
 * error's name; EXPECT prints "expect SIZE", one line for each allocation the program's
 * source makes and frees, which test_cuda.py looks for, once each, in memtap's trace. */
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

#define TRUE(cond)                                                                                                     \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "%s:%d: not true: %s\n", __FILE__, __LINE__, #cond);                           \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

#define EXPECT(size) printf("expect %zu\n", (size_t)(size))

#endif
