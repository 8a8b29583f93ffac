/* void *mtp_on_stack(void *(*fn)(void *), void *arg, void *top), x86-64 System V:
 * calls fn(arg) with the stack pointer at top (16-byte aligned) and returns its result
 * on the caller's stack. The frame is an ordinary frame-pointer frame, so unwinders
 * (libgcc, libunwind, gdb) and memtap's frame walk go from fn back to the caller's
 * stack through the saved %rbp: stacks captured on memtap's own stack are whole. */
	.text
	.globl mtp_on_stack
	.hidden mtp_on_stack
	.type mtp_on_stack, @function
mtp_on_stack:
	.cfi_startproc
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	andq $-16, %rdx
	movq %rdx, %rsp
	movq %rdi, %rax
	movq %rsi, %rdi
	call *%rax
	movq %rbp, %rsp
	popq %rbp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size mtp_on_stack, .-mtp_on_stack

	.section .note.GNU-stack,"",@progbits
