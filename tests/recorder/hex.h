/* Bytes as hex text and back: how tests/recorder's programs hand an IPC handle or a pool
 * pointer's export data to the process they exec. */
#ifndef MT_TESTS_HEX_H
#define MT_TESTS_HEX_H
#include <stdio.h>

/* hex has room for 2n + 1 characters */
static inline void to_hex(const void *p, size_t n, char *hex)
{
	for (size_t i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)p)[i]);
}

/* as many bytes as hex has pairs of digits, at most n */
static inline void from_hex(const char *hex, void *p, size_t n)
{
	for (size_t i = 0; i < n && hex[2 * i] && hex[2 * i + 1]; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		((unsigned char *)p)[i] = (unsigned char)v;
	}
}
#endif
