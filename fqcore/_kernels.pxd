from libc.stddef cimport ptrdiff_t

# The C API of src_c/include/fqcore.h, as Cython sees it.
cdef extern from "fqcore.h" nogil:
    ctypedef enum fq_status:
        FQ_OK
        FQ_ERR_NULL_POINTER
        FQ_ERR_NUM_BITS
        FQ_ERR_MIN_NOT_BELOW_MAX
        FQ_ERR_NO_MEMORY
        FQ_ERR_ISA_UNAVAILABLE
        FQ_ERR_BAD_ISA
        FQ_ERR_BAD_THREADS
        FQ_ERR_BAD_SHAPE
        FQ_ERR_BAD_DTYPE
        FQ_ERR_BAD_LAYOUT
        FQ_ERR_NO_THREADS
        FQ_ERR_BAD_PROGRAM

    ctypedef enum fq_isa:
        FQ_ISA_SCALAR
        FQ_ISA_AVX2
        FQ_ISA_AVX512
        FQ_ISA_NEON
        FQ_ISA_COUNT

    const char *FQCORE_VERSION_STRING
    const char *fq_status_string(fq_status status)
    const char *fq_isa_name(fq_isa isa)
    fq_status fq_isa_from_name(const char *name, fq_isa *isa)
    int fq_isa_compiled(fq_isa isa)
    int fq_isa_available(fq_isa isa)
    fq_isa fq_get_isa()
    fq_status fq_set_isa(fq_isa isa)
    fq_status fq_init()
    int fq_get_num_threads()
    int fq_num_threads_is_auto()
    fq_status fq_set_num_threads(int num_threads)
    int fq_usable_cpus()
    const char *fq_kernel_choices()
    double fq_other_cpu_load()
    int fq_free_cpus()
    void fq_keep_workers_awake(int hold)
    int fq_workers_kept_awake()

    fq_status fq_f32_args(const float *x, float *out, size_t n, float min, float max,
                          int num_bits, int narrow_range)
    fq_status fq_f32_args_grad(const float *g, const float *x, float *dx, size_t n, float min,
                               float max, int num_bits, int narrow_range)
    fq_status fq_f32_vars(const float *x, float *out, size_t n, float min, float max,
                          int num_bits, int narrow_range)
    fq_status fq_f32_vars_grad(const float *g, const float *x, float *dx, size_t n, float min,
                               float max, int num_bits, int narrow_range, float *dmin,
                               float *dmax)
    fq_status fq_f32_vars_grad_interval(float min, float max, int num_bits, int narrow_range,
                                        int *passes_all, float *nudged_min, float *nudged_max)
    fq_status fq_f32_vars_per_channel(const float *x, float *out, size_t n, size_t channels,
                                      const float *min, const float *max, int num_bits,
                                      int narrow_range)
    fq_status fq_f32_vars_per_channel_grad(const float *g, const float *x, float *dx, size_t n,
                                           size_t channels, const float *min, const float *max,
                                           int num_bits, int narrow_range, float *dmin,
                                           float *dmax)

    ctypedef enum fq_dtype:
        FQ_DTYPE_F32
        FQ_DTYPE_F16
        FQ_DTYPE_BF16

    ctypedef enum fq_bn_layout:
        FQ_BN_CHANNELS_LAST
        FQ_BN_CHANNELS_FIRST

    ctypedef struct fq_bn_shape:
        fq_bn_layout layout
        size_t outer
        size_t channels
        size_t inner

    fq_status fq_bn_forward_training(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                     const float *scale, const float *offset, float epsilon,
                                     float exponential_avg_factor, const float *mean_in,
                                     const float *variance_in, void *y, float *batch_mean,
                                     float *batch_variance, float *saved_mean,
                                     float *saved_variance)
    fq_status fq_bn_forward_inference(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                      const float *scale, const float *offset, const float *mean,
                                      const float *variance, float epsilon, void *y)
    fq_status fq_bn_grad(const void *y_backprop, const void *x, fq_dtype dtype, fq_bn_shape shape,
                         const float *scale, const float *mean, const float *variance,
                         float epsilon, int is_training, void *x_backprop, float *scale_backprop,
                         float *offset_backprop)

    fq_status fq_f32_range(const float *x, size_t n, size_t channels, float *min, float *max)
    fq_status fq_f32_moving_average(float *values, const float *targets, size_t n, float rate)

    ctypedef struct fq_conv_geometry:
        size_t batch, height, width, channels
        size_t kernel_height, kernel_width
        size_t out_height, out_width
        size_t stride_height, stride_width
        size_t dilation_height, dilation_width
        size_t pad_top, pad_left

    fq_status fq_f32_im2col(const float *x, const fq_conv_geometry *geometry, float *cols)
    fq_status fq_f32_col2im(const float *cols, const fq_conv_geometry *geometry, float *x_backprop)
    int fq_conv_geometry_pointwise(const fq_conv_geometry *geometry)
    fq_status fq_f32_conv2d_forward(const float *x, const fq_conv_geometry *geometry, float *cols,
                                    int columns_given, const float *w, size_t outputs, float *y)
    fq_status fq_f32_conv2d_grad(const float *cols, const fq_conv_geometry *geometry, size_t terms,
                                 const float *const *w, const float *const *dy,
                                 const size_t *outputs, float *w_backprop, float *x_backprop,
                                 float *scratch)
    fq_status fq_f32_depthwise(const float *x, const float *w, size_t multiplier,
                               const fq_conv_geometry *geometry, float *y)
    fq_status fq_f32_depthwise_grad_input(const float *y_backprop, const float *w,
                                          size_t multiplier, const fq_conv_geometry *geometry,
                                          float *x_backprop)
    fq_status fq_f32_depthwise_grad_input_sum(const float *y_backprop_a, const float *w_a,
                                              const float *y_backprop_b, const float *w_b,
                                              size_t multiplier, const fq_conv_geometry *geometry,
                                              float *x_backprop)
    fq_status fq_f32_depthwise_grad_filter(const float *x, const float *y_backprop,
                                           size_t multiplier, const fq_conv_geometry *geometry,
                                           float *w_backprop)

    ctypedef enum fq_activation:
        FQ_ACTIVATION_NONE
        FQ_ACTIVATION_RELU
        FQ_ACTIVATION_RELU6

    fq_status fq_f32_channel_affine(const float *x, size_t n, size_t channels, const float *scale,
                                    const float *shift_a, const float *shift_b,
                                    fq_activation activation, float *y)
    fq_status fq_f32_channel_affine_grad(const float *y_backprop, const float *x, const float *y,
                                         size_t n, size_t channels, const float *scale,
                                         fq_activation activation, float *x_backprop,
                                         float *scale_backprop, float *shift_backprop)
    fq_status fq_f32_channel_affine_grad_clipped(const float *y_backprop, const float *x,
                                                 const float *y, size_t n, size_t channels,
                                                 const float *scale, fq_activation activation,
                                                 float clip_min, float clip_max,
                                                 float *x_backprop, float *scale_backprop,
                                                 float *shift_backprop)
    fq_status fq_f32_add_activation(const float *a, const float *b, size_t n,
                                    fq_activation activation, float *y)
    fq_status fq_f32_fold_batch_norm_grad(const float *x, size_t n, size_t channels,
                                          const float *mean, const float *grad_mean,
                                          const float *grad_var, float count, float *x_backprop)

    fq_status fq_f32_matmul(const float *a, ptrdiff_t a_row_stride, ptrdiff_t a_column_stride,
                            const float *b, ptrdiff_t b_row_stride, ptrdiff_t b_column_stride,
                            size_t m, size_t depth, size_t n, float *c)
    fq_status fq_f32_matmul_continue(const float *a, ptrdiff_t a_row_stride,
                                     ptrdiff_t a_column_stride, const float *b,
                                     ptrdiff_t b_row_stride, ptrdiff_t b_column_stride, size_t m,
                                     size_t depth, size_t n, float *c)

    fq_status fq_f32_pow(const float *x, const float *y, size_t n, float *out)
    ctypedef enum fq_tracker_clamp:
        FQ_CLAMP_NONE
        FQ_CLAMP_MINIMUM
        FQ_CLAMP_MAXIMUM
    float fq_f32_clamp(float extreme, fq_tracker_clamp clamp, float bound)
    void fq_f32_tracker_step(float extreme, fq_tracker_clamp clamp, float bound, float read,
                             float decay_complement, float increment, float base, float one,
                             float biased, float step, float *out)
    fq_status fq_f32_momentum(const float *var, const float *accum, const float *grad, size_t n,
                              float learning_rate, float momentum, int use_nesterov,
                              float *new_var, float *new_accum)
    fq_status fq_f32_filter_scaling(const float *f0, const float *const *vectors, size_t k,
                                    size_t rows, size_t columns, float *out)
    fq_status fq_f32_filter_scaling_grad(const float *const *filters,
                                         const float *const *vectors, size_t k, size_t rows,
                                         size_t columns, const float *g, float *df0,
                                         float *const *dvectors)
    fq_status fq_f32_vector_program(const int *code, size_t instructions,
                                    const float *const *sources, const unsigned char *broadcast,
                                    size_t num_sources, float *registers, size_t num_registers,
                                    size_t n)
    ctypedef struct fq_block_cache_stats:
        size_t cached_bytes
        size_t cached_blocks
        unsigned long long hits
        unsigned long long misses
    void *fq_block_alloc(size_t size)
    void *fq_block_calloc(size_t count, size_t size)
    void *fq_block_realloc(void *block, size_t size)
    void fq_block_free(void *block)
    void fq_block_cache_end_round()
    size_t fq_block_cache_release()
    void fq_block_cache_get_stats(fq_block_cache_stats *stats)
