/* Flush-to-zero / denormals-are-zero and round-to-nearest for the duration of a kernel call, as
   TF's CPU threads run. */
#ifndef FQ_FPENV_H
#define FQ_FPENV_H

#include <stdint.h>

typedef uint64_t fq_fpenv;

/* Switches the calling thread to FTZ+DAZ, round to nearest, and returns the previous state for
   fq_fpenv_leave(). */
fq_fpenv fq_fpenv_enter(void);
/* The calling thread's state, unchanged. */
fq_fpenv fq_fpenv_get(void);
/* Puts back a state that fq_fpenv_enter or fq_fpenv_get returned. */
void fq_fpenv_leave(fq_fpenv saved);
/* Whether `state` is IEEE's default: round to nearest even, subnormals kept (on AArch64 also NaN
   payloads propagated); what the kernels' state is but for its flushing. */
int fq_fpenv_is_default(fq_fpenv state);

#endif
