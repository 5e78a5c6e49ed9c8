/* The period of per-channel walks over channels-last data [rows, channels]. */
#ifndef FQ_PERIOD_H
#define FQ_PERIOD_H

#include <stddef.h>

/* The channel count, or its least common multiple with 16 when that is at most `max_padded`: a
   period of whole 16-lane vectors, so a vector loop over positions never straddles a period when
   channels are few. Position p of a period belongs to channel p % channels. */
static inline size_t fq_padded_period(size_t channels, size_t max_padded) {
    size_t a = channels, b = 16;
    while (b != 0) {
        const size_t r = a % b;
        a = b;
        b = r;
    }
    const size_t padded = channels / a * 16;
    return padded <= max_padded ? padded : channels;
}

#endif
