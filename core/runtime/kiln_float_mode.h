/* The floating-point control word (x86 MXCSR, AArch64 FPCR): read, set, and flush denormals.
 * Shared by the runtime (kiln_run flushes denormals) and the thread pool (workers copy the caller's mode). */
#ifndef KILN_FLOAT_MODE_H
#define KILN_FLOAT_MODE_H

/* The bits that change results (rounding, flushing); x86 MXCSR also holds sticky exception flags. */
#if defined(__x86_64__) || defined(__i386__)
#define KILN_FLOAT_CONTROL_BITS 0xffc0ul
#else
#define KILN_FLOAT_CONTROL_BITS (~0ul)
#endif

static inline unsigned long kiln_float_mode_get(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_stmxcsr();
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return fpcr;
#else
    return 0;
#endif
}

static inline void kiln_float_mode_set(unsigned long mode) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_ldmxcsr((unsigned)mode);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(mode));
#else
    (void)mode;
#endif
}

/* Denormal floats are 10-100x slower on x86 and arise naturally as activations decay; inference
 * runtimes flush them to zero. x86: FTZ (bit 15) | DAZ (bit 6); AArch64: FZ (bit 24). */
static inline unsigned long kiln_float_mode_flushing(unsigned long mode) {
#if defined(__x86_64__) || defined(__i386__)
    return mode | 0x8040ul;
#elif defined(__aarch64__)
    return mode | (1ul << 24);
#else
    return mode;
#endif
}

#endif /* KILN_FLOAT_MODE_H */
