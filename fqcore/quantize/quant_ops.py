"""The range trackers contrib inserts: LastValueQuantize (weights, per tensor or per channel) and
MovingAvgQuantize (activations, zero-debiased EMA), built from graph ops with contrib's names."""
import numpy as np

from ..graph import build
from ..graph.core import GraphKeys
from ..graph.variables import variable
from . import common


def _range(x, num_bits, narrow_range, symmetric, per_channel=False):
    """Batch min/max of x (per tensor: over every axis, whatever its rank; per channel: over all
    but the last, a 1-D x being its own per-channel range) widened to contain 0 (or made
    symmetric), as quantizers.md says."""
    if per_channel and len(x.shape) == 1:
        batch_min = batch_max = x
    else:
        axis = list(range(len(x.shape) - 1)) if per_channel else None
        batch_min = build.reduce_min(x, axis=axis, name="BatchMin")
        batch_max = build.reduce_max(x, axis=axis, name="BatchMax")
    if symmetric:
        ratio = -1.0 if narrow_range else -((1 << num_bits) - 2) / (1 << num_bits)
        return (build.minimum(batch_min, build.divide(batch_max, np.float32(ratio))),
                build.maximum(batch_max, build.multiply(batch_min, np.float32(ratio))))
    return build.minimum(batch_min, np.float32(0.0)), build.maximum(batch_max, np.float32(0.0))


def _min_max_variables(init_min, init_max, shape=(), vars_collection=None):
    """`min` and `max`, global variables that also join `vars_collection` when given."""
    collections = [GraphKeys.GLOBAL_VARIABLES]
    if vars_collection and vars_collection != GraphKeys.GLOBAL_VARIABLES:
        collections.append(vars_collection)
    return (variable("min", np.full(shape, init_min, np.float32), trainable=False,
                     collections=collections),
            variable("max", np.full(shape, init_max, np.float32), trainable=False,
                     collections=collections))


def _check_per_channel_shape(x, rank):
    shape = x.shape
    if shape is None or None in shape or len(shape) < rank:
        raise ValueError(f"per-channel quantization of {x.name} needs a known shape of rank "
                         f"{rank} or more, got {shape}")


def _fake_quant(x, lo, hi, num_bits, narrow_range, per_channel=False):
    fake_quant = (build.fake_quant_with_min_max_vars_per_channel if per_channel
                  else build.fake_quant_with_min_max_vars)
    return fake_quant(x, lo, hi, num_bits=num_bits, narrow_range=narrow_range)


def last_value_quantize(graph, x, name_prefix, is_training, init_min=-6.0, init_max=6.0,
                        num_bits=8, narrow_range=False, symmetric=False, per_channel=False,
                        depthwise=False, vars_collection=None):
    """Range = this batch's (Assign{Min,Max}Last), then fake quant with it. per_channel (as
    contrib's LastValueQuantize(per_channel=True)): one range per last-axis channel, batch
    min/max over the other axes, FakeQuantWithMinMaxVarsPerChannel. depthwise: x is a depthwise
    filter [kh, kw, cin, m], quantized along TFLite's output channels c = i * m + k (its filter
    is [1, kh, kw, cin * m]) between a Reshape to [kh, kw, cin * m] and one back."""
    with graph.name_scope(name_prefix):
        shape = x.shape
        if per_channel:
            _check_per_channel_shape(x, 4 if depthwise else 1)
        if depthwise:
            x = build.reshape(x, [shape[0], shape[1], shape[2] * shape[3]])
        min_var, max_var = _min_max_variables(init_min, init_max,
                                              (x.shape[-1],) if per_channel else (),
                                              vars_collection)
        if not is_training:
            y = _fake_quant(x, min_var.read, max_var.read, num_bits, narrow_range, per_channel)
        else:
            range_min, range_max = _range(x, num_bits, narrow_range, symmetric, per_channel)
            assign_min = graph.create_op("Assign", [min_var.op.outputs[0], range_min],
                                         {"use_locking": True, "validate_shape": True},
                                         name="AssignMinLast")
            assign_max = graph.create_op("Assign", [max_var.op.outputs[0], range_max],
                                         {"use_locking": True, "validate_shape": True},
                                         name="AssignMaxLast")
            y = _fake_quant(x, assign_min.outputs[0], assign_max.outputs[0], num_bits,
                            narrow_range, per_channel)
        return build.reshape(y, list(shape)) if depthwise else y


def moving_avg_quantize(graph, x, name_prefix, is_training, init_min=-6.0, init_max=6.0,
                        ema_decay=0.999, num_bits=8, narrow_range=False, symmetric=False,
                        per_channel=False, vars_collection=None):
    """Range = zero-debiased EMA of batch ranges (Assign{Min,Max}Ema), then fake quant with it.
    Per tensor, x may have any rank, known or not (the batch range reduces every axis)."""
    with graph.name_scope(name_prefix) as scope:
        if per_channel:
            _check_per_channel_shape(x, 1)
        min_var, max_var = _min_max_variables(init_min, init_max,
                                              (x.shape[-1],) if per_channel else (),
                                              vars_collection)
        if not is_training:
            return _fake_quant(x, min_var.read, max_var.read, num_bits, narrow_range,
                               per_channel)
        range_min, range_max = _range(x, num_bits, narrow_range, symmetric, per_channel)
        assign_min = _assign_moving_average(graph, scope, min_var, range_min, ema_decay,
                                            "AssignMinEma")
        assign_max = _assign_moving_average(graph, scope, max_var, range_max, ema_decay,
                                            "AssignMaxEma")
        return _fake_quant(x, assign_min, assign_max, num_bits, narrow_range, per_channel)


def _assign_moving_average(graph, scope, var, value, ema_decay, name):
    """TF's assign_moving_average(zero_debias=True), op for op: biased -= (biased - value) * d;
    local_step += 1; var = biased / (1 - (1 - d)^local_step), d = float32(1 - ema_decay)."""
    with graph.name_scope(name) as op_scope:
        decay = build.constant(np.float32(1.0 - ema_decay), name="decay")
        # TF opens a variable scope named after the variable inside the quantizer's scope.
        with graph.name_scope(f"{scope}{var.op.name}/"):
            biased = variable("biased", np.zeros(var.shape, np.float32), trainable=False,
                              initializer_name="zeros")
            local_step = variable("local_step", np.float32(0), trainable=False,
                                  initializer_name="zeros")
        with graph.name_scope(op_scope):
            delta = build.multiply(build.subtract(biased.read, value), decay)
            update_biased = graph.create_op("AssignSub", [biased.op.outputs[0], delta],
                                            {"use_locking": False}, name="AssignSub")
            with graph.name_scope("AssignAdd") as add_scope:
                one = build.constant(np.float32(1.0), name="value")
                update_step = graph.create_op("AssignAdd", [local_step.op.outputs[0], one],
                                              {"use_locking": False}, full_name=add_scope[:-1])
            bias_factor = build.subtract(
                np.float32(1.0), build.pow(build.subtract(np.float32(1.0), decay),
                                           update_step.outputs[0]))
            unbiased = build.divide(update_biased.outputs[0], bias_factor)
        return graph.create_op("Assign", [var.op.outputs[0], unbiased],
                               {"use_locking": True, "validate_shape": True},
                               full_name=op_scope[:-1]).outputs[0]


def _check_quantizer_args(inputs, init_min, init_max, num_bits, reuse, per_channel):
    if not hasattr(inputs, "op") or not hasattr(inputs.op, "graph"):
        raise TypeError(f"inputs must be an fqcore.graph Tensor, got {type(inputs).__name__}")
    common.check_bits("num_bits", num_bits)
    for name, value in (("init_min", init_min), ("init_max", init_max)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not np.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if init_min > init_max:
        raise ValueError(f"init_min must not exceed init_max, got {init_min!r} > {init_max!r}")
    if reuse:
        raise ValueError(f"reuse={reuse!r} is not supported: each call makes its own min and max "
                         f"variables under a new scope (as contrib does with reuse=None)")
    if per_channel and (inputs.shape is None or len(inputs.shape) not in (1, 2, 4)):
        raise ValueError(f"per_channel quantization expects a 1-D, 2-D or 4-D input (as "
                         f"contrib), got {inputs.name} of shape {inputs.shape}")


def LastValueQuantize(inputs, per_channel=False, init_min=-6.0, init_max=6.0,
                      vars_collection=None, name_prefix="LastValueQuant", reuse=None,
                      is_training=True, num_bits=8, narrow_range=False, symmetric=False):
    """contrib's quant_ops.LastValueQuantize on `inputs`' graph: variables `<scope>/min` and
    `<scope>/max` (scope `name_prefix`, made unique) hold the last batch's range."""
    _check_quantizer_args(inputs, init_min, init_max, num_bits, reuse, per_channel)
    graph = inputs.op.graph
    with graph.as_default():
        return last_value_quantize(graph, inputs, name_prefix, bool(is_training),
                                   init_min=float(init_min), init_max=float(init_max),
                                   num_bits=num_bits, narrow_range=bool(narrow_range),
                                   symmetric=bool(symmetric), per_channel=bool(per_channel),
                                   vars_collection=vars_collection)


def MovingAvgQuantize(inputs, per_channel=False, init_min=-6.0, init_max=6.0, ema_decay=0.999,
                      vars_collection="moving_average_variables",
                      name_prefix="MovingAvgQuantize", reuse=None, is_training=True, num_bits=8,
                      narrow_range=False, symmetric=False):
    """contrib's quant_ops.MovingAvgQuantize on `inputs`' graph: the range is the zero-debiased
    moving average of batch ranges. Per tensor, `inputs` may have any rank, known or not."""
    _check_quantizer_args(inputs, init_min, init_max, num_bits, reuse, per_channel)
    common.check_ema_decay(ema_decay)
    graph = inputs.op.graph
    with graph.as_default():
        return moving_avg_quantize(graph, inputs, name_prefix, bool(is_training),
                                   init_min=float(init_min), init_max=float(init_max),
                                   ema_decay=float(ema_decay), num_bits=num_bits,
                                   narrow_range=bool(narrow_range), symmetric=bool(symmetric),
                                   per_channel=bool(per_channel),
                                   vars_collection=vars_collection)
