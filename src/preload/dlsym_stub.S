/* The dlsym interposer's entry, x86-64 System V. glibc decides what RTLD_NEXT means
 * from the return address of its caller, so RTLD_NEXT and RTLD_DEFAULT lookups must
 * reach the real dlsym by a jump that leaves the application's return address in
 * place: a C wrapper that calls it would make "next" mean "next after memtap".
 * Every other handle goes to mt_dlsym_hook(handle, name), written in C. */
	.text
	.hidden mt_dlsym_hook
	.hidden mt_dlsym_resolve
	.hidden mt_real_dlsym
	.globl dlsym
	.type dlsym, @function
dlsym:
	.cfi_startproc
	cmpq $-1, %rdi			/* RTLD_NEXT */
	je 1f
	testq %rdi, %rdi		/* RTLD_DEFAULT */
	je 1f
	jmp mt_dlsym_hook
1:
	movq mt_real_dlsym(%rip), %rax
	testq %rax, %rax
	jz 2f
	jmp *%rax
2:
	/* first use, possibly before constructors ran: resolve, keeping the arguments */
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

	.section .note.GNU-stack,"",@progbits
