/* Shared plumbing of the C test binaries: fixed-seed PRNG, bit helpers, check counting, sections,
   and the list of ISAs this machine can run. */
#ifndef FQ_TEST_HARNESS_H
#define FQ_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "fqcore.h"

#define THREADS_MAX 4

/* splitmix64 with a fixed seed: every run sees the same inputs. */
uint64_t rnd64(void);
/* Uniform in [0, n); 0 when n == 0. */
size_t below(size_t n);
/* Uniform in [lo, hi) with 24 random bits. */
float unif(float lo, float hi);

float from_bits(uint32_t b);
uint32_t to_bits(float f);
/* Equal bits, or both NaN (payloads may differ between ISAs). -0 and +0 differ. */
int same(float a, float b);

/* One check: counted, and on failure the message is printed (up to FQ_TEST_MAX_REPORTS of them). */
int expect(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern long n_passed, n_failed;

/* 64-byte aligned; exits on failure. */
void *xmalloc_aligned(size_t bytes);
/* n floats uniform in [-2, 2), from xmalloc_aligned (n may be 0); free with free(). */
float *random_floats(size_t n);

/* An output of n floats between two runs of GUARD_FLOATS floats holding GUARD_BITS (a signalling
   NaN no kernel writes): output_intact tells whether a kernel wrote outside it; free_output frees
   it. */
#define GUARD_FLOATS ((size_t)16)
#define GUARD_BITS 0x7fa5a5a5u
float *guarded_output(size_t n);
int output_intact(const float *data, size_t n);
void free_output(float *data);

/* The ISAs this CPU and build can run, scalar first. */
extern fq_isa isas[FQ_ISA_COUNT];
extern int n_isas;
/* Exits the run when the library refuses (a harness bug, not a kernel one). */
void set_isa_threads(fq_isa isa, int threads);

/* Sets (on) or clears FPCR bit `bit` of the calling thread on AArch64; nothing elsewhere. */
void set_fpcr_bit(unsigned bit, int on);

typedef struct {
    const char *name;
    void (*fn)(void);
} harness_section;

/* Prints the build's ISAs, runs the sections with a line of counts each, then the summary line
   "<passed> passed, <failed> failed" (tests/test_c_harness.py reads it); returns the exit code. */
int harness_main(const char *title, const harness_section *sections, size_t count);

#endif
