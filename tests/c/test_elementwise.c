/* C test harness, the element-wise kernels without SIMD files: fq_f32_pow (the C library's powf
   per element under flush-to-zero and denormals-are-zero, the caller's state put back),
   fq_f32_momentum (TF's ApplyMomentum, each operation rounded in turn: the formula in plain float
   arithmetic, this file being built with -ffp-contract=off as the library is) and
   fq_f32_vector_program (each opcode against its float expression, broadcast sources, a
   destination that is an operand, programs it refuses) and fq_f32_filter_scaling (the products
   and their gradients against the loops numpy's ops make, sums from the first row's term) and
   fq_f32_debiased_average (the formula in float arithmetic, powf under the kernels' state); NaN,
   infinities, subnormals, aliasing, statuses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fqcore.h"
#include "common/fpenv.h"
#include "harness.h"

static const float SPECIALS[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, INFINITY, -INFINITY, NAN,
                                 1e-40f, -1e-40f, 3.4e38f, -8.0f};
#define N_SPECIALS (sizeof SPECIALS / sizeof SPECIALS[0])

/* powf as the kernel runs it: under the kernels' state, then the caller's back. */
static float flushed_powf(float x, float y) {
    const fq_fpenv saved = fq_fpenv_enter();
    const float z = powf(x, y);
    fq_fpenv_leave(saved);
    return z;
}

static void test_pow(void) {
    enum { N = 1000 };
    float *x = xmalloc_aligned(N * sizeof(float)), *y = xmalloc_aligned(N * sizeof(float));
    for (size_t k = 0; k < N; ++k) {
        x[k] = k < N_SPECIALS * N_SPECIALS ? SPECIALS[k % N_SPECIALS] : unif(0.0f, 4.0f);
        y[k] = k < N_SPECIALS * N_SPECIALS ? SPECIALS[k / N_SPECIALS] : unif(-12.0f, 12.0f);
    }
    float *out = guarded_output(N);
    const fq_fpenv before = fq_fpenv_get();
    expect(fq_f32_pow(x, y, N, out) == FQ_OK, "pow: status");
    expect(fq_fpenv_get() == before, "pow: the caller's floating-point state is put back");
    expect(output_intact(out, N), "pow: wrote outside its output");
    size_t bad = N;
    for (size_t k = 0; k < N && bad == N; ++k)
        if (!same(out[k], flushed_powf(x[k], y[k]))) bad = k;
    expect(bad == N, "pow: element %zu, %g ** %g", bad, bad < N ? x[bad] : 0.0, bad < N ? y[bad] : 0.0);
    /* The kernels' state flushes: a subnormal base reads as zero, a subnormal result is zero. */
    const float tiny[] = {1e-40f, 3.4e38f}, exponent[] = {1.0f, -1.0f};
    float got[2];
    expect(fq_f32_pow(tiny, exponent, 2, got) == FQ_OK && got[0] == 0.0f && got[1] == 0.0f,
           "pow: subnormals flushed (%g, %g)", got[0], got[1]);
    /* out may be x. */
    float same_array[3] = {2.0f, 3.0f, 0.5f};
    const float twos[3] = {2.0f, 2.0f, 2.0f};
    expect(fq_f32_pow(same_array, twos, 3, same_array) == FQ_OK && same_array[0] == 4.0f &&
               same_array[1] == 9.0f && same_array[2] == 0.25f, "pow: in place");
    free_output(out);
    free(x);
    free(y);
}

static void momentum_case(size_t n, int nesterov, int in_place) {
    float *var = xmalloc_aligned(n * sizeof(float) + 1), *accum = xmalloc_aligned(n * sizeof(float) + 1);
    float *grad = xmalloc_aligned(n * sizeof(float) + 1);
    float *expect_var = xmalloc_aligned(n * sizeof(float) + 1), *expect_accum = xmalloc_aligned(n * sizeof(float) + 1);
    const float lr = 0.0123f, momentum = 0.9f;
    for (size_t k = 0; k < n; ++k) {
        var[k] = k < N_SPECIALS ? SPECIALS[k] : unif(-3.0f, 3.0f);
        accum[k] = k >= N_SPECIALS && k < 2 * N_SPECIALS ? SPECIALS[k - N_SPECIALS] : unif(-1.0f, 1.0f);
        grad[k] = k >= 2 * N_SPECIALS && k < 3 * N_SPECIALS ? SPECIALS[k - 2 * N_SPECIALS] : unif(-1.0f, 1.0f);
        const float a = accum[k] * momentum + grad[k];
        expect_accum[k] = a;
        expect_var[k] = nesterov ? var[k] - (grad[k] * lr + a * momentum * lr) : var[k] - a * lr;
    }
    float *new_var = in_place ? var : guarded_output(n);
    float *new_accum = in_place ? accum : guarded_output(n);
    expect(fq_f32_momentum(var, accum, grad, n, lr, momentum, nesterov, new_var, new_accum) == FQ_OK,
           "momentum: status");
    size_t bad = n;
    for (size_t k = 0; k < n && bad == n; ++k)
        if (!same(new_var[k], expect_var[k]) || !same(new_accum[k], expect_accum[k])) bad = k;
    expect(bad == n, "momentum n=%zu nesterov=%d in place=%d: element %zu", n, nesterov, in_place, bad);
    if (!in_place) {
        expect(output_intact(new_var, n) && output_intact(new_accum, n), "momentum: wrote outside");
        free_output(new_var);
        free_output(new_accum);
    }
    free(var);
    free(accum);
    free(grad);
    free(expect_var);
    free(expect_accum);
}

static void test_momentum(void) {
    const size_t sizes[] = {0, 1, 7, 16, 17, 64, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
        for (int nesterov = 0; nesterov < 2; ++nesterov)
            for (int in_place = 0; in_place < 2; ++in_place) momentum_case(sizes[s], nesterov, in_place);
}

static void test_statuses(void) {
    float one = 1.0f;
    expect(fq_f32_pow(NULL, &one, 1, &one) == FQ_ERR_NULL_POINTER, "pow: NULL x");
    expect(fq_f32_pow(NULL, NULL, 0, NULL) == FQ_OK, "pow: nothing to do");
    expect(fq_f32_momentum(&one, NULL, &one, 1, 0.1f, 0.9f, 0, &one, &one) == FQ_ERR_NULL_POINTER,
           "momentum: NULL accum");
    expect(fq_f32_momentum(NULL, NULL, NULL, 0, 0.1f, 0.9f, 0, NULL, NULL) == FQ_OK,
           "momentum: nothing to do");
}

/* What an opcode computes, in plain float arithmetic. */
static float vp_expected(int opcode, float a, float b) {
    switch (opcode) {
    case FQ_VP_COPY: return a;
    case FQ_VP_NEGATE: return -a;
    case FQ_VP_RECIPROCAL: return 1.0f / a;
    case FQ_VP_RSQRT: return 1.0f / sqrtf(a);
    case FQ_VP_SQUARE: return a * a;
    case FQ_VP_ADD: return a + b;
    case FQ_VP_SUBTRACT: return a - b;
    case FQ_VP_MULTIPLY: return a * b;
    default: return a / b;
    }
}

/* Each opcode on two vectors with specials, and with either operand a broadcast scalar. */
static void test_vector_program_opcodes(void) {
    enum { N = 37 };
    float x[N], y[N];
    for (size_t i = 0; i < N; ++i) {
        x[i] = i < N_SPECIALS ? SPECIALS[i] : unif(-5.0f, 5.0f);
        y[i] = i + N_SPECIALS < N ? SPECIALS[(i * 7) % N_SPECIALS] : unif(-5.0f, 5.0f);
    }
    const float scalar = 0.37f;
    const float *sources[] = {x, y, &scalar};
    const unsigned char broadcast[] = {0, 0, 1};
    /* Operand pairs (rows): vector-vector, vector-scalar, scalar-vector. */
    const int pairs[3][2] = {{0, 1}, {0, 2}, {2, 1}};
    for (int opcode = 0; opcode < FQ_VP_OPCODES; ++opcode)
        for (int p = 0; p < 3; ++p) {
            float *registers = guarded_output(N);
            const int code[4] = {opcode, 3, pairs[p][0], pairs[p][1]};
            expect(fq_f32_vector_program(code, 1, sources, broadcast, 3, registers, 1, N) == FQ_OK,
                   "vector program: opcode %d status", opcode);
            size_t bad = N;
            for (size_t i = 0; i < N && bad == N; ++i) {
                const float a = pairs[p][0] == 2 ? scalar : sources[pairs[p][0]][i];
                const float b = pairs[p][1] == 2 ? scalar : sources[pairs[p][1]][i];
                if (!same(registers[i], vp_expected(opcode, a, b))) bad = i;
            }
            expect(bad == N, "vector program: opcode %d, operands %d %d: element %zu", opcode,
                   pairs[p][0], pairs[p][1], bad);
            expect(output_intact(registers, N), "vector program: wrote outside its registers");
            free_output(registers);
        }
}

/* A chain through registers, a destination that is its own operand, subnormals kept. */
static void test_vector_program_chain(void) {
    const float x[3] = {4.0f, 1e-39f, -2.0f}, eps = 1e-3f;
    const float *sources[] = {x, &eps};
    const unsigned char broadcast[] = {0, 1};
    float registers[2 * 3];
    /* r2 = x + eps; r3 = rsqrt(r2); r3 = r3 * x (in place); r2 = x + x (a subnormal doubled). */
    const int code[] = {FQ_VP_ADD, 2, 0, 1, FQ_VP_RSQRT, 3, 2, 0, FQ_VP_MULTIPLY, 3, 3, 0,
                        FQ_VP_ADD, 2, 0, 0};
    expect(fq_f32_vector_program(code, 4, sources, broadcast, 2, registers, 2, 3) == FQ_OK,
           "vector program chain: status");
    size_t bad = 3;
    for (size_t i = 0; i < 3 && bad == 3; ++i)
        if (!same(registers[3 + i], 1.0f / sqrtf(x[i] + eps) * x[i]) ||
            !same(registers[i], x[i] + x[i]))
            bad = i;
    expect(bad == 3, "vector program chain: element %zu", bad);
    expect(registers[1] == 2e-39f && registers[1] != 0.0f, "vector program: subnormals are kept");
}

/* Programs it refuses write nothing. */
static void test_vector_program_statuses(void) {
    const float x[2] = {1.0f, 2.0f};
    const float *sources[] = {x};
    const unsigned char broadcast[] = {0};
    float registers[2] = {7.0f, 7.0f};
    const int good[4] = {FQ_VP_NEGATE, 1, 0, 0};
    const int refused[][4] = {
        {FQ_VP_OPCODES, 1, 0, 0}, {-1, 1, 0, 0},  /* unknown opcodes */
        {FQ_VP_COPY, 0, 0, 0},                    /* writes a source */
        {FQ_VP_COPY, 2, 0, 0}, {FQ_VP_COPY, -1, 0, 0}, /* past the registers, negative */
        {FQ_VP_COPY, 1, 2, 0}, {FQ_VP_ADD, 1, 0, 2}, {FQ_VP_ADD, 1, 0, -3}, /* operands */
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; ++k) {
        /* the good instruction first: the refusal comes before it runs */
        int code[8];
        for (int j = 0; j < 4; ++j) code[j] = good[j], code[4 + j] = refused[k][j];
        expect(fq_f32_vector_program(code, 2, sources, broadcast, 1, registers, 1, 2) ==
                   FQ_ERR_BAD_PROGRAM && registers[0] == 7.0f && registers[1] == 7.0f,
               "vector program: refused instruction %zu, nothing written", k);
    }
    /* A one-operand opcode ignores b, whatever it holds. */
    const int ignores_b[4] = {FQ_VP_NEGATE, 1, 0, 99};
    expect(fq_f32_vector_program(ignores_b, 1, sources, broadcast, 1, registers, 1, 2) == FQ_OK &&
               registers[0] == -1.0f && registers[1] == -2.0f, "vector program: b ignored");
    expect(fq_f32_vector_program(NULL, 1, sources, broadcast, 1, registers, 1, 2) ==
               FQ_ERR_NULL_POINTER, "vector program: NULL code");
    const float *missing[] = {NULL};
    expect(fq_f32_vector_program(good, 1, missing, broadcast, 1, registers, 1, 2) ==
               FQ_ERR_NULL_POINTER, "vector program: NULL source");
    expect(fq_f32_vector_program(good, 1, sources, broadcast, 1, NULL, 1, 2) == FQ_ERR_NULL_POINTER,
           "vector program: NULL registers");
    expect(fq_f32_vector_program(NULL, 0, NULL, NULL, 0, NULL, 0, 0) == FQ_OK,
           "vector program: nothing to do");
}

/* Forward and gradient of k = 1..3 vectors on filters of several shapes against numpy's order:
   each product rounded, the gradient of each product formed in turn, the sums down the rows from
   the first row's term (a column of -0.0 terms sums to -0.0). */
static void test_filter_scaling(void) {
    const size_t shapes[][2] = {{1, 2}, {9, 32}, {288, 64}, {5, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (size_t k = 1; k <= 3; ++k) {
            const size_t rows = shapes[s][0], columns = shapes[s][1], n = rows * columns;
            float *f = xmalloc_aligned(n * sizeof(float)), *g = xmalloc_aligned(n * sizeof(float));
            float *v[3], *dv[3], *expect_dv[3];
            for (size_t i = 0; i < n; ++i) {
                f[i] = i < N_SPECIALS ? SPECIALS[i] : unif(-4.0f, 4.0f);
                g[i] = unif(-1.0f, 1.0f);
            }
            for (size_t r = 0; r < rows; ++r) f[r * columns] = -0.0f; /* column 0: -0.0 terms */
            for (size_t m = 0; m < k; ++m) {
                v[m] = xmalloc_aligned(columns * sizeof(float));
                for (size_t c = 0; c < columns; ++c) v[m][c] = unif(0.5f, 2.0f);
                dv[m] = guarded_output(columns);
                expect_dv[m] = xmalloc_aligned(columns * sizeof(float));
            }
            for (size_t r = 0; r < rows; ++r) g[r * columns] = 1.0f;
            float *out = guarded_output(k * n), *df0 = guarded_output(n);
            const float *vectors[3] = {v[0], v[1], v[2]};
            expect(fq_f32_filter_scaling(f, vectors, k, rows, columns, out) == FQ_OK,
                   "filter scaling: status");
            size_t bad = n;
            for (size_t i = 0; i < n && bad == n; ++i) {
                float p = f[i];
                for (size_t m = 0; m < k; ++m) {
                    p = p * v[m][i % columns];
                    if (!same(out[m * n + i], p)) bad = i;
                }
            }
            expect(bad == n && output_intact(out, k * n),
                   "filter scaling %zux%zu k=%zu: forward element %zu", rows, columns, k, bad);
            const float *filters[3] = {f, out, out + n};
            float *dvectors[3] = {dv[0], dv[1], dv[2]};
            expect(fq_f32_filter_scaling_grad(filters, vectors, k, rows, columns, g, df0,
                                              dvectors) == FQ_OK, "filter scaling grad: status");
            /* numpy: the gradient of each product as an array, then its sum down the rows. */
            bad = n;
            for (size_t m = k; m-- > 0;)
                for (size_t c = 0; c < columns; ++c) expect_dv[m][c] = 0.0f;
            for (size_t i = 0; i < n && bad == n; ++i) {
                float grad = g[i];
                const size_t c = i % columns;
                for (size_t m = k; m-- > 0;) {
                    const float term = filters[m][i] * grad;
                    expect_dv[m][c] = i < columns ? term : expect_dv[m][c] + term;
                    grad = grad * v[m][c];
                }
                if (!same(df0[i], grad)) bad = i;
            }
            expect(bad == n && output_intact(df0, n),
                   "filter scaling %zux%zu k=%zu: df0 element %zu", rows, columns, k, bad);
            for (size_t m = 0; m < k; ++m) {
                size_t wrong = columns;
                for (size_t c = 0; c < columns && wrong == columns; ++c)
                    if (!same(dv[m][c], expect_dv[m][c])) wrong = c;
                expect(wrong == columns && output_intact(dv[m], columns),
                       "filter scaling %zux%zu k=%zu: dv%zu element %zu", rows, columns, k, m, wrong);
            }
            expect(signbit(dv[0][0]) && dv[0][0] == 0.0f, "filter scaling: -0.0 terms sum to -0.0");
            /* Outputs left out are not written. */
            float *skipped[3] = {NULL, NULL, NULL};
            expect(fq_f32_filter_scaling_grad(filters, vectors, k, rows, columns, g, NULL,
                                              skipped) == FQ_OK, "filter scaling grad: none wanted");
            for (size_t m = 0; m < k; ++m) {
                free(v[m]);
                free_output(dv[m]);
                free(expect_dv[m]);
            }
            free_output(out);
            free_output(df0);
            free(f);
            free(g);
        }
    float one = 1.0f;
    const float *none[1] = {NULL};
    expect(fq_f32_filter_scaling(&one, none, 1, 1, 1, &one) == FQ_ERR_NULL_POINTER,
           "filter scaling: NULL vector");
    expect(fq_f32_filter_scaling(NULL, NULL, 0, 0, 0, NULL) == FQ_OK, "filter scaling: nothing");
}

/* A tracker's steps: decays 0.999, 0.99 and 0.9999 over 300 steps each, random batch values, a
   NaN batch value; against the formula in plain float arithmetic with flushed_powf. */
static void test_debiased_average(void) {
    const float decays[] = {0.999f, 0.99f, 0.9999f};
    size_t bad = 0;
    for (size_t k = 0; k < 3; ++k) {
        const float complement = 1.0f - decays[k];
        float biased = 0.0f, step = 0.0f, shadow = 0.0f;
        for (int s = 0; s < 300; ++s) {
            const float value = s == 150 ? NAN : unif(-6.0f, 6.0f);
            float out[3];
            fq_f32_debiased_average(biased, value, complement, 1.0f, decays[k], 1.0f, biased,
                                    step, out);
            const float want_biased = biased - (biased - value) * complement;
            const float want_step = step + 1.0f;
            const float want = want_biased / (1.0f - flushed_powf(decays[k], want_step));
            if (!same(out[0], want_biased) || !same(out[1], want_step) || !same(out[2], want))
                ++bad;
            biased = s == 150 ? 0.0f : out[0];
            step = out[1];
            shadow = out[2];
        }
        expect(shadow == shadow, "debiased average: finite after the NaN step is dropped");
    }
    expect(bad == 0, "debiased average: %zu steps differ from the formula", bad);
}

/* A tracker step's clamp, seen through biased' (read and biased -0, decay complement 1, so
   biased' is the clamped value, the sign of a zero included): numpy's minimum and maximum of
   float32 scalars, a NaN winning (the first of two) and the second of two equal values. */
static void test_tracker_clamp(void) {
    const float nan_a = copysignf(NAN, 1.0f), nan_b = copysignf(NAN, -1.0f);
    const struct {
        float extreme;
        fq_tracker_clamp clamp;
        float bound, want;
    } cases[] = {
        {-3.0f, FQ_CLAMP_MINIMUM, 0.0f, -3.0f}, {3.0f, FQ_CLAMP_MINIMUM, 0.0f, 0.0f},
        {-3.0f, FQ_CLAMP_MAXIMUM, 0.0f, 0.0f},  {3.0f, FQ_CLAMP_MAXIMUM, 0.0f, 3.0f},
        {-0.0f, FQ_CLAMP_MINIMUM, 0.0f, 0.0f},  {0.0f, FQ_CLAMP_MINIMUM, -0.0f, -0.0f},
        {-0.0f, FQ_CLAMP_MAXIMUM, 0.0f, 0.0f},  {0.0f, FQ_CLAMP_MAXIMUM, -0.0f, -0.0f},
        {nan_a, FQ_CLAMP_MINIMUM, 1.0f, nan_a}, {1.0f, FQ_CLAMP_MINIMUM, nan_b, nan_b},
        {nan_a, FQ_CLAMP_MAXIMUM, nan_b, nan_a}, {nan_b, FQ_CLAMP_MAXIMUM, nan_a, nan_b},
        {5.0f, FQ_CLAMP_NONE, 0.0f, 5.0f},      {-0.0f, FQ_CLAMP_NONE, 0.0f, -0.0f},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        float out[3];
        fq_f32_tracker_step(cases[k].extreme, cases[k].clamp, cases[k].bound, -0.0f, 1.0f, 1.0f,
                            0.5f, 1.0f, -0.0f, 0.0f, out);
        expect(same(out[0], cases[k].want) && signbit(out[0]) == signbit(cases[k].want),
               "tracker clamp %zu: %g (clamp %d) with %g gave %g, want %g", k,
               (double)cases[k].extreme, (int)cases[k].clamp, (double)cases[k].bound,
               (double)out[0], (double)cases[k].want);
        const float clamped = fq_f32_clamp(cases[k].extreme, cases[k].clamp, cases[k].bound);
        expect(same(clamped, out[0]) && signbit(clamped) == signbit(out[0]),
               "clamp %zu: %g, the tracker step's %g", k, (double)clamped, (double)out[0]);
    }
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_statuses},
        {"pow: specials, random pairs, flushing, in place", test_pow},
        {"momentum: sizes, Nesterov, in place, specials", test_momentum},
        {"vector program: every opcode, broadcast operands, specials", test_vector_program_opcodes},
        {"vector program: a chain through registers, in place, subnormals", test_vector_program_chain},
        {"vector program: refused programs write nothing, NULL pointers", test_vector_program_statuses},
        {"filter scaling: products, gradients, sums from the first row", test_filter_scaling},
        {"debiased average: tracker steps against the formula", test_debiased_average},
        {"tracker step: the clamp's NaNs and signed zeros as numpy's", test_tracker_clamp},
    };
    return harness_main("C kernel harness (element-wise: pow, momentum, vector programs, filter "
                        "scaling, debiased averages)", sections,
                        sizeof sections / sizeof sections[0]);
}
