/* Kiln multi-ISA dispatch (x86-64): a library built for the `x86-64` target holds every kernel twice, for AVX2+FMA
 * and for AVX-512 with VNNI; each kernel's symbol is a dispatcher that calls the variant `kiln_isa_index` names.
 * The index is chosen when the library loads, from CPUID (and XGETBV: the OS must save the wider registers),
 * the best variant this CPU runs, or the one $KILN_ISA names (avx2 | avx512 | auto), for testing. A variant the CPU
 * lacks is never selected: kiln_isa_refusal() then says why, and kiln_load refuses the model with that message.
 * Variant order: the target's isa_variants in core/target.py. */
#include <cpuid.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KILN_ISA_COUNT 2
static const char* const isa_names[KILN_ISA_COUNT] = {"avx2", "avx512"};

/* Read by every kernel dispatcher (hidden: the library's own, never another library's). */
__attribute__((visibility("hidden"))) int32_t kiln_isa_index = 0;
static char refusal[256];

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Whether this CPU (and its OS) runs variant `index`. */
static int isa_supported(int index) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return 0;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0; /* SSE and AVX state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int avx2 = (b >> 5) & 1, bmi1 = (b >> 3) & 1, bmi2 = (b >> 8) & 1;
    if (!(avx2 && bmi1 && bmi2)) return 0;
    if (index == 0) return 1;
    /* AVX-512 F, DQ, CD, BW, VL and VNNI; opmask and the upper zmm state saved by the OS */
    const unsigned need_b = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
    return (b & need_b) == need_b && ((c >> 11) & 1) && (xcr0 & 0xE0) == 0xE0;
}

static int best_supported(void) {
    for (int i = KILN_ISA_COUNT - 1; i >= 0; i--)
        if (isa_supported(i)) return i;
    return -1;
}

/* Selects the variant named `name` (NULL, "" or "auto": the best this CPU runs). Returns 0, or -1 with the reason
 * in kiln_isa_refusal() (the index then stays on a variant the CPU runs, when there is one). */
__attribute__((visibility("default"))) int kiln_set_isa(const char* name) {
    const int best = best_supported();
    refusal[0] = '\0';
    if (best < 0) {
        kiln_isa_index = 0;
        snprintf(refusal, sizeof refusal, "this CPU lacks AVX2, FMA and F16C, which every variant of this x86-64 "
                 "library needs");
        return -1;
    }
    kiln_isa_index = best;
    if (!name || !*name || strcmp(name, "auto") == 0) return 0;
    for (int i = 0; i < KILN_ISA_COUNT; i++) {
        if (strcmp(name, isa_names[i]) != 0) continue;
        if (!isa_supported(i)) {
            snprintf(refusal, sizeof refusal, "the %s variant was asked for (KILN_ISA or the load option), but this "
                     "CPU does not run it (best here: %s)", name, isa_names[best]);
            return -1;
        }
        kiln_isa_index = i;
        return 0;
    }
    snprintf(refusal, sizeof refusal, "unknown ISA variant '%s' (KILN_ISA): this library has avx2 and avx512, or auto",
             name);
    return -1;
}

/* The variant the kernels run: "avx2" or "avx512". */
__attribute__((visibility("default"))) const char* kiln_isa(void) { return isa_names[kiln_isa_index]; }

/* Why the variant asked for cannot run here, or NULL; kiln_load's check (hidden: this library's own). */
__attribute__((visibility("hidden"))) const char* kiln_isa_check(void) { return refusal[0] ? refusal : NULL; }
__attribute__((visibility("default"))) const char* kiln_isa_refusal(void) { return kiln_isa_check(); }

__attribute__((constructor)) static void kiln_isa_select(void) { kiln_set_isa(getenv("KILN_ISA")); }
