/* Where CPython keeps a thread's Python stack, per minor version (64-bit Linux, the
 * default build: no Py_TRACE_REFS, no free threading). From each version's headers:
 * cpython/pystate.h (PyThreadState), internal/pycore_frame.h or frameobject.h (frames),
 * cpython/code.h (PyCodeObject), cpython/unicodeobject.h (str). tests/python/layout.c
 * compares the row of the installed version with offsetof() on its headers; python.c
 * checks any row on the running interpreter's own objects before trusting it. */
#ifndef MEMTAP_PYLAYOUT_H
#define MEMTAP_PYLAYOUT_H

#include <stddef.h>

struct py_layout {
	int minor;
	size_t tstate_frame;   /* PyThreadState: .frame (3.9, 3.10), .cframe (3.11, 3.12), .current_frame (3.13) */
	size_t cframe_current; /* _PyCFrame.current_frame; PY_DIRECT when tstate_frame is the frame itself */
	size_t frame_code, frame_previous;
	size_t frame_instr;		 /* the instruction pointer, or int f_lasti (3.9, 3.10) */
	int lasti_unit;			 /* f_lasti counts this many bytes; 0: frame_instr is a pointer */
	size_t frame_entry;		 /* 3.11: bool is_entry, set on the first frame of an eval call; 0: none */
	size_t frame_owner;		 /* 3.11 on: char owner; 0: none */
	int owner_cstack;		 /* 3.12 on: owner value of the frame an eval call keeps on the C stack */
	size_t code_filename, code_name; /* qualified name from 3.11 on */
	size_t code_firsttraceable, code_instructions;
	size_t str_state, str_ascii_data, str_utf8;
	size_t str_compact_data; /* sizeof(PyCompactUnicodeObject): where a compact str's characters start */
};

#define PY_DIRECT ((size_t)-1)
#define PY_OWNED_BY_GENERATOR 1 /* _PyInterpreterFrame.owner, 3.11 on */

static const struct py_layout py_layouts[] = {
    {.minor = 9,
     .tstate_frame = 24,
     .cframe_current = PY_DIRECT,
     .frame_code = 32,
     .frame_previous = 24,
     .frame_instr = 104,
     .lasti_unit = 1,
     .code_filename = 104,
     .code_name = 112,
     .str_state = 32,
     .str_ascii_data = 48,
     .str_utf8 = 56,
     .str_compact_data = 72},
    {.minor = 10,
     .tstate_frame = 24,
     .cframe_current = PY_DIRECT,
     .frame_code = 32,
     .frame_previous = 24,
     .frame_instr = 96,
     .lasti_unit = 2,
     .code_filename = 104,
     .code_name = 112,
     .str_state = 32,
     .str_ascii_data = 48,
     .str_utf8 = 56,
     .str_compact_data = 72},
    {.minor = 11,
     .tstate_frame = 56,
     .cframe_current = 8,
     .frame_code = 32,
     .frame_previous = 48,
     .frame_instr = 56,
     .frame_entry = 68,
     .frame_owner = 69,
     .code_filename = 112,
     .code_name = 128,
     .code_firsttraceable = 168,
     .code_instructions = 184,
     .str_state = 32,
     .str_ascii_data = 48,
     .str_utf8 = 56,
     .str_compact_data = 72},
    {.minor = 12,
     .tstate_frame = 56,
     .cframe_current = 0,
     .frame_code = 0,
     .frame_previous = 8,
     .frame_instr = 56,
     .frame_owner = 70,
     .owner_cstack = 3,
     .code_filename = 112,
     .code_name = 128,
     .code_firsttraceable = 176,
     .code_instructions = 192,
     .str_state = 32,
     .str_ascii_data = 40,
     .str_utf8 = 48,
     .str_compact_data = 56},
    {.minor = 13,
     .tstate_frame = 72,
     .cframe_current = PY_DIRECT,
     .frame_code = 0,
     .frame_previous = 8,
     .frame_instr = 56,
     .frame_owner = 70,
     .owner_cstack = 3,
     .code_filename = 112,
     .code_name = 128,
     .code_firsttraceable = 184,
     .code_instructions = 200,
     .str_state = 32,
     .str_ascii_data = 40,
     .str_utf8 = 48,
     .str_compact_data = 56},
};

#endif
