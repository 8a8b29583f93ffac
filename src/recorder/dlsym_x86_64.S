/* The dlsym interposer's entry, x86-64 System V. glibc decides what RTLD_NEXT means
 * from the return address of its caller, so RTLD_NEXT and RTLD_DEFAULT lookups must
 * reach the real dlsym by a jump that leaves the application's return address in
 * place: a C wrapper that calls it would make "next" mean "next after memtap".
 * Every other handle goes to mt_dlsym_hook(handle, name), written in C.
 * Finding glibc's dlsym is assembly too: sanitizer runtimes call dlsym while they
 * initialise, before any instrumented C code may run. */
	.text
	.hidden mt_dlsym_hook
	.hidden mt_dlsym_resolve
	.hidden mt_real_dlsym
	.hidden mt_dlsym_watch
	.hidden mt_dlsym_default

	.globl dlsym
	.type dlsym, @function
dlsym:
	.cfi_startproc
	cmpq $-1, %rdi			/* RTLD_NEXT */
	je 1f
	testq %rdi, %rdi		/* RTLD_DEFAULT */
	je 3f
	jmp mt_dlsym_hook
3:
	/* a library that links this stub and defines mt_dlsym_default (memtap: loader.c)
	   sees RTLD_DEFAULT lookups first, with the caller's return address, once it is ready */
	cmpb $0, mt_dlsym_watch(%rip)
	je 1f
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	movq %rsi, %rdi			/* name */
	movq 24(%rsp), %rsi		/* the caller's return address */
	call mt_dlsym_default
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
1:
	movq mt_real_dlsym(%rip), %rax
	testq %rax, %rax
	jz 2f
	jmp *%rax
2:
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	call mt_dlsym_resolve
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	jmp *%rax
	.cfi_endproc
	.size dlsym, .-dlsym

/* mt_dlsym_fn mt_dlsym_resolve(void): glibc's dlsym, GLIBC_2.34 else GLIBC_2.2.5.
 * Called from this library, RTLD_NEXT here means the objects after us: glibc. */
	.globl mt_dlsym_resolve
	.type mt_dlsym_resolve, @function
mt_dlsym_resolve:
	.cfi_startproc
	movq mt_real_dlsym(%rip), %rax
	testq %rax, %rax
	jnz 2f
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	movq $-1, %rdi
	leaq .Lname(%rip), %rsi
	leaq .Lv234(%rip), %rdx
	call dlvsym@PLT
	testq %rax, %rax
	jnz 1f
	movq $-1, %rdi
	leaq .Lname(%rip), %rsi
	leaq .Lv225(%rip), %rdx
	call dlvsym@PLT
1:
	movq %rax, mt_real_dlsym(%rip)	/* racing threads store the same value */
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
2:
	ret
	.cfi_endproc
	.size mt_dlsym_resolve, .-mt_dlsym_resolve

	.bss
	.align 8
	.globl mt_real_dlsym
	.type mt_real_dlsym, @object
	.size mt_real_dlsym, 8
mt_real_dlsym:
	.zero 8

/* Defaults for a library that does not watch RTLD_DEFAULT lookups: never called. */
	.text
	.weak mt_dlsym_default
	.type mt_dlsym_default, @function
mt_dlsym_default:
	.cfi_startproc
	ret
	.cfi_endproc
	.size mt_dlsym_default, .-mt_dlsym_default

	.bss
	.weak mt_dlsym_watch
	.type mt_dlsym_watch, @object
	.size mt_dlsym_watch, 1
mt_dlsym_watch:
	.zero 1

	.section .rodata
.Lname:	.string "dlsym"
.Lv234:	.string "GLIBC_2.34"
.Lv225:	.string "GLIBC_2.2.5"

	.section .note.GNU-stack,"",@progbits
