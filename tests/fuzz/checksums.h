/* For the fuzz targets that read memtap traces: a copy of the input whose chunks, as far as
 * their headers hold together, carry their right CRC, so that mutations reach the decoder
 * and what comes after it instead of stopping at the checksum (a hostile file has valid
 * checksums). NULL when the input is not a memtap trace. */
#ifndef MT_FUZZ_CHECKSUMS_H
#define MT_FUZZ_CHECKSUMS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/format.h"

static inline uint8_t *with_checksums(const uint8_t *data, size_t size)
{
	uint8_t *copy;
	size_t off = 16;

	if (size < 16 || memcmp(data, MT_FILE_MAGIC, 8) != 0 || !(copy = malloc(size)))
		return NULL;
	memcpy(copy, data, size);
	while (size - off >= sizeof(struct mt_chunk_header)) {
		struct mt_chunk_header h;
		memcpy(&h, copy + off, sizeof h);
		if (h.length > size - off - sizeof h)
			break;
		h.crc = mt_crc32(0, copy + off + sizeof h, h.length);
		memcpy(copy + off, &h, sizeof h);
		off += sizeof h + h.length;
	}
	return copy;
}

/* fn on the input as it is, then, when it is a memtap trace, with its checksums made right. */
static inline void as_is_and_checksummed(const uint8_t *data, size_t size, void (*fn)(const uint8_t *, size_t))
{
	uint8_t *fixed = with_checksums(data, size);

	fn(data, size);
	if (fixed) {
		fn(fixed, size);
		free(fixed);
	}
}

#endif
