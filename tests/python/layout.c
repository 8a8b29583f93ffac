/* The layout row python.c uses for the installed CPython, against offsetof() on that
 * CPython's own headers (built only when pkg-config finds them: python3-dev). */
#include <stdio.h>

#ifdef HAVE_PYTHON_DEV
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_MINOR_VERSION >= 11
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#include <string.h>

#include "recorder/pylayout.h"

static int failed, n;

static void same(const char *what, size_t row, size_t header)
{
	printf("%s %d - %s: %zu in memtap's row, %zu in the headers\n", row == header ? "ok" : "not ok", ++n, what, row,
	       header);
	failed |= row != header;
}

#define SAME(field, type, member) same(#type "." #member, l->field, offsetof(type, member))

int main(void)
{
	const struct py_layout *l = NULL;

	for (size_t i = 0; i < sizeof py_layouts / sizeof py_layouts[0]; i++)
		if (py_layouts[i].minor == PY_MINOR_VERSION)
			l = &py_layouts[i];
	if (!l) {
		printf("not ok 1 - CPython 3.%d has no layout row in src/recorder/pylayout.h\n1..1\n",
		       PY_MINOR_VERSION);
		return 1;
	}
#if PY_MINOR_VERSION <= 10
	SAME(tstate_frame, PyThreadState, frame);
	SAME(frame_code, PyFrameObject, f_code);
	SAME(frame_previous, PyFrameObject, f_back);
	SAME(frame_instr, PyFrameObject, f_lasti);
	SAME(code_name, PyCodeObject, co_name);
#else
#if PY_MINOR_VERSION <= 12
	SAME(tstate_frame, PyThreadState, cframe);
	SAME(cframe_current, _PyCFrame, current_frame);
#else
	SAME(tstate_frame, PyThreadState, current_frame);
#endif
#if PY_MINOR_VERSION == 11
	SAME(frame_code, _PyInterpreterFrame, f_code);
	SAME(frame_instr, _PyInterpreterFrame, prev_instr);
	SAME(frame_entry, _PyInterpreterFrame, is_entry);
#elif PY_MINOR_VERSION == 12
	SAME(frame_code, _PyInterpreterFrame, f_code);
	SAME(frame_instr, _PyInterpreterFrame, prev_instr);
	same("FRAME_OWNED_BY_CSTACK", l->owner_cstack, FRAME_OWNED_BY_CSTACK);
#else
	SAME(frame_code, _PyInterpreterFrame, f_executable);
	SAME(frame_instr, _PyInterpreterFrame, instr_ptr);
	same("FRAME_OWNED_BY_CSTACK", l->owner_cstack, FRAME_OWNED_BY_CSTACK);
#endif
	SAME(frame_previous, _PyInterpreterFrame, previous);
	SAME(frame_owner, _PyInterpreterFrame, owner);
	same("FRAME_OWNED_BY_GENERATOR", PY_OWNED_BY_GENERATOR, FRAME_OWNED_BY_GENERATOR);
	SAME(code_name, PyCodeObject, co_qualname);
	SAME(code_firsttraceable, PyCodeObject, _co_firsttraceable);
	SAME(code_instructions, PyCodeObject, co_code_adaptive);
#endif
	SAME(code_filename, PyCodeObject, co_filename);
	SAME(str_state, PyASCIIObject, state);
	same("sizeof(PyASCIIObject)", l->str_ascii_data, sizeof(PyASCIIObject));
	SAME(str_utf8, PyCompactUnicodeObject, utf8);
	same("sizeof(PyCompactUnicodeObject)", l->str_compact_data, sizeof(PyCompactUnicodeObject));
	printf("1..%d\n", n);
	return failed;
}
#else
int main(void)
{
	puts("1..0 # SKIP no CPython headers (pkg-config python3; Debian: python3-dev)");
	return 0;
}
#endif
