/* Python frames. When the allocating thread has a CPython thread state, its Python
 * stack is read from the interpreter's own structures, without the GIL and without
 * touching a reference count: the thread is inside a C call (it holds the GIL, or it
 * released it for the call, as ctypes does), so its frames cannot change under us, and
 * code objects are immutable. Nothing from Python is linked: the few entry points used
 * are looked up in the process, and the structure layouts come from a table per CPython
 * version. Each Python frame (code object, instruction) becomes one string,
 * "function\tfile\tline", interned like any string; the stack carries it as a pseudo
 * address (MT_PYFRAME | string id) in place of the interpreter's own native frames,
 * so that every reader shows train.py's lines where _PyEval_EvalFrameDefault was. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "preload/mtp.h"

/* Byte offsets in one CPython minor version's structures (64-bit Linux). */
struct layout {
	int minor;
	size_t tstate_cframe;   /* PyThreadState.cframe */
	size_t cframe_current;  /* _PyCFrame.current_frame */
	size_t frame_code, frame_previous, frame_instr, frame_entry, frame_owner; /* _PyInterpreterFrame */
	size_t code_filename, code_qualname, code_firsttraceable, code_instructions; /* PyCodeObject */
	size_t str_state, str_ascii_data, str_utf8; /* PyASCIIObject, PyCompactUnicodeObject */
};

/* 3.11: cpython/pystate.h, internal/pycore_frame.h, cpython/code.h, cpython/unicodeobject.h;
 * tests/python checks this row against the headers when they are installed. */
static const struct layout layouts[] = {
	{11, 56, 8, 32, 48, 56, 68, 69, 112, 128, 168, 184, 32, 48, 56},
};

#define OWNED_BY_GENERATOR 1 /* _PyInterpreterFrame.owner */
#define STR_ASCII (1u << 6)  /* PyASCIIObject.state: interned:2 kind:3 compact:1 ascii:1 */
#define MAX_PY 256           /* Python frames read per stack */
#define CACHE 256            /* (code, instruction) -> frame string, per thread */

static struct {
	int state; /* 0: not found yet, 1: an interpreter we can read, -1: one we cannot */
	const struct layout *l;
	int (*initialized)(void);
	void *(*tstate)(void);
	int (*addr2line)(void *code, int offset);
	uintptr_t interp_start, interp_end; /* the module holding the eval loop */
	uintptr_t eval_start, eval_end;     /* _PyEval_EvalFrameDefault */
} py;
static pthread_mutex_t py_lock = PTHREAD_MUTEX_INITIALIZER;

struct py_entry {
	uintptr_t code, instr, file, name; /* file and name: the string objects, to catch a reused address */
	uint32_t id;
};

struct mtp_py_cache {
	struct py_entry e[CACHE];
};

static int module_extent(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + p->p_vaddr < lo)
			lo = info->dlpi_addr + p->p_vaddr;
		if (info->dlpi_addr + p->p_vaddr + p->p_memsz > hi)
			hi = info->dlpi_addr + p->p_vaddr + p->p_memsz;
	}
	if (py.eval_start < lo || py.eval_start >= hi)
		return 0;
	py.interp_start = lo;
	py.interp_end = hi;
	return 1;
}

/* Finds an interpreter in the process. Called under py_lock. */
static int look(void)
{
	const char *(*version)(void) = (const char *(*)(void))mtp_dlsym(RTLD_DEFAULT, "Py_GetVersion");
	void *eval = mtp_dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
	int major = 0, minor = 0;
	Dl_info info;
	const ElfW(Sym) *sym = NULL;

	if (!version || !eval)
		return 0; /* not (yet) a Python process */
	if (sscanf(version(), "%d.%d", &major, &minor) != 2)
		return -1;
	for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
		if (major == 3 && layouts[i].minor == minor)
			py.l = &layouts[i];
	py.initialized = (int (*)(void))mtp_dlsym(RTLD_DEFAULT, "Py_IsInitialized");
	py.tstate = (void *(*)(void))mtp_dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
	py.addr2line = (int (*)(void *, int))mtp_dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
	if (!py.l || !py.initialized || !py.tstate || !py.addr2line) {
		if (!mtp_opt.quiet)
			fprintf(stderr, "memtap: Python %d.%d: its frames cannot be read by this memtap; "
					"native stacks only\n", major, minor);
		return -1;
	}
	py.eval_start = (uintptr_t)eval;
	py.eval_end = py.eval_start + 1;
	if (dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size)
		py.eval_end = py.eval_start + sym->st_size;
	dl_iterate_phdr(module_extent, NULL);
	return 1;
}

static bool ready(void)
{
	int s = __atomic_load_n(&py.state, __ATOMIC_ACQUIRE);

	if (likely(s != 0))
		return s > 0;
	/* a program may load the interpreter late: each thread looks again now and then */
	if (mtp_self.py_looks++ % 4096 != 0)
		return false;
	pthread_mutex_lock(&py_lock);
	if (!py.state && (s = look()) != 0)
		__atomic_store_n(&py.state, s, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&py_lock);
	return s > 0;
}

static uintptr_t word(uintptr_t p, size_t off)
{
	return *(const uintptr_t *)(p + off);
}

/* A str object's text when it can be had without the GIL: ASCII, or UTF-8 made earlier. */
static const char *text(uintptr_t s)
{
	const struct layout *l = py.l;

	if (!s)
		return "?";
	if (*(const uint32_t *)(s + l->str_state) & STR_ASCII)
		return (const char *)(s + l->str_ascii_data);
	return word(s, l->str_utf8) ? (const char *)word(s, l->str_utf8) : "<non-ASCII name>";
}

/* The string id of one frame: from this thread's cache, else made and interned. */
static uint32_t frame_id(uintptr_t code, uintptr_t instr)
{
	const struct layout *l = py.l;
	struct mtp_py_cache *c = mtp_self.py_cache;
	uintptr_t file = word(code, l->code_filename), name = word(code, l->code_qualname);
	struct py_entry *e = NULL;
	char s[1024];
	int line;

	if (!c && (c = mtp_self.py_cache = mtp_map(sizeof *c)) == NULL)
		return 0;
	e = &c->e[((code ^ instr) * 0x9e3779b97f4a7c15ull) >> 56 & (CACHE - 1)];
	if (e->code == code && e->instr == instr && e->file == file && e->name == name && e->id)
		return e->id;
	line = py.addr2line((void *)code, (int)(instr - (code + l->code_instructions)));
	snprintf(s, sizeof s, "%s\t%s\t%d", text(name), text(file), line);
	*e = (struct py_entry){code, instr, file, name, mtp_intern(s)};
	return e->id;
}

/* This thread's Python frames, innermost first, as pseudo addresses; entry[i] marks the
 * last frame run by one native call of the eval loop. */
static size_t python_frames(uint64_t *out, bool *entry, size_t max)
{
	const struct layout *l = py.l;
	uintptr_t ts, cf, f;
	size_t n = 0;

	if (!py.initialized() || !(ts = (uintptr_t)py.tstate()) || !(cf = word(ts, l->tstate_cframe)))
		return 0;
	for (f = word(cf, l->cframe_current); f && n < max; f = word(f, l->frame_previous)) {
		uintptr_t code = word(f, l->frame_code), instr = word(f, l->frame_instr);
		int first = *(const int *)(code + l->code_firsttraceable);
		bool is_entry = *(const bool *)(f + l->frame_entry);
		uint32_t id;
		/* a frame that has not started running its code yet is not shown */
		if (*(const char *)(f + l->frame_owner) != OWNED_BY_GENERATOR &&
		    instr < code + l->code_instructions + (uintptr_t)first * 2) {
			if (is_entry && n)
				entry[n - 1] = true;
			continue;
		}
		if (!(id = frame_id(code, instr)))
			break;
		entry[n] = is_entry;
		out[n++] = MT_PYFRAME | id;
	}
	return n;
}

static bool in_interpreter(uint64_t ip)
{
	return ip >= py.interp_start && ip < py.interp_end;
}

static bool is_eval(uint64_t ip)
{
	return ip > py.eval_start && ip <= py.eval_end; /* return addresses point after the call */
}

uint32_t mtp_python_stack(uint32_t native)
{
	uint64_t pf[MAX_PY], out[MAX_PY + 256];
	bool entry[MAX_PY] = {false};
	size_t np, no = 0, nn = 0, k = 0, limit = mtp_opt.python_depth < MAX_PY ? mtp_opt.python_depth : MAX_PY;
	const uint64_t *nf = NULL;

	if (!mtp_opt.python_frames || !ready() || !(np = python_frames(pf, entry, limit)))
		return native;
	if (native)
		nf = mtp_table_get(&mtp_stacks, native, &nn);
	nn /= sizeof *nf;
	if (nn > 256)
		nn = 256;
	/* native frames as they are, except that each run inside the interpreter which holds
	 * eval-loop frames becomes the Python frames those eval loops were running */
	for (size_t i = 0; i < nn;) {
		size_t j = i, evals = 0;
		while (j < nn && in_interpreter(nf[j]))
			evals += is_eval(nf[j++]);
		if (j == i) {
			out[no++] = nf[i++];
			continue;
		}
		if (!evals || k == np) {
			memcpy(out + no, nf + i, (j - i) * sizeof *out);
			no += j - i;
		}
		for (; evals && k < np; k++) {
			out[no++] = pf[k];
			evals -= entry[k];
		}
		i = j;
	}
	while (k < np) /* deeper than the native stack went */
		out[no++] = pf[k++];
	return mtp_table_intern(&mtp_stacks, out, no * sizeof *out);
}

void mtp_python_thread_gone(void)
{
	struct mtp_py_cache *c = mtp_self.py_cache;

	mtp_self.py_cache = NULL;
	if (c)
		mtp_unmap(c, sizeof *c);
}
