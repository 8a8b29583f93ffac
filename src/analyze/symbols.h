/* Offline symbolization of recorded return addresses: the trace's module map (path,
 * load bias) is reported to elfutils' libdwfl, which reads symbol tables and DWARF
 * line tables from the files as they are on this machine. Results are cached per
 * address. Frames whose module is gone keep module + offset. */
#ifndef MT_SYMBOLS_H
#define MT_SYMBOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "reader/reader.h"

struct mt_frame {
	uint64_t addr;
	const char *function; /* NULL when unknown */
	const char *file;     /* NULL when unknown */
	int line;
	const char *module; /* basename, NULL when outside every module */
	uint64_t offset;    /* from the module's load bias */
};

struct mt_symbols;

struct mt_symbols *mt_symbols_open(const struct mt_trace *t);
const struct mt_frame *mt_symbols_frame(struct mt_symbols *s, uint64_t addr); /* s may be NULL */
/* Whether the trace holds Python frames (its process ran Python); and, for a stack of
 * such a trace that has none (a thread without Python: autograd, NCCL), a line saying
 * so, the way PyTorch does; NULL otherwise. */
bool mt_symbols_python(const struct mt_symbols *s);
const char *mt_symbols_no_python(const struct mt_symbols *s, uint32_t stack);
void mt_symbols_close(struct mt_symbols *s);

#endif
