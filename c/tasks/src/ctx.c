/*
 * ctx.c: the user-space context switch of task stacks.
 *
 * ctx_switch(&save, to) saves the callee-saved registers of the System V
 * (x86-64) or AAPCS64 (arm64) calling convention on the current stack,
 * stores the stack pointer in *save and resumes the context whose stack
 * pointer is to. Caller-saved registers need no saving: ctx_switch is an
 * ordinary call to the compiler. A new context starts in ctx_start_, which
 * calls entry(arg) and must never return.
 *
 * Other architectures are refused at build time.
 */
#include "internal.h"

#if defined(__x86_64__)

/* Saved, low to high: mxcsr and the x87 control word (8 bytes), r15, r14,
 * r13, r12, rbx, rbp, then the return address. */
__asm__(".text\n"
        ".globl chanos_tasks_ctx_switch_\n"
        ".hidden chanos_tasks_ctx_switch_\n"
        ".type chanos_tasks_ctx_switch_,@function\n"
        "chanos_tasks_ctx_switch_:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size chanos_tasks_ctx_switch_, .-chanos_tasks_ctx_switch_\n"
        ".globl chanos_tasks_ctx_start_\n"
        ".hidden chanos_tasks_ctx_start_\n"
        ".type chanos_tasks_ctx_start_,@function\n"
        "chanos_tasks_ctx_start_:\n"
        "    movq %r12, %rdi\n"
        "    callq *%r13\n"
        "    ud2\n"
        ".size chanos_tasks_ctx_start_, .-chanos_tasks_ctx_start_\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");

void *ctx_init(void *stack_top, void (*entry)(void *), void *arg)
{
    uintptr_t *sp = (uintptr_t *)((uintptr_t)stack_top & ~(uintptr_t)15);

    *--sp = (uintptr_t)chanos_tasks_ctx_start_; /* ret lands here, rsp 16-aligned */
    *--sp = 0;                                  /* rbp */
    *--sp = 0;                                  /* rbx */
    *--sp = (uintptr_t)arg;                     /* r12 */
    *--sp = (uintptr_t)entry;                   /* r13 */
    *--sp = 0;                                  /* r14 */
    *--sp = 0;                                  /* r15 */
    *--sp = (uintptr_t)0x1F80 | (uintptr_t)0x037F << 32; /* mxcsr, x87 cw */
    return sp;
}

#elif defined(__aarch64__)

/* Saved, 176 bytes: x19..x28, x29 (fp), x30 (lr), d8..d15. */
__asm__(".text\n"
        ".globl chanos_tasks_ctx_switch_\n"
        ".hidden chanos_tasks_ctx_switch_\n"
        ".type chanos_tasks_ctx_switch_,%function\n"
        "chanos_tasks_ctx_switch_:\n"
        "    sub sp, sp, #176\n"
        "    stp x19, x20, [sp, #0]\n"
        "    stp x21, x22, [sp, #16]\n"
        "    stp x23, x24, [sp, #32]\n"
        "    stp x25, x26, [sp, #48]\n"
        "    stp x27, x28, [sp, #64]\n"
        "    stp x29, x30, [sp, #80]\n"
        "    stp d8, d9, [sp, #96]\n"
        "    stp d10, d11, [sp, #112]\n"
        "    stp d12, d13, [sp, #128]\n"
        "    stp d14, d15, [sp, #144]\n"
        "    mov x2, sp\n"
        "    str x2, [x0]\n"
        "    mov sp, x1\n"
        "    ldp x19, x20, [sp, #0]\n"
        "    ldp x21, x22, [sp, #16]\n"
        "    ldp x23, x24, [sp, #32]\n"
        "    ldp x25, x26, [sp, #48]\n"
        "    ldp x27, x28, [sp, #64]\n"
        "    ldp x29, x30, [sp, #80]\n"
        "    ldp d8, d9, [sp, #96]\n"
        "    ldp d10, d11, [sp, #112]\n"
        "    ldp d12, d13, [sp, #128]\n"
        "    ldp d14, d15, [sp, #144]\n"
        "    add sp, sp, #176\n"
        "    ret\n"
        ".size chanos_tasks_ctx_switch_, .-chanos_tasks_ctx_switch_\n"
        ".globl chanos_tasks_ctx_start_\n"
        ".hidden chanos_tasks_ctx_start_\n"
        ".type chanos_tasks_ctx_start_,%function\n"
        "chanos_tasks_ctx_start_:\n"
        "    mov x0, x19\n"
        "    blr x20\n"
        "    brk #0\n"
        ".size chanos_tasks_ctx_start_, .-chanos_tasks_ctx_start_\n"
        ".section .note.GNU-stack,\"\",%progbits\n"
        ".text\n");

void *ctx_init(void *stack_top, void (*entry)(void *), void *arg)
{
    uintptr_t *sp = (uintptr_t *)(((uintptr_t)stack_top & ~(uintptr_t)15) - 176);

    for (int i = 0; i < 22; i++)
        sp[i] = 0;
    sp[0] = (uintptr_t)arg;                     /* x19 */
    sp[1] = (uintptr_t)entry;                   /* x20 */
    sp[11] = (uintptr_t)chanos_tasks_ctx_start_; /* x30 */
    return sp;
}

#else
#error "chanos_tasks: no context switch for this architecture (x86-64 and arm64 only)"
#endif
