/* Scalar fake-quant kernels: the executable spec every SIMD path must equal bit for bit. */
#include "fq_element.h"

static void forward_mul__scalar(const float *x, float *out, size_t n, const fq_grid *grid) {
    for (size_t i = 0; i < n; ++i)
        out[i] = fq_element_mul(x[i], grid->nudged_min, grid->nudged_max, grid->inv_scale,
                                grid->quant_zero, grid->scale);
}

static void forward_div__scalar(const float *x, float *out, size_t n, const fq_grid *grid) {
    for (size_t i = 0; i < n; ++i) out[i] = fq_element_div(x[i], grid);
}

static void mask__scalar(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid) {
    for (size_t i = 0; i < n; ++i) dx[i] = fq_element_mask(g[i], x[i], grid->nudged_min, grid->nudged_max);
}

static void mask_sums__scalar(const float *g, const float *x, float *dx, size_t n,
                              const fq_grid *grid, double lanes_min[FQ_SUM_LANES],
                              double lanes_max[FQ_SUM_LANES]) {
    float run_min[FQ_SUM_LANES] = {0}, run_max[FQ_SUM_LANES] = {0};
    for (size_t i = 0; i < n; ++i) {
        float to_min, to_max;
        dx[i] = fq_element_grad(g[i], x[i], grid->nudged_min, grid->nudged_max, &to_min, &to_max);
        run_min[i % FQ_SUM_LANES] += to_min;
        run_max[i % FQ_SUM_LANES] += to_max;
        if (i % FQ_SUM_RUN_ELEMENTS == FQ_SUM_RUN_ELEMENTS - 1 || i == n - 1)
            fq_flush_runs(run_min, run_max, lanes_min, lanes_max);
    }
}

static void channel_forward__scalar(const float *x, float *out, size_t rows,
                                    const fq_grid_table *t, size_t p0, size_t p1) {
    for (size_t r = 0; r < rows; ++r)
        fq_channel_forward_row(x + r * t->period, out + r * t->period, t, p0, p1);
}

static void channel_mask_sums__scalar(const float *g, const float *x, float *dx, size_t rows,
                                      const fq_grid_table *t, size_t p0, size_t p1,
                                      double *acc_min, double *acc_max, fq_grad_place place) {
    (void)place;
    for (size_t r = 0; r < rows; ++r) {
        const size_t base = r * t->period;
        fq_channel_row(g + base, x + base, dx + base, t, p0, p1, acc_min, acc_max);
    }
}

static void nudge_channels__scalar(const float *min, const float *max, size_t channels, int num_bits,
                                  int narrow_range, float *grid) {
    fq_nudge_positions(min, max, 0, channels, num_bits, narrow_range, grid);
}

const fq_fake_quant_kernels fq_fake_quant__scalar = {
    forward_mul__scalar,       forward_mul__scalar,    forward_div__scalar,
    mask__scalar,              mask_sums__scalar,      channel_forward__scalar,
    channel_mask_sums__scalar, nudge_channels__scalar, NULL,
    NULL,
};
