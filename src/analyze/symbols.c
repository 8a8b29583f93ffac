/* libdwfl-backed symbolization with a per-address cache. */
#include "analyze/symbols.h"

#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/map.h"

struct mt_symbols {
	const struct mt_trace *trace;
	Dwfl *dwfl;
	struct mt_map cache; /* address -> index + 1 into frames */
	struct mt_frame *frames;
	size_t nframes, cap;
	bool python; /* some stack holds Python frames */
};

static bool has_python(const struct mt_stack *st)
{
	for (uint32_t i = 0; i < st->depth; i++)
		if (st->frames[i] & MT_PYFRAME)
			return true;
	return false;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
};

/* Whether the file at path is the library the trace recorded there: the same GNU build
 * id, where the trace has one. A trace read on another machine names that machine's
 * files: one of the same path here is another build (Ubuntu's libc read with Debian's
 * named its frames after the wrong functions), and its frames stay addresses. */
static bool same_build(const char *path, const char *want)
{
	const unsigned char *id = NULL;
	char hex[2 * 64 + 1] = "";
	ssize_t n = -1;
	int fd;
	Elf *elf;

	if (!want || !want[0])
		return true;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false;
	elf_version(EV_CURRENT);
	if ((elf = elf_begin(fd, ELF_C_READ_MMAP, NULL)) != NULL)
		n = dwelf_elf_gnu_build_id(elf, (const void **)&id);
	for (ssize_t i = 0; i < n && i < 64; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	elf_end(elf);
	close(fd);
	return strcmp(hex, want) == 0;
}

struct mt_symbols *mt_symbols_open(const struct mt_trace *t)
{
	struct mt_symbols *s = calloc(1, sizeof *s);

	if (!s)
		return NULL;
	s->trace = t;
	for (size_t i = 1; i < t->nstacks && !t->nnamed && !s->python; i++)
		s->python = has_python(&t->stacks[i]);
	s->dwfl = dwfl_begin(&callbacks);
	if (s->dwfl) {
		dwfl_report_begin(s->dwfl);
		for (size_t i = 0; i < t->nmodules; i++) {
			const struct mt_module *m = &t->modules[i];
			struct stat st;
			/* a path in a trace may name a pipe or a device: opening one could wait forever */
			if (m->path[0] == '/' && stat(m->path, &st) == 0 && S_ISREG(st.st_mode) &&
			    same_build(m->path, m->build_id))
				dwfl_report_elf(s->dwfl, m->path, m->path, -1, m->base, false);
		}
		dwfl_report_end(s->dwfl, NULL, NULL);
	}
	return s;
}

static const struct mt_module *module_of(const struct mt_trace *t, uint64_t addr)
{
	for (size_t i = 0; i < t->nmodules; i++)
		if (addr >= t->modules[i].start && addr < t->modules[i].end)
			return &t->modules[i];
	return NULL;
}

static char *copy(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* The C++ runtime's demangler (elfutils has none; eu-addr2line -C uses this one). */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* A symbol's name as its source spells it: a C++ name demangled, any other as it is. */
static char *source_name(const char *s)
{
	int status = -1;
	char *d = s && s[0] == '_' && s[1] == 'Z' ? __cxa_demangle(s, NULL, NULL, &status) : NULL;

	return d && status == 0 ? d : copy(s);
}

/* "function\tfile\tline", as the recorder wrote it */
static void python_frame(struct mt_frame *f, const char *s)
{
	const char *tab = s ? strchr(s, '\t') : NULL, *tab2 = tab ? strchr(tab + 1, '\t') : NULL;

	f->module = "python";
	if (!tab2) {
		f->function = copy(s);
		return;
	}
	f->function = strndup(s, (size_t)(tab - s));
	f->file = strndup(tab + 1, (size_t)(tab2 - tab - 1));
	f->line = atoi(tab2 + 1);
}

const struct mt_frame *mt_symbols_frame(struct mt_symbols *s, uint64_t addr)
{
	uint64_t i;
	struct mt_frame f = {.addr = addr};
	const struct mt_module *m;
	uint64_t pc = addr ? addr - 1 : 0; /* a return address: look at the call before it */

	if (s && s->trace->nnamed) { /* an imported trace: frames come with names */
		const struct mt_named_frame *n = addr && addr <= s->trace->nnamed ? &s->trace->named[addr - 1] : NULL;
		static struct mt_frame named;
		named = (struct mt_frame){.addr = addr,
					  .function = n ? n->function : NULL,
					  .file = n && n->file[0] ? n->file : NULL,
					  .line = n ? n->line : 0};
		return &named;
	}
	if (!s) { /* no symbolizer: addresses only */
		static struct mt_frame bare;
		bare = f;
		return &bare;
	}
	if (mt_map_get(&s->cache, addr, &i))
		return &s->frames[i - 1];
	if (addr & MT_PYFRAME) {
		python_frame(&f, mt_trace_string(s->trace, addr & 0xffffffffu));
	} else if ((m = module_of(s->trace, addr))) {
		const char *slash = strrchr(m->path, '/');
		f.module = slash ? slash + 1 : m->path;
		f.offset = addr - m->base;
	}
	if (s->dwfl && !(addr & MT_PYFRAME)) {
		Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, pc);
		if (mod) {
			Dwfl_Line *line = dwfl_module_getsrc(mod, pc);
			f.function = source_name(dwfl_module_addrname(mod, pc));
			if (line) {
				int lineno = 0;
				const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
				f.file = copy(file);
				f.line = lineno;
			}
		}
	}
	if (s->nframes == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		struct mt_frame *n = realloc(s->frames, cap * sizeof *n);
		if (!n) {
			static struct mt_frame unknown;
			unknown = (struct mt_frame){.addr = addr};
			return &unknown;
		}
		s->frames = n;
		s->cap = cap;
	}
	s->frames[s->nframes++] = f;
	mt_map_put(&s->cache, addr, s->nframes);
	return &s->frames[s->nframes - 1];
}

bool mt_symbols_python(const struct mt_symbols *s)
{
	return s && s->python;
}

const char *mt_symbols_no_python(const struct mt_symbols *s, uint32_t stack)
{
	if (!mt_symbols_python(s) || stack == 0 || stack >= s->trace->nstacks || has_python(&s->trace->stacks[stack]))
		return NULL;
	return "(no Python frames: a thread without Python)";
}

void mt_symbols_close(struct mt_symbols *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nframes; i++) {
		free((char *)s->frames[i].function);
		free((char *)s->frames[i].file);
	}
	free(s->frames);
	mt_map_free(&s->cache);
	if (s->dwfl)
		dwfl_end(s->dwfl);
	free(s);
}
