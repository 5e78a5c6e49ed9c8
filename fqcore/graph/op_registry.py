"""The op table: for each TF op type, its output shapes/dtypes, forward kernel and gradient."""

_OPS = {}
_GRADIENT_OVERRIDES = {}


class OpDef:
    """What the engine needs to know about one op type.

    infer(inputs, attrs) -> [(shape, dtype), ...]     static output shapes (None = unknown)
    forward(op, inputs, ctx) -> tuple of arrays      the kernel
    gradient(op, inputs, outputs, grads) -> list     one gradient (or None) per input
    ref_inputs: input positions that name a variable to write, not a value to read.
    """

    def __init__(self, op_type, infer, forward, gradient=None, ref_inputs=(), stateful=False):
        self.type = op_type
        self.infer = infer
        self.forward = forward
        self.gradient = gradient
        self.ref_inputs = tuple(ref_inputs)
        self.stateful = stateful


def register(op_type, infer, gradient=None, ref_inputs=(), stateful=False):
    """Decorator for a forward kernel: registers the op type with its inference and gradient."""
    def wrap(forward):
        if op_type in _OPS:
            raise ValueError(f"op type {op_type!r} is registered twice")
        _OPS[op_type] = OpDef(op_type, infer, forward, gradient, ref_inputs, stateful)
        return forward
    return wrap


def register_gradient_override(name, gradient):
    """A named gradient an op can select with the `_gradient_op_type` attribute (TF's
    gradient_override_map), e.g. contrib's FoldFusedBatchNormGrad."""
    _GRADIENT_OVERRIDES[name] = gradient


def op_def(op_type):
    _load_definitions()
    try:
        return _OPS[op_type]
    except KeyError:
        raise ValueError(f"unknown op type {op_type!r}; known: {sorted(_OPS)}") from None


def gradient_function(op):
    """The gradient of `op`: its override when it names one, else its type's."""
    override = op.attrs.get("_gradient_op_type")
    if override is not None:
        try:
            return _GRADIENT_OVERRIDES[override]
        except KeyError:
            raise ValueError(f"operation {op.name!r} names unknown gradient {override!r}") from None
    return op_def(op.type).gradient


_loaded = False


def _load_definitions():
    global _loaded
    if not _loaded:
        _loaded = True
        from .op_defs import (array, control, math, nn, quant,  # noqa: F401 (registers)
                              space_batch, state, train)
