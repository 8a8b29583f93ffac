/* Byte sizes as people write them ("80GiB", "1.5G", "512KB", "4096") and back.
 * Binary suffixes K/M/G/T (also Ki/KiB...) are powers of 1024; "KB", "MB", "GB",
 * "TB" are powers of 1000, so "80GB" and "80GiB" never mean the same thing. */
#ifndef MT_UNITS_H
#define MT_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* 0 on success, EINVAL for text that is not a size, ERANGE when it overflows. */
int mt_parse_size(const char *text, uint64_t *out);

/* Writes "1.50 GiB" style text (binary units) into buf; returns buf. */
char *mt_format_size(uint64_t bytes, char *buf, size_t len);

#endif
