/* Buffers that kernels read and write a vector at a time. */
#ifndef FQ_LINE_ALLOC_H
#define FQ_LINE_ALLOC_H

#include <stdint.h>
#include <stdlib.h>

#define FQ_LINE_BYTES ((size_t)64)

/* `size` bytes starting on a 64-byte cache line, or NULL (free() releases them). malloc's 16-byte
   start splits every 64-byte vector across two lines, and a kernel that loads and stores such
   vectors at each step pays for both lines each time: the per-channel fake-quant gradient's
   partial sums and the channel chain's, whose costs then changed with where malloc put them from
   one process to the next (fq_api.c and channel_api.c have the figures). */
static inline void *fq_line_alloc(size_t size) {
    if (size > SIZE_MAX - FQ_LINE_BYTES) return NULL;
    /* aligned_alloc wants whole multiples of the alignment. */
    return aligned_alloc(FQ_LINE_BYTES, (size + FQ_LINE_BYTES - 1) / FQ_LINE_BYTES * FQ_LINE_BYTES);
}

#endif
