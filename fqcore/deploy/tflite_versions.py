"""The op versions and minimum runtime version TFLite's converter stamps on a Model's ops."""
# TFLite's rules: tensorflow/lite/tools/versioning/op_version.cc and runtime_version.cc.
# runtime_version.cc, FindMinimumRuntimeVersionForOp: the entries for our op kinds. Versions our
# rules never produce are kept so the table reads like TFLite's; a missing pair is skipped, as
# TFLite skips it (FULLY_CONNECTED 12, the per-channel hybrid, has no entry there).
MIN_RUNTIME_VERSION = {
    ("ADD", 1): "1.5.0", ("ADD", 2): "1.14.0", ("ADD", 3): "2.4.0", ("ADD", 4): "2.6.0",
    ("AVERAGE_POOL_2D", 1): "1.5.0", ("AVERAGE_POOL_2D", 2): "1.14.0",
    ("AVERAGE_POOL_2D", 3): "2.3.0",
    ("CONV_2D", 1): "1.5.0", ("CONV_2D", 2): "1.14.0", ("CONV_2D", 3): "1.14.0",
    ("CONV_2D", 4): "2.3.0", ("CONV_2D", 5): "2.4.0", ("CONV_2D", 6): "2.9.0",
    ("CONV_2D", 7): "2.11.0",
    ("DEPTHWISE_CONV_2D", 1): "1.5.0", ("DEPTHWISE_CONV_2D", 2): "1.12.0",
    ("DEPTHWISE_CONV_2D", 3): "1.14.0", ("DEPTHWISE_CONV_2D", 4): "2.2.0",
    ("DEPTHWISE_CONV_2D", 5): "2.3.0", ("DEPTHWISE_CONV_2D", 6): "2.3.0",
    ("DEPTHWISE_CONV_2D", 7): "2.11.0",
    ("DEQUANTIZE", 1): "1.13.1", ("DEQUANTIZE", 2): "1.14.0", ("DEQUANTIZE", 3): "1.15.0",
    ("DEQUANTIZE", 4): "2.2.0", ("DEQUANTIZE", 5): "2.7.0",
    ("FULLY_CONNECTED", 1): "1.5.0", ("FULLY_CONNECTED", 2): "1.10.0",
    ("FULLY_CONNECTED", 3): "1.14.0", ("FULLY_CONNECTED", 4): "1.14.0",
    ("FULLY_CONNECTED", 5): "2.0.0", ("FULLY_CONNECTED", 6): "2.1.0",
    ("FULLY_CONNECTED", 7): "2.3.0", ("FULLY_CONNECTED", 8): "2.3.0",
    ("FULLY_CONNECTED", 9): "2.3.0", ("FULLY_CONNECTED", 10): "2.11.0",
    ("MEAN", 1): "1.6.0", ("MEAN", 2): "1.14.0", ("MEAN", 3): "2.4.0",
    ("QUANTIZE", 1): "1.14.0", ("QUANTIZE", 2): "1.15.0", ("QUANTIZE", 3): "2.7.0",
    ("RESHAPE", 1): "1.5.0",
    ("SOFTMAX", 1): "1.5.0", ("SOFTMAX", 2): "1.14.0", ("SOFTMAX", 3): "2.3.0",
}


def _per_channel(tensor, dim):
    """Whether tensor has one scale per entry of its dimension `dim` (more than one), as
    op_signature.cc decides it for each op."""
    q = tensor.quantization
    return (q is not None and q.scale.size > 1 and len(tensor.shape) > dim
            and q.scale.size == tensor.shape[dim])


def op_version(op, model):
    """GetBuiltinOperatorVersion (op_version.cc) for `op`, reduced to the branches our op kinds
    and dtypes (float32, int8, uint8, int32 biases) can take; the others (int16, int4, sparse
    weights, quantized bias types, keep_num_dims, shuffled weights) fqcore never writes."""
    ins = [model.tensor(name) for name in op.inputs]
    out = model.tensor(op.outputs[0])
    t_in = ins[0].dtype
    t_w = ins[1].dtype if len(ins) > 1 else None
    t_out = out.dtype
    hybrid = (t_in, t_w, t_out) == ("float32", "int8", "float32")
    int8 = (t_in, t_w, t_out) == ("int8", "int8", "int8")
    kind = op.kind
    if kind == "CONV_2D":
        # A filter with fewer input channels than the input is a grouped convolution.
        grouped = (len(ins[0].shape) == 4 and len(ins[1].shape) == 4
                   and ins[0].shape[3] != ins[1].shape[3])
        if grouped:
            return 6
        if int8:
            return 3
        if hybrid:
            return 5 if _per_channel(ins[1], 0) else 2
        return 1
    if kind == "DEPTHWISE_CONV_2D":
        if hybrid:
            return 6 if _per_channel(ins[1], 3) else 4
        if int8:
            return 3
        if op.options["dilation_h"] != 1 or op.options["dilation_w"] != 1:
            return 2
        return 1
    if kind == "FULLY_CONNECTED":
        if hybrid and _per_channel(ins[1], 0):
            return 12
        if len(ins) == 2:        # no bias
            return 6
        if int8:
            return 4
        if hybrid:
            return 3
        return 1
    if kind in ("ADD", "AVERAGE_POOL_2D", "MEAN", "SOFTMAX"):
        return 2 if t_in == "int8" else 1
    if kind == "QUANTIZE":
        q = out.quantization
        return 3 if _per_channel(out, q.axis if q is not None else 0) else 1
    if kind == "DEQUANTIZE":
        if t_in == "int8":
            q = ins[0].quantization
            return 5 if _per_channel(ins[0], q.axis if q is not None else 0) else 2
        return 1
    return 1    # RESHAPE: no rule in op_version.cc, the default


def _version_key(version):
    return tuple(int(part) for part in version.split("."))


def min_runtime_version(kinds_and_versions):
    """UpdateMinimumRuntimeVersionForModel: the highest runtime version any (kind, op version)
    pair needs, compared part by part as numbers; "" when none is in the table."""
    best = ""
    for key in kinds_and_versions:
        version = MIN_RUNTIME_VERSION.get(key)
        if version and (not best or _version_key(version) > _version_key(best)):
            best = version
    return best
