/* SGD with momentum (TF's ApplyMomentum) in one pass over the variable, its accumulator and the
   gradient, where numpy made four passes and three temporaries. Each operation is rounded to
   float32 in the order numpy computes the formula (built with -ffp-contract=off: no fused
   multiply-add), under the caller's floating-point environment, so the bits are the numpy ops'. */
#include "../include/fqcore.h"

fq_status fq_f32_momentum(const float *var, const float *accum, const float *grad, size_t n,
                          float learning_rate, float momentum, int use_nesterov, float *new_var,
                          float *new_accum) {
    if (n > 0 && (var == NULL || accum == NULL || grad == NULL || new_var == NULL ||
                  new_accum == NULL))
        return FQ_ERR_NULL_POINTER;
    if (use_nesterov) {
        for (size_t i = 0; i < n; ++i) {
            const float a = accum[i] * momentum + grad[i];
            new_accum[i] = a;
            new_var[i] = var[i] - (grad[i] * learning_rate + a * momentum * learning_rate);
        }
    } else {
        for (size_t i = 0; i < n; ++i) {
            const float a = accum[i] * momentum + grad[i];
            new_accum[i] = a;
            new_var[i] = var[i] - a * learning_rate;
        }
    }
    return FQ_OK;
}
