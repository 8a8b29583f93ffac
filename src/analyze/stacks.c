/* Stack views: each frame is PyTorch's plumbing (its _frame_filter's lists, and memtap's
 * longer ones below), a Python frame, or a native frame worth showing; a view is the
 * Python frames in order, then a few native ones. Names are shortened by their C++
 * syntax alone (parameter list, template arguments, return type, compiler suffixes). */
#include "analyze/stacks.h"
#include "core/map.h"
#include "core/text.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* torch/cuda/_memory_viz.py's _frame_filter: substrings of the function, of the file */
static const char *const torch_functions[] = {"unwind::unwind",	   "CapturedTraceback::gather",
					      "gather_with_cpp",   "_start",
					      "__libc_start_main", "PyEval_",
					      "PyObject_",	   "PyFunction_"};
static const char *const torch_files[] = {"core/boxing",
					  "/Register",
					  "/Redispatch",
					  "pythonrun.c",
					  "Modules/main.c",
					  "Objects/call.c",
					  "Objects/methodobject.c",
					  "pycore_ceval.h",
					  "ceval.c",
					  "cpython/abstract.h"};
/* memtap's: what a shortened name starts with when it is the caching allocator, tensor
 * creation, the dispatcher, autograd's engine, the interpreter or thread start-up */
static const char *const plumbing[] = {"c10::cuda::CUDACachingAllocator::",
				       "c10::StorageImpl::",
				       "c10::impl::",
				       "c10::Dispatcher::",
				       "c10::BoxedKernel",
				       "c10::KernelFunction",
				       "c10::OperatorHandle",
				       "c10::intrusive_ptr",
				       "c10::TensorImpl::",
				       "c10::detail::",
				       "at::_ops::",
				       "at::detail::",
				       "at::TensorIteratorBase::",
				       "at::TensorIterator::",
				       "at::meta::",
				       "at::(anonymous namespace)::create_out",
				       "at::(anonymous namespace)::resize_out",
				       "at::native::resize_",
				       "at::native::empty_",
				       "at::TensorBase::",
				       "at::Tensor::",
				       "torch::autograd::VariableType::",
				       "torch::ADInplaceOrView::",
				       "torch::autograd::Engine::",
				       "torch::autograd::Node::operator",
				       "torch::autograd::python::PythonEngine::",
				       "torch::autograd::GraphTask",
				       "torch::autograd::SavedVariable::",
				       "torch::autograd::InputBuffer::",
				       "torch::autograd::utils::wrap",
				       "torch::unwind::",
				       "torch::CapturedTraceback",
				       "std::",
				       "THPVariable_",
				       "THPFunction_",
				       "_Py",
				       "Py",
				       "method_vectorcall",
				       "slot_",
				       "cfunction_",
				       "vectorcall",
				       "builtin_",
				       "run_mod",
				       "run_eval_code_obj",
				       "pymain_",
				       "pyrun_",
				       "thread_run",
				       "pythread_wrapper",
				       "partial_vectorcall",
				       "do_call_core",
				       "object_vacall",
				       "call_function",
				       "function_code_fastcall",
				       "_start",
				       "__libc_",
				       "start_thread",
				       "clone",
				       "__clone",
				       "execute_native_thread_routine",
				       "pthread_",
				       "__xmknodat"};
/* Python frames of torch.nn's call machinery and of wrappers: left out of a view */
static const struct {
	const char *file, *function;
} python_plumbing[] = {{"torch/nn/modules/module.py", "_call_impl"},
		       {"torch/nn/modules/module.py", "_wrapped_call_impl"},
		       {"torch/utils/_contextlib.py", "decorate_context"},
		       {"torch/optim/optimizer.py", "wrapper"},
		       {"torch/optim/optimizer.py", "_use_grad"},
		       {"torch/optim/optimizer.py", "maybe_fallback"},
		       {"torch/_tensor.py", "wrapped"},
		       {"torch/_dynamo/eval_frame.py", "_fn"},
		       {"torch/_compile.py", "inner"}};
/* where a Python file is not the user's own: libraries, and code torch.compile generated
 * (Inductor's wrappers in /tmp/torchinductor_<user>/, an FX GraphModule's <eval_with_key>.N),
 * whose allocations are the compiled model's forward's, the user's frame further out */
static const char *const library[] = {"/site-packages/", "/dist-packages/", "\\site-packages\\", "/lib/python3",
				      "\\Lib\\",	 "/torch/",	    "\\torch\\",	 "<frozen",
				      "torchinductor_",	 "<eval_with_key>"};

struct mt_views {
	const struct mt_trace *t;
	struct mt_symbols *sym;
	struct mt_view *views; /* by stack id */
	bool *made;
	size_t n;
};

struct mt_views *mt_views_open(const struct mt_trace *t, struct mt_symbols *sym)
{
	struct mt_views *v = calloc(1, sizeof *v);

	if (!v)
		return NULL;
	v->t = t;
	v->sym = sym;
	v->n = t->nstacks ? t->nstacks : 1;
	v->views = calloc(v->n, sizeof *v->views);
	v->made = calloc(v->n, sizeof *v->made);
	if (!v->views || !v->made) {
		mt_views_close(v);
		return NULL;
	}
	return v;
}

void mt_views_close(struct mt_views *v)
{
	if (!v)
		return;
	for (size_t i = 0; v->views && i < v->n; i++)
		free((void *)v->views[i].shown);
	free(v->views);
	free(v->made);
	free(v);
}

static bool ends_with(const char *s, const char *end)
{
	size_t n = strlen(s), k = strlen(end);
	return n >= k && !strcmp(s + n - k, end);
}

/* s ends with path `end`, a '/' in it matching a Windows '\\' too. */
static bool ends_with_path(const char *s, const char *end)
{
	size_t n = strlen(s), k = strlen(end);

	if (n < k)
		return false;
	for (s += n - k; *end; s++, end++)
		if (*s != *end && !(*end == '/' && *s == '\\'))
			return false;
	return true;
}

static bool contains_any(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		if (strstr(s, list[i]))
			return true;
	return false;
}

bool mt_frame_is_python(const struct mt_frame *f)
{
	if (f->module && !strcmp(f->module, "python"))
		return true;
	return f->file && (ends_with(f->file, ".py") || (f->file[0] == '<' && f->line > 0));
}

/* Cuts a compiler's suffix off the end: " [clone .part.0]", ".llvm.123", ".lto_priv.0", ... */
static bool cut_suffix(char *s)
{
	static const char *const dotted[] = {".llvm.", ".lto_priv.", ".constprop.", ".isra.", ".part.", ".cold"};
	size_t n = strlen(s);
	char *p;

	if (n && s[n - 1] == ']' && (p = strstr(s, " [clone "))) {
		*p = '\0';
		return true;
	}
	if (ends_with(s, ".localalias")) {
		s[n - strlen(".localalias")] = '\0';
		return true;
	}
	for (size_t i = 0; i < sizeof dotted / sizeof dotted[0]; i++) {
		char *at = strstr(s, dotted[i]);
		bool digits = at != NULL;
		for (const char *q = at ? at + strlen(dotted[i]) : NULL; q && *q; q++)
			digits &= *q >= '0' && *q <= '9';
		if (at && digits && at > s) {
			*at = '\0';
			return true;
		}
	}
	return false;
}

const char *mt_frame_name(const char *function, char *buf, size_t n)
{
	char tmp[4096], *s = tmp;
	size_t len, o = 0;
	int depth = 0;

	if (!function || n < 8)
		return function;
	snprintf(tmp, sizeof tmp, "%.*s", (int)sizeof tmp - 1, function); /* reads no further */
	mt_utf8_end(tmp);
	while (cut_suffix(tmp))
		;
	len = strlen(tmp);
	for (bool more = true; more && len;) { /* trailing qualifiers */
		static const char *const quals[] = {" const", " &&", " &", " volatile", " noexcept"};
		more = false;
		for (size_t i = 0; i < sizeof quals / sizeof quals[0]; i++)
			if (ends_with(tmp, quals[i])) {
				tmp[len -= strlen(quals[i])] = '\0';
				more = true;
			}
	}
	if (len && tmp[len - 1] == ')') { /* the parameter list */
		for (size_t i = len; i-- > 0;) {
			depth += tmp[i] == ')' ? 1 : tmp[i] == '(' ? -1 : 0;
			if (depth == 0) {
				tmp[i] = '\0';
				break;
			}
		}
	}
	/* template arguments as <…>, the return type dropped: the last space outside brackets */
	depth = 0;
	for (size_t i = 0; s[i] && o + 4 < n; i++) {
		char c = s[i];
		bool op = i >= 8 && !strncmp(s + i - 8, "operator", 8);
		if (c == '<' && !op) {
			if (depth++ == 0) {
				memcpy(buf + o, "<\xe2\x80\xa6>", 5);
				o += 5;
			}
			continue;
		}
		if (c == '>' && depth > 0 && !(i && s[i - 1] == '-')) {
			depth--;
			continue;
		}
		if (depth)
			continue;
		buf[o++] = c;
	}
	buf[o < n ? o : n - 1] = '\0';
	depth = 0;
	for (size_t i = o; i-- > 0;) {
		depth += buf[i] == ')' ? 1 : buf[i] == '(' ? -1 : 0;
		if (buf[i] == ' ' && depth == 0 && !(i >= 8 && !strncmp(buf + i - 8, "operator", 8))) {
			memmove(buf, buf + i + 1, o - i);
			break;
		}
	}
	return mt_utf8_end(buf); /* the copy may stop inside a character */
}

static const char *base_name(const char *path)
{
	const char *a = strrchr(path, '/'), *b = strrchr(path, '\\');
	const char *c = a > b ? a : b;

	return c ? c + 1 : path;
}

const char *mt_frame_text(const struct mt_frame *f, bool full, char *buf, size_t n)
{
	char name[2048];
	const char *fn = f->function;
	int k;

	if (fn && !full && !mt_frame_is_python(f))
		fn = mt_frame_name(fn, name, sizeof name);
	if (fn) /* the precision bounds what is read of a name of any length */
		k = snprintf(buf, n, "%.*s", (int)(n < INT_MAX ? n : INT_MAX), fn);
	else if (f->module)
		k = snprintf(buf, n, "%s+0x%llx", f->module, (unsigned long long)f->offset);
	else
		k = snprintf(buf, n, "0x%llx", (unsigned long long)f->addr);
	if (k < 0 || (size_t)k >= n)
		return mt_utf8_end(buf); /* n bytes may end inside a character */
	if (f->file && f->file[0] && strcmp(f->file, "??") && (full || f->line > 0))
		snprintf(buf + k, n - (size_t)k, " (%s:%d)", full ? f->file : base_name(f->file), f->line);
	else if (full && f->function && f->module && strcmp(f->module, "python"))
		snprintf(buf + k, n - (size_t)k, " (%s)", f->module);
	return mt_utf8_end(buf);
}

/* What a frame is to a view. */
enum role { PLUMBING, PYTHON, PYTHON_PLUMBING, NATIVE };

static enum role role_of(const struct mt_frame *f)
{
	char name[2048];
	const char *s;

	if (mt_frame_is_python(f)) {
		for (size_t i = 0; i < sizeof python_plumbing / sizeof python_plumbing[0]; i++)
			if (f->function && !strcmp(f->function, python_plumbing[i].function) && f->file &&
			    ends_with_path(f->file, python_plumbing[i].file))
				return PYTHON_PLUMBING;
		return PYTHON;
	}
	if (!f->function)
		return f->module && !strncmp(f->module, "libmemtap", 9) ? PLUMBING : NATIVE;
	if (!f->function[0] || !strcmp(f->function, "??") || !strncmp(f->function, "<unwind", 7))
		return PLUMBING; /* a frame PyTorch could not name */
	if (contains_any(f->function, torch_functions, sizeof torch_functions / sizeof torch_functions[0]) ||
	    contains_any(f->file, torch_files, sizeof torch_files / sizeof torch_files[0]) ||
	    (f->file && !strncmp(base_name(f->file), "Register", 8)) ||
	    (f->module && !strncmp(f->module, "libmemtap", 9)) || !strncmp(f->function, "mtp_", 4) ||
	    !strncmp(f->function, "memtap_", 7))
		return PLUMBING;
	s = mt_frame_name(f->function, name, sizeof name);
	for (size_t i = 0; i < sizeof plumbing / sizeof plumbing[0]; i++)
		if (!strncmp(s, plumbing[i], strlen(plumbing[i])))
			return PLUMBING;
	return NATIVE;
}

static bool is_library(const char *file)
{
	return !file || contains_any(file, library, sizeof library / sizeof library[0]);
}

/* A frame's site: its function, file and line. Of a function name only the first 4 KiB
 * count (a hostile snapshot's megabyte names made this quadratic). */
static uint64_t site_of(const struct mt_frame *f)
{
	const char *fn = f->function ? f->function : "?", *file = f->file ? f->file : "";
	uint32_t line = (uint32_t)f->line;
	uint64_t h = mt_fnv1a(MT_FNV_BASIS, fn, strnlen(fn, 4096));

	h = mt_fnv1a(h, "\xff", 1);
	h = mt_fnv1a(h, file, strlen(file));
	h = mt_fnv1a(h, &line, sizeof line);
	return h ? h : 1;
}

static void make(struct mt_views *v, uint32_t stack, struct mt_view *out)
{
	const struct mt_stack *st = &v->t->stacks[stack];
	uint32_t *shown = malloc((st->depth ? st->depth : 1) * sizeof *shown), n = 0, native = 0;
	uint32_t first_py = MT_NO_FRAME, user = MT_NO_FRAME, node = MT_NO_FRAME, first_native = MT_NO_FRAME;
	enum role *roles = malloc((st->depth ? st->depth : 1) * sizeof *roles);
	bool *library = malloc(st->depth ? st->depth : 1);

	*out = (struct mt_view){.depth = st->depth, .where = MT_NO_FRAME};
	if (!shown || !roles || !library) {
		free(shown);
		free(roles);
		free(library);
		return;
	}
	for (uint32_t i = 0; i < st->depth; i++) {
		const struct mt_frame *f = mt_symbols_frame(v->sym, st->frames[i]);
		roles[i] = role_of(f);
		library[i] = is_library(f->file);
		if (f->function && strstr(f->function, "autograd::Engine::thread_main"))
			out->autograd = true;
		if (roles[i] == PYTHON || roles[i] == PYTHON_PLUMBING) {
			out->python = true;
			if (first_py == MT_NO_FRAME && roles[i] == PYTHON)
				first_py = i;
			if (user == MT_NO_FRAME && roles[i] == PYTHON && !library[i])
				user = i;
		} else if (roles[i] == NATIVE) {
			if (first_native == MT_NO_FRAME)
				first_native = i;
			char nm[2048];
			const char *sn = f->function ? mt_frame_name(f->function, nm, sizeof nm) : NULL;
			if (node == MT_NO_FRAME && sn && ends_with(sn, "::apply") &&
			    (strstr(sn, "Backward") || strstr(sn, "AccumulateGrad")))
				node = i; /* autograd's node: torch::autograd::generated::MmBackward0::apply */
		}
	}
	/* the Python frames; of a run of the libraries' (torch's _apply recursion, threading's
	   start), the innermost and the outermost, which say what ran and who called it */
	for (uint32_t i = 0, run = 0; i < st->depth; i++) {
		if (roles[i] != PYTHON)
			continue;
		if (!library[i]) {
			run = 0;
			shown[n++] = i;
			continue;
		}
		if (run++ >= 2)
			n--; /* the last one kept was the run's middle */
		shown[n++] = i;
	}
	/* a program without Python (or its native frames alone) says where by all of them */
	bool native_only = !out->python && !out->autograd;
	for (uint32_t i = 0; i < st->depth && (native < MT_VIEW_NATIVE || native_only); i++)
		if (roles[i] == NATIVE)
			shown[n++] = i, native++;
	if (node != MT_NO_FRAME && (!n || shown[n - 1] < node)) /* and autograd's node that ran it */
		shown[n++] = node;
	out->shown = shown;
	out->nshown = n;
	out->where = user != MT_NO_FRAME       ? user
		     : first_py != MT_NO_FRAME ? first_py
		     : node != MT_NO_FRAME     ? node
					       : first_native;
	if (native_only)
		for (uint32_t k = 0; k < n; k++)
			out->site =
			    out->site * 0x100000001b3ull ^ site_of(mt_symbols_frame(v->sym, st->frames[shown[k]]));
	else if (out->where != MT_NO_FRAME)
		out->site = site_of(mt_symbols_frame(v->sym, st->frames[out->where]));
	if (out->where != MT_NO_FRAME && !out->site)
		out->site = 1;
	free(roles);
	free(library);
}

const struct mt_view *mt_view(struct mt_views *v, uint32_t stack)
{
	static const struct mt_view none = {.where = MT_NO_FRAME};

	if (!v || !stack || stack >= v->n || stack >= v->t->nstacks)
		return &none;
	if (!v->made[stack]) {
		make(v, stack, &v->views[stack]);
		v->made[stack] = true;
	}
	return &v->views[stack];
}
