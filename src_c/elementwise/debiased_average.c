/* One step of a zero-debiased moving average of a float32 scalar (fq_f32_debiased_average, see
   fqcore.h): contrib's range trackers run two per activation every training step, eight graph ops
   each, where the numpy scalar operations cost a microsecond apiece and the step's arithmetic a few
   nanoseconds. Each operation rounds to float32 as numpy's float32 scalars do (built with
   -ffp-contract=off); the power is fq_f32_pow's, as TF's Pow computes it. */
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
