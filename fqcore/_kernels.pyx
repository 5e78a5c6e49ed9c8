# Thin bindings: one C call per function, the GIL released, a status code turned into an exception.
# Arguments arrive validated and C-contiguous from fqcore.ops; nothing else happens here.

ISA_NAMES = tuple(fq_isa_name(<fq_isa>i).decode() for i in range(FQ_ISA_COUNT))
VERSION = FQCORE_VERSION_STRING.decode()


cdef int _check(fq_status status) except -1:
    if status == FQ_OK:
        return 0
    message = fq_status_string(status).decode()
    if status == FQ_ERR_NO_MEMORY:
        raise MemoryError(message)
    raise ValueError(message)


cdef inline const float *_cptr(const float[::1] a) noexcept nogil:
    """Address of the first element, NULL for an empty array (which has no element 0)."""
    return &a[0] if a.shape[0] > 0 else NULL


cdef inline float *_ptr(float[::1] a) noexcept nogil:
    return &a[0] if a.shape[0] > 0 else NULL


def init():
    """Reads FQCORE_ISA / FQCORE_NUM_THREADS; raises if either holds a bad value."""
    _check(fq_init())


def isa_compiled(int isa):
    return bool(fq_isa_compiled(<fq_isa>isa))


def isa_available(int isa):
    return bool(fq_isa_available(<fq_isa>isa))


def get_isa():
    return <int>fq_get_isa()


def set_isa(int isa):
    _check(fq_set_isa(<fq_isa>isa))


def get_num_threads():
    return fq_get_num_threads()


def set_num_threads(int threads):
    _check(fq_set_num_threads(threads))


def has_openmp():
    return bool(fq_has_openmp())


def args_forward(const float[::1] x, float[::1] out, float min, float max, int num_bits,
                 bint narrow_range):
    """False when min >= max (the caller words TF's message); True when done."""
    cdef fq_status rc
    with nogil:
        rc = fq_f32_args(_cptr(x), _ptr(out), x.shape[0], min, max, num_bits, narrow_range)
    if rc == FQ_ERR_MIN_NOT_BELOW_MAX:
        return False
    _check(rc)
    return True


def args_grad(const float[::1] g, const float[::1] x, float[::1] dx, float min, float max,
              int num_bits, bint narrow_range):
    """False when min >= max (the caller words TF's message); True when done."""
    cdef fq_status rc
    with nogil:
        rc = fq_f32_args_grad(_cptr(g), _cptr(x), _ptr(dx), x.shape[0], min, max, num_bits,
                              narrow_range)
    if rc == FQ_ERR_MIN_NOT_BELOW_MAX:
        return False
    _check(rc)
    return True


def vars_forward(const float[::1] x, float[::1] out, float min, float max, int num_bits,
                 bint narrow_range):
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars(_cptr(x), _ptr(out), x.shape[0], min, max, num_bits, narrow_range)
    _check(rc)


def vars_grad(const float[::1] g, const float[::1] x, float[::1] dx, float min, float max,
              int num_bits, bint narrow_range, float[::1] sums):
    """sums receives [backprop_wrt_min, backprop_wrt_max]."""
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars_grad(_cptr(g), _cptr(x), _ptr(dx), x.shape[0], min, max, num_bits,
                              narrow_range, &sums[0], &sums[1])
    _check(rc)


def channel_forward(const float[::1] x, float[::1] out, const float[::1] min,
                    const float[::1] max, int num_bits, bint narrow_range):
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars_per_channel(_cptr(x), _ptr(out), x.shape[0], min.shape[0], _cptr(min),
                                     _cptr(max), num_bits, narrow_range)
    _check(rc)


def channel_grad(const float[::1] g, const float[::1] x, float[::1] dx,
                 const float[::1] min, const float[::1] max, int num_bits,
                 bint narrow_range, float[::1] dmin, float[::1] dmax):
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars_per_channel_grad(_cptr(g), _cptr(x), _ptr(dx), x.shape[0], min.shape[0],
                                          _cptr(min), _cptr(max), num_bits, narrow_range,
                                          _ptr(dmin), _ptr(dmax))
    _check(rc)


# Batch norm. Element data arrives as the raw bytes of a C-contiguous float32, float16 or bfloat16
# array (`dtype` says which: 0, 1, 2); everything per channel is float32.

cdef inline const void *_cbytes(const unsigned char[::1] a) noexcept nogil:
    return &a[0] if a.shape[0] > 0 else NULL


cdef inline void *_bytes(unsigned char[::1] a) noexcept nogil:
    return &a[0] if a.shape[0] > 0 else NULL


cdef fq_bn_shape _bn_shape(bint channels_last, size_t outer, size_t channels, size_t inner):
    cdef fq_bn_shape shape
    shape.layout = FQ_BN_CHANNELS_LAST if channels_last else FQ_BN_CHANNELS_FIRST
    shape.outer = outer
    shape.channels = channels
    shape.inner = inner
    return shape


def bn_forward_training(const unsigned char[::1] x, int dtype, bint channels_last, size_t outer,
                        size_t channels, size_t inner, const float[::1] scale,
                        const float[::1] offset, float epsilon, float exponential_avg_factor,
                        const float[::1] mean_in, const float[::1] variance_in,
                        unsigned char[::1] y, float[::1] batch_mean, float[::1] batch_variance,
                        float[::1] saved_mean, float[::1] saved_variance):
    cdef fq_status rc
    cdef fq_bn_shape shape = _bn_shape(channels_last, outer, channels, inner)
    with nogil:
        rc = fq_bn_forward_training(_cbytes(x), <fq_dtype>dtype, shape, _cptr(scale),
                                    _cptr(offset), epsilon, exponential_avg_factor,
                                    _cptr(mean_in), _cptr(variance_in), _bytes(y),
                                    _ptr(batch_mean), _ptr(batch_variance), _ptr(saved_mean),
                                    _ptr(saved_variance))
    _check(rc)


def bn_forward_inference(const unsigned char[::1] x, int dtype, bint channels_last, size_t outer,
                         size_t channels, size_t inner, const float[::1] scale,
                         const float[::1] offset, const float[::1] mean,
                         const float[::1] variance, float epsilon, unsigned char[::1] y):
    cdef fq_status rc
    cdef fq_bn_shape shape = _bn_shape(channels_last, outer, channels, inner)
    with nogil:
        rc = fq_bn_forward_inference(_cbytes(x), <fq_dtype>dtype, shape, _cptr(scale),
                                     _cptr(offset), _cptr(mean), _cptr(variance), epsilon,
                                     _bytes(y))
    _check(rc)


def bn_grad(const unsigned char[::1] y_backprop, const unsigned char[::1] x, int dtype,
            bint channels_last, size_t outer, size_t channels, size_t inner,
            const float[::1] scale, const float[::1] mean, const float[::1] variance,
            float epsilon, bint is_training, unsigned char[::1] x_backprop,
            float[::1] scale_backprop, float[::1] offset_backprop):
    cdef fq_status rc
    cdef fq_bn_shape shape = _bn_shape(channels_last, outer, channels, inner)
    with nogil:
        rc = fq_bn_grad(_cbytes(y_backprop), _cbytes(x), <fq_dtype>dtype, shape, _cptr(scale),
                        _cptr(mean), _cptr(variance), epsilon, is_training, _bytes(x_backprop),
                        _ptr(scale_backprop), _ptr(offset_backprop))
    _check(rc)


# Range observation: per-channel (or, with one channel, per-tensor) min and max of x viewed as
# [x.size // channels, channels], where channels = min.shape[0].

def batch_range(const float[::1] x, float[::1] min, float[::1] max):
    cdef fq_status rc
    if max.shape[0] != min.shape[0]:
        raise ValueError(f"min and max must have the same length, got {min.shape[0]} and {max.shape[0]}")
    with nogil:
        rc = fq_f32_range(_cptr(x), x.shape[0], min.shape[0], _ptr(min), _ptr(max))
    _check(rc)


def moving_average(float[::1] values, const float[::1] targets, float rate):
    cdef fq_status rc
    if values.shape[0] != targets.shape[0]:
        raise ValueError(f"values and targets must have the same length, got {values.shape[0]} "
                         f"and {targets.shape[0]}")
    with nogil:
        rc = fq_f32_moving_average(_ptr(values), _cptr(targets), values.shape[0], rate)
    _check(rc)
