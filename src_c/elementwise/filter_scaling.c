/* A filter scaled per column by a few vectors in turn (fq_f32_filter_scaling, see fqcore.h): a
   folded layer's filter times contrib's correction, then times the fold's scale. As numpy ops each
   product is a pass over the filter, and each gradient two more and a sum down the rows; here the
   forward is one pass and the gradient one, with numpy's roundings and its order of the sums
   (down the rows, from the first row's product: numpy's reduction over leading axes), built with
   -ffp-contract=off. */
#include "../include/fqcore.h"

fq_status fq_f32_filter_scaling(const float *f0, const float *const *vectors, size_t k,
                                size_t rows, size_t columns, float *out) {
    const size_t n = rows * columns;
    if (k == 0 || n == 0) return FQ_OK;
    if (f0 == NULL || vectors == NULL || out == NULL) return FQ_ERR_NULL_POINTER;
    for (size_t m = 0; m < k; ++m)
        if (vectors[m] == NULL) return FQ_ERR_NULL_POINTER;
    const float *in = f0;
    for (size_t m = 0; m < k; ++m, in = out, out += n) {
        const float *v = vectors[m];
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < columns; ++c) out[r * columns + c] = in[r * columns + c] * v[c];
    }
    return FQ_OK;
}

fq_status fq_f32_filter_scaling_grad(const float *const *filters, const float *const *vectors,
                                     size_t k, size_t rows, size_t columns, const float *g,
                                     float *df0, float *const *dvectors) {
    if (k == 0 || rows * columns == 0) return FQ_OK;
    if (filters == NULL || vectors == NULL || g == NULL || dvectors == NULL)
        return FQ_ERR_NULL_POINTER;
    for (size_t m = 0; m < k; ++m)
        if (filters[m] == NULL || vectors[m] == NULL) return FQ_ERR_NULL_POINTER;
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < columns; ++c) {
            const size_t i = r * columns + c;
            float grad = g[i]; /* the gradient of f_k, then of each f_m in turn */
            for (size_t m = k; m-- > 0;) {
                float *dv = dvectors[m];
                if (dv != NULL) {
                    const float product = filters[m][i] * grad;
                    dv[c] = r == 0 ? product : dv[c] + product;
                }
                grad = grad * vectors[m][c];
            }
            if (df0 != NULL) df0[i] = grad;
        }
    return FQ_OK;
}
