/* The table cuGetProcAddress serves from (procs.def) and a weak definition of every
 * symbol in it. A function simgpu simulates is defined in another file, whose strong
 * definition the linker picks; every other one is this stub, exported under the real
 * name (libraries dlsym them), which returns CUDA_ERROR_NOT_SUPPORTED and logs the
 * refusal. Stubs take no parameters: the caller's arguments are ignored, which the
 * x86-64 calling convention makes safe. No simulated function may live in this file. */
#include "sim.h"

/* sym is pasted and quoted, never expanded: cuda.h renames many of these names */
#define SIM_PROC(base, version, sym)                                                                                   \
	__attribute__((weak, visibility("default"))) CUresult stub_##sym(void) __asm__(#sym);                          \
	CUresult stub_##sym(void)                                                                                      \
	{                                                                                                              \
		return sim_refuse(#sym);                                                                               \
	}
#define SIM_PROC_PT(base, version, sym) SIM_PROC(base, version, sym)
#include "procs.def"
#undef SIM_PROC
#undef SIM_PROC_PT

/* sorted by base name (procs.py writes it so), for the lookup's binary search */
const struct sim_proc sim_procs[] = {
#define SIM_PROC(base, version, sym) {#base, #sym, version, false, (void *)stub_##sym},
#define SIM_PROC_PT(base, version, sym) {#base, #sym, version, true, (void *)stub_##sym},
#include "procs.def"
#undef SIM_PROC
#undef SIM_PROC_PT
};

const size_t sim_nprocs = sizeof sim_procs / sizeof sim_procs[0];
