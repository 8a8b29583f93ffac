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
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format.h"
#include "recorder/mtp.h"
#include "recorder/pylayout.h"

#define OB_TYPE 8	 /* PyObject.ob_type */
#define OB_SIZE 16	 /* PyVarObject.ob_size: a code object's length in code units, 3.11 on */
#define STR_LENGTH 16	 /* PyASCIIObject.length */
#define STR_KIND_SHIFT 2 /* PyASCIIObject.state: interned:2 kind:3 compact:1 ascii:1 */
#define STR_COMPACT (1u << 5)
#define STR_ASCII (1u << 6)
#define MAX_PY 256 /* Python frames read per stack */
#define CACHE 256  /* (code, instruction) -> frame string, per thread */
#define MAX_EMPTY_CHECKS 1024

/* 0: not found yet; FOUND: a layout for this version, not yet seen to match it;
 * CHECKED: seen to match on the interpreter's own objects; -1: frames cannot be read */
enum { FOUND = 1, CHECKED = 2 };

int mtp_py_state;

static struct {
	const struct py_layout *l;
	int minor;
	int (*initialized)(void);
	void *(*tstate)(void);
	int (*addr2line)(void *code, int offset);
	uintptr_t code_type, str_type;	    /* PyCode_Type, PyUnicode_Type */
	uintptr_t interp_start, interp_end; /* the module holding the eval loop */
	uintptr_t eval_start, eval_end;	    /* _PyEval_EvalFrameDefault */
	unsigned empty_checks;		    /* threads with Python state in which no frame was found */
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

static int cannot(const char *why)
{
	if (!mtp_opt.quiet)
		fprintf(stderr, "memtap: Python 3.%d: %s; native stacks only\n", py.minor, why);
	return -1;
}

/* A name in the global scope. Through the main program's handle, not RTLD_DEFAULT:
 * glibc makes a dlopen'ed library that answers an RTLD_DEFAULT lookup by memtap (which
 * cannot be unloaded) unloadable too, and memtap must not keep a library the program
 * closes. */
static void *global(const char *name)
{
	static void *main_program;

	if (!main_program)
		main_program = dlopen(NULL, RTLD_LAZY);
	return main_program ? mtp_dlsym(main_program, name) : NULL;
}

/* After an unload: if the interpreter went, its frames are not read again. */
void mtp_python_forget(void)
{
	pthread_mutex_lock(&py_lock);
	if (mtp_py_state > 0 && !mtp_module_loaded(py.interp_start, py.interp_end))
		__atomic_store_n(&mtp_py_state, -1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&py_lock);
}

/* Finds an interpreter in the process. Called under py_lock. */
static int look(void)
{
	const char *(*version)(void) = (const char *(*)(void))global("Py_GetVersion");
	void *eval = global("_PyEval_EvalFrameDefault");
	int major = 0;
	Dl_info info;
	const ElfW(Sym) *sym = NULL;

	if (!version || !eval)
		return 0; /* not (yet) a Python process */
	if (sscanf(version(), "%d.%d", &major, &py.minor) != 2 || major != 3)
		return -1;
	for (size_t i = 0; i < sizeof py_layouts / sizeof py_layouts[0]; i++)
		if (py_layouts[i].minor == (mtp_opt.python_layout ? (int)mtp_opt.python_layout : py.minor))
			py.l = &py_layouts[i];
	py.initialized = (int (*)(void))global("Py_IsInitialized");
	py.tstate = (void *(*)(void))global("PyGILState_GetThisThreadState");
	py.addr2line = (int (*)(void *, int))global("PyCode_Addr2Line");
	py.code_type = (uintptr_t)global("PyCode_Type");
	py.str_type = (uintptr_t)global("PyUnicode_Type");
	if (!py.l || strstr(version(), "free-threading"))
		return cannot("its frames cannot be read by this memtap");
	if (!py.initialized || !py.tstate || !py.addr2line || !py.code_type || !py.str_type)
		return cannot("its API lacks what memtap reads frames with");
	py.eval_start = (uintptr_t)eval;
	py.eval_end = py.eval_start + 1;
	if (dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size)
		py.eval_end = py.eval_start + sym->st_size;
	dl_iterate_phdr(module_extent, NULL);
	return FOUND;
}

static bool ready(void)
{
	int s = __atomic_load_n(&mtp_py_state, __ATOMIC_ACQUIRE);

	if (likely(s != 0))
		return s > 0;
	pthread_mutex_lock(&py_lock);
	if (!mtp_py_state && (s = look()) != 0)
		__atomic_store_n(&mtp_py_state, s, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&py_lock);
	return s > 0;
}

/* Reading memory. Until the layout has been seen to match, every read is checked first:
 * a wrong layout then turns Python frames off instead of crashing the job. */
struct reader {
	int pipe[2]; /* checking: the kernel tells whether memory is readable (write gives EFAULT) */
	bool bad;    /* checking: something was not where the layout says */
};

/* checking only: whether n bytes at p can be read */
static bool readable_checked(struct reader *r, uintptr_t p, size_t n)
{
	char sink[256];

	for (size_t k; n && !r->bad; p += k, n -= k) {
		k = n < sizeof sink ? n : sizeof sink;
		if (p < 4096 || write(r->pipe[1], (const void *)p, k) != (ssize_t)k ||
		    read(r->pipe[0], sink, k) != (ssize_t)k)
			r->bad = true;
	}
	return !r->bad;
}

static inline bool readable(struct reader *r, uintptr_t p, size_t n)
{
	return r->pipe[0] < 0 || readable_checked(r, p, n);
}

/* always inlined: size is a constant at each use, so the copy is one load */
static inline __attribute__((always_inline)) uintptr_t load(struct reader *r, uintptr_t p, size_t off, size_t size)
{
	uintptr_t v = 0;

	if (unlikely(r->pipe[0] >= 0) && (r->bad || !readable_checked(r, p + off, size)))
		return 0;
	memcpy(&v, (const void *)(p + off), size); /* little-endian */
	return v;
}

static bool is_a(struct reader *r, uintptr_t obj, uintptr_t type)
{
	return obj && load(r, obj, OB_TYPE, sizeof obj) == type;
}

/* A str object's text as UTF-8, read without the GIL: ASCII as it is, else the UTF-8
 * copy Python made earlier, else the compact form (1, 2 or 4 bytes a character) encoded
 * into buf. */
static const char *text(struct reader *r, uintptr_t s, char *buf, size_t cap)
{
	const struct py_layout *l = py.l;
	uint32_t state;
	size_t n, kind, o = 0;
	uintptr_t utf8;

	if (!is_a(r, s, py.str_type)) {
		r->bad = r->pipe[0] >= 0;
		return "?";
	}
	state = (uint32_t)load(r, s, l->str_state, 4);
	n = load(r, s, STR_LENGTH, 8);
	if (state & STR_ASCII) {
		/* checking: the length the object states ends the text where the layout says */
		if (r->pipe[0] >= 0 && (n >= 4096 || !readable(r, s + l->str_ascii_data, n + 1) ||
					strnlen((const char *)(s + l->str_ascii_data), n + 1) != n))
			r->bad = true;
		return r->bad ? "?" : (const char *)(s + l->str_ascii_data);
	}
	if ((utf8 = load(r, s, l->str_utf8, sizeof utf8)))
		return (const char *)utf8;
	kind = state >> STR_KIND_SHIFT & 7;
	if (!(state & STR_COMPACT) || (kind != 1 && kind != 2 && kind != 4) || n >= 4096 ||
	    !readable(r, s + l->str_compact_data, n * kind))
		return "<name not readable>";
	for (size_t i = 0; i < n && o + 5 < cap; i++) {
		const unsigned char *p = (const unsigned char *)(s + l->str_compact_data + i * kind);
		uint32_t c = kind == 1	 ? p[0]
			     : kind == 2 ? (uint32_t)(p[0] | p[1] << 8)
					 : (uint32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
		if (c < 0x80) {
			buf[o++] = (char)c;
		} else if (c < 0x800) {
			buf[o++] = (char)(0xc0 | c >> 6);
			buf[o++] = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			buf[o++] = (char)(0xe0 | c >> 12);
			buf[o++] = (char)(0x80 | (c >> 6 & 0x3f));
			buf[o++] = (char)(0x80 | (c & 0x3f));
		} else {
			buf[o++] = (char)(0xf0 | c >> 18);
			buf[o++] = (char)(0x80 | (c >> 12 & 0x3f));
			buf[o++] = (char)(0x80 | (c >> 6 & 0x3f));
			buf[o++] = (char)(0x80 | (c & 0x3f));
		}
	}
	buf[o] = '\0';
	return buf;
}

/* The string id of one frame: from this thread's cache, else made and interned. */
static uint32_t frame_id(struct reader *r, uintptr_t code, uintptr_t instr)
{
	const struct py_layout *l = py.l;
	struct mtp_py_cache *c = mtp_self.py_cache;
	uintptr_t file = load(r, code, l->code_filename, sizeof file), name = load(r, code, l->code_name, sizeof name);
	const char *name_text, *file_text;
	struct py_entry *e = NULL;
	char s[1024], name_buf[256], file_buf[512];
	int offset;

	if (!c && (c = mtp_self.py_cache = mtp_map(sizeof *c)) == NULL)
		return 0;
	e = &c->e[((code ^ instr) * 0x9e3779b97f4a7c15ull) >> 56 & (CACHE - 1)];
	if (e->code == code && e->instr == instr && e->file == file && e->name == name && e->id)
		return e->id;
	offset = l->lasti_unit ? (int)instr * l->lasti_unit : (int)(instr - (code + l->code_instructions));
	/* checking: the instruction lies inside the code (3.11 on, where its length is known) */
	if (r->pipe[0] >= 0 && !l->lasti_unit && (offset < 0 || (size_t)offset >= 2 * load(r, code, OB_SIZE, 8)))
		r->bad = true;
	name_text = text(r, name, name_buf, sizeof name_buf);
	file_text = text(r, file, file_buf, sizeof file_buf);
	if (r->bad)
		return 0;
	snprintf(s, sizeof s, "%s\t%s\t%d", name_text, file_text, py.addr2line((void *)code, offset));
	*e = (struct py_entry){code, instr, file, name, mtp_intern(s)};
	return e->id;
}

/* A frame that has not begun running its code is not shown. */
static bool started(struct reader *r, uintptr_t f, uintptr_t code, uintptr_t instr)
{
	const struct py_layout *l = py.l;

	if (l->lasti_unit)
		return (int)instr >= 0;
	return load(r, f, l->frame_owner, 1) == PY_OWNED_BY_GENERATOR ||
	       instr >= code + l->code_instructions + 2 * load(r, code, l->code_firsttraceable, 4);
}

/* This thread's Python frames, innermost first, as pseudo addresses; entry[i] marks the
 * last frame run by one native call of the eval loop. */
static size_t python_frames(struct reader *r, uint64_t *out, bool *entry, size_t max)
{
	const struct py_layout *l = py.l;
	uintptr_t ts, f;
	size_t n = 0;

	if (!py.initialized() || !(ts = (uintptr_t)py.tstate()) || !(f = load(r, ts, l->tstate_frame, sizeof f)))
		return 0;
	if (l->cframe_current != PY_DIRECT)
		f = load(r, f, l->cframe_current, sizeof f);
	for (; f && n < max && !r->bad; f = load(r, f, l->frame_previous, sizeof f)) {
		uintptr_t code, instr;
		bool is_entry = l->lasti_unit || (l->frame_entry && load(r, f, l->frame_entry, 1));
		uint32_t id;

		if (l->owner_cstack && load(r, f, l->frame_owner, 1) == (uintptr_t)l->owner_cstack) {
			if (n) /* the frame an eval call keeps on the C stack follows its first frame */
				entry[n - 1] = true;
			continue;
		}
		code = load(r, f, l->frame_code, sizeof code);
		instr = load(r, f, l->frame_instr, sizeof instr);
		if (l->lasti_unit)
			instr = (uint32_t)instr; /* int f_lasti */
		if (!is_a(r, code, py.code_type)) {
			r->bad = r->pipe[0] >= 0;
			break;
		}
		if (!started(r, f, code, instr)) {
			if (is_entry && n)
				entry[n - 1] = true;
			continue;
		}
		if (!(id = frame_id(r, code, instr)))
			break;
		entry[n] = is_entry;
		out[n++] = MT_PYFRAME | id;
	}
	return r->bad ? 0 : n;
}

/* The first stack with Python frames is read with every access checked; if the layout
 * does not match this interpreter, Python frames are turned off. */
static size_t first_frames(uint64_t *out, bool *entry, size_t max)
{
	struct reader r = {{-1, -1}, false};
	size_t n = 0;

	if (!py.initialized() || !py.tstate())
		return 0; /* no Python in this thread: nothing to check with */
	pthread_mutex_lock(&py_lock);
	if (mtp_py_state == FOUND && pipe2(r.pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
		n = python_frames(&r, out, entry, max);
		if (r.bad)
			__atomic_store_n(&mtp_py_state, cannot("its structures are not where this memtap expects them"),
					 __ATOMIC_RELEASE);
		else if (n)
			__atomic_store_n(&mtp_py_state, CHECKED, __ATOMIC_RELEASE);
		else if (++py.empty_checks == MAX_EMPTY_CHECKS)
			__atomic_store_n(&mtp_py_state, cannot("no thread's frames were found where this memtap looks"),
					 __ATOMIC_RELEASE);
		close(r.pipe[0]);
		close(r.pipe[1]);
		r.pipe[0] = -1;
	}
	pthread_mutex_unlock(&py_lock);
	if (!n && !r.bad && mtp_py_state == CHECKED) /* another thread checked it meanwhile */
		n = python_frames(&r, out, entry, max);
	return r.bad ? 0 : n;
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
	struct reader fast = {{-1, -1}, false};

	if (!mtp_opt.python_frames || !ready())
		return native;
	if (likely(__atomic_load_n(&mtp_py_state, __ATOMIC_ACQUIRE) == CHECKED))
		np = python_frames(&fast, pf, entry, limit);
	else
		np = first_frames(pf, entry, limit);
	if (!np)
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
