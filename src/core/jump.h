/* A function defined as one indirect jump through a pointer: how
 * src/cuda/libs.c defines the CUDA libraries' functions it loads when
 * first needed. ST_JUMP_ASM(name, ptr) is a top-level asm statement that
 * defines, in .text, a global function `name` which jumps to the address
 * held in the pointer whose assembler name is `ptr` (a variable declared
 * with __asm__("ptr"), in the same file). Nothing is saved or moved: every
 * argument register, the stack and the return address reach the target as
 * the caller left them, so one definition serves any signature, variadic
 * ones and those returning a structure included, and the target returns
 * straight to the caller. The pointer is read at each call.
 *
 * x86-64: endbr64 (a landing pad for indirect branch tracking; a no-op
 * without it), then jmp *ptr(%rip). AArch64: bti c (the same for branch
 * target identification, a hint that older cores ignore), the pointer's
 * address by adrp and its value by ldr into x16 (IP0, the register the
 * procedure call standard gives such veneers: no argument lives there),
 * br x16. ST_JUMP_SUPPORTED is 0 elsewhere. tests/test_jump.c calls
 * through it with every kind of argument, on x86-64 and, under qemu, on
 * arm64 (tests/e2e/arm64.sh). */
#ifndef ST_CORE_JUMP_H
#define ST_CORE_JUMP_H

#if defined(__x86_64__)
#define ST_JUMP_SUPPORTED 1
#define ST_JUMP_ASM(name, ptr)                                                                               \
    __asm__(".pushsection .text\n"                                                                           \
            ".globl " #name "\n"                                                                             \
            ".type " #name ", @function\n" #name ":\n"                                                       \
            "\tendbr64\n"                                                                                    \
            "\tjmp *" #ptr "(%rip)\n"                                                                        \
            ".size " #name ", . - " #name "\n"                                                               \
            ".popsection\n")
#elif defined(__aarch64__)
#define ST_JUMP_SUPPORTED 1
#define ST_JUMP_ASM(name, ptr)                                                                               \
    __asm__(".pushsection .text\n"                                                                           \
            ".p2align 2\n"                                                                                   \
            ".globl " #name "\n"                                                                             \
            ".type " #name ", %function\n" #name ":\n"                                                       \
            "\thint #34\n" /* bti c */                                                                       \
            "\tadrp x16, " #ptr "\n"                                                                         \
            "\tldr x16, [x16, :lo12:" #ptr "]\n"                                                             \
            "\tbr x16\n"                                                                                     \
            ".size " #name ", . - " #name "\n"                                                               \
            ".popsection\n")
#else
#define ST_JUMP_SUPPORTED 0
#endif

#endif
