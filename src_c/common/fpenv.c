/* The floating-point mode of a kernel call, whatever the caller's: round to nearest even, with
   flush-to-zero / denormals-are-zero (MXCSR on x86-64, FPCR on AArch64). A caller's other rounding
   mode would change results and make them depend on the thread count (OpenMP workers keep the
   default mode), so it is replaced for the call, then restored. */
#include "fpenv.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <xmmintrin.h>

/* MXCSR bit 15 is flush-to-zero, bit 6 denormals-are-zero; bits 14:13 the rounding mode (00:
   nearest). SSE, AVX and AVX-512 all obey it. */
#define FQ_MXCSR_FTZ_DAZ 0x8040u
#define FQ_MXCSR_ROUNDING 0x6000u

fq_fpenv fq_fpenv_enter(void) {
    unsigned int csr = _mm_getcsr();
    _mm_setcsr((csr & ~FQ_MXCSR_ROUNDING) | FQ_MXCSR_FTZ_DAZ);
    return csr;
}

fq_fpenv fq_fpenv_get(void) { return _mm_getcsr(); }

void fq_fpenv_leave(fq_fpenv saved) { _mm_setcsr((unsigned int)saved); }

int fq_fpenv_is_default(fq_fpenv state) { return (state & (FQ_MXCSR_ROUNDING | FQ_MXCSR_FTZ_DAZ)) == 0; }

#elif defined(__aarch64__)

/* FPCR.FZ (bit 24) flushes denormal inputs and results of scalar and Advanced SIMD float ops.
   Cleared for the call: the rounding mode (23:22, 00 is nearest), default NaN (25), half-precision
   flushing (19), and the alternate-handling bits AH (1) and FIZ (0). */
#define FQ_FPCR_FZ ((uint64_t)1 << 24)
#define FQ_FPCR_CLEARED (((uint64_t)3 << 22) | ((uint64_t)1 << 25) | ((uint64_t)1 << 19) | 3u)

fq_fpenv fq_fpenv_enter(void) {
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ __volatile__("msr fpcr, %0" : : "r"((fpcr & ~FQ_FPCR_CLEARED) | FQ_FPCR_FZ));
    return fpcr;
}

fq_fpenv fq_fpenv_get(void) {
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    return fpcr;
}

void fq_fpenv_leave(fq_fpenv saved) { __asm__ __volatile__("msr fpcr, %0" : : "r"(saved)); }

int fq_fpenv_is_default(fq_fpenv state) { return (state & (FQ_FPCR_CLEARED | FQ_FPCR_FZ)) == 0; }

#else

/* Other CPUs: no portable switch; denormals keep their IEEE meaning there (documented in README). */
fq_fpenv fq_fpenv_enter(void) { return 0; }
fq_fpenv fq_fpenv_get(void) { return 0; }
void fq_fpenv_leave(fq_fpenv saved) { (void)saved; }
int fq_fpenv_is_default(fq_fpenv state) { (void)state; return 1; }

#endif
