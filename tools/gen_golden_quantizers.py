"""Writes tfmot 0.8.1's quantizer golden data, tests/data/quantizers_*.npz and quantizers_interop.json (`python tools/gen_golden_quantizers.py`; needs `pip install tensorflow-cpu==2.21.* tensorflow-model-optimization==0.8.1 tf-keras==2.21.*`)."""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# tfmot 0.8.1 is written for Keras 2 (tf_keras); both must be set before TensorFlow is imported.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
import tensorflow_model_optimization as tfmot  # noqa: E402
from tensorflow_model_optimization.python.core.quantization.keras import quant_ops  # noqa: E402
from tensorflow_model_optimization.python.core.quantization.keras import quantize_layer  # noqa: E402
from tensorflow_model_optimization.python.core.quantization.keras import quantizers as tq  # noqa: E402

assert tf.__version__.startswith("2.21"), f"the golden data is TF 2.21's, this is {tf.__version__}"
assert tfmot.__version__ == "0.8.1", f"the golden data is tfmot 0.8.1's, this is {tfmot.__version__}"

F32 = np.float32
FLT_MAX = float(np.finfo(F32).max)
SEED = 4_000_004
NUM_BITS = (2, 4, 8, 16)
FLAGS = [(s, n) for s in (False, True) for n in (False, True)]  # (symmetric, narrow_range)
CHANNEL_SHAPES = {1: (5,), 2: (7, 3), 3: (2, 3, 4), 4: (2, 3, 2, 4), 5: (1, 2, 2, 2, 3)}


def f32(*values):
    return np.array(values, dtype=F32)


class Inputs:
    """Deterministic float32 test tensors (stored in the data, so numpy's generators may change)."""

    def __init__(self, seed):
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def normal(self, shape, loc=0.3, scale=1.5):
        return (self.rng.standard_normal(shape) * scale + loc).astype(F32)

    def positive(self, shape, low=0.25, high=3.0):
        return self.rng.uniform(low, high, shape).astype(F32)

    def negative(self, shape):
        return -self.positive(shape, 0.1, 4.0)

    def per_channel(self, shape):
        """Channel c of the last axis: its own offset and scale; channel 1 all positive, channel 2
        all negative, so that the range's zero clamp shows."""
        x = self.normal(shape, 0.0, 1.0)
        c = shape[-1]
        offset = np.linspace(-1.5, 2.0, c).astype(F32)
        scale = np.linspace(0.5, 3.0, c).astype(F32)[::-1]
        x = (x * scale + offset).astype(F32)
        if c > 1 and x.size:
            x[..., 1] = np.abs(x[..., 1]) + F32(0.125)
        if c > 2 and x.size:
            x[..., 2] = -np.abs(x[..., 2]) - F32(0.25)
        return x

    def grad(self, shape):
        """Upstream gradients in quarter steps of [-2, 2]: every sum of them is exact in float32,
        whatever the summation order, so the gradient sums compare bit for bit."""
        return (self.rng.integers(-8, 9, shape) * 0.25).astype(F32)


def seq(name, class_name, config, steps, build_shape, source="quantizer", initial=None):
    """One sequence: a quantizer (tfmot class name and config), the tensor shape given to build, and
    steps [(training, x)]. source: 'quantizer' (tfmot's object), 'quant_ops' (tfmot's quant_ops
    function with per-channel variables: fqcore's per-axis moving average and ema_decay
    extensions; also any state to start from, `initial` = (min, max)), 'reshape' (tfmot on x
    reshaped to [-1, channels]: the per-axis ranks 3 and 5)."""
    return dict(name=name, class_name=class_name, config=config, steps=steps,
                build_shape=None if build_shape is None else list(build_shape), source=source, initial=initial)


def range_config(num_bits, per_axis, symmetric, narrow_range):
    return dict(num_bits=num_bits, per_axis=per_axis, symmetric=symmetric, narrow_range=narrow_range)


def flag_name(num_bits, symmetric, narrow_range):
    return f"b{num_bits}{'-sym' if symmetric else ''}{'-narrow' if narrow_range else ''}"


def spec_sequences():
    """The spec's test vectors, as sequences."""
    lv = "LastValueQuantizer"
    out = [
        seq("spec-lastvalue", lv, range_config(8, False, False, False), [
            (True, f32([1, 2, 3], [0.5, 1.5, 2.5])), (True, f32([-1, 0.25, 3], [0.1, -0.7, 2])),
            (True, f32([-4, -2, -1], [-3, -0.5, -0.25])), (False, f32([-10, -4, -1], [0, 0.01, 5]))], (2, 3)),
        seq("spec-symmetric-narrow", lv, range_config(8, False, True, True), [
            (True, f32(-1, 0.5, 2, 3)), (True, f32(-5, 0.5, 1, 2)), (True, f32(0.5, 1, 1.5, 2))], (4,)),
        seq("spec-per-axis-rank2", lv, range_config(8, True, False, False), [
            (True, f32([1, -2], [3, -1], [-0.5, -4]))], (3, 2)),
        seq("spec-per-axis-rank4-symmetric-narrow", lv, range_config(8, True, True, True), [
            (True, np.array([[[[1, -2]], [[-3, 0.5]]]], F32))], (1, 2, 1, 2)),
        seq("spec-per-axis-rank1", lv, range_config(8, True, False, False), [(True, f32(1, -2, 0.5))], (3,)),
        seq("spec-moving-average", "MovingAverageQuantizer", range_config(8, False, False, False), [
            (True, f32(-1, 0.5, 2, 3)), (True, f32(-1, 0.5, 2, 3)), (True, f32(0.5, 1, 1.5, 2)),
            (False, f32(-7, -1, 1, 7))], (4,)),
        seq("spec-all-values", "AllValuesQuantizer", range_config(8, False, False, False), [
            (False, f32(0.5, 1, 2)), (True, f32(0.5, 1, 2)), (True, f32(-1, 0.5, 1)), (True, f32(-0.5, 0.25, 4)),
            (False, f32(-2, 0.3, 5))], (3,)),
    ]
    for bits in (8, 4):
        out.append(seq(f"spec-symmetric-wide-b{bits}", lv, range_config(bits, False, True, False), [
            (True, f32(-1, 0.5, 2, 3)), (True, f32(-5, 0.5, 1, 2))], (4,)))
    return out


def per_tensor_steps(inputs):
    return [(True, inputs.normal((4, 6))), (True, inputs.positive((4, 6))), (True, inputs.negative((24,))),
            (False, inputs.normal((3, 5), 0.0, 4.0)), (True, inputs.normal((2, 3, 4), -0.5, 3.0)),
            (False, inputs.normal((2, 3, 4), 0.0, 5.0))]


def per_axis_steps(inputs, shape):
    return [(True, inputs.per_channel(shape)), (True, inputs.per_channel(shape)),
            (False, (inputs.per_channel(shape) * F32(2)).astype(F32)), (True, inputs.per_channel(shape)),
            (False, (inputs.per_channel(shape) * F32(1.5)).astype(F32))]


def grid_sequences():
    """Every quantizer x num_bits x symmetric x narrow_range, per tensor and (LastValue; MovingAverage
    as fqcore's extension; AllValues, which ignores it) per axis."""
    out = []
    i = 0
    for bits in NUM_BITS:
        for symmetric, narrow in FLAGS:
            flags = flag_name(bits, symmetric, narrow)
            for cls in ("LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer"):
                i += 1
                steps = per_tensor_steps(Inputs(SEED + 100 * i))
                out.append(seq(f"{cls[:-9]}-{flags}", cls, range_config(bits, False, symmetric, narrow), steps, (4, 6)))
            for rank in (1, 2, 4):
                shape = CHANNEL_SHAPES[rank]
                for cls, source in (("LastValueQuantizer", "quantizer"), ("MovingAverageQuantizer", "quant_ops")):
                    i += 1
                    steps = per_axis_steps(Inputs(SEED + 100 * i), shape)
                    out.append(seq(f"{cls[:-9]}-per-axis-rank{rank}-{flags}", cls,
                                   range_config(bits, True, symmetric, narrow), steps, shape, source))
            i += 1
            steps = per_axis_steps(Inputs(SEED + 100 * i), CHANNEL_SHAPES[4])
            out.append(seq(f"AllValues-per-axis-flag-{flags}", "AllValuesQuantizer",
                           range_config(bits, True, symmetric, narrow), steps, CHANNEL_SHAPES[4]))
    return out


def fixed_sequences():
    """FixedQuantizer at every num_bits (tfmot always quantizes to 8), both narrow_range, four ranges."""
    out = []
    inputs = Inputs(SEED + 50_000)
    for bits in NUM_BITS:
        for narrow in (False, True):
            for lo, hi in ((-6.0, 6.0), (-1.0, 3.0), (0.5, 1.0), (-2.5, -0.5), (-6, 6)):
                name = f"Fixed-b{bits}{'-narrow' if narrow else ''}-[{lo!r},{hi!r}]"
                steps = [(True, inputs.normal((3, 7), 0.0, 4.0)), (False, inputs.normal((21,), 0.0, 4.0))]
                out.append(seq(name, "FixedQuantizer", dict(num_bits=bits, init_min=lo, init_max=hi,
                                                            narrow_range=narrow), steps, (3, 7)))
    out.append(seq("NoQuantizer", "NoQuantizer", {}, [(True, inputs.normal((3, 4))), (False, inputs.normal((5,)))],
                   (3, 4)))
    return out


def special_sequences():
    """NaN, infinities, zeros of both signs, empty and one-element tensors, denormals, FLT_MAX with a
    symmetric range, a long moving average, ema_decay, per-axis ranks 3 and 5, an all-zero channel."""
    inputs = Inputs(SEED + 60_000)
    nan, inf = np.nan, np.inf
    specials = [
        (True, f32(1, -2, 3)), (True, f32(0.5, nan, -1)), (True, f32(-1, 2, 0.5)), (True, f32(inf, 1, -1)),
        (True, f32(-inf, 1, 2)), (True, f32(0, 0, 0)), (True, f32(-0.0, -0.0, -0.0)), (True, f32(1e-40, 3e-39, 2e-45)),
        (True, f32(-1e-40, 1e-40, 0.5)), (True, f32(2.5)), (True, np.zeros((0,), F32)), (True, np.zeros((2, 0), F32)),
        (True, f32(FLT_MAX, -1, 2)), (True, f32(-FLT_MAX, 1, 2)), (True, f32(3e38, -3e38)), (False, f32(-2, 0.5, 7)),
        (True, f32(-1, 1, 2)),
    ]
    out = []
    for cls in ("LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer"):
        for symmetric, narrow in FLAGS:
            steps = specials
            if cls != "LastValueQuantizer":
                # A NaN stays in a moving average or a running min/max: one sequence without it, one with.
                nan_free = [s for s in specials if not np.isnan(s[1]).any()]
                out.append(seq(f"special-{cls[:-9]}-{flag_name(8, symmetric, narrow)}-nan-last", cls,
                               range_config(8, False, symmetric, narrow),
                               nan_free + [(True, f32(nan, 1, 2)), (False, f32(-1, 0, 1)), (True, f32(1, 2, 3))], (3,)))
                steps = nan_free
            out.append(seq(f"special-{cls[:-9]}-{flag_name(8, symmetric, narrow)}", cls,
                           range_config(8, False, symmetric, narrow), steps, (3,)))
    special_channels = [
        (True, f32([1, nan, 0], [2, 1, 0])), (True, f32([inf, -1, 0], [1, 2, -0.0])), (True, f32([-inf, 1, 5], [1, 2, 3])),
        (True, f32([0, 0, 0], [0, 0, 0])), (True, f32([-0.0, -0.0, -0.0], [-0.0, -0.0, -0.0])), (True, np.zeros((0, 3), F32)),
        (True, f32([FLT_MAX, -FLT_MAX, 1e-40], [1, 2, -1e-40])), (False, f32([-3, 0.5, 2], [4, -4, 1])),
    ]
    for symmetric, narrow in FLAGS:
        for cls, source in (("LastValueQuantizer", "quantizer"), ("MovingAverageQuantizer", "quant_ops")):
            out.append(seq(f"special-{cls[:-9]}-per-axis-{flag_name(8, symmetric, narrow)}", cls,
                           range_config(8, True, symmetric, narrow), special_channels, (2, 3), source))
    # Signed-zero channels at 8 and 17 channels: TF's 8-lane packets and its scalar tail disagree.
    for channels in (8, 17):
        x = inputs.per_channel((3, channels))
        x[:, 0] = 0.0
        x[:, channels - 1] = -0.0
        for symmetric in (False, True):
            out.append(seq(f"special-LastValue-per-axis-zero-channels-c{channels}{'-sym' if symmetric else ''}",
                           "LastValueQuantizer", range_config(8, True, symmetric, False),
                           [(True, x), (False, (x * F32(3)).astype(F32))], x.shape))
    # Symmetric ranges whose mirrored maximum rounds above the batch maximum: tfmot's AllValues
    # mirrors the widened minimum (r * (max / r) may exceed max), LastValue and MovingAverage the batch's.
    for bits in (4, 8):
        r = F32(-((1 << bits) - 2) / (1 << bits))
        grid = np.linspace(0.5, 8, 20001).astype(F32)
        hits = grid[((grid / r).astype(F32) * r).astype(F32) > grid]
        steps = [(True, f32(-0.1, hits[0], 0.3)), (False, f32(-2, -0.5, 0.5, 2)), (True, f32(-0.05, hits[-1])),
                 (True, f32(-hits[len(hits) // 2], 0.1)), (False, f32(-9, -1, 1, 9))]
        for cls in ("AllValuesQuantizer", "LastValueQuantizer", "MovingAverageQuantizer"):
            out.append(seq(f"special-{cls[:-9]}-mirror-rounding-b{bits}-sym", cls,
                           range_config(bits, False, True, False), steps, (3,)))
    # Flush-to-zero: a mirrored minimum below FLT_MIN, moving-average steps below it, denormal state.
    tiny = float(np.finfo(F32).tiny)
    ftz_steps = [(True, f32(-1.18e-38, -1.179e-38)), (True, f32(1.18e-38, 1.2e-38)), (True, f32(-1.3e-38, 1.25e-38)),
                 (False, f32(-2e-38, -1e-38, 0, 1e-38, 2e-38)), (True, f32(-1.19e-38, 5e-38)), (True, f32(-1, 1))]
    for cls in ("LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer"):
        for bits in (4, 8):
            out.append(seq(f"ftz-{cls[:-9]}-b{bits}-sym", cls, range_config(bits, False, True, False), ftz_steps, (2,)))
            for initial in ((-1.3e-38, 1.3e-38), (-1e-39, 1e-39), (-tiny, tiny)):
                out.append(seq(f"ftz-{cls[:-9]}-b{bits}-sym-from-[{initial[0]:g},{initial[1]:g}]", cls,
                               range_config(bits, False, True, False), ftz_steps, (2,), "quant_ops", initial))
    channels = [(True, f32([-1.18e-38, 1.2e-38, -1.3e-38], [-1.179e-38, 1.3e-38, 1.25e-38])),
                (True, f32([-1.19e-38, 1.18e-38, -1], [5e-38, 1.2e-38, 1])), (False, f32([-1e-38, 0, 1e-38], [2e-38, -2e-38, 1]))]
    for cls in ("LastValueQuantizer", "MovingAverageQuantizer"):
        out.append(seq(f"ftz-{cls[:-9]}-per-axis-b8-sym", cls, range_config(8, True, True, False), channels, (2, 3),
                       "quant_ops", (-1.3e-38, 1.3e-38)))
    long_run = [(True, inputs.normal((16,), 0.5, 2.0)) for _ in range(60)] + [(False, inputs.normal((16,), 0, 6))]
    for symmetric, narrow in FLAGS:
        out.append(seq(f"MovingAverage-60-steps-{flag_name(8, symmetric, narrow)}", "MovingAverageQuantizer",
                       range_config(8, False, symmetric, narrow), long_run, (16,)))
    for decay in (0.9, 0.5, 0.99999):
        steps = [(True, inputs.normal((12,), 0.5, 2.0)) for _ in range(8)] + [(False, inputs.normal((12,), 0, 4))]
        out.append(seq(f"MovingAverage-ema-decay-{decay!r}", "MovingAverageQuantizer",
                       dict(range_config(8, False, False, False), ema_decay=decay), steps, (12,), "quant_ops"))
        shape = CHANNEL_SHAPES[2]
        out.append(seq(f"MovingAverage-per-axis-ema-decay-{decay!r}", "MovingAverageQuantizer",
                       dict(range_config(8, True, True, False), ema_decay=decay),
                       per_axis_steps(Inputs(SEED + 70_000 + len(out)), shape), shape, "quant_ops"))
    for rank in (3, 5):
        shape = CHANNEL_SHAPES[rank]
        for bits in (4, 8):
            for symmetric, narrow in FLAGS:
                for cls in ("LastValueQuantizer", "MovingAverageQuantizer"):
                    steps = per_axis_steps(Inputs(SEED + 80_000 + len(out)), shape)
                    out.append(seq(f"{cls[:-9]}-per-axis-rank{rank}-{flag_name(bits, symmetric, narrow)}", cls,
                                   range_config(bits, True, symmetric, narrow), steps, shape, "reshape"))
    return out


# --- Running tfmot


class Owner(tf_keras.layers.Layer):
    """The layer that owns the quantizer's variables, as a QuantizeWrapper would."""


def tfmot_quantizer(class_name, config):
    return getattr(tq, class_name)(**config)


def run_sequence(s):
    """tfmot's outputs, gradients and state after each step."""
    config = {k: v for k, v in s["config"].items() if k != "ema_decay"}
    channels = s["build_shape"][-1] if s["config"].get("per_axis") and s["build_shape"] else None
    if s["source"] == "quantizer":
        quantizer = tfmot_quantizer(s["class_name"], config)
        weights = quantizer.build(tf.TensorShape(s["build_shape"]), "q", Owner()) or {}

        def call(x, training):
            return quantizer(x, training, weights)
    else:
        # tfmot's quant_ops with per-channel state (or tfmot's quantizer on [-1, channels]).
        state_shape = (channels,) if channels is not None and s["class_name"] != "AllValuesQuantizer" else ()
        start = s["initial"] or ((0.0, 0.0) if s["class_name"] == "AllValuesQuantizer" else (-6.0, 6.0))
        weights = {"min_var": tf.Variable(np.array(np.broadcast_to(F32(start[0]), state_shape)), trainable=False),
                   "max_var": tf.Variable(np.array(np.broadcast_to(F32(start[1]), state_shape)), trainable=False)}
        kw = dict(num_bits=config["num_bits"], symmetric=config["symmetric"], narrow_range=config["narrow_range"])
        if s["class_name"] == "MovingAverageQuantizer":
            kw.update(ema_decay=s["config"].get("ema_decay", 0.999), per_channel=config["per_axis"])
            op = quant_ops.MovingAvgQuantize
        elif s["class_name"] == "AllValuesQuantizer":
            op = quant_ops.AllValuesQuantize
        else:
            kw.update(per_channel=config["per_axis"])
            op = quant_ops.LastValueQuantize

        def call(x, training):
            shape = x.shape
            if s["source"] == "reshape":
                x = tf.reshape(x, (-1, channels))
            return tf.reshape(op(x, weights["min_var"], weights["max_var"], is_training=training, **kw), shape)

    variables = [weights[k] for k in ("min_var", "max_var") if k in weights]
    initial = [np.asarray(v.numpy(), F32).copy() for v in variables] or None
    steps = []
    for k, (training, x) in enumerate(s["steps"]):
        g = Inputs(SEED + 7 * k + 13 * len(s["name"])).grad(x.shape)
        xt = tf.constant(x)
        with tf.device("/CPU:0"), tf.GradientTape() as tape:
            tape.watch(xt)
            tape.watch(variables)  # non-trainable variables are not watched on their own
            y = call(xt, training)
        grads = tape.gradient(y, [xt] + variables, output_gradients=tf.constant(g))
        step = dict(training=training, x=x, g=g, y=np.asarray(y.numpy(), F32),
                    dx=np.asarray(grads[0].numpy() if grads[0] is not None else g, F32))
        if variables:
            step["min"], step["max"] = (np.asarray(v.numpy(), F32) for v in variables)
            for key, grad, v in zip(("dmin", "dmax"), grads[1:], variables):
                assert grad is not None, f"{s['name']}: no gradient for {key}"
                step[key] = np.asarray(grad.numpy(), F32)
        steps.append(step)
    if variables and s["source"] == "quantizer":
        # Build's initial values: the state before the first step is tfmot's initializers' output.
        fresh = tfmot_quantizer(s["class_name"], config).build(tf.TensorShape(s["build_shape"]), "q", Owner())
        assert all(np.array_equal(a, np.asarray(fresh[k].numpy(), F32)) for a, k in zip(initial, ("min_var", "max_var")))
    return steps, initial


def rejected_by_tfmot():
    """What tfmot 0.8.1 itself fails on (fqcore extensions): recorded, not compared."""
    cases = [("LastValueQuantizer", (2, 3, 4)), ("LastValueQuantizer", (1, 2, 2, 2, 3)),
             ("MovingAverageQuantizer", (7, 3)), ("MovingAverageQuantizer", (2, 3, 2, 4)),
             ("LastValueQuantizer", ())]
    out = []
    for class_name, shape in cases:
        quantizer = tfmot_quantizer(class_name, range_config(8, True, False, False))
        try:
            weights = quantizer.build(tf.TensorShape(shape), "q", Owner())
            quantizer(tf.constant(np.ones(shape, F32)), True, weights)
            error = None
        except Exception as e:  # noqa: BLE001 - recording what tfmot raises
            error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        out.append(dict(class_name=class_name, per_axis=True, shape=list(shape), error=error))
    return out


# --- Packing


def bits(a):
    return np.ascontiguousarray(a, dtype=F32).reshape(-1).view(np.uint32)


def pack(sequences, results):
    """Sequences as JSON metadata, steps as flat uint32 bit arrays (layout: tests/data/README.md)."""
    meta, rows = [], []
    for s, (steps, initial) in zip(sequences, results):
        meta.append(dict(name=s["name"], class_name=s["class_name"], config=s["config"], source=s["source"],
                         build_shape=s["build_shape"], first_step=len(rows), steps=len(steps),
                         initial_from_build=s["initial"] is None,
                         state_shape=None if initial is None else list(initial[0].shape),
                         initial_min=None if initial is None else [int(b) for b in bits(initial[0])],
                         initial_max=None if initial is None else [int(b) for b in bits(initial[1])]))
        rows.extend(steps)
    shape = np.zeros((len(rows), 5), np.int64)
    for i, r in enumerate(rows):
        shape[i, : r["x"].ndim] = r["x"].shape
    out = dict(
        tf_version=np.array(tf.__version__), tfmot_version=np.array(tfmot.__version__),
        tf_keras_version=np.array(tf_keras.__version__), numpy_version=np.array(np.__version__),
        sequences=np.array(json.dumps(meta)),
        training=np.array([r["training"] for r in rows], bool),
        ndim=np.array([r["x"].ndim for r in rows], np.int8), shape=shape,
        elem_off=np.concatenate([[0], np.cumsum([r["x"].size for r in rows])]).astype(np.int64),
        state_off=np.concatenate([[0], np.cumsum([r["min"].size if "min" in r else 0 for r in rows])]).astype(np.int64),
    )
    for key in ("x", "g", "y", "dx"):
        out[key] = np.concatenate([bits(r[key]) for r in rows])
    for key in ("min", "max", "dmin", "dmax"):
        out[key] = np.concatenate([bits(r[key]) for r in rows if key in r] or [np.zeros(0, np.uint32)])
    return out


# --- Serialization interop


def interop():
    """tfmot's own serialized configs, and whether tfmot accepts fqcore-shaped dicts in quantize_scope."""
    configs = []
    for bits in NUM_BITS:
        for per_axis in (False, True):
            for symmetric, narrow in FLAGS:
                for cls in ("LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer"):
                    configs.append((cls, range_config(bits, per_axis, symmetric, narrow)))
    for bits in (2, 8, 16):
        for lo, hi in ((-6.0, 6.0), (-6, 6), (-1.5, 0.25), (0, 1)):
            configs.append(("FixedQuantizer", dict(num_bits=bits, init_min=lo, init_max=hi, narrow_range=bits == 8)))
    configs.append(("NoQuantizer", {}))

    serialized = []
    for cls, config in configs:
        q = tfmot_quantizer(cls, config)
        layer = quantize_layer.QuantizeLayer(q)
        serialized.append(dict(
            class_name=cls, args=config,
            keras2=tf_keras.utils.legacy.serialize_keras_object(q),
            tf_keras=tf_keras.utils.serialize_keras_object(q),
            quantize_layer=layer.get_config()["quantizer"]))

    # fqcore's serialize output, written here from the same rules: the class name and get_config()
    # (keys in the constructor's order; MovingAverage adds ema_decay only when it is not 0.999).
    fqcore_dicts = [{"class_name": cls, "config": dict(config)} for cls, config in configs]
    fqcore_dicts.append({"class_name": "MovingAverageQuantizer",
                         "config": dict(range_config(8, False, False, False), ema_decay=0.9)})
    fqcore_checked = check_against_fqcore(fqcore_dicts)

    accepts = []
    for d in fqcore_dicts:
        expected_class = d["class_name"]
        for method in ("tf_keras.utils.deserialize_keras_object", "tf_keras.utils.legacy.deserialize_keras_object",
                       "QuantizeLayer.from_config"):
            entry = dict(method=method, fqcore_dict=d)
            try:
                with tfmot.quantization.keras.quantize_scope():
                    if method == "QuantizeLayer.from_config":
                        obj = quantize_layer.QuantizeLayer.from_config(
                            {"quantizer": json.loads(json.dumps(d)), "name": "q", "trainable": True, "dtype": "float32"}
                        ).quantizer
                    elif method.startswith("tf_keras.utils.legacy"):
                        obj = tf_keras.utils.legacy.deserialize_keras_object(json.loads(json.dumps(d)))
                    else:
                        obj = tf_keras.utils.deserialize_keras_object(json.loads(json.dumps(d)))
                expected = tfmot_quantizer(expected_class, d["config"])
                entry.update(accepted=True, result_class=type(obj).__name__, equal=bool(obj == expected),
                             result_config=obj.get_config(), error=None)
            except Exception as e:  # noqa: BLE001 - recording tfmot's answer
                entry.update(accepted=False, result_class=None, equal=False, result_config=None,
                             error=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            accepts.append(entry)
    return dict(tf_version=tf.__version__, tfmot_version=tfmot.__version__, tf_keras_version=tf_keras.__version__,
                serialized=serialized, accepts=accepts, fqcore_checked_directly=fqcore_checked,
                rejected_by_tfmot=rejected_by_tfmot())


def check_against_fqcore(dicts):
    """When fqcore imports in this interpreter (same Python and numpy), its serialize output must be
    the dicts written here; the tests check the same equality without TensorFlow."""
    sys.path.insert(0, str(ROOT))
    try:
        from fqcore import serialization as fqcore
    except Exception as e:  # noqa: BLE001 - fqcore is optional here
        print(f"fqcore not importable here ({type(e).__name__}: {e}); its dicts are checked by the tests only")
        return False
    finally:
        sys.path.pop(0)
    for d in dicts:
        made = fqcore.serialize(fqcore.deserialize(d))
        assert made == d and list(made["config"]) == list(d["config"]), (made, d)
    return True


def one_entry_per_line(report):
    """JSON text with each list entry on a line of its own: small, and diffs show which entry changed."""
    lines = []
    for key, value in report.items():
        if isinstance(value, list):
            items = ",\n  ".join(json.dumps(v, allow_nan=False) for v in value)
            lines.append(f" {json.dumps(key)}: [\n  {items}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, allow_nan=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    DATA.mkdir(parents=True, exist_ok=True)
    sequences = spec_sequences() + grid_sequences() + fixed_sequences() + special_sequences()
    names = [s["name"] for s in sequences]
    assert len(set(names)) == len(names), [n for n in names if names.count(n) > 1]
    results = [run_sequence(s) for s in sequences]
    path = DATA / "quantizers_sequences.npz"
    np.savez_compressed(path, **pack(sequences, results))
    steps = sum(len(r[0]) for r in results)
    print(f"{path.name}: {len(sequences)} sequences, {steps} steps, {path.stat().st_size} bytes")
    report = interop()
    path = DATA / "quantizers_interop.json"
    path.write_text(one_entry_per_line(report))
    accepted = sum(a["accepted"] and a["equal"] for a in report["accepts"])
    print(f"{path.name}: {len(report['serialized'])} tfmot configs; tfmot accepted {accepted} of "
          f"{len(report['accepts'])} fqcore dicts (equal quantizer); fqcore checked directly: "
          f"{report['fqcore_checked_directly']}")
    for a in report["accepts"]:
        if not (a["accepted"] and a["equal"]):
            print(f"  not accepted: {a['method']} {a['fqcore_dict']}: {a['error']}")
    for r in report["rejected_by_tfmot"]:
        print(f"  tfmot rejects {r['class_name']} per_axis shape {r['shape']}: {r['error']}")


if __name__ == "__main__":
    main()
