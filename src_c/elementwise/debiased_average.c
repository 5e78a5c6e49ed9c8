/* One step of a zero-debiased moving average of a float32 scalar (fq_f32_debiased_average, see
   fqcore.h), a range tracker's clamp of its batch extreme (fq_f32_clamp), and its step around
   both (fq_f32_tracker_step): contrib's range trackers run two per activation every training
   step, nine graph ops each, where the numpy scalar operations cost a microsecond apiece and the
   step's arithmetic a few nanoseconds. Each operation rounds to float32 as numpy's float32
   scalars do (built with -ffp-contract=off); the power is fq_f32_pow's, as TF's Pow computes it. */
#include <math.h>

#include "../include/fqcore.h"

void fq_f32_debiased_average(float read, float value, float decay_complement, float increment,
                             float base, float one, float biased, float step, float out[3]) {
    const float new_biased = biased - (read - value) * decay_complement;
    const float new_step = step + increment;
    float power;
    fq_f32_pow(&base, &new_step, 1, &power);
    out[0] = new_biased;
    out[1] = new_step;
    out[2] = new_biased / (one - power);
}

/* numpy's minimum and maximum of two float32 scalars: a NaN wins, the first one if both are; of
   two equal values (-0 and +0 among them) the second. */
static float numpy_minimum(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) ? a : b;
    return a < b ? a : b;
}

static float numpy_maximum(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) ? a : b;
    return a > b ? a : b;
}

float fq_f32_clamp(float extreme, fq_tracker_clamp clamp, float bound) {
    return clamp == FQ_CLAMP_MINIMUM   ? numpy_minimum(extreme, bound)
           : clamp == FQ_CLAMP_MAXIMUM ? numpy_maximum(extreme, bound)
                                       : extreme;
}

void fq_f32_tracker_step(float extreme, fq_tracker_clamp clamp, float bound, float read,
                         float decay_complement, float increment, float base, float one,
                         float biased, float step, float out[3]) {
    fq_f32_debiased_average(read, fq_f32_clamp(extreme, clamp, bound), decay_complement, increment,
                            base, one, biased, step, out);
}
