/* fqcore public C API: TF-exact fake quantization kernels with run-time SIMD dispatch (plain C99). */
#ifndef FQCORE_H
#define FQCORE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FQCORE_VERSION_STRING "0.1.0"

typedef enum {
    FQ_OK = 0,
    FQ_ERR_NULL_POINTER = 1,    /* a required pointer is NULL while its length is not zero */
    FQ_ERR_NUM_BITS = 2,        /* num_bits outside 2..16 */
    FQ_ERR_MIN_NOT_BELOW_MAX = 3, /* Args ops: min >= max (after flushing denormals), or NaN */
    FQ_ERR_NO_MEMORY = 4,       /* a scratch allocation failed */
    FQ_ERR_ISA_UNAVAILABLE = 5, /* the requested ISA is not compiled in or not supported by this CPU */
    FQ_ERR_BAD_ISA = 6,         /* not a known fq_isa value or name */
    FQ_ERR_BAD_THREADS = 7,     /* thread count outside FQ_THREADS_AUTO .. FQ_MAX_THREADS */
    FQ_ERR_BAD_SHAPE = 8,       /* per-channel: channels == 0 while the input is not empty; batch norm:
                                   a shape whose element count overflows size_t */
    FQ_ERR_BAD_DTYPE = 9,       /* not a known fq_dtype value */
    FQ_ERR_BAD_LAYOUT = 10,     /* not a known fq_bn_layout value */
    FQ_ERR_NO_THREADS = 11,     /* the system refused to start the threads asked for */
    FQ_ERR_BAD_PROGRAM = 12     /* fq_f32_vector_program: an unknown opcode, or an operand or
                                   destination outside the rows it may read or write */
} fq_status;

/* A static English description of a status code. */
const char *fq_status_string(fq_status status);

/* Instruction sets, in priority order (best last). */
typedef enum {
    FQ_ISA_SCALAR = 0,
    FQ_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C, with OS support for the YMM state */
    FQ_ISA_AVX512 = 2, /* AVX-512 F/BW/DQ/VL, with OS support for the ZMM state */
    FQ_ISA_NEON = 3,   /* AArch64 Advanced SIMD */
    FQ_ISA_COUNT = 4
} fq_isa;

const char *fq_isa_name(fq_isa isa);
/* Parses "scalar", "avx2", "avx512" or "neon"; FQ_ERR_BAD_ISA otherwise. */
fq_status fq_isa_from_name(const char *name, fq_isa *isa);
/* 1 when the library was built with kernels for this ISA. */
int fq_isa_compiled(fq_isa isa);
/* 1 when the ISA is compiled in and this CPU and OS can run it. */
int fq_isa_available(fq_isa isa);
/* The ISA the kernels run on now. Chosen at first use: FQCORE_ISA if set (an unavailable or unknown
   value makes fq_init() report an error and keeps the best available ISA), else the best available. */
fq_isa fq_get_isa(void);
fq_status fq_set_isa(fq_isa isa);
/* Where the fastest kernel walk depends on the CPU's microarchitecture, what the active ISA's
   kernels chose on this CPU (from cpuid's vendor; the bits never depend on it), as text in the
   calling thread's storage, valid until its next call: "scalar kernels: no choices" on the scalar
   ISA. */
const char *fq_kernel_choices(void);
/* Status of the environment overrides read at start-up (FQCORE_ISA, FQCORE_NUM_THREADS); FQ_OK when
   they were absent or valid. The bindings turn a bad value into an error at import. */
fq_status fq_init(void);

/* Threads of one call: the calling thread and workers of the library's own pool. Results never
   depend on the count. FQ_THREADS_AUTO (the default; FQCORE_NUM_THREADS unset or "auto") lets
   each call choose: one thread below 64K elements, else the CPUs this process may use that other
   processes leave free, one thread while workers come late; only workers already awake join calls
   below 256K elements. A fixed count (1 .. FQ_MAX_THREADS) is used by every call of 64K elements
   and more; setting it starts its workers, and FQ_ERR_NO_THREADS leaves the previous setting when
   the system refuses them. */
#define FQ_THREADS_AUTO 0
#define FQ_MAX_THREADS 1024
/* The fixed count, or in auto mode the most a call may use (the usable CPUs). */
int fq_get_num_threads(void);
int fq_num_threads_is_auto(void);
fq_status fq_set_num_threads(int num_threads);
/* Holds (hold != 0) or lets go of (0) the pool's idle workers: while anyone holds them, a worker
   that finished its part of a call looks for the next one for 2 ms before it sleeps, instead of
   about twice the recent gaps between calls (20-250 us). Waking a sleeping worker costs the caller
   tens of microseconds on a virtual machine. For callers that know their calls keep coming and
   that no other thread pool of the process (a multi-threaded BLAS) runs between them: a Session
   run with BLAS on one thread, a fqcore.workers_awake region. Holds nest; each hold is let go of
   once. */
void fq_keep_workers_awake(int hold);
/* The holds not yet let go of. */
int fq_workers_kept_awake(void);
/* CPUs this process may run on: its affinity mask, lowered to a cgroup CPU quota (Linux); the
   online CPUs elsewhere. Read once. */
int fq_usable_cpus(void);
/* Cores of the affinity mask's CPUs that other processes kept busy over the last interval of at
   least 100 ms: busy time in /proc/stat (steal included) less this process's CPU time; 0 before
   the first interval and where it cannot be read (not Linux). */
double fq_other_cpu_load(void);
/* CPUs worth a thread now: the usable CPUs less those others keep at least half busy; >= 1. */
int fq_free_cpus(void);

/* --- Fake quantization (float32). n counts elements; arrays may alias only exactly (out == in). ---
   Semantics: shared spec of FakeQuantWithMinMaxArgs/Vars/VarsPerChannel and their gradients in
   TensorFlow 2.21, with denormals flushed to zero as TF's CPU threads do. */

/* FakeQuantWithMinMaxArgs: out = fq(x), multiplying by the inverse scale. */
fq_status fq_f32_args(const float *x, float *out, size_t n, float min, float max, int num_bits,
                      int narrow_range);
/* FakeQuantWithMinMaxArgsGradient: dx = g * (x in [nudged_min, nudged_max]). */
fq_status fq_f32_args_grad(const float *g, const float *x, float *dx, size_t n, float min, float max,
                           int num_bits, int narrow_range);
/* FakeQuantWithMinMaxVars: out = fq(x), dividing by the scale. */
fq_status fq_f32_vars(const float *x, float *out, size_t n, float min, float max, int num_bits,
                      int narrow_range);
/* FakeQuantWithMinMaxVarsGradient, fused: dx and both sums in one pass. */
fq_status fq_f32_vars_grad(const float *g, const float *x, float *dx, size_t n, float min, float max,
                           int num_bits, int narrow_range, float *dmin, float *dmax);
/* The interval whose inputs fq_f32_vars_grad passes the gradient of: *passes_all = 1 when it
   passes every element's unchanged (TF's all-zero range); else [*nudged_min, *nudged_max], and dx
   = g * (x in it) with g and x as denormals-are-zero sees them (fq_f32_channel_affine_grad_clipped
   applies it). */
fq_status fq_f32_vars_grad_interval(float min, float max, int num_bits, int narrow_range,
                                    int *passes_all, float *nudged_min, float *nudged_max);
/* FakeQuantWithMinMaxVarsPerChannel on x viewed as [n / channels, channels] (n % channels == 0);
   min and max have `channels` elements. */
fq_status fq_f32_vars_per_channel(const float *x, float *out, size_t n, size_t channels,
                                  const float *min, const float *max, int num_bits, int narrow_range);
/* FakeQuantWithMinMaxVarsPerChannelGradient; dmin and dmax have `channels` elements. */
fq_status fq_f32_vars_per_channel_grad(const float *g, const float *x, float *dx, size_t n,
                                       size_t channels, const float *min, const float *max,
                                       int num_bits, int narrow_range, float *dmin, float *dmax);

/* --- Fused batch norm (FusedBatchNormV3 / FusedBatchNormGradV3, TF 2.21 semantics). ---
   x, y_backprop and the outputs y / x_backprop hold `dtype` elements; everything per channel is
   float32. Low-precision data is computed in float32 and rounded once (to nearest even) on output.
   Statistics are sums in float64 in one fixed order: the same bits on every ISA and thread count.
   Element arrays may alias only exactly (y == x, x_backprop == y_backprop or == x). */

typedef enum {
    FQ_DTYPE_F32 = 0,
    FQ_DTYPE_F16 = 1,  /* IEEE binary16 bits (uint16_t) */
    FQ_DTYPE_BF16 = 2  /* bfloat16 bits (uint16_t): the upper half of a float32 */
} fq_dtype;

/* Memory order of the data: [outer, inner, channels] (NHWC, NDHWC) or [outer, channels, inner]
   (NCHW, NCDHW); inner is the spatial extent (H*W or D*H*W), outer the batch N. */
typedef enum {
    FQ_BN_CHANNELS_LAST = 0,
    FQ_BN_CHANNELS_FIRST = 1
} fq_bn_layout;

typedef struct {
    fq_bn_layout layout;
    size_t outer;
    size_t channels;
    size_t inner;
} fq_bn_shape;

/* Training forward. mean_in / variance_in are read only when exponential_avg_factor != 1 (then
   required). Outputs: y; batch_mean / batch_variance (running statistics, Bessel-corrected);
   saved_mean / saved_variance (reserve spaces 1 and 2: the batch mean and biased variance). y may
   be NULL: the statistics alone, without the pass that normalizes (what a batch norm folded into
   its layer reads). */
fq_status fq_bn_forward_training(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                 const float *scale, const float *offset, float epsilon,
                                 float exponential_avg_factor, const float *mean_in,
                                 const float *variance_in, void *y, float *batch_mean,
                                 float *batch_variance, float *saved_mean, float *saved_variance);
/* Inference forward: y = (x - mean) * (rsqrt(variance + epsilon) * scale) + offset. */
fq_status fq_bn_forward_inference(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                  const float *scale, const float *offset, const float *mean,
                                  const float *variance, float epsilon, void *y);
/* Gradient. Training: mean / variance are the forward's reserve spaces 1 and 2 (batch mean and
   biased variance); inference: the population statistics the forward used. */
fq_status fq_bn_grad(const void *y_backprop, const void *x, fq_dtype dtype, fq_bn_shape shape,
                     const float *scale, const float *mean, const float *variance, float epsilon,
                     int is_training, void *x_backprop, float *scale_backprop,
                     float *offset_backprop);

/* --- Range observation (float32): the batch min and max a quantizer observes in training. ---
   TF's reduce_min / reduce_max in one pass over x viewed as [n / channels, channels], reducing the
   rows: channels == 1 is the per-tensor range, otherwise one range per last-axis channel. min and
   max have `channels` elements (and must not overlap x). Per channel, exactly and independently of
   the ISA, the thread count and the order of the data:
   - a NaN anywhere makes both min and max NaN (always the quiet NaN 0x7fc00000);
   - denormals count as zeros of their sign, as TF's reduce ops see them on its flush-to-zero
     threads (minps / maxps under denormals-are-zero return the flushed zero): a result is never a
     denormal;
   - zeros follow IEEE 754-2019 minimum / maximum: min is -0 when the channel holds a -0 (or a
     negative denormal) and nothing below zero, max is +0 when it holds a +0 (or a positive
     denormal) and nothing above zero;
   - n == 0: min = +inf and max = -inf for every channel, as TF reduces an empty tensor.
   Errors: n % channels != 0, or channels == 0 with n > 0: FQ_ERR_BAD_SHAPE. */
fq_status fq_f32_range(const float *x, size_t n, size_t channels, float *min, float *max);

/* A moving-average quantizer's state update (tfmot's, and assign_moving_average's without
   debiasing): values[i] = values[i] - (values[i] - targets[i]) * rate for i < n, each operation in
   float32 with denormals flushed to zero (inputs and results, signs kept) and round to nearest, as
   TF's CPU threads compute it. values and targets must not overlap. */
fq_status fq_f32_moving_average(float *values, const float *targets, size_t n, float rate);

/* --- Convolution helpers (float32, NHWC): what the training engine's convolutions need besides a
   matrix multiply. ---
   The geometry of a convolution of x [batch, height, width, channels] with a kernel of
   kernel_height x kernel_width taps: output pixel (r, q) reads input pixel
   (r * stride_height + i * dilation_height - pad_top, q * stride_width + j * dilation_width -
   pad_left) at tap (i, j), zero when that falls outside the input. Output sizes and pads are the
   caller's (TF's SAME / VALID rules give them); any values are safe. Every result element is a
   sum in a fixed order (taps row-major, then the depthwise multiplier), the same on every ISA and
   thread count. Errors: a stride, dilation or kernel size of 0, or sizes whose products overflow:
   FQ_ERR_BAD_SHAPE; a NULL array with elements: FQ_ERR_NULL_POINTER. Arrays must not overlap. */
typedef struct {
    size_t batch, height, width, channels;
    size_t kernel_height, kernel_width;
    size_t out_height, out_width;
    size_t stride_height, stride_width;
    size_t dilation_height, dilation_width;
    size_t pad_top, pad_left;
} fq_conv_geometry;

/* cols [batch * out_height * out_width, kernel_height * kernel_width * channels]: row p holds
   output pixel p's window in (i, j, c) order, so cols times an HWIO filter flattened to
   [KH * KW * C, O] is the convolution. */
fq_status fq_f32_im2col(const float *x, const fq_conv_geometry *geometry, float *cols);
/* The adjoint of im2col: x_backprop [batch, height, width, channels] is, per element, the sum of
   the cols entries that im2col copied it to, in tap order (zero where no window reads it). */
fq_status fq_f32_col2im(const float *cols, const fq_conv_geometry *geometry, float *x_backprop);
/* Conv2D as matrix products (src_c/conv/conv_products.c), with pixels = batch * out_height *
   out_width and window = kernel_height * kernel_width * channels. A pointwise geometry (1x1
   kernel, stride 1, no padding, output the input's size) has x itself as its columns.
   Forward: y [pixels, outputs] = cols [pixels, window] times w [window, outputs] (an HWIO filter)
   by fq_f32_matmul: cols as given (columns_given: x is not read), else x itself where pointwise
   (cols is not used), else fq_f32_im2col of x into cols first. */
int fq_conv_geometry_pointwise(const fq_conv_geometry *geometry);
fq_status fq_f32_conv2d_forward(const float *x, const fq_conv_geometry *geometry, float *cols,
                                int columns_given, const float *w, size_t outputs, float *y);
/* The gradients of `terms` convolutions of the same columns, term k with filter w[k] [window,
   outputs[k]] and output gradient dy[k] [pixels, outputs[k]]: w_backprop [window, outputs[0]] =
   cols' dy[0] (NULL: not made); x_backprop = fq_f32_col2im of the sum of dy[k] w[k]' over k, one
   product going on from term to term (fq_f32_matmul_continue), made in scratch [pixels, window]
   (not used when pointwise: the sum is x_backprop itself; NULL: not made). An input gradient of
   no term: FQ_ERR_BAD_SHAPE. The same bits as those calls made one at a time. */
fq_status fq_f32_conv2d_grad(const float *cols, const fq_conv_geometry *geometry, size_t terms,
                             const float *const *w, const float *const *dy, const size_t *outputs,
                             float *w_backprop, float *x_backprop, float *scratch);
/* DepthwiseConv2dNative: w [KH, KW, channels, multiplier], y [batch, out_height, out_width,
   channels * multiplier] with output channel c * multiplier + m. */
fq_status fq_f32_depthwise(const float *x, const float *w, size_t multiplier,
                           const fq_conv_geometry *geometry, float *y);
/* Its gradients: x_backprop [batch, height, width, channels] from y_backprop; w_backprop
   [KH, KW, channels, multiplier], summed over fixed blocks of output rows (a function of the
   shape), blocks added in order. */
fq_status fq_f32_depthwise_grad_input(const float *y_backprop, const float *w, size_t multiplier,
                                      const fq_conv_geometry *geometry, float *x_backprop);
fq_status fq_f32_depthwise_grad_filter(const float *x, const float *y_backprop, size_t multiplier,
                                       const fq_conv_geometry *geometry, float *w_backprop);
/* The sum of two input gradients of one geometry, (y_backprop_a, w_a) and (y_backprop_b, w_b):
   x_backprop is each one's fq_f32_depthwise_grad_input added as numpy adds float32 (no flush to
   zero), the same bits, in one pass over x_backprop. */
fq_status fq_f32_depthwise_grad_input_sum(const float *y_backprop_a, const float *w_a,
                                          const float *y_backprop_b, const float *w_b,
                                          size_t multiplier, const fq_conv_geometry *geometry,
                                          float *x_backprop);

/* --- Per-channel chains (float32): the scale, shifts and activation after a convolution (what the
   fold of a batch norm into a layer leaves: contrib's post_conv_mul, correction_add, add_fold,
   Relu6), in one pass, equal bit for bit to the unfused ops as numpy runs them (under the caller's
   floating-point environment: denormals are not flushed). x is viewed as
   [n / channels, channels]; scale, shift_a, shift_b have `channels` floats, or are NULL to leave
   that step out. Arrays must not overlap. ---
   y = activation(((x * scale) + shift_a) + shift_b), each operation rounded to float32; Relu is
   max(v, 0) with NaN kept and -0 made +0, Relu6 is v < 0 ? 0 : (v > 6 ? 6 : v) (NaN and -0 kept). */
typedef enum {
    FQ_ACTIVATION_NONE = 0,
    FQ_ACTIVATION_RELU = 1,
    FQ_ACTIVATION_RELU6 = 2
} fq_activation;

fq_status fq_f32_channel_affine(const float *x, size_t n, size_t channels, const float *scale,
                                const float *shift_a, const float *shift_b,
                                fq_activation activation, float *y);
/* Its gradient from y_backprop and the forward's output y: g = y_backprop * (1.0f where the
   activation passes y, else 0.0f); x_backprop = scale * g (g without a scale); scale_backprop[c]
   = the sum of g * x (each product rounded to float32), shift_backprop[c] = the sum of g, both
   in float64 over fixed blocks of the data (a function of the shape), rounded once. Any of the
   three outputs may be NULL (x may be NULL without scale_backprop). */
fq_status fq_f32_channel_affine_grad(const float *y_backprop, const float *x, const float *y,
                                     size_t n, size_t channels, const float *scale,
                                     fq_activation activation, float *x_backprop,
                                     float *scale_backprop, float *shift_backprop);
/* The same with y_backprop first through a FakeQuantWithMinMaxVars of y whose gradient passes
   [clip_min, clip_max] (fq_f32_vars_grad_interval): the chain's gradient of that op's dx, without
   making it, the same bits. */
fq_status fq_f32_channel_affine_grad_clipped(const float *y_backprop, const float *x, const float *y,
                                             size_t n, size_t channels, const float *scale,
                                             fq_activation activation, float clip_min,
                                             float clip_max, float *x_backprop,
                                             float *scale_backprop, float *shift_backprop);
/* A residual connection's sum and the activation after it (a ResNet block's add and Relu, a
   MobileNet-style block's add and Relu6): y = activation(a + b), the sum rounded to float32 and the
   activations as above, the same bits as the two ops (where a and b are both NaN the sum is a's
   NaN, as numpy 2.5 gives it; numpy 2.0's vector loop gives b's). a, b and y have n floats and
   must not overlap. The gradient of both operands is fq_f32_channel_affine_grad (or _clipped)
   with one channel, no x and no scale: y_backprop times the activation's mask of y, which is the
   mask of a + b (Relu6 passes 0 < y < 6 exactly where 0 < a + b < 6, NaN aside in both). */
fq_status fq_f32_add_activation(const float *a, const float *b, size_t n, fq_activation activation,
                                float *y);
/* contrib.quantize's FoldFusedBatchNormGrad, the gradient x gets through a folded batch norm's
   batch mean and Bessel-corrected variance: x_backprop = grad_mean[c] / count +
   ((2 * grad_var[c]) * (x - mean[c])) / (count - 1), each operation in float32 in that order (as
   numpy runs the formula), count = n / channels as a float32. */
fq_status fq_f32_fold_batch_norm_grad(const float *x, size_t n, size_t channels, const float *mean,
                                      const float *grad_mean, const float *grad_var, float count,
                                      float *x_backprop);

/* --- Matrix product (float32): the training engine's convolutions and dense layers. ---
   c [m, n] (contiguous) = a [m, depth] times b [depth, n], with a[i, p] at
   a + i * a_row_stride + p * a_column_stride and b[p, j] at b + p * b_row_stride +
   j * b_column_stride (strides in floats, any sign: a transposed operand is a swap of its
   strides). Each element is the sum over p = 0 .. depth-1 of a[i, p] * b[p, j] as fused
   multiply-adds in that order, from 0.0f, with subnormals flushed: the same bits on every ISA and
   thread count (a BLAS sums in an order of its own). c must not overlap a or b. Errors: sizes
   whose products overflow: FQ_ERR_BAD_SHAPE; a NULL array with elements: FQ_ERR_NULL_POINTER;
   the packed copy of b cannot be had: FQ_ERR_NO_MEMORY. */
fq_status fq_f32_matmul(const float *a, ptrdiff_t a_row_stride, ptrdiff_t a_column_stride,
                        const float *b, ptrdiff_t b_row_stride, ptrdiff_t b_column_stride,
                        size_t m, size_t depth, size_t n, float *c);

/* fq_f32_matmul whose sums go on from c's values instead of 0.0f: the fused multiply-adds of
   a[i, p] * b[p, j] in order of p, added to c[i, j]. A product whose a and b are the column and
   row concatenations [a1 a2] and [b1; b2] is then fq_f32_matmul of a1 and b1, then this of a2
   and b2: the same bits, without the concatenated copies. Depth 0 leaves c as it is; the rest
   as fq_f32_matmul. */
fq_status fq_f32_matmul_continue(const float *a, ptrdiff_t a_row_stride,
                                 ptrdiff_t a_column_stride, const float *b,
                                 ptrdiff_t b_row_stride, ptrdiff_t b_column_stride, size_t m,
                                 size_t depth, size_t n, float *c);

/* --- Element-wise math (float32). ---
   out[i] = powf(x[i], y[i]) for i < n: the C library's powf, as TensorFlow's CPU Pow computes a
   scalar (std::pow), on its threads' flush-to-zero and denormals-are-zero state; special cases
   (NaN, infinities, zeros, negative bases) as powf gives them. out may alias x or y exactly. */
fq_status fq_f32_pow(const float *x, const float *y, size_t n, float *out);

/* One step of tf.train's assign_moving_average with zero_debias on float32 scalars, as contrib's
   range trackers build it: biased' = biased - (read - value) * decay_complement, step' = step +
   increment, average = biased' / (one - base ** step') with fq_f32_pow's power; out = {biased',
   step', average}, each operation rounded to float32 in that order. */
void fq_f32_debiased_average(float read, float value, float decay_complement, float increment,
                             float base, float one, float biased, float step, float out[3]);

/* A range tracker's clamp of a batch extreme: Minimum(extreme, bound) or Maximum(extreme, bound)
   as numpy computes them on float32 scalars (a NaN wins, the first if both are; of equal values
   the second, so -0 and +0 give bound), or the extreme itself with FQ_CLAMP_NONE. */
typedef enum { FQ_CLAMP_NONE = 0, FQ_CLAMP_MINIMUM = 1, FQ_CLAMP_MAXIMUM = 2 } fq_tracker_clamp;
float fq_f32_clamp(float extreme, fq_tracker_clamp clamp, float bound);

/* A range tracker's step (contrib's AssignMinEma / AssignMaxEma of a batch extreme):
   fq_f32_debiased_average of fq_f32_clamp(extreme, clamp, bound). */
void fq_f32_tracker_step(float extreme, fq_tracker_clamp clamp, float bound, float read,
                         float decay_complement, float increment, float base, float one,
                         float biased, float step, float out[3]);

/* --- Optimizer updates (float32). ---
   TF's ApplyMomentum on n elements: new_accum = accum * momentum + grad, then new_var =
   var - new_accum * learning_rate, or with use_nesterov new_var = var - (grad * learning_rate +
   new_accum * momentum * learning_rate); every operation rounded to float32 in that order (no
   fused multiply-add), subnormals kept. The outputs may alias their own inputs exactly (new_var
   == var, new_accum == accum). */
fq_status fq_f32_momentum(const float *var, const float *accum, const float *grad, size_t n,
                          float learning_rate, float momentum, int use_nesterov, float *new_var,
                          float *new_accum);

/* --- Straight-line programs over float32 vectors. ---
   The per-channel arithmetic around a folded batch norm (factors, corrections, their gradients)
   is a dozen element-wise operations on vectors of a few dozen elements each: as numpy calls
   their overhead is the cost. A program runs them in one call, each operation rounded to float32
   as numpy rounds it (no fused multiply-add, subnormals kept, the caller's floating-point
   environment), so the bits are the numpy operations'.
   Rows 0 .. num_sources - 1 are the read-only sources: sources[k] holds n elements, or one element
   that every position reads when broadcast[k] is not zero. Rows num_sources .. num_sources +
   num_registers - 1 are the registers, registers + r * n for register r; only they are written.
   Each instruction is four int32: opcode, destination row, operand rows a and b (b is ignored by
   the one-operand opcodes). A destination may be one of its own operands (element-wise). Errors:
   an unknown opcode, an operand row outside the rows, a destination that is not a register:
   FQ_ERR_BAD_PROGRAM, before anything is written; a NULL pointer where rows have elements:
   FQ_ERR_NULL_POINTER. */
typedef enum {
    FQ_VP_COPY = 0,       /* a */
    FQ_VP_NEGATE = 1,     /* -a */
    FQ_VP_RECIPROCAL = 2, /* 1 / a */
    FQ_VP_RSQRT = 3,      /* 1 / sqrt(a) */
    FQ_VP_SQUARE = 4,     /* a * a */
    FQ_VP_ADD = 5,        /* a + b */
    FQ_VP_SUBTRACT = 6,   /* a - b */
    FQ_VP_MULTIPLY = 7,   /* a * b */
    FQ_VP_DIVIDE = 8,     /* a / b */
    FQ_VP_OPCODES = 9
} fq_vp_opcode;

fq_status fq_f32_vector_program(const int *code, size_t instructions, const float *const *sources,
                                const unsigned char *broadcast, size_t num_sources,
                                float *registers, size_t num_registers, size_t n);

/* --- A filter scaled per column (float32). ---
   A folded layer's filter goes through products with vectors repeated down its rows (contrib's
   correction, then the fold's scale): f_{m+1}[r][c] = f_m[r][c] * v_m[c] for m = 0 .. k - 1, on a
   filter f_0 of `rows` x `columns` (the vectors' elements are its columns: its last dimensions).
   Forward: f_1 .. f_k into `out` (k x rows x columns, in that order), each product rounded to
   float32. Gradient from g, the gradient of f_k: with g_k = g and g_m = g_{m+1} * v_m, df0 = g_0
   and dvectors[m][c] = the float32 sum down the rows, in row order from the first row's term, of
   f_m[r][c] * g_{m+1}[r][c] (numpy's Mul gradients, and its sum over leading axes); a NULL df0 or
   dvectors[m] is not computed. filters: f_0 .. f_{k-1}. No SIMD file: each element is a few
   products, and the filters are small (a layer's weights). */
fq_status fq_f32_filter_scaling(const float *f0, const float *const *vectors, size_t k,
                                size_t rows, size_t columns, float *out);
fq_status fq_f32_filter_scaling_grad(const float *const *filters, const float *const *vectors,
                                     size_t k, size_t rows, size_t columns, const float *g,
                                     float *df0, float *const *dvectors);

/* --- Memory blocks for arrays (common/block_cache.c). ---
   malloc, calloc, realloc and free for arrays that a loop makes and frees again and again (a
   training step): a freed block of 16 KiB or more is kept for the next request of its size (sizes
   rounded up to 64 bytes), up to 1 GiB in all, where the system would take it back and return it
   as fresh pages, a page fault each. A request takes first the newest of the last 16 blocks freed
   that holds it and is at most 4 times its size (memory still in the CPU's caches), then its own
   size's newest. Blocks of 16 KiB and more are 64-byte aligned. Thread-safe; a block is freed with
   fq_block_free only. */
void *fq_block_alloc(size_t size);
void *fq_block_calloc(size_t count, size_t size);
void *fq_block_realloc(void *block, size_t size);
void fq_block_free(void *block);
/* Ends a round of use (one training step): the blocks of every size neither taken nor freed in
   the last four rounds are given back to the system. */
void fq_block_cache_end_round(void);
/* Gives every kept block back to the system; returns their bytes. */
size_t fq_block_cache_release(void);
typedef struct {
    size_t cached_bytes, cached_blocks;  /* kept now */
    unsigned long long hits, misses;     /* requests of 16 KiB or more: served from kept blocks or not */
} fq_block_cache_stats;
void fq_block_cache_get_stats(fq_block_cache_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* FQCORE_H */
