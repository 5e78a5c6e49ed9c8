# Thin bindings: one C call per function, the GIL released, a status code turned into an exception.
# Range arguments arrive validated and C-contiguous from their Python modules; the fake-quant
# bindings check their arguments' form themselves, and the batch-norm ones each array against the
# shape they are given (see below).
cimport cython
cimport numpy as cnp
import numpy
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.pycapsule cimport PyCapsule_New
from libc.float cimport FLT_MIN
from libc.math cimport copysignf, fabsf
from libc.string cimport strcpy

cnp.import_array()

ISA_NAMES = tuple(fq_isa_name(<fq_isa>i).decode() for i in range(FQ_ISA_COUNT))
VERSION = FQCORE_VERSION_STRING.decode()


cdef extern from *:
    # setup.py defines it on this file's compile line: JSON of the ISAs it left out and why, the
    # compiler and the flags, so the description cannot disagree with the binary.
    const char *FQ_BUILD_INFO

BUILD_INFO = FQ_BUILD_INFO.decode()


cdef int _check(fq_status status) except -1:
    if status == FQ_OK:
        return 0
    message = fq_status_string(status).decode()
    if status == FQ_ERR_NO_MEMORY:
        raise MemoryError(message)
    if status == FQ_ERR_NO_THREADS:
        raise RuntimeError(message)
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
    """0 for auto, else the fixed count."""
    return 0 if fq_num_threads_is_auto() else fq_get_num_threads()


def set_num_threads(int threads):
    """0 for auto."""
    cdef fq_status rc
    with nogil:
        rc = fq_set_num_threads(threads)
    _check(rc)


def usable_cpus():
    return fq_usable_cpus()


def kernel_choices():
    return fq_kernel_choices().decode()


def other_cpu_load():
    return fq_other_cpu_load()


def free_cpus():
    return fq_free_cpus()


def keep_workers_awake(bint hold):
    """Holds the pool's idle workers awake between calls (True) or lets go of a hold (False)."""
    fq_keep_workers_awake(hold)


def workers_kept_awake():
    """The holds of keep_workers_awake not yet let go of."""
    return fq_workers_kept_awake()


# Array memory: numpy's allocator hook (NEP 49) over fq_block_*, which keeps freed large blocks for
# the next array of their size. Session.run and fqcore.cached_memory install it for the arrays
# they make.
cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyDataMemAllocator:
        void *ctx
        void *(*malloc)(void *ctx, size_t size) noexcept nogil
        void *(*calloc)(void *ctx, size_t nelem, size_t elsize) noexcept nogil
        void *(*realloc)(void *ctx, void *ptr, size_t new_size) noexcept nogil
        void (*free)(void *ctx, void *ptr, size_t size) noexcept nogil
    ctypedef struct PyDataMem_Handler:
        char name[127]
        unsigned char version
        PyDataMemAllocator allocator
    object PyDataMem_SetHandler(object handler)


cdef void *_block_malloc(void *ctx, size_t size) noexcept nogil:
    return fq_block_alloc(size)


cdef void *_block_calloc(void *ctx, size_t count, size_t size) noexcept nogil:
    return fq_block_calloc(count, size)


cdef void *_block_realloc(void *ctx, void *block, size_t size) noexcept nogil:
    return fq_block_realloc(block, size)


cdef void _block_free(void *ctx, void *block, size_t size) noexcept nogil:
    fq_block_free(block)  # the block knows its own size


cdef PyDataMem_Handler _block_handler
strcpy(_block_handler.name, b"fqcore_block_cache")
_block_handler.version = 1
_block_handler.allocator.ctx = NULL
_block_handler.allocator.malloc = _block_malloc
_block_handler.allocator.calloc = _block_calloc
_block_handler.allocator.realloc = _block_realloc
_block_handler.allocator.free = _block_free
# Lives as long as the module: arrays made with it keep a reference to free their memory.
_BLOCK_HANDLER = PyCapsule_New(&_block_handler, "mem_handler", NULL)


def begin_block_round():
    """Has numpy take the memory of the arrays this context makes from the block cache; returns the
    handler in force before, for end_block_round."""
    return PyDataMem_SetHandler(_BLOCK_HANDLER)


def end_block_round(previous):
    """Puts `previous` (begin_block_round's result) back, then ends the cache's round, unless
    `previous` is the block cache itself: a region inside another (a Session.run inside
    fqcore.cached_memory) is part of the outer one's round, so that the sizes only the outer
    region uses do not age once per inner region."""
    PyDataMem_SetHandler(previous)
    if previous is not _BLOCK_HANDLER:
        fq_block_cache_end_round()


def release_blocks():
    return fq_block_cache_release()


def block_cache_stats():
    cdef fq_block_cache_stats stats
    fq_block_cache_get_stats(&stats)
    return {"cached_bytes": stats.cached_bytes, "cached_blocks": stats.cached_blocks,
            "hits": stats.hits, "misses": stats.misses}


# Fake quantization. Each binding takes the arguments of its fqcore.ops function as they come and
# runs the kernel when they already are in the kernels' form: exact float32 ndarrays, C-contiguous,
# aligned, out= of the input's shape and either disjoint from every input or the very same memory
# (in place), Python floats for ranges (or 0-d float32 arrays for Vars), an int num_bits in 2..16, a
# bool narrow_range. Anything else returns None without touching memory, and fqcore.ops converts,
# copies or reports, then calls again. This keeps a typical call at about a microsecond: the
# general path's checks cost more than the kernel on small arrays.

cdef int _KERNEL_FLAGS = cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_ALIGNED


cdef inline bint _is_kernel_array(object a) noexcept:
    """An ndarray of native-order float32, C-contiguous and aligned."""
    if not cnp.PyArray_Check(a):
        return False
    cdef cnp.ndarray array = <cnp.ndarray>a
    return (cnp.PyArray_TYPE(array) == cnp.NPY_FLOAT32 and cnp.PyArray_ISNOTSWAPPED(array)
            and (cnp.PyArray_FLAGS(array) & _KERNEL_FLAGS) == _KERNEL_FLAGS)


cdef inline bint _is_shaped(object a, int rank, cnp.npy_intp d0, cnp.npy_intp d1=-1,
                            cnp.npy_intp d2=-1, cnp.npy_intp d3=-1) noexcept:
    """A kernel array of `rank` dimensions (1 to 4) of sizes d0, d1, ... (a negative one: any)."""
    if not _is_kernel_array(a) or cnp.PyArray_NDIM(<cnp.ndarray>a) != rank:
        return False
    cdef cnp.npy_intp wanted[4]
    wanted[0], wanted[1], wanted[2], wanted[3] = d0, d1, d2, d3
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>a)
    cdef int k
    for k in range(rank):
        if wanted[k] >= 0 and dims[k] != wanted[k]:
            return False
    return True


cdef inline bint _is_attrs(object num_bits, object narrow_range) noexcept:
    return (type(num_bits) is int and 2 <= num_bits <= 16
            and (narrow_range is True or narrow_range is False))


cdef object _NUMPY_FLOAT32 = numpy.float32
# The scalar types a range may be, taken as they are: each is one double, which C rounds to float32
# once (a numpy array's min() is a np.float32). fqcore.ops' general path skips its checks for them.
EXACT_FLOATS = (float, _NUMPY_FLOAT32, numpy.float64)
cdef tuple _EXACT_FLOATS = EXACT_FLOATS


cdef inline bint _is_float(object value) noexcept:
    """A scalar of EXACT_FLOATS (by identity: no comparison that could call Python)."""
    cdef object kind = type(value), exact
    for exact in _EXACT_FLOATS:
        if kind is exact:
            return True
    return False


cdef inline bint _is_range_value(object value) noexcept:
    """A Vars min or max the kernels take as is: a float (_is_float) or a 0-d float32 array."""
    return _is_float(value) or (_is_kernel_array(value) and cnp.PyArray_NDIM(<cnp.ndarray>value) == 0)


cdef inline float _range_value(object value):
    if _is_float(value):
        return <float><double>value
    return (<float *>cnp.PyArray_DATA(<cnp.ndarray>value))[0]


cdef inline bint _disjoint_or_same(cnp.ndarray out, cnp.ndarray a) noexcept:
    """Whether the kernel may write out while reading a: C-contiguous arrays are byte ranges, so
    they either do not meet, or are the same memory (elementwise in place), or overlap partly."""
    cdef char *o = cnp.PyArray_BYTES(out)
    cdef char *p = cnp.PyArray_BYTES(a)
    cdef cnp.npy_intp size = cnp.PyArray_NBYTES(out), a_size = cnp.PyArray_NBYTES(a)
    return (o == p and size == a_size) or o + size <= p or p + a_size <= o


cdef object _kernel_output(object out, cnp.ndarray inputs, object other):
    """The array to write: a new one when out is None, out when it is in the kernels' form for
    these inputs (`other` is the gradients array, or None), else None."""
    if out is None:
        return cnp.PyArray_EMPTY(cnp.PyArray_NDIM(inputs), cnp.PyArray_DIMS(inputs),
                                 cnp.NPY_FLOAT32, 0)
    if not _is_kernel_array(out):
        return None
    cdef cnp.ndarray result = <cnp.ndarray>out
    if not (cnp.PyArray_ISWRITEABLE(result) and cnp.PyArray_SAMESHAPE(result, inputs)
            and _disjoint_or_same(result, inputs)
            and (other is None or _disjoint_or_same(result, <cnp.ndarray>other))):
        return None
    return result


cdef inline const float *_cdata(object a) noexcept:
    """Address of the first element, NULL for an empty array (which has no element 0)."""
    cdef cnp.ndarray array = <cnp.ndarray>a
    return <const float *>cnp.PyArray_DATA(array) if cnp.PyArray_SIZE(array) > 0 else NULL


cdef inline float *_data(object a) noexcept:
    cdef cnp.ndarray array = <cnp.ndarray>a
    return <float *>cnp.PyArray_DATA(array) if cnp.PyArray_SIZE(array) > 0 else NULL


cdef extern from "numpy/arrayobject.h":
    object PyArray_Scalar(void *data, cnp.dtype descr, object base)

cdef cnp.dtype _FLOAT32_DESCR = cnp.PyArray_DescrFromType(cnp.NPY_FLOAT32)


cdef inline object _float32(float value):
    """A numpy float32 scalar, as TF's 0-d results read back."""
    return PyArray_Scalar(&value, _FLOAT32_DESCR, None)


cdef inline bint _is_gradient_pair(object gradients, object inputs) noexcept:
    return (_is_kernel_array(gradients) and _is_kernel_array(inputs)
            and cnp.PyArray_SAMESHAPE(<cnp.ndarray>gradients, <cnp.ndarray>inputs))


cdef inline bint _is_channel_ranges(object inputs, object min, object max) noexcept:
    """min and max of one value per channel of the inputs' last dimension."""
    cdef cnp.ndarray x = <cnp.ndarray>inputs
    if cnp.PyArray_NDIM(x) == 0 or not (_is_kernel_array(min) and _is_kernel_array(max)):
        return False
    cdef cnp.npy_intp channels = cnp.PyArray_DIMS(x)[cnp.PyArray_NDIM(x) - 1]
    return (cnp.PyArray_NDIM(<cnp.ndarray>min) == 1 and cnp.PyArray_NDIM(<cnp.ndarray>max) == 1
            and cnp.PyArray_DIMS(<cnp.ndarray>min)[0] == channels
            and cnp.PyArray_DIMS(<cnp.ndarray>max)[0] == channels)


ctypedef fq_status (*forward_kernel)(const float *x, float *out, size_t n, float min, float max,
                                     int num_bits, int narrow_range) noexcept nogil


cdef object _forward(forward_kernel kernel, cnp.ndarray x, float lo, float hi, object num_bits,
                     object narrow_range, object out):
    """Args or Vars forward on checked inputs and range; False when C finds min >= max."""
    if not _is_attrs(num_bits, narrow_range):
        return None
    cdef object result = _kernel_output(out, x, None)
    if result is None:
        return None
    cdef int bits = num_bits, narrow = narrow_range
    cdef const float *px = _cdata(x)
    cdef float *pout = _data(result)
    cdef size_t n = cnp.PyArray_SIZE(x)
    cdef fq_status rc
    with nogil:
        rc = kernel(px, pout, n, lo, hi, bits, narrow)
    if rc == FQ_ERR_MIN_NOT_BELOW_MAX:
        return False
    _check(rc)
    return result


def args_forward(inputs, min, max, num_bits, narrow_range, out):
    """The result; False when min >= max (fqcore.ops words TF's message); None: see above."""
    if not (_is_kernel_array(inputs) and _is_float(min) and _is_float(max)):
        return None
    return _forward(fq_f32_args, <cnp.ndarray>inputs, <double>min, <double>max, num_bits,
                    narrow_range, out)


def vars_forward(inputs, min, max, num_bits, narrow_range, out):
    """The result, or None: see above."""
    if not (_is_kernel_array(inputs) and _is_range_value(min) and _is_range_value(max)):
        return None
    return _forward(fq_f32_vars, <cnp.ndarray>inputs, _range_value(min), _range_value(max),
                    num_bits, narrow_range, out)


def args_grad(gradients, inputs, min, max, num_bits, narrow_range, out):
    """The result; False when min >= max (fqcore.ops words TF's message); None: see above."""
    if not (_is_gradient_pair(gradients, inputs) and _is_float(min) and _is_float(max)
            and _is_attrs(num_bits, narrow_range)):
        return None
    cdef cnp.ndarray g = <cnp.ndarray>gradients, x = <cnp.ndarray>inputs
    cdef object result = _kernel_output(out, x, g)
    if result is None:
        return None
    cdef float lo = <double>min, hi = <double>max
    cdef int bits = num_bits, narrow = narrow_range
    cdef const float *pg = _cdata(g)
    cdef const float *px = _cdata(x)
    cdef float *pout = _data(result)
    cdef size_t n = cnp.PyArray_SIZE(x)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_args_grad(pg, px, pout, n, lo, hi, bits, narrow)
    if rc == FQ_ERR_MIN_NOT_BELOW_MAX:
        return False
    _check(rc)
    return result


def vars_grad(gradients, inputs, min, max, num_bits, narrow_range, out):
    """(dx, backprop_wrt_min, backprop_wrt_max) with the sums as float32 scalars, or None."""
    if not (_is_gradient_pair(gradients, inputs) and _is_range_value(min)
            and _is_range_value(max) and _is_attrs(num_bits, narrow_range)):
        return None
    cdef cnp.ndarray g = <cnp.ndarray>gradients, x = <cnp.ndarray>inputs
    cdef object result = _kernel_output(out, x, g)
    if result is None:
        return None
    cdef float lo = _range_value(min), hi = _range_value(max), dmin, dmax
    cdef int bits = num_bits, narrow = narrow_range
    cdef const float *pg = _cdata(g)
    cdef const float *px = _cdata(x)
    cdef float *pout = _data(result)
    cdef size_t n = cnp.PyArray_SIZE(x)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars_grad(pg, px, pout, n, lo, hi, bits, narrow, &dmin, &dmax)
    _check(rc)
    return result, _float32(dmin), _float32(dmax)


def vars_grad_interval(float min, float max, int num_bits, bint narrow_range):
    """None when vars_grad passes every element's gradient (an all-zero range), else the
    (nudged_min, nudged_max) it passes the gradient of inputs inside."""
    cdef int passes_all
    cdef float lo, hi
    _check(fq_f32_vars_grad_interval(min, max, num_bits, narrow_range, &passes_all, &lo, &hi))
    return None if passes_all else (lo, hi)


def channel_forward(inputs, min, max, num_bits, narrow_range, out):
    """The result, or None: see above."""
    if not (_is_kernel_array(inputs) and _is_channel_ranges(inputs, min, max)
            and _is_attrs(num_bits, narrow_range)):
        return None
    cdef cnp.ndarray x = <cnp.ndarray>inputs, lo = <cnp.ndarray>min, hi = <cnp.ndarray>max
    cdef object result = _kernel_output(out, x, None)
    if result is None:
        return None
    cdef int bits = num_bits, narrow = narrow_range
    cdef const float *px = _cdata(x)
    cdef const float *plo = _cdata(lo)
    cdef const float *phi = _cdata(hi)
    cdef float *pout = _data(result)
    cdef size_t n = cnp.PyArray_SIZE(x), channels = cnp.PyArray_SIZE(lo)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars_per_channel(px, pout, n, channels, plo, phi, bits, narrow)
    _check(rc)
    return result


def channel_grad(gradients, inputs, min, max, num_bits, narrow_range, out):
    """(dx, backprop_wrt_min, backprop_wrt_max), or None: see above."""
    if not (_is_gradient_pair(gradients, inputs) and _is_channel_ranges(inputs, min, max)
            and _is_attrs(num_bits, narrow_range)):
        return None
    cdef cnp.ndarray g = <cnp.ndarray>gradients, x = <cnp.ndarray>inputs
    cdef cnp.ndarray lo = <cnp.ndarray>min, hi = <cnp.ndarray>max
    cdef object result = _kernel_output(out, x, g)
    if result is None:
        return None
    cdef cnp.ndarray dmin = cnp.PyArray_EMPTY(1, cnp.PyArray_DIMS(lo), cnp.NPY_FLOAT32, 0)
    cdef cnp.ndarray dmax = cnp.PyArray_EMPTY(1, cnp.PyArray_DIMS(lo), cnp.NPY_FLOAT32, 0)
    cdef int bits = num_bits, narrow = narrow_range
    cdef const float *pg = _cdata(g)
    cdef const float *px = _cdata(x)
    cdef const float *plo = _cdata(lo)
    cdef const float *phi = _cdata(hi)
    cdef float *pout = _data(result)
    cdef float *pdmin = _data(dmin)
    cdef float *pdmax = _data(dmax)
    cdef size_t n = cnp.PyArray_SIZE(x), channels = cnp.PyArray_SIZE(lo)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_vars_per_channel_grad(pg, px, pout, n, channels, plo, phi, bits, narrow,
                                          pdmin, pdmax)
    _check(rc)
    return result, dmin, dmax


# Batch norm. Element data (x, y and their gradients) arrives as C-contiguous, aligned float32,
# float16 or bfloat16 arrays of any shape (`dtype` says which: 0, 1, 2), everything per channel as
# float32 vectors; each is checked against the shape here (typed memoryviews cost a third of a
# microsecond each, and a call takes up to nine).

cdef int _ELEMENT_FLAGS = cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_ALIGNED


cdef void *_element_data(object array, int dtype, size_t count, str name,
                         bint written) except? NULL:
    """The data of an element array of `count` elements of `dtype`; NULL when empty."""
    cdef Py_ssize_t itemsize = 4 if dtype == 0 else 2
    if not cnp.PyArray_Check(array):
        raise ValueError(f"{name} must be an array, got {type(array).__name__}")
    cdef cnp.ndarray a = <cnp.ndarray>array
    cdef int flags = _ELEMENT_FLAGS | (cnp.NPY_ARRAY_WRITEABLE if written else 0)
    if ((cnp.PyArray_FLAGS(a) & flags) != flags or cnp.PyArray_ITEMSIZE(a) != itemsize
            or not cnp.PyArray_ISNOTSWAPPED(a)):
        raise ValueError(f"{name} must be a C-contiguous, aligned{', writeable' if written else ''}"
                         f" array of {itemsize}-byte elements in native byte order")
    if <size_t>cnp.PyArray_SIZE(a) != count:
        raise ValueError(f"{name} must have {count} elements, got {cnp.PyArray_SIZE(a)}")
    return cnp.PyArray_DATA(a) if count > 0 else NULL


cdef float *_channel_data(object array, str name, size_t channels, bint written,
                          bint optional=False) except? NULL:
    """The data of a float32 vector of one value per channel; NULL for an empty one where
    `optional` (running statistics the training forward reads only with a factor other than 1)."""
    if optional and cnp.PyArray_Check(array) and cnp.PyArray_SIZE(<cnp.ndarray>array) == 0:
        return NULL
    cdef float *data = <float *>_element_data(array, 0, channels, name, written)
    if cnp.PyArray_TYPE(<cnp.ndarray>array) != cnp.NPY_FLOAT32:
        raise ValueError(f"{name} must be float32")
    return data


cdef fq_bn_shape _bn_shape(bint channels_last, size_t outer, size_t channels, size_t inner):
    cdef fq_bn_shape shape
    shape.layout = FQ_BN_CHANNELS_LAST if channels_last else FQ_BN_CHANNELS_FIRST
    shape.outer = outer
    shape.channels = channels
    shape.inner = inner
    return shape


def bn_forward_training(x, int dtype, bint channels_last, size_t outer, size_t channels,
                        size_t inner, scale, offset, float epsilon, float exponential_avg_factor,
                        mean_in, variance_in, y, batch_mean, batch_variance, saved_mean,
                        saved_variance):
    """y None: the statistics alone."""
    cdef fq_status rc
    cdef fq_bn_shape shape = _bn_shape(channels_last, outer, channels, inner)
    cdef size_t count = outer * channels * inner
    cdef const void *px = _element_data(x, dtype, count, "x", False)
    cdef void *py = _element_data(y, dtype, count, "y", True) if y is not None else NULL
    cdef const float *pscale = _channel_data(scale, "scale", channels, False)
    cdef const float *poffset = _channel_data(offset, "offset", channels, False)
    cdef const float *pmean = _channel_data(mean_in, "mean", channels, False, True)
    cdef const float *pvariance = _channel_data(variance_in, "variance", channels, False, True)
    cdef float *out_mean = _channel_data(batch_mean, "batch_mean", channels, True)
    cdef float *out_variance = _channel_data(batch_variance, "batch_variance", channels, True)
    cdef float *out_saved_mean = _channel_data(saved_mean, "saved_mean", channels, True)
    cdef float *out_saved_variance = _channel_data(saved_variance, "saved_variance", channels, True)
    with nogil:
        rc = fq_bn_forward_training(px, <fq_dtype>dtype, shape, pscale, poffset, epsilon,
                                    exponential_avg_factor, pmean, pvariance, py, out_mean,
                                    out_variance, out_saved_mean, out_saved_variance)
    _check(rc)


def bn_statistics_nhwc(x, scale, offset, float epsilon):
    """fused_batch_norm's training statistics (batch mean, batch variance, reserve spaces 1 and 2,
    each a new float32 vector) of x [N, H, W, C] with exponential_avg_factor 1 and no y, without
    its argument checks: a training graph's folded batch norms take them every step, where the
    checks cost more than the kernel on a small tensor. None unless x, scale and offset are kernel
    arrays (_is_kernel_array) of those shapes: the caller then takes fused_batch_norm, which names
    what is wrong or copies."""
    if not _is_shaped(x, 4, -1):
        return None
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>x)
    cdef cnp.npy_intp channels = dims[3]
    if not (_is_shaped(scale, 1, channels) and _is_shaped(offset, 1, channels)):
        return None
    cdef fq_bn_shape shape = _bn_shape(True, dims[0], channels, dims[1] * dims[2])
    statistics = tuple([_empty(1, channels, 0, 0, 0) for _ in range(4)])
    cdef const void *px = _cdata(x)
    cdef const float *pscale = _cdata(scale)
    cdef const float *poffset = _cdata(offset)
    cdef float *out_mean = _data(statistics[0])
    cdef float *out_variance = _data(statistics[1])
    cdef float *out_saved_mean = _data(statistics[2])
    cdef float *out_saved_variance = _data(statistics[3])
    cdef fq_status rc
    with nogil:
        rc = fq_bn_forward_training(px, FQ_DTYPE_F32, shape, pscale, poffset, epsilon, 1.0, NULL,
                                    NULL, NULL, out_mean, out_variance, out_saved_mean,
                                    out_saved_variance)
    _check(rc)
    return statistics


def bn_forward_inference(x, int dtype, bint channels_last, size_t outer, size_t channels,
                         size_t inner, scale, offset, mean, variance, float epsilon, y):
    cdef fq_status rc
    cdef fq_bn_shape shape = _bn_shape(channels_last, outer, channels, inner)
    cdef size_t count = outer * channels * inner
    cdef const void *px = _element_data(x, dtype, count, "x", False)
    cdef void *py = _element_data(y, dtype, count, "y", True)
    cdef const float *pscale = _channel_data(scale, "scale", channels, False)
    cdef const float *poffset = _channel_data(offset, "offset", channels, False)
    cdef const float *pmean = _channel_data(mean, "mean", channels, False)
    cdef const float *pvariance = _channel_data(variance, "variance", channels, False)
    with nogil:
        rc = fq_bn_forward_inference(px, <fq_dtype>dtype, shape, pscale, poffset, pmean,
                                     pvariance, epsilon, py)
    _check(rc)


def bn_grad(y_backprop, x, int dtype, bint channels_last, size_t outer, size_t channels,
            size_t inner, scale, mean, variance, float epsilon, bint is_training, x_backprop,
            scale_backprop, offset_backprop):
    cdef fq_status rc
    cdef fq_bn_shape shape = _bn_shape(channels_last, outer, channels, inner)
    cdef size_t count = outer * channels * inner
    cdef const void *pdy = _element_data(y_backprop, dtype, count, "y_backprop", False)
    cdef const void *px = _element_data(x, dtype, count, "x", False)
    cdef void *pdx = _element_data(x_backprop, dtype, count, "x_backprop", True)
    cdef const float *pscale = _channel_data(scale, "scale", channels, False)
    cdef const float *pmean = _channel_data(mean, "mean", channels, False)
    cdef const float *pvariance = _channel_data(variance, "variance", channels, False)
    cdef float *out_scale = _channel_data(scale_backprop, "scale_backprop", channels, True)
    cdef float *out_offset = _channel_data(offset_backprop, "offset_backprop", channels, True)
    with nogil:
        rc = fq_bn_grad(pdy, px, <fq_dtype>dtype, shape, pscale, pmean, pvariance, epsilon,
                        is_training, pdx, out_scale, out_offset)
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


@cython.cdivision(True)  # IEEE division, as numpy's: the ratio is never zero
def observed_range(x, lo, hi, float ratio, bint symmetric, bint flush):
    """A range quantizer's batch range per channel of x's last axis, written to lo and hi (float32
    vectors of the channels): fq_f32_range's min and max, then widened to contain zero
    (min > 0: 0; max < 0: 0), or made symmetric about it: min' = max / ratio where that is below
    min, max' = min * ratio where that is above max, the product a zero of its sign where denormal
    and `flush`. The float32 operations, in the order, of the numpy they replace
    (fqcore/quantizers.py's _observed_range), in one call instead of eight."""
    cdef Py_ssize_t n = _float32_size(x, "x"), channels = _float32_size(lo, "lo"), c
    if _float32_size(hi, "hi") != channels or channels == 0 or n % channels:
        raise ValueError(f"lo and hi must hold one value per channel of x, got {channels} and "
                         f"{cnp.PyArray_SIZE(<cnp.ndarray>hi)} for {n} elements")
    cdef float *low = _float32_out(lo, "lo", channels)
    cdef float *high = _float32_out(hi, "hi", channels)
    cdef float mirrored, scaled
    cdef fq_status rc
    with nogil:
        rc = fq_f32_range(<const float *>cnp.PyArray_DATA(<cnp.ndarray>x), n, channels, low, high)
    _check(rc)
    for c in range(channels):
        if not symmetric:
            if low[c] > 0:
                low[c] = 0
            if high[c] < 0:
                high[c] = 0
            continue
        mirrored = high[c] / ratio
        scaled = low[c] * ratio
        if flush and fabsf(scaled) < FLT_MIN:
            scaled = copysignf(0, scaled)
        if mirrored < low[c]:
            low[c] = mirrored
        if scaled > high[c]:
            high[c] = scaled


def moving_average(float[::1] values, const float[::1] targets, float rate):
    cdef fq_status rc
    if values.shape[0] != targets.shape[0]:
        raise ValueError(f"values and targets must have the same length, got {values.shape[0]} "
                         f"and {targets.shape[0]}")
    with nogil:
        rc = fq_f32_moving_average(_ptr(values), _cptr(targets), values.shape[0], rate)
    _check(rc)


# Convolution helpers on float32 arrays of any shape (C-contiguous, aligned); geometry is the 14
# sizes of fq_conv_geometry in its order, (N, H, W, C, KH, KW, OH, OW, SH, SW, DH, DW, top, left).
# The element counts are checked here: the C side trusts them.

cdef fq_conv_geometry _geometry(tuple sizes) except *:
    cdef fq_conv_geometry g
    (g.batch, g.height, g.width, g.channels, g.kernel_height, g.kernel_width, g.out_height,
     g.out_width, g.stride_height, g.stride_width, g.dilation_height, g.dilation_width, g.pad_top,
     g.pad_left) = sizes
    return g


# The element counts of a geometry's arrays (size_t products: the C side refuses a geometry whose
# counts overflow, so a wrapped count here never reaches a kernel).
cdef inline size_t _input_size(const fq_conv_geometry *g) noexcept:
    return g.batch * g.height * g.width * g.channels


cdef inline size_t _output_size(const fq_conv_geometry *g, size_t multiplier) noexcept:
    return g.batch * g.out_height * g.out_width * g.channels * multiplier


cdef inline size_t _filter_size(const fq_conv_geometry *g, size_t multiplier) noexcept:
    return g.kernel_height * g.kernel_width * g.channels * multiplier


cdef inline size_t _cols_size(const fq_conv_geometry *g) noexcept:
    return g.batch * g.out_height * g.out_width * _filter_size(g, 1)


def im2col(x, tuple geometry, cols):
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef const float *px = _float32_data(x, "x", _input_size(&g))
    cdef float *pc = _float32_out(cols, "cols", _cols_size(&g))
    cdef fq_status rc
    with nogil:
        rc = fq_f32_im2col(px, &g, pc)
    _check(rc)


def col2im(cols, tuple geometry, x_backprop):
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef const float *pc = _float32_data(cols, "cols", _cols_size(&g))
    cdef float *pdx = _float32_out(x_backprop, "x_backprop", _input_size(&g))
    cdef fq_status rc
    with nogil:
        rc = fq_f32_col2im(pc, &g, pdx)
    _check(rc)


def depthwise(x, w, size_t multiplier, tuple geometry, y):
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef const float *px = _float32_data(x, "x", _input_size(&g))
    cdef const float *pw = _float32_data(w, "w", _filter_size(&g, multiplier))
    cdef float *py = _float32_out(y, "y", _output_size(&g, multiplier))
    cdef fq_status rc
    with nogil:
        rc = fq_f32_depthwise(px, pw, multiplier, &g, py)
    _check(rc)


def depthwise_grad_input(y_backprop, w, size_t multiplier, tuple geometry, x_backprop):
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef const float *pdy = _float32_data(y_backprop, "y_backprop", _output_size(&g, multiplier))
    cdef const float *pw = _float32_data(w, "w", _filter_size(&g, multiplier))
    cdef float *pdx = _float32_out(x_backprop, "x_backprop", _input_size(&g))
    cdef fq_status rc
    with nogil:
        rc = fq_f32_depthwise_grad_input(pdy, pw, multiplier, &g, pdx)
    _check(rc)


def depthwise_grad_input_sum(y_backprop_a, w_a, y_backprop_b, w_b, size_t multiplier,
                             tuple geometry, x_backprop):
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef size_t outputs = _output_size(&g, multiplier), filters = _filter_size(&g, multiplier)
    cdef const float *pdy_a = _float32_data(y_backprop_a, "y_backprop_a", outputs)
    cdef const float *pw_a = _float32_data(w_a, "w_a", filters)
    cdef const float *pdy_b = _float32_data(y_backprop_b, "y_backprop_b", outputs)
    cdef const float *pw_b = _float32_data(w_b, "w_b", filters)
    cdef float *pdx = _float32_out(x_backprop, "x_backprop", _input_size(&g))
    cdef fq_status rc
    with nogil:
        rc = fq_f32_depthwise_grad_input_sum(pdy_a, pw_a, pdy_b, pw_b, multiplier, &g, pdx)
    _check(rc)


def depthwise_grad_filter(x, y_backprop, size_t multiplier, tuple geometry, w_backprop):
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef const float *px = _float32_data(x, "x", _input_size(&g))
    cdef const float *pdy = _float32_data(y_backprop, "y_backprop", _output_size(&g, multiplier))
    cdef float *pdw = _float32_out(w_backprop, "w_backprop", _filter_size(&g, multiplier))
    cdef fq_status rc
    with nogil:
        rc = fq_f32_depthwise_grad_filter(px, pdy, multiplier, &g, pdw)
    _check(rc)


# The per-channel chain (fq_f32_channel_affine): float32 arrays of any shape (C-contiguous, the
# channels their last dimension), the vectors `channels` long or None (the step left out);
# activation 0 none, 1 Relu, 2 Relu6.

ACTIVATIONS = {None: FQ_ACTIVATION_NONE, "Relu": FQ_ACTIVATION_RELU, "Relu6": FQ_ACTIVATION_RELU6}


cdef const float *_optional(object a, size_t size, str name) except? NULL:
    """_float32_data of an operand that may be None (NULL)."""
    if a is None:
        return NULL
    return _float32_data(a, name, size)


cdef inline object _float32_like(object a):
    """A new float32 array of kernel array a's shape."""
    return cnp.PyArray_EMPTY(cnp.PyArray_NDIM(<cnp.ndarray>a), cnp.PyArray_DIMS(<cnp.ndarray>a),
                             cnp.NPY_FLOAT32, 0)


def channel_affine(x, size_t channels, scale, shift_a, shift_b, int activation):
    """y, a new array of x's shape."""
    cdef Py_ssize_t n = _float32_size(x, "x")
    cdef const float *px = _float32_data(x, "x", n)
    cdef const float *s = _optional(scale, channels, "scale")
    cdef const float *a = _optional(shift_a, channels, "shift_a")
    cdef const float *b = _optional(shift_b, channels, "shift_b")
    y = _float32_like(x)
    cdef float *py = _data(y)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_channel_affine(px, n, channels, s, a, b, <fq_activation>activation, py)
    _check(rc)
    return y


def channel_affine_grad(y_backprop, x, y, size_t channels, scale, int activation,
                        bint input_gradient, bint scale_gradient, bint shift_gradient, clip=None):
    """(x_backprop, scale_backprop, shift_backprop), each new (x_backprop of y's shape, the others
    `channels` long) or None where not asked for. clip: None, or (nudged_min, nudged_max) of a
    fake quant of y that y_backprop goes through first (vars_grad_interval)."""
    cdef Py_ssize_t n = _float32_size(y_backprop, "y_backprop")
    cdef const float *pdy = _float32_data(y_backprop, "y_backprop", n)
    cdef const float *py = _float32_data(y, "y", n)
    cdef const float *xp = _optional(x, n, "x")
    cdef const float *s = _optional(scale, channels, "scale")
    dx = _float32_like(y) if input_gradient else None
    dscale = _empty(1, channels, 0, 0, 0) if scale_gradient else None
    dshift = _empty(1, channels, 0, 0, 0) if shift_gradient else None
    cdef float *pdx = _data(dx) if input_gradient else NULL
    cdef float *ds = _data(dscale) if scale_gradient else NULL
    cdef float *db = _data(dshift) if shift_gradient else NULL
    cdef float lo = 0.0, hi = 0.0
    cdef bint clipped = clip is not None
    cdef fq_status rc
    if clipped:
        lo, hi = clip
    with nogil:
        if clipped:
            rc = fq_f32_channel_affine_grad_clipped(pdy, xp, py, n, channels, s,
                                                    <fq_activation>activation, lo, hi, pdx, ds, db)
        else:
            rc = fq_f32_channel_affine_grad(pdy, xp, py, n, channels, s,
                                            <fq_activation>activation, pdx, ds, db)
    _check(rc)
    return dx, dscale, dshift


def add_activation(a, b, int activation):
    """y = activation(a + b) (fq_f32_add_activation), a new array of a's shape; its gradient is
    channel_affine_grad with one channel, no x and no scale."""
    cdef Py_ssize_t n = _float32_size(a, "a")
    cdef const float *pa = _float32_data(a, "a", n)
    cdef const float *pb = _float32_data(b, "b", n)
    y = _float32_like(a)
    cdef float *py = _data(y)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_add_activation(pa, pb, n, <fq_activation>activation, py)
    _check(rc)
    return y


def fold_batch_norm_grad(x, size_t channels, mean, grad_mean, grad_var, float count):
    """x_backprop, a new array of x's shape."""
    cdef Py_ssize_t n = _float32_size(x, "x")
    cdef const float *px = _float32_data(x, "x", n)
    cdef const float *m = _float32_data(mean, "mean", channels)
    cdef const float *gm = _float32_data(grad_mean, "grad_mean", channels)
    cdef const float *gv = _float32_data(grad_var, "grad_var", channels)
    dx = _float32_like(x)
    cdef float *pdx = _data(dx)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_fold_batch_norm_grad(px, n, channels, m, gm, gv, count, pdx)
    _check(rc)
    return dx


cdef inline ptrdiff_t _stride(Py_ssize_t stride_bytes, str name) except? -1:
    if stride_bytes % <Py_ssize_t>sizeof(float):
        raise ValueError(f"{name}'s strides must be whole float32 elements, got {stride_bytes} bytes")
    return stride_bytes // <Py_ssize_t>sizeof(float)


cdef inline bint _own_matrix_products() noexcept:
    cdef fq_isa isa = fq_get_isa()
    return isa == FQ_ISA_AVX2 or isa == FQ_ISA_AVX512


def own_matrix_products():
    """Whether the graph's float32 products run on fq_f32_matmul: on the AVX2 and AVX-512 paths
    (fqcore._runtime.own_matrix_products says why)."""
    return _own_matrix_products()


def matmul(const float[:, :] a, const float[:, :] b, float[:, ::1] c, bint continues=False):
    """c = a @ b (fq_f32_matmul): a [m, depth] and b [depth, n] of any strides, c [m, n]; with
    `continues`, c's sums go on from its values (fq_f32_matmul_continue)."""
    cdef fq_status rc
    cdef size_t m = a.shape[0], depth = a.shape[1], n = b.shape[1]
    if <size_t>b.shape[0] != depth:
        raise ValueError(f"b must have {depth} rows (a's columns), got {b.shape[0]}")
    if <size_t>c.shape[0] != m or <size_t>c.shape[1] != n:
        raise ValueError(f"c must be [{m}, {n}], got [{c.shape[0]}, {c.shape[1]}]")
    cdef ptrdiff_t ar = _stride(a.strides[0], "a"), ac = _stride(a.strides[1], "a")
    cdef ptrdiff_t br = _stride(b.strides[0], "b"), bc = _stride(b.strides[1], "b")
    cdef const float *ap = &a[0, 0] if m * depth > 0 else NULL
    cdef const float *bp = &b[0, 0] if depth * n > 0 else NULL
    cdef float *cp = &c[0, 0] if m * n > 0 else NULL
    with nogil:
        if continues:
            rc = fq_f32_matmul_continue(ap, ar, ac, bp, br, bc, m, depth, n, cp)
        else:
            rc = fq_f32_matmul(ap, ar, ac, bp, br, bc, m, depth, n, cp)
    _check(rc)


# A float32 Conv2D as products, one call for its forward and one for its gradients
# (fq_f32_conv2d_forward / fq_f32_conv2d_grad), where fqcore's product serves the graph
# (own_matrix_products). As the fake-quant bindings, they take their operands as they come and
# return None, touching nothing, unless every array is in the kernels' form with the shape the
# geometry (the 14 sizes, as above) gives it: fqcore/graph/nn_numpy.py then makes the calls one at a
# time, or BLAS's.

cdef inline object _empty(int rank, cnp.npy_intp d0, cnp.npy_intp d1, cnp.npy_intp d2,
                          cnp.npy_intp d3):
    cdef cnp.npy_intp dims[4]
    dims[0], dims[1], dims[2], dims[3] = d0, d1, d2, d3
    return cnp.PyArray_EMPTY(rank, dims, cnp.NPY_FLOAT32, 0)


def conv2d_forward(x, w, tuple geometry, columns):
    """(y, columns): x [N, H, W, C] convolved with w [KH, KW, C, O], and the [N*OH*OW, KH*KW*C]
    columns of x it multiplied (given: those of an earlier call on x; None: made, or x itself
    as a matrix when the geometry is pointwise); or None (see above)."""
    if not _own_matrix_products():
        return None
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef cnp.npy_intp pixels = g.batch * g.out_height * g.out_width
    cdef cnp.npy_intp window = _filter_size(&g, 1)
    if not (_is_shaped(x, 4, g.batch, g.height, g.width, g.channels)
            and _is_shaped(w, 4, g.kernel_height, g.kernel_width, g.channels)
            and (columns is None or _is_shaped(columns, 2, pixels, window))):
        return None
    cdef cnp.npy_intp outputs = cnp.PyArray_DIMS(<cnp.ndarray>w)[3]
    cdef bint given = columns is not None
    if not given:
        columns = ((<cnp.ndarray>x).reshape(pixels, window) if fq_conv_geometry_pointwise(&g)
                   else _empty(2, pixels, window, 0, 0))
    y = _empty(4, g.batch, g.out_height, g.out_width, outputs)
    cdef const float *px = _cdata(x)
    cdef const float *pw = _cdata(w)
    cdef float *pc = _data(columns)
    cdef float *py = _data(y)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_conv2d_forward(px, &g, pc, given, pw, outputs, py)
    _check(rc)
    return y, columns


def conv2d_grad(columns, tuple geometry, list filters, list output_gradients,
                bint filter_gradient, bint input_gradient):
    """(dx, dw) of convolutions of the same columns [N*OH*OW, KH*KW*C]: filters[k]
    [KH, KW, C, O_k] with output_gradients[k] [N, OH, OW, O_k]. dw: the first filter's gradient
    (None unless filter_gradient); dx: the input gradient of them all, summed in their order (None
    unless input_gradient). None (see above)."""
    if not _own_matrix_products():
        return None
    cdef fq_conv_geometry g = _geometry(geometry)
    cdef cnp.npy_intp pixels = g.batch * g.out_height * g.out_width
    cdef cnp.npy_intp window = _filter_size(&g, 1)
    cdef Py_ssize_t k, terms = len(filters)
    if (terms != len(output_gradients) or (terms == 0 and (filter_gradient or input_gradient))
            or not _is_shaped(columns, 2, pixels, window)):
        return None
    cdef cnp.npy_intp outputs
    for k in range(terms):
        if not _is_shaped(filters[k], 4, g.kernel_height, g.kernel_width, g.channels):
            return None
        outputs = cnp.PyArray_DIMS(<cnp.ndarray>filters[k])[3]
        if not _is_shaped(output_gradients[k], 4, g.batch, g.out_height, g.out_width, outputs):
            return None
    dw = dx = scratch = None
    if filter_gradient:
        outputs = cnp.PyArray_DIMS(<cnp.ndarray>filters[0])[3]
        dw = _empty(4, g.kernel_height, g.kernel_width, g.channels, outputs)
    if input_gradient:
        dx = _empty(4, g.batch, g.height, g.width, g.channels)
        if not fq_conv_geometry_pointwise(&g):
            scratch = _empty(2, pixels, window, 0, 0)
    cdef const float **pw = <const float **>PyMem_Malloc(max(terms, 1) * sizeof(float *))
    cdef const float **pdy = <const float **>PyMem_Malloc(max(terms, 1) * sizeof(float *))
    cdef size_t *counts = <size_t *>PyMem_Malloc(max(terms, 1) * sizeof(size_t))
    cdef const float *pc = _cdata(columns)
    cdef float *pdw = _data(dw) if dw is not None else NULL
    cdef float *pdx = _data(dx) if dx is not None else NULL
    cdef float *ps = _data(scratch) if scratch is not None else NULL
    cdef fq_status rc
    try:
        if pw == NULL or pdy == NULL or counts == NULL:
            raise MemoryError()
        for k in range(terms):
            pw[k], pdy[k] = _cdata(filters[k]), _cdata(output_gradients[k])
            counts[k] = cnp.PyArray_DIMS(<cnp.ndarray>filters[k])[3]
        with nogil:
            rc = fq_f32_conv2d_grad(pc, &g, terms, pw, pdy, counts, pdw, pdx, ps)
        _check(rc)
    finally:
        PyMem_Free(pw)
        PyMem_Free(pdy)
        PyMem_Free(counts)
    return dx, dw


def pow(const float[::1] x, const float[::1] y, float[::1] out):
    """out = x ** y element-wise with the C library's powf (fq_f32_pow), as TF's CPU Pow."""
    cdef fq_status rc
    if y.shape[0] != x.shape[0] or out.shape[0] != x.shape[0]:
        raise ValueError(f"x, y and out must have the same length, got {x.shape[0]}, {y.shape[0]} "
                         f"and {out.shape[0]}")
    with nogil:
        rc = fq_f32_pow(_cptr(x), _cptr(y), x.shape[0], _ptr(out))
    _check(rc)


cdef str _named(str name, Py_ssize_t index):
    """An operand's name in a message: `name`, or "name index" for one of several (formatted only
    for the message: a call checks many operands)."""
    return name if index < 0 else f"{name} {index}"


cdef Py_ssize_t _float32_size(object array, str name, Py_ssize_t index=-1) except -1:
    """The element count of a kernel array (_is_kernel_array: native float32, C-contiguous,
    aligned; any shape); ValueError otherwise, naming the operand (_named)."""
    if not _is_kernel_array(array):
        aligned = not cnp.PyArray_Check(array) or cnp.PyArray_ISALIGNED(<cnp.ndarray>array)
        raise ValueError(f"{_named(name, index)} must be a C-contiguous float32 array, got "
                         f"{type(array).__name__} of {getattr(array, 'dtype', None)}"
                         f"{'' if aligned else ', not aligned'}")
    return cnp.PyArray_SIZE(<cnp.ndarray>array)


cdef const float *_float32_data(object array, str name, Py_ssize_t size,
                                Py_ssize_t index=-1) except? NULL:
    """The data of a C-contiguous float32 ndarray of `size` elements (any shape); NULL if empty."""
    if _float32_size(array, name, index) != size:
        raise ValueError(f"{_named(name, index)} must have {size} elements, got "
                         f"{cnp.PyArray_SIZE(<cnp.ndarray>array)}")
    return <const float *>cnp.PyArray_DATA(<cnp.ndarray>array) if size > 0 else NULL


def tracker_step(float extreme, int clamp, float bound, float read, float decay_complement,
                 float increment, float base, float one, float biased, float step):
    """(biased', step', average) of a range tracker's step on float32 scalars (fq_f32_tracker_step),
    each a new 0-d float32 array: the extreme clamped (clamp 0: not; 1: Minimum(extreme, bound);
    2: Maximum(extreme, bound)), then one zero-debiased moving-average step: a range tracker's
    nine ops."""
    cdef float out[3]
    fq_f32_tracker_step(extreme, _clamp(clamp), bound, read, decay_complement, increment, base,
                        one, biased, step, out)
    return _float32_scalar(out[0]), _float32_scalar(out[1]), _float32_scalar(out[2])


cdef fq_tracker_clamp _clamp(int clamp) except *:
    if clamp not in (FQ_CLAMP_NONE, FQ_CLAMP_MINIMUM, FQ_CLAMP_MAXIMUM):
        raise ValueError(f"clamp must be 0 (none), 1 (minimum) or 2 (maximum), got {clamp}")
    return <fq_tracker_clamp>clamp


cdef object _float32_scalar(float value):
    """A new 0-d float32 array holding `value`."""
    cdef cnp.ndarray array = cnp.PyArray_EMPTY(0, NULL, cnp.NPY_FLOAT32, 0)
    (<float *>cnp.PyArray_DATA(array))[0] = value
    return array


cdef int _tensor_range(x, float extremes[2]) except -1:
    """x's per-tensor min and max into extremes (fq_f32_range; x a C-contiguous float32 array of
    any shape, else ValueError)."""
    cdef Py_ssize_t n = _float32_size(x, "x")
    cdef const float *data = <const float *>cnp.PyArray_DATA(<cnp.ndarray>x)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_range(data, n, 1, &extremes[0], &extremes[1])
    return _check(rc)


def range_trackers(x, tuple clamps, tuple operands, tuple state):
    """Both range trackers of a tensor in one call: x's per-tensor min and max (fq_f32_range; x a
    C-contiguous float32 array of any shape), each through tracker_step: the min with clamps[0],
    operands[0:6] (bound, read, decay_complement, increment, base, one) and state[0:2] (biased,
    step), the max with clamps[1], operands[6:12] and state[2:4]. Returns (min's average, max's
    average, min's biased', min's step', max's biased', max's step'), each a new 0-d float32
    array."""
    if len(clamps) != 2 or len(operands) != 12 or len(state) != 4:
        raise ValueError(f"range_trackers takes 2 clamps, 12 operands and 4 state values, got "
                         f"{len(clamps)}, {len(operands)} and {len(state)}")
    cdef fq_tracker_clamp low_clamp = _clamp(clamps[0]), high_clamp = _clamp(clamps[1])
    cdef float extremes[2]
    cdef float a[3]
    cdef float b[3]
    _tensor_range(x, extremes)
    fq_f32_tracker_step(extremes[0], low_clamp, operands[0], operands[1], operands[2], operands[3],
                        operands[4], operands[5], state[0], state[1], a)
    fq_f32_tracker_step(extremes[1], high_clamp, operands[6], operands[7], operands[8],
                        operands[9], operands[10], operands[11], state[2], state[3], b)
    return (_float32_scalar(a[2]), _float32_scalar(b[2]), _float32_scalar(a[0]),
            _float32_scalar(a[1]), _float32_scalar(b[0]), _float32_scalar(b[1]))


def clamped_range(x, tuple clamps, tuple bounds):
    """A last-value range tracker's batch range: x's per-tensor min and max (fq_f32_range; x a
    C-contiguous float32 array of any shape), the min through fq_f32_clamp with clamps[0] and
    bounds[0], the max with clamps[1] and bounds[1]. Returns (min', max'), each a new 0-d float32
    array."""
    if len(clamps) != 2 or len(bounds) != 2:
        raise ValueError(f"clamped_range takes 2 clamps and 2 bounds, got {len(clamps)} and "
                         f"{len(bounds)}")
    cdef fq_tracker_clamp low_clamp = _clamp(clamps[0]), high_clamp = _clamp(clamps[1])
    cdef float low_bound = bounds[0], high_bound = bounds[1]
    cdef float extremes[2]
    _tensor_range(x, extremes)
    return (_float32_scalar(fq_f32_clamp(extremes[0], low_clamp, low_bound)),
            _float32_scalar(fq_f32_clamp(extremes[1], high_clamp, high_bound)))


cdef float *_float32_out(object array, str name, Py_ssize_t size, Py_ssize_t index=-1) except? NULL:
    """_float32_data of an array the kernel writes: it must be writeable."""
    cdef const float *data = _float32_data(array, name, size, index)
    if not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>array):
        raise ValueError(f"{_named(name, index)} must be writeable")
    return <float *>data


cdef cnp.ndarray _float32_operand(object array, object shape, str name):
    """`array` as a C-contiguous float32 ndarray (of `shape`, unless None): itself, or a
    contiguous copy of a strided one (a gradient may be a transposed product); ValueError
    otherwise."""
    if (not isinstance(array, cnp.ndarray) or cnp.PyArray_TYPE(<cnp.ndarray>array) != cnp.NPY_FLOAT32
            or (shape is not None and array.shape != shape)):
        raise ValueError(f"{name} must be a float32 array" +
                         (f" of shape {shape}" if shape is not None else "") +
                         f", got {type(array).__name__} {getattr(array, 'dtype', '')} "
                         f"{getattr(array, 'shape', '')}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>array):
        return cnp.PyArray_GETCONTIGUOUS(<cnp.ndarray>array)
    return <cnp.ndarray>array


def momentum_group(tuple variables, tuple accumulators, tuple gradients, tuple learning_rates,
                   tuple momenta, tuple use_nesterov):
    """TF's ApplyMomentum on each (variable, accumulator, gradient, learning rate, momentum,
    use_nesterov) in turn (fq_f32_momentum on each, in one call): (new variables, new
    accumulators), lists of new float32 arrays of the variables' shapes. An optimizer's step
    over a model's variables: dozens of small arrays, where a call each cost more than the
    arithmetic."""
    cdef Py_ssize_t count = len(variables), k
    lengths = (len(accumulators), len(gradients), len(learning_rates), len(momenta),
               len(use_nesterov))
    if any(n != count for n in lengths):
        raise ValueError(f"variables, accumulators, gradients, learning_rates, momenta and "
                         f"use_nesterov must have the same length, got {(count,) + lengths}")
    operands, new_variables, new_accumulators = [], [], []
    cdef cnp.ndarray variable, accumulator, gradient, new_variable, new_accumulator
    cdef float **pointers = <float **>PyMem_Malloc(max(count, 1) * 5 * sizeof(float *))
    cdef size_t *sizes = <size_t *>PyMem_Malloc(max(count, 1) * sizeof(size_t))
    cdef float *scalars = <float *>PyMem_Malloc(max(count, 1) * 2 * sizeof(float))
    cdef int *nesterov = <int *>PyMem_Malloc(max(count, 1) * sizeof(int))
    cdef fq_status rc = FQ_OK
    if pointers == NULL or sizes == NULL or scalars == NULL or nesterov == NULL:
        PyMem_Free(pointers)
        PyMem_Free(sizes)
        PyMem_Free(scalars)
        PyMem_Free(nesterov)
        raise MemoryError("no memory for a momentum group's operands")
    try:
        for k in range(count):
            variable = _float32_operand(variables[k], None, f"variable {k}")
            shape = variables[k].shape
            accumulator = _float32_operand(accumulators[k], shape, f"accumulator {k}")
            gradient = _float32_operand(gradients[k], shape, f"gradient {k}")
            new_variable = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(variable), cnp.PyArray_DIMS(variable),
                                             cnp.NPY_FLOAT32, 0)
            new_accumulator = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(variable),
                                                cnp.PyArray_DIMS(variable), cnp.NPY_FLOAT32, 0)
            operands.append((variable, accumulator, gradient))  # alive while the kernel reads
            new_variables.append(new_variable)
            new_accumulators.append(new_accumulator)
            sizes[k] = cnp.PyArray_SIZE(variable)
            scalars[2 * k] = learning_rates[k]
            scalars[2 * k + 1] = momenta[k]
            nesterov[k] = bool(use_nesterov[k])
            pointers[5 * k] = <float *>cnp.PyArray_DATA(variable)
            pointers[5 * k + 1] = <float *>cnp.PyArray_DATA(accumulator)
            pointers[5 * k + 2] = <float *>cnp.PyArray_DATA(gradient)
            pointers[5 * k + 3] = <float *>cnp.PyArray_DATA(new_variable)
            pointers[5 * k + 4] = <float *>cnp.PyArray_DATA(new_accumulator)
        with nogil:
            for k in range(count):
                rc = fq_f32_momentum(pointers[5 * k], pointers[5 * k + 1], pointers[5 * k + 2],
                                     sizes[k], scalars[2 * k], scalars[2 * k + 1], nesterov[k],
                                     pointers[5 * k + 3], pointers[5 * k + 4])
                if rc != FQ_OK:
                    break
        _check(rc)
    finally:
        PyMem_Free(pointers)
        PyMem_Free(sizes)
        PyMem_Free(scalars)
        PyMem_Free(nesterov)
    return new_variables, new_accumulators


def vector_program(const int[:, ::1] code, const float[:, ::1] kept, tuple sources,
                   float[:, ::1] registers):
    """Runs a straight-line program over float32 vectors (fq_f32_vector_program) whose registers
    are the rows of `registers` [R, n]. Its sources, in row order: the rows of `kept` [K, n],
    then each of `sources`, a float32 array of n elements or of one (read as broadcast), or a
    numpy float32 scalar (a 0-d value as numpy's operations return it; broadcast)."""
    cdef Py_ssize_t n = registers.shape[1], count = kept.shape[0] + len(sources), k, size
    cdef fq_status rc
    if code.shape[1] != 4:
        raise ValueError(f"code must be [instructions, 4], got [{code.shape[0]}, {code.shape[1]}]")
    if kept.shape[0] > 0 and kept.shape[1] != n:
        raise ValueError(f"kept must have rows of {n} elements (the registers'), got {kept.shape[1]}")
    cdef const float **rows = <const float **>PyMem_Malloc(max(count, 1) * sizeof(float *))
    cdef unsigned char *broadcast = <unsigned char *>PyMem_Malloc(max(count, 1))
    cdef float *scalars = <float *>PyMem_Malloc(max(count, 1) * sizeof(float))
    if rows == NULL or broadcast == NULL or scalars == NULL:
        PyMem_Free(rows)
        PyMem_Free(broadcast)
        PyMem_Free(scalars)
        raise MemoryError("no memory for a vector program's rows")
    try:
        for k in range(kept.shape[0]):
            rows[k] = &kept[k, 0] if n > 0 else NULL
            broadcast[k] = 0
        for k, source in enumerate(sources, kept.shape[0]):
            if type(source) is _NUMPY_FLOAT32:
                scalars[k] = <double>source
                rows[k] = &scalars[k]
                broadcast[k] = 1
                continue
            size = _float32_size(source, "source", k - kept.shape[0])
            if size != n and size != 1:
                raise ValueError(f"source {k - kept.shape[0]} must have {n} elements or 1, got {size}")
            rows[k] = <const float *>cnp.PyArray_DATA(<cnp.ndarray>source)
            broadcast[k] = size == 1
        with nogil:
            rc = fq_f32_vector_program(&code[0, 0] if code.shape[0] > 0 else NULL, code.shape[0],
                                       rows, broadcast, count,
                                       &registers[0, 0] if registers.shape[0] * n > 0 else NULL,
                                       registers.shape[0], n)
    finally:
        PyMem_Free(rows)
        PyMem_Free(broadcast)
        PyMem_Free(scalars)
    _check(rc)


# The most vectors a filter_scaling call takes (a fold has two): the size of its pointer arrays.
cdef enum:
    _SCALING_MAX = 8
FILTER_SCALING_MAX = _SCALING_MAX


cdef int _scaling_operands(tuple filters, tuple vectors, Py_ssize_t size,
                           const float **filter_data, const float **vector_data) except -1:
    """The data of a filter scaling's filters (each of `size` elements) and vectors (each of one
    element count that divides it); returns that count."""
    cdef Py_ssize_t k = len(vectors), m, columns = 0
    if k == 0 or k > _SCALING_MAX:
        raise ValueError(f"a filter scaling takes 1 to {_SCALING_MAX} vectors, got {k}")
    for m in range(k):
        if m == 0:
            columns = _float32_size(vectors[0], "vector 0")
            if columns == 0 or size % columns:
                raise ValueError(f"the vectors' element count ({columns}) must divide the "
                                 f"filter's ({size})")
        vector_data[m] = _float32_data(vectors[m], "vector", columns, m)
        if m < len(filters):
            filter_data[m] = _float32_data(filters[m], "filter", size, m)
    return columns


def filter_scaling(f0, tuple vectors, out):
    """f0 times each of `vectors` in turn (fq_f32_filter_scaling): `out` [k, f0's elements]."""
    cdef const float *filter_data[_SCALING_MAX]
    cdef const float *vector_data[_SCALING_MAX]
    cdef Py_ssize_t size = _float32_size(f0, "f0")
    cdef Py_ssize_t columns = _scaling_operands((f0,), vectors, size, filter_data, vector_data)
    cdef float *out_data = _float32_out(out, "out", size * len(vectors))
    cdef fq_status rc
    cdef size_t k = len(vectors)
    with nogil:
        rc = fq_f32_filter_scaling(filter_data[0], vector_data, k, size // columns, columns,
                                   out_data)
    _check(rc)


def filter_scaling_grad(tuple filters, tuple vectors, g, df0, tuple dvectors):
    """The gradients of a filter scaling from g (fq_f32_filter_scaling_grad): filters f_0 ..
    f_{k-1}, df0 (or None) like f_0, dvectors (each None or like its vector) written."""
    cdef const float *filter_data[_SCALING_MAX]
    cdef const float *vector_data[_SCALING_MAX]
    cdef float *dvector_data[_SCALING_MAX]
    cdef Py_ssize_t k = len(vectors), m
    if len(filters) != k or len(dvectors) != k:
        raise ValueError(f"filters, vectors and dvectors must have the same length, got "
                         f"{len(filters)}, {k} and {len(dvectors)}")
    cdef Py_ssize_t size = _float32_size(g, "g")
    cdef Py_ssize_t columns = _scaling_operands(filters, vectors, size, filter_data, vector_data)
    cdef float *df0_data = NULL if df0 is None else _float32_out(df0, "df0", size)
    for m in range(k):
        dvector_data[m] = (NULL if dvectors[m] is None else
                           _float32_out(dvectors[m], "dvector", columns, m))
    cdef const float *g_data = _float32_data(g, "g", size)
    cdef fq_status rc
    with nogil:
        rc = fq_f32_filter_scaling_grad(filter_data, vector_data, k, size // columns, columns,
                                        g_data, df0_data, dvector_data)
    _check(rc)
