"""Plan-time fusion: runs of ops in a Session plan that one kernel call can do, each replaced in
the plan (forward steps and reverse mode alike) by a unit that stands for the ops. The graph
itself is untouched: names, collections and checkpoints stay as they are.

The one pattern so far is the per-channel chain that follows a convolution, as the fold of a
batch norm leaves it (contrib's post_conv_mul -> correction_add -> add_fold -> Relu6) or as a
layer with a bias writes it (BiasAdd -> Relu): a float32 tensor [..., C] times a [C] vector,
plus up to two [C] vectors, then Relu or Relu6, in any run of two or more of those steps. It
becomes fqcore.channel_affine (fq_f32_channel_affine), whose forward equals the ops bit for bit
and whose gradient differs only in the order of its sums (float64, where numpy sums in float32).
A run is fused only when nothing else reads its intermediate tensors: no op of the plan outside
it, no fetch, no feed, and no op that a dead branch (Switch) can reach."""
import numpy as np

from .. import _kernels

FLOAT32 = np.dtype(np.float32)
_ADDS = ("AddV2", "Add")
_ACTIVATIONS = ("Relu", "Relu6")


class FusedChannelChain:
    """A fused run of ops, as the engine sees an operation: name, type, inputs, outputs and
    control_inputs, with forward(op, inputs, ctx) and gradient(op, inputs, outputs, grads)."""

    type = "FusedChannelChain"
    control_inputs = ()

    def __init__(self, ops, x, scale, shifts, activation):
        self.ops = ops
        self.name = ops[-1].name
        self.scale, self.shifts, self.activation = scale, shifts, activation
        self.inputs = [x] + ([scale] if scale is not None else []) + shifts
        self.outputs = [ops[-1].outputs[0]]
        self.channels = x.shape[-1]

    def __repr__(self):
        return f"<FusedChannelChain of {[op.name for op in self.ops]}>"

    def _vectors(self, inputs):
        rest = list(inputs[1:])
        scale = rest.pop(0) if self.scale is not None else None
        shifts = rest + [None] * (2 - len(rest))
        return scale, shifts

    def forward(self, op, inputs, ctx):
        x = inputs[0]
        scale, (shift_a, shift_b) = self._vectors(inputs)
        y = np.empty(x.shape, FLOAT32)
        _kernels.channel_affine(np.ascontiguousarray(x).reshape(-1), self.channels, scale, shift_a,
                                shift_b, _kernels.ACTIVATIONS[self.activation], y.reshape(-1))
        return (y,)

    def gradient(self, op, inputs, outputs, grads):
        x = inputs[0]
        scale, _ = self._vectors(inputs)
        dx = np.empty(x.shape, FLOAT32)
        dscale = np.empty(self.channels, FLOAT32) if scale is not None else None
        dshift = np.empty(self.channels, FLOAT32) if self.shifts else None
        _kernels.channel_affine_grad(
            np.ascontiguousarray(grads[0], FLOAT32).reshape(-1),
            np.ascontiguousarray(x).reshape(-1), outputs[0].reshape(-1), self.channels, scale,
            _kernels.ACTIVATIONS[self.activation], dx.reshape(-1), dscale, dshift)
        shift_grads = [dshift] + [dshift.copy() for _ in self.shifts[1:]]
        return [dx] + ([dscale] if scale is not None else []) + shift_grads


def _vector(tensor, channels):
    """Whether `tensor` is a float32 vector of `channels` elements."""
    return tensor.dtype == FLOAT32 and tensor.shape is not None and tuple(tensor.shape) == (channels,)


def _channels(tensor):
    """The last dimension of a float32 tensor of rank 2 or more, when it is known."""
    shape = tensor.shape
    if tensor.dtype != FLOAT32 or shape is None or len(shape) < 2 or shape[-1] is None:
        return None
    return shape[-1]


def _shift_of(op, running, channels):
    """The [C] vector `op` adds to `running` (AddV2 / Add either way round, BiasAdd NHWC)."""
    if op.type == "BiasAdd":
        if op.attrs.get("data_format", "NHWC") != "NHWC" or op.inputs[0] is not running:
            return None
        other = op.inputs[1]
    elif op.type in _ADDS:
        a, b = op.inputs
        other = b if a is running else a if b is running else None
        if other is None or other is running:
            return None
    else:
        return None
    return other if _vector(other, channels) else None


def _scale_of(op, channels):
    """(the [..., C] operand, the [C] operand) of a Mul, or None."""
    if op.type != "Mul":
        return None
    a, b = op.inputs
    for big, small in ((a, b), (b, a)):
        if _channels(big) == channels and _vector(small, channels):
            return big, small
    return None


def fuse(order, sole_consumer, fusable):
    """`order` (the plan's ops) with each fusable run replaced by one unit. sole_consumer(tensor)
    gives the one op of the plan that reads a tensor nothing else needs (else None); fusable(op)
    says whether an op may join a run (it cannot die on a dead branch)."""
    units, taken = [], set()
    for op in order:
        if op in taken:
            continue
        chain = _chain_from(op, sole_consumer, fusable)
        if chain is None:
            units.append(op)
            continue
        taken.update(chain.ops)
        units.append(chain)
    # A unit runs where its last op ran: every input of every member is computed by then.
    position = {op: i for i, op in enumerate(order)}
    return sorted(units, key=lambda u: position[u.ops[-1]] if isinstance(u, FusedChannelChain)
                  else position[u])


def _chain_from(op, sole_consumer, fusable):
    """The FusedChannelChain that starts at `op`, or None."""
    if not fusable(op) or not op.outputs:
        return None
    scaled = _scale_of(op, _channels(op.outputs[0])) if op.type == "Mul" else None
    if scaled is not None:
        x, scale, shifts = scaled[0], scaled[1], []
    else:
        if op.type not in _ADDS + ("BiasAdd",):
            return None
        x = op.inputs[0] if op.type == "BiasAdd" else None
        for candidate in ([op.inputs[0]] if op.type == "BiasAdd" else op.inputs):
            if _channels(candidate) is not None and _shift_of(op, candidate, _channels(candidate)) is not None:
                x = candidate
                break
        if x is None or _channels(x) is None:
            return None
        scale, shifts = None, [_shift_of(op, x, _channels(x))]
    channels = _channels(x)
    ops, running, activation = [op], op.outputs[0], None
    while activation is None:
        nxt = sole_consumer(running)
        if nxt is None or not fusable(nxt):
            break
        if nxt.type in _ACTIVATIONS and nxt.inputs[0] is running:
            activation = nxt.type
        else:
            shift = _shift_of(nxt, running, channels) if len(shifts) < 2 else None
            if shift is None:
                break
            shifts.append(shift)
        ops.append(nxt)
        running = nxt.outputs[0]
    if len(ops) < 2:
        return None
    return FusedChannelChain(ops, x, scale, shifts, activation)
