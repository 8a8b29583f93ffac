/* How a stack reads to a person. A recorded stack is innermost first and mostly plumbing:
 * PyTorch's recorder and unwinder, its caching allocator, tensor creation, the
 * dispatcher, the interpreter, thread start-up, memtap itself; and PyTorch appends the
 * Python frames it could not interleave after `_start`. A view keeps what PyTorch's own
 * viewer keeps (its _frame_filter) less that plumbing: the Python frames first, innermost
 * first, with the torch.nn call machinery left out, then the few native frames that say
 * which operation it was, names shortened. Its `where` is the first frame of the user's
 * own code (a Python file outside the libraries, else the operation), by which tables
 * group; a stack without Python frames off autograd's thread (a C or C++ program) shows
 * all its native frames and groups by all of them. Views are made once per stack. */
#ifndef MT_STACKS_H
#define MT_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "analyze/symbols.h"
#include "reader/reader.h"

#define MT_VIEW_NATIVE 3 /* native frames a view keeps after the Python ones */
#define MT_NO_FRAME UINT32_MAX

struct mt_view {
	const uint32_t *shown; /* indices into the stack's frames, in the order shown */
	uint32_t nshown, depth;
	uint32_t where; /* index of the first frame of the user's code, or MT_NO_FRAME */
	bool python;	/* the stack has Python frames */
	bool autograd;	/* made on autograd's engine thread (a C++ thread: no Python frames) */
	uint64_t site;	/* where's identity (function, file, line), for grouping; 0: none */
};

struct mt_views;

struct mt_views *mt_views_open(const struct mt_trace *t, struct mt_symbols *sym); /* NULL: out of memory */
const struct mt_view *mt_view(struct mt_views *v, uint32_t stack);		  /* stack 0: no frames */
void mt_views_close(struct mt_views *v);

/* A frame as one line: "function (file:line)", a C++ name shortened (no parameters,
 * template arguments as <…>, no return type or compiler suffix) unless `full`. */
const char *mt_frame_text(const struct mt_frame *f, bool full, char *buf, size_t n);
/* The function's name alone, shortened the same way. */
const char *mt_frame_name(const char *function, char *buf, size_t n);
/* Whether a frame is Python's (a .py file, or a recorded Python frame). */
bool mt_frame_is_python(const struct mt_frame *f);

/* What a block made before recording began says instead of frames, as PyTorch's viewer
 * says it. */
#define MT_BEFORE_RECORDING "allocated before recording started (the model's parameters and buffers, typically)"
#define MT_NO_HISTORY "no stack: the snapshot was taken without torch.cuda.memory._record_memory_history"

#endif
