"""Plan-time fusion: work in a Session plan that fewer, larger calls can do, each replaced in the
plan (forward steps and reverse mode alike) by a unit that stands for its ops. The graph itself is
untouched: names, collections and checkpoints stay as they are. The kinds:

- FusedChannelChain: the per-channel chain that follows a convolution, as the fold of a batch
  norm leaves it (contrib's post_conv_mul -> correction_add -> add_fold -> Relu6) or as a layer
  with a bias writes it (BiasAdd -> Relu): a float32 tensor [..., C] times a [C] vector, plus up
  to two [C] vectors, then Relu or Relu6, in any run of two or more of those steps, as one call of
  fq_f32_channel_affine. Its forward equals the ops bit for bit; its gradient differs only in the
  order of its sums (float64, where numpy sums in float32). A run is fused only when nothing else
  reads its intermediate tensors: no op of the plan outside it, no fetch, no feed, and no op that
  a dead branch (Switch) can reach.
- AddActivation: a float32 add of two tensors of one shape (a residual connection) and the Relu
  or Relu6 that alone reads the sum: one pass each way (fq_f32_add_activation; the gradient is the
  chain's kernel with one channel and no scale), the same bits as the two ops.
- ColumnsConv2D: a float32 Conv2D that keeps the windows it multiplies (conv2d_columns) for its
  gradient, and shares them with the other Conv2Ds of the plan that read the same input with the
  same geometry (the fold's two convolutions of a layer's input): one im2col where there were up
  to four, the same bits (a copy is a copy). Those others leave their input gradient to the
  first (DeferredInputGradient), which makes them all in one product: x's gradient to float32
  rounding (one product sums both), one product and one col2im where there were two and an add.
  On fqcore's product (AVX-512, AVX2) each of its forward and gradient is one kernel call
  (nn_numpy.conv2d_planned, conv2d_grad_planned).
- PairedDepthwise: the same for two float32 DepthwiseConv2dNative of one input and geometry:
  both input gradients in one pass over x's gradient, the same bits as their sum (x's gradient
  is then the same bits too unless other ops add to it: reverse mode adds their part first).
- BatchNormStatistics: a training FusedBatchNormV3 whose y nothing reads (the batch norm the
  fold replaced, kept for its statistics): the statistics without the pass that makes y (the
  kernel without the public function's checks where the inputs are as it reads them), and the
  MovingAverages of those statistics where it can run them.
- RangePair: a Min and a Max of the same float32 tensor (a range tracker's batch range): one
  pass for both, the same bits (the ops use the same kernel alone); with the DebiasedMovingAverage
  of each extreme (a moving-average tracker) the range, the clamps and both averages' steps are
  one call (range_trackers).
- ConvStatistics: a 1x1 Conv2D whose output only a BatchNormStatistics with contrib's
  FoldFusedBatchNormGrad reads (and ops that ask only its shape), where the input has fewer
  channels than the output: the statistics from the input's moments (conv_statistics.py), never
  the convolution, to float32 rounding.
- ClippedFakeQuant: a FakeQuantWithMinMaxVars of a FusedChannelChain's or an AddActivation's
  output whose range takes no gradient (an activation quant's range tracker): its gradient's clip
  runs inside that unit's gradient pass (ClippedGradient), the same bits, one pass over the tensor
  fewer.
- DebiasedMovingAverage: contrib's zero-debiased moving average of a range value (a range
  tracker's AssignMinEma / AssignMaxEma: eight float32 scalar ops, three of them variable writes)
  and its clamp as one step in float32 scalar arithmetic (fq_f32_tracker_step), the same bits
  (IEEE float32 operations round alike in any form), where the nine calls cost a range tracker
  more than its pass over the tensor; in a RangePair where the pair can run it.
- MovingAverage: assign_moving_average without debiasing (a batch norm's moving mean and
  variance: Sub, Mul by a scalar, AssignSub) as one step, the same numpy operations; in the
  BatchNormStatistics of its statistic where that can run it.
- ShapeFunction: ops that compute from a tensor's shape and the plan's constants alone (a batch
  norm's Bessel factor n / (n - 1) from its input's Size), run op by op once per shape of that
  tensor and then reused.
- VectorProgram: a connected set of element-wise ops (add, subtract, multiply, divide, negate,
  reciprocal, rsqrt, square, identity, reshape by a constant) on float32 tensors of one element
  count and fixed shapes, scalars aside (a fold's per-channel factors, correction and bias): one
  call of fq_f32_vector_program forward and one for the gradient (vector_program.py), the same
  bits, but where an input's gradient sums three or more terms (the unit adds its own before the
  plan adds the others'). A scalar input that takes a gradient (a sum over the vector) sends the
  gradient through the ops' own functions.
- FilterScaling: a run of Muls of a float32 filter by vectors that repeat down its rows (the fold's
  filter times contrib's correction, then times the scale), whose intermediate filters nothing else
  reads: one pass of fq_f32_filter_scaling forward and one for the gradient, the same bits.
- MomentumUpdates: the ApplyMomentum ops an optimizer's step runs one after another (one per
  variable, each with its own scalar learning rate and momentum): one call that updates every
  variable with fq_f32_momentum, the same bits, where a call per variable cost more than its
  arithmetic."""
from collections import namedtuple
from itertools import compress, repeat
from operator import is_not, itemgetter

import numpy as np

from .. import _kernels
from ..batch_norm import nhwc_float32_statistics
from ..ops import _kernel_form
from . import conv_statistics, nn_numpy, vector_program
from .op_defs._infer import constant_value
from .op_defs.math import _shape, float32_range, range_layout
from .op_defs.nn import FOLDED_GRADIENT, batch_norm_forward, conv_args
from .op_defs.quant import _bits as quant_bits
from .op_registry import gradient_function, op_def

# What fusion asks of a plan: sole_consumer(tensor), the one op that reads a tensor nothing else
# needs (else None); unread(tensor), nothing reads it (no op, fetch or feed); readers(tensor), the
# ops of the plan that read it, in plan order; pinned(tensor), it is fetched or fed (read outside
# the plan); fusable(op), the op may join a unit (it cannot die on a dead branch, no control edge
# touches it); constant(tensor), it is the same in every run (the plan folds it); position(op),
# the op's place in the plan's order (-1 for an op the plan does not run: its outputs are fed);
# live(op), no dead branch (Switch) reaches the op (control edges may touch it); following(op),
# the op the plan runs after `op` but for ops whose value is the same wherever they run (Consts,
# variable reads), None after the last.
PlanRules = namedtuple("PlanRules", ["sole_consumer", "unread", "readers", "pinned", "fusable",
                                     "constant", "position", "live", "following"])

FLOAT32 = np.dtype(np.float32)
_ADDS = ("AddV2", "Add")
_ACTIVATIONS = ("Relu", "Relu6")


class Unit:
    """What the engine sees of a unit: an operation's name, type, inputs, outputs and
    control_inputs, forward(op, inputs, ctx) and gradient(op, inputs, outputs, grads, needed)
    (`needed`: for each input, whether reverse mode uses its gradient; an unneeded one may come
    back None); `ops`, the graph's ops it stands for; `runs_at`, the one of them where it runs
    (the last, unless its inputs are all computed before an earlier one), which is also where
    reverse mode takes its gradient (every reader of its outputs runs after it). Its inputs and
    outputs may include values that are not tensors of the graph (Hidden): what it passes to
    itself or to another unit."""

    control_inputs = ()
    # Whether the unit may take in ops that the plan runs before the one it was found at (a
    # unit whose ops' outputs only the unit reads, and whose writes nothing else sees).
    gathers_earlier_ops = False

    @property
    def runs_at(self):
        return self.ops[-1]

    def __repr__(self):
        return f"<{type(self).__name__} of {[op.name for op in self.ops]}>"


class Hidden:
    """A value in a run that no tensor of the graph names. One that a unit (`producer`) gives
    to later units of the same input can carry their input gradients back to it: reverse mode
    sums a DeferredInputGradient into it when the producer takes a gradient too."""

    def __init__(self, name, producer=None):
        self.name = name
        self.producer = producer
        self.dtype = FLOAT32

    def __repr__(self):
        return f"<Hidden {self.name}>"


class DeferredInputGradient:
    """The input gradient of one or more convolutions of an input, as their (filter, output
    gradient) pairs, for the first convolution of that input to compute with its own in one
    pass: the fold's two convolutions of a layer's input (one for the batch statistics, one with
    the folded weights) then read and write the input gradient once, not three times. Reverse
    mode sums them (+) in the order they arrive."""

    def __init__(self, terms):
        self.terms = terms

    def __add__(self, other):
        return DeferredInputGradient(self.terms + other.terms)


class FusedChannelChain(Unit):
    """A run of per-channel ops as one call (see the module docstring)."""

    type = "FusedChannelChain"

    def __init__(self, ops, x, scale, shifts, activation):
        self.ops = ops
        self.name = ops[-1].name
        self.scale, self.shifts = scale, shifts
        self.inputs = [x] + ([scale] if scale is not None else []) + shifts
        self.outputs = [ops[-1].outputs[0]]
        self.channels = x.shape[-1]
        self.kernel_activation = _kernels.ACTIVATIONS[activation]
        # (scale, first shift, second shift) of (*inputs, None): an operand the chain does not
        # have is the None after the inputs.
        shifts_from, missing = len(self.inputs) - len(shifts), len(self.inputs)
        self.vectors = itemgetter(1 if scale is not None else missing,
                                  *(shifts_from + k if k < len(shifts) else missing
                                    for k in range(2)))

    def forward(self, op, inputs, ctx):
        x = inputs[0]
        scale, shift_a, shift_b = self.vectors((*inputs, None))
        try:
            return (_kernels.channel_affine(x, self.channels, scale, shift_a, shift_b,
                                            self.kernel_activation),)
        except ValueError:  # x not in the kernels' form (a strided view): a copy that is
            return (_kernels.channel_affine(_kernel_form(x), self.channels, scale,
                                            shift_a, shift_b, self.kernel_activation),)

    def gradient(self, op, inputs, outputs, grads, needed):
        x, dy, clip = inputs[0], grads[0], None
        if isinstance(dy, ClippedGradient):
            # A fake quant of this chain's output: its clip joins this pass.
            dy, clip = (dy.dy, dy.interval) if dy.x is outputs[0] else (dy.value(), None)
        scale = inputs[1] if self.scale is not None else None
        wanted = (True, scale is not None, bool(self.shifts), clip)
        try:
            dx, dscale, dshift = _kernels.channel_affine_grad(
                dy, x, outputs[0], self.channels, scale, self.kernel_activation, *wanted)
        except ValueError:  # dy or x not in the kernels' form: float32 copies that are
            dx, dscale, dshift = _kernels.channel_affine_grad(
                _kernel_form(np.asarray(dy, FLOAT32)), _kernel_form(x), outputs[0],
                self.channels, scale, self.kernel_activation, *wanted)
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


class AddActivation(Unit):
    """A residual connection's add and its activation as one call each way (see the module
    docstring). Relu6 passes the gradient where 0 < a + b < 6, which is where 0 < y < 6 (and Relu
    where y > 0): the gradient needs y alone. Both operands take the one gradient, as from the
    add. Operands whose shapes differ in a run (a batch dimension the graph leaves open, fed as 1
    for one and more for the other: numpy broadcasts) take the two ops' own functions."""

    type = "AddActivation"

    def __init__(self, add, activation):
        self.ops = [add, activation]
        self.name = activation.name
        self.inputs = list(add.inputs)
        self.outputs = [activation.outputs[0]]
        self.kernel_activation = _kernels.ACTIVATIONS[activation.type]

    def forward(self, op, inputs, ctx):
        a, b = inputs
        if a.shape != b.shape:
            return tuple(_op_by_op(self.ops, zip(self.inputs, inputs), self.outputs, ctx))
        try:
            return (_kernels.add_activation(a, b, self.kernel_activation),)
        except ValueError:  # an operand not in the kernels' form: copies that are
            return (_kernels.add_activation(_kernel_form(a), _kernel_form(b),
                                            self.kernel_activation),)

    def gradient(self, op, inputs, outputs, grads, needed):
        y, dy, clip = outputs[0], grads[0], None
        if isinstance(dy, ClippedGradient):
            # A fake quant of this unit's output: its clip joins this pass.
            dy, clip = (dy.dy, dy.interval) if dy.x is y else (dy.value(), None)
        if inputs[0].shape != inputs[1].shape:
            if clip is not None:
                dy = grads[0].value()
            add, activation = self.ops
            total = op_def(add.type).forward(add, inputs, None)[0]
            before = gradient_function(activation)(activation, [total], [y], [dy])[0]
            return gradient_function(add)(add, inputs, [total], [before])
        try:
            dx = _kernels.channel_affine_grad(dy, None, y, 1, None, self.kernel_activation, True,
                                              False, False, clip)[0]
        except ValueError:  # dy not in the kernels' form: a float32 copy that is
            dx = _kernels.channel_affine_grad(_kernel_form(np.asarray(dy, FLOAT32)), None, y, 1,
                                              None, self.kernel_activation, True, False, False,
                                              clip)[0]
        return [dx, dx]


def _add_activation(op, rules):
    """The AddActivation whose add is `op`: AddV2 / Add of two float32 tensors of the output's
    rank whose dimensions agree where the graph knows them, the sum read by a Relu or Relu6 alone;
    else None."""
    if op.type not in _ADDS or not rules.fusable(op):
        return None
    total = op.outputs[0]
    tensors = (*op.inputs, total)
    shapes = [t.shape for t in tensors]
    if (any(t.dtype != FLOAT32 or t.shape is None for t in tensors)
            or len({len(shape) for shape in shapes}) != 1
            or any(len({d for d in dims if d is not None}) > 1 for dims in zip(*shapes))):
        return None
    reader = rules.sole_consumer(total)
    if (reader is None or reader.type not in _ACTIVATIONS or not rules.fusable(reader)
            or reader.inputs[0] is not total):
        return None
    return AddActivation(op, reader)


class InputSharing(Unit):
    """A unit of one op that reads the same input as an earlier unit of its kind (its owner) or is
    that owner: a Hidden link, the owner's extra output and each follower's extra input, carries
    what they share forward and the followers' DeferredInputGradient back."""

    def __init__(self, op, args, owner, link_name):
        self.ops = [op]
        self.name = op.name
        self.args = args
        self.shared = owner is not None
        self.link = owner.link if self.shared else Hidden(f"{op.name}/{link_name}", self)
        self.inputs = list(op.inputs) + ([self.link] if self.shared else [])
        self.outputs = list(op.outputs) + ([] if self.shared else [self.link])
        self.geometries = {}  # (x's shape, w's shape) -> nn_numpy.ConvGeometry

    def _geometry(self, x, w):
        """The convolution's geometry, checked once per pair of shapes."""
        key = (x.shape, w.shape)
        geometry = self.geometries.get(key)
        if geometry is None:
            geometry = self.geometries[key] = nn_numpy.conv_geometry(x, w, **self.args)
        return geometry

    def defers(self, needed):
        """A follower leaves x's gradient to its owner when both take one (x's and the link's)."""
        return self.shared and needed[0] and needed[2]


class ColumnsConv2D(InputSharing):
    """A float32 Conv2D that keeps its input's windows for its gradient (an extra output), or
    takes them from the first Conv2D of the plan that read the same input the same way (an extra
    input), instead of computing them again. Such a follower leaves its input gradient to that
    first one (a DeferredInputGradient through the windows) when it takes a gradient too."""

    type = "Conv2D"

    def __init__(self, op, args, owner=None):
        super().__init__(op, args, owner, "columns")

    def forward(self, op, inputs, ctx):
        x, w = inputs[0], inputs[1]
        if self.shared:
            return nn_numpy.conv2d_planned(x, w, inputs[2], self._geometry(x, w))[:1]
        return nn_numpy.conv2d_planned(x, w, None, self._geometry(x, w))

    def gradient(self, op, inputs, outputs, grads, needed):
        x, w = inputs[0], inputs[1]
        geometry = self._geometry(x, w)
        if self.shared:
            defer = self.defers(needed)
            dx, dw = nn_numpy.conv2d_grad_planned(x, w, grads[0], inputs[2], geometry,
                                                  input_gradient=needed[0] and not defer)
            return [dx, dw, DeferredInputGradient([(w, grads[0])]) if defer else None]
        more = grads[1].terms if grads[1] is not None else ()
        dx, dw = nn_numpy.conv2d_grad_planned(x, w, grads[0], outputs[1], geometry,
                                              input_gradient=needed[0], more=more)
        return [dx, dw]


class PairedDepthwise(InputSharing):
    """A float32 DepthwiseConv2dNative with another of the same input and geometry (the fold's
    pair): the first takes the later ones' input gradients (DeferredInputGradient) and computes
    them with its own in one pass, the same bits as the sum reverse mode would make of them."""

    type = "DepthwiseConv2dNative"

    def __init__(self, op, args, owner=None):
        super().__init__(op, args, owner, "input gradients")

    def forward(self, op, inputs, ctx):
        x, w = inputs[0], inputs[1]
        y = nn_numpy.depthwise_conv2d_planned(x, w, self._geometry(x, w))
        return (y,) if self.shared else (y, None)

    def gradient(self, op, inputs, outputs, grads, needed):
        x, w, dy = inputs[0], inputs[1], grads[0]
        geometry = self._geometry(x, w)
        if self.shared:
            defer = self.defers(needed)
            dx, dw = nn_numpy.depthwise_conv2d_grad_planned(
                x, w, dy, geometry, input_gradient=needed[0] and not defer)
            return [dx, dw, DeferredInputGradient([(w, dy)]) if defer else None]
        dw = None if dy is None else nn_numpy.depthwise_conv2d_grad_planned(
            x, w, dy, geometry, input_gradient=False)[1]
        # In the order reverse mode would have summed them: the later convolutions' first.
        terms = (grads[1].terms if grads[1] is not None else []) + ([(w, dy)] if dy is not None else [])
        if not needed[0]:
            return [None, dw]
        if all(term[0].shape == w.shape for term in terms):  # the geometry checked for w holds
            return [nn_numpy.depthwise_conv2d_input_grad_sum_planned(x, terms, geometry), dw]
        return [nn_numpy.depthwise_conv2d_input_grad_sum(x, terms, **self.args), dw]


class BatchNormStatistics(Unit):
    """A training FusedBatchNormV3 whose y nothing reads: its outputs but y (None), and its
    gradient (TF's, or the override the op names) as the op's. The MovingAverages of its batch
    mean and variance (a batch-norm layer's moving statistics, `averages`) may run in it, where
    the last of its ops ran (`last`): their operands but the statistic (the variable's read and
    the decay) follow the op's inputs, their outputs the op's."""

    type = "FusedBatchNormV3"

    def __init__(self, op, averages=(), last=None):
        self.ops = [op] + [member for average in averages for member in average.ops]
        self.name = op.name
        self.averages = averages
        self.inputs = list(op.inputs) + [t for a in averages for t in (a.inputs[0], a.inputs[2])]
        self.outputs = list(op.outputs) + [a.outputs[0] for a in averages]
        # Where each average's statistic is among the op's outputs.
        self.statistics = [list(op.outputs).index(a.inputs[1]) for a in averages]
        self._runs_at = last or op
        self.op_gradient = gradient_function(op)
        attrs = op.attrs
        # The kernel without fused_batch_norm's checks (nhwc_float32_statistics) where the op
        # asks what it computes; its epsilon as the checked path rounds it.
        self.unchecked = (attrs.get("data_format", "NHWC") == "NHWC"
                          and attrs.get("exponential_avg_factor", 1.0) == 1.0
                          and type(attrs.get("epsilon", 1e-4)) is float)
        self.epsilon = attrs.get("epsilon", 1e-4)
        self.average_variables = [a.variable for a in averages]
        self.average_code = _moving_averages_program(len(averages))
        self.no_rows = np.empty((0, 0), FLOAT32)

    @property
    def runs_at(self):
        return self._runs_at

    def forward(self, op, inputs, ctx):
        statistics = (nhwc_float32_statistics(*inputs[:3], self.epsilon) if self.unchecked
                      else None)
        if statistics is None:
            results = batch_norm_forward(self.ops[0], inputs[:5], normalize=False)
        else:
            results = (None, *statistics, np.zeros(0, FLOAT32))
        if self.averages and ctx.update_state:
            batch = [results[position] for position in self.statistics]
            registers = np.empty((len(self.average_code), batch[0].size), FLOAT32)
            sources = (*ctx.current_variables(self.average_variables), *inputs[5:], *batch)
            if _run_program(self.average_code, self.no_rows, sources, registers) is not None:
                new = tuple(registers[2::3])
                ctx.write_variables(self.average_variables, new)
                return results + new
        for k, (average, position) in enumerate(zip(self.averages, self.statistics)):
            read, decay = inputs[5 + 2 * k], inputs[6 + 2 * k]
            results += average.forward(None, [read, results[position], decay], ctx)
        return results

    def gradient(self, op, inputs, outputs, grads, needed):
        # The averages' writes take no gradient, as in TF.
        return self.op_gradient(self.ops[0], inputs[:5], outputs[:6], grads[:6]) + [None] * (
            len(inputs) - 5)


def _moving_averages_program(count):
    """The vector program of `count` MovingAverages (each one's Sub, Mul and AssignSub: new =
    current - (read - value) * decay, numpy's float32 operations in that order, so their bits) on
    the sources: the variables' current values, each average's read and decay, then each
    average's value; average k's new value is register 3k + 2. One call for a batch norm's two
    averages, where numpy took four calls each."""
    sources, code = 4 * count, []
    for k in range(count):
        first = sources + 3 * k  # its registers' rows
        read, decay, value = count + 2 * k, count + 2 * k + 1, 3 * count + k
        code += [(vector_program.SUBTRACT, first, read, value),
                 (vector_program.MULTIPLY, first + 1, first, decay),
                 (vector_program.SUBTRACT, first + 2, k, first + 1)]
    return np.array(code, np.int32).reshape(-1, 4)


class ConvStatistics(Unit):
    """A 1x1 Conv2D and the batch-norm statistics of its output (see the module docstring): the
    batch norm's outputs (y None) and those of the ops that read only the convolution's shape,
    from the convolution's input and weights, where the convolution runs."""

    type = "ConvStatistics"
    # Ops that read a tensor's shape and nothing else: they run on a stand-in of that shape.
    SHAPE_READERS = ("Size", "Shape")

    def __init__(self, conv, batch_norm, shape_readers):
        self.ops = [conv, batch_norm] + shape_readers
        self.name = batch_norm.name
        self.inputs = list(conv.inputs)
        self.kept = Hidden(f"{batch_norm.name}/moments")
        self.outputs = list(batch_norm.outputs) + [t for op in shape_readers for t in op.outputs]
        self.outputs.append(self.kept)

    @property
    def runs_at(self):
        return self.ops[0]

    def forward(self, op, inputs, ctx):
        x, w = inputs
        rows = x.size // x.shape[-1] if x.shape[-1] else 0
        *statistics, kept = conv_statistics.moments(
            np.ascontiguousarray(x).reshape(rows, x.shape[-1]), w.reshape(w.shape[2], w.shape[3]))
        stand_in = np.broadcast_to(FLOAT32.type(0), x.shape[:-1] + (w.shape[3],))
        shapes = [r for member in self.ops[2:]
                  for r in op_def(member.type).forward(member, [stand_in], ctx)]
        return (None, *statistics, np.zeros(0, FLOAT32), *shapes, kept)

    def gradient(self, op, inputs, outputs, grads, needed):
        x, w = inputs
        dx, dw = conv_statistics.gradient(
            np.ascontiguousarray(x).reshape(-1, x.shape[-1]), w.reshape(w.shape[2], w.shape[3]),
            outputs[1], outputs[-1], grads[1], grads[2], needed[0], needed[1])
        return [None if dx is None else dx.reshape(x.shape),
                None if dw is None else dw.reshape(w.shape)]


class ClippedGradient:
    """The input gradient of a FakeQuantWithMinMaxVars (dy where x lies in [lo, hi], the nudged
    range), not made yet: when x is a FusedChannelChain's or an AddActivation's output, that
    unit's gradient applies the clip in its own pass (channel_affine_grad's clip), and the fake
    quant's pass over the tensor, which would write a gradient only for the unit to read it
    back, is not made. Used anywhere else (summed with another gradient, returned), it is made
    (value())."""

    __array_ufunc__ = None  # numpy defers `array + this` to __radd__

    def __init__(self, dy, x, interval, make):
        self.dy, self.x, self.interval, self.make = dy, x, interval, make

    def value(self):
        return self.make()

    def __add__(self, other):
        return self.value() + (other.value() if isinstance(other, ClippedGradient) else other)

    def __radd__(self, other):
        return other + self.value()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value(), dtype)


class ClippedFakeQuant(Unit):
    """A per-tensor float32 FakeQuantWithMinMaxVars of a FusedChannelChain's or an AddActivation's
    output (a range tracker's activation quant): the op's forward; its input gradient as a
    ClippedGradient when its range takes none (min and max come from the tracker's assignments)."""

    type = "FakeQuantWithMinMaxVars"

    def __init__(self, op):
        self.ops = [op]
        self.name = op.name
        self.inputs, self.outputs = list(op.inputs), list(op.outputs)
        self.op_forward = op_def(op.type).forward
        self.op_gradient = gradient_function(op)
        self.bits = quant_bits(op)

    def forward(self, op, inputs, ctx):
        return self.op_forward(self.ops[0], inputs, ctx)

    def gradient(self, op, inputs, outputs, grads, needed):
        fake_quant = self.ops[0]

        def made():
            return self.op_gradient(fake_quant, inputs, outputs, grads)
        x, low, high = inputs
        if needed[1] or needed[2] or _shape(low) or _shape(high):  # a range that is not scalar
            return made()
        interval = _kernels.vars_grad_interval(float(low), float(high), *self.bits)
        if interval is None:  # the op passes every element's gradient as it is
            return [grads[0], None, None]
        return [ClippedGradient(grads[0], x, interval, lambda: made()[0]), None, None]


def fuse(order, rules):
    """`order` (the plan's ops) with each unit's ops replaced by the unit (PlanRules: what the
    plan allows)."""
    units, taken, owners, unit_of, alone = [], set(), {}, {}, set()
    for op in order:
        if op in taken:
            continue
        unit = (_chain_from(op, rules) or _add_activation(op, rules) or _conv_statistics(op, rules)
                or _columns_conv(op, rules, owners) or _paired_depthwise(op, rules, owners)
                or _statistics_only(op, rules) or _range_pair(op, rules, taken)
                or _clipped_fake_quant(op, rules, unit_of) or _debiased_average(op, rules)
                or _moving_average(op, rules) or _shape_function(op, rules)
                or _vector_program(op, rules) or _filter_scaling(op, rules)
                or _momentum_updates(op, rules))
        earlier = [member for member in unit.ops if member in alone] if unit is not None else []
        if unit is None or (earlier and not unit.gathers_earlier_ops):
            units.append(op)
            alone.add(op)
            continue
        if earlier:  # ops of the unit the plan ran before its first one: they run in it now
            units = [u for u in units if u not in earlier]
        taken.update(unit.ops)
        unit_of.update((member, unit) for member in unit.ops)
        units.append(unit)
    return _in_data_order(units, rules)


def _in_data_order(units, rules):
    """`units` sorted by where each runs, with any VectorProgram that would read a value made
    after its place (an input whose maker joined a unit that runs later) back to its ops."""
    while True:
        units.sort(key=lambda u: rules.position(u.runs_at if isinstance(u, Unit) else u))
        made_at = {t: k for k, u in enumerate(units) for t in u.outputs}
        late = next((u for k, u in enumerate(units) if isinstance(u, VectorProgram)
                     and any(made_at.get(t, -1) > k for t in u.inputs)), None)
        if late is None:
            return units
        units.remove(late)
        units.extend(late.ops)


class RangePair(Unit):
    """A Min and a Max of the same float32 tensor over the same constant axes (a range tracker's
    batch min and max): both from one fq_f32_range pass, where the earlier of the two ran. Each
    of the two may carry a tail that stores it (a last-value tracker's): a Minimum or Maximum with
    a constant scalar, then an Assign of a float32 scalar variable that nothing else writes, the
    same operations (`tails`, per output; the unit's output is then the Assign's); or a
    DebiasedMovingAverage of it (a moving-average tracker's, `averages`), which then runs here,
    its variables written by nothing else: the pair then runs where the last of its ops ran
    (`last`). A pair whose two extremes are both averaged, each with a clamp, steps in one call
    (range_trackers)."""

    type = "RangePair"

    def __init__(self, first, second, axes, tails=((), ()), averages=(None, None), last=None):
        self.ops = [first, second] + [member for tail in tails for member in tail] + [
            member for average in averages if average is not None for member in average.ops]
        self.name = f"{first.name}+{second.name}"
        self.tails = tails
        self.averages = averages
        # float32_range gives (min, max): which of the two each output is.
        self.picks = (0, 1) if first.type == "Min" else (1, 0)
        self.picked = itemgetter(*self.picks)  # (outputs) of a (min, max, ...) sequence
        # x, then each average's operands but the extreme, the min's first (`starts`: where
        # each output's operands begin).
        self.inputs, starts = [first.inputs[0]], {}
        for side in (self.picks.index(0), self.picks.index(1)):
            starts[side] = len(self.inputs)
            if averages[side] is not None:
                self.inputs.extend(averages[side].inputs[1:])
        self.starts = [starts[0], starts[1]]
        # Each output's tail as (its clamp's op type, the clamp's constant, the stored variable's
        # name), None where the tail has no such op; the constants as the Const ops hold them
        # (the plan may run those after the unit's place in its first run).
        self.stores = []
        for head, tail in zip((first, second), tails):
            clamp = tail[0] if tail and tail[0].type in _CLAMPS else None
            self.stores.append((
                None if clamp is None else clamp.type,
                None if clamp is None else constant_value(_other(clamp, _input_of(clamp, head))),
                tail[-1].inputs[0].op.name if tail else None))
        self.outputs = [average.outputs[0] if average is not None else
                        tail[-1].outputs[0] if tail else head.outputs[0]
                        for head, tail, average in zip((first, second), tails, averages)]
        self.axes = axes
        self.layouts = {}  # x's shape -> range_layout
        # Both averaged with a clamp each: the range and both steps are one range_trackers call
        # on the inputs after x, which the variables' reads and writes join by name.
        by_range = [averages[self.picks.index(0)], averages[self.picks.index(1)]]
        self.one_call = None not in by_range and all(a.clamp != _NO_CLAMP for a in by_range)
        if self.one_call:
            low, high = by_range
            self.clamps = (low.clamp, high.clamp)
            self.state = low.variables[:2] + high.variables[:2]
            self.written = [low.variables[2], high.variables[2]] + self.state
        # Both stored and neither averaged (last-value trackers): the range, both clamps and the
        # values stored are one clamped_range call; its operands by extreme, the min's first.
        self.clamped_stores = averages == (None, None) and all(
            name is not None for _, _, name in self.stores)
        if self.clamped_stores:
            by_extreme = [self.stores[self.picks.index(0)], self.stores[self.picks.index(1)]]
            self.store_clamps = tuple(_CLAMP_CODES.get(clamp, _NO_CLAMP)
                                      for clamp, _, _ in by_extreme)
            self.store_bounds = tuple(0.0 if clamp is None else float(bound)
                                      for clamp, bound, _ in by_extreme)
            self.store_names = [name for _, _, name in by_extreme]
        self._runs_at = last or first
        # An average's step counter may run before the pair's first op: it joins the unit.
        self.gathers_earlier_ops = averages != (None, None)

    @property
    def runs_at(self):
        return self._runs_at

    def forward(self, op, inputs, ctx):
        x = inputs[0]
        layout = (self.layouts.get(x.shape) if isinstance(x, np.ndarray) and x.dtype == FLOAT32
                  else None)
        if layout is None:
            layout = range_layout(self.ops[0], x, self.axes)
            if layout is None:  # a run-time x the ranges do not cover (rank 0, not float32)
                heads = [op_def(m.type).forward(m, [x, self.axes], ctx)[0] for m in self.ops[:2]]
                return self._stored(heads, inputs, ctx)
            self.layouts[x.shape] = layout
        if self.one_call and ctx.update_state and layout == (1, ()):
            state = ctx.current_variables(self.state)
            try:
                written = _kernels.range_trackers(x, self.clamps, tuple(inputs[1:]), state)
            except ValueError:  # x not in the kernels' form (a strided view): a copy that is
                written = _kernels.range_trackers(_kernel_form(x), self.clamps,
                                                  tuple(inputs[1:]), state)
            ctx.write_variables(self.written, written)
            return self.picked(written)
        if self.clamped_stores and ctx.update_state and layout == (1, ()):
            try:
                stored = _kernels.clamped_range(x, self.store_clamps, self.store_bounds)
            except ValueError:  # x not in the kernels' form (a strided view): a copy that is
                stored = _kernels.clamped_range(_kernel_form(x), self.store_clamps,
                                                self.store_bounds)
            ctx.write_variables(self.store_names, stored)
            return self.picked(stored)
        extremes = float32_range(x, layout)
        return self._stored([extremes[self.picks[0]], extremes[self.picks[1]]], inputs, ctx)

    def _stored(self, heads, inputs, ctx):
        """The two outputs: each extreme through its tail (clamp, then store) or its average."""
        outputs = []
        for value, average, start, (clamp, bound, name) in zip(heads, self.averages, self.starts,
                                                               self.stores):
            if average is not None:
                operands = inputs[start:start + len(average.inputs) - 1]
                value = average.forward(None, [value] + operands, ctx)[0]
            if clamp is not None:
                value = _CLAMPS[clamp](value, bound)
            if name is not None and ctx.update_state:
                value = np.array(value, FLOAT32)
                ctx.write_variable(name, value)
            elif name is not None:
                value = ctx.current_variable(name)
            outputs.append(value)
        return tuple(outputs)

    def gradient(self, op, inputs, outputs, grads, needed):
        # Each op's gradient as TF takes it; the two are added before they join x's other
        # gradients (the unfused plan adds them one by one). A stored or averaged output takes
        # none (no gradient passes an Assign).
        dx = None
        for member, tail, average, output, grad in zip(self.ops, self.tails, self.averages,
                                                       outputs, grads):
            if grad is not None and not tail and average is None:
                part = op_def(member.type).gradient(member, [inputs[0], self.axes], [output],
                                                    [grad])[0]
                dx = part if dx is None else dx + part
        return [dx] + [None] * (len(inputs) - 1)


# The clamps a range tracker applies to its batch range, as their ops compute them.
_CLAMPS = {"Minimum": np.minimum, "Maximum": np.maximum}
# fq_f32_tracker_step's codes for them (fq_tracker_clamp), and for no clamp.
_CLAMP_CODES = {"Minimum": 1, "Maximum": 2}
_NO_CLAMP = 0


def _input_of(op, producer):
    """The input of `op` that `producer` makes."""
    return next(t for t in op.inputs if t.op is producer)


def _stored_tail(extreme, rules):
    """The ops that store `extreme` (a RangePair output), if that is all that reads it: an
    optional Minimum / Maximum with a Const float32 scalar (read from the graph), then
    an Assign of a float32 scalar variable that no other op writes; else ()."""
    tail, running = [], extreme
    reader = rules.sole_consumer(running)
    if (reader is not None and reader.type in _CLAMPS and rules.fusable(reader)
            and _other(reader, running) is not None and _other(reader, running).op.type == "Const"
            and all(map(_scalar32, list(reader.inputs) + list(reader.outputs)))):
        tail.append(reader)
        running = reader.outputs[0]
        reader = rules.sole_consumer(running)
    if (reader is None or reader.type != "Assign" or not rules.fusable(reader)
            or reader.inputs[1] is not running or not _scalar32(running)
            or not _scalar32(reader.inputs[0]) or not _sole_writer(reader, rules)):
        return ()
    return tuple(tail + [reader])


def _averaged_tail(extreme, rules):
    """The DebiasedMovingAverage of `extreme` (a RangePair output) if the pair may run it: the
    extreme is the clamp's first operand or the Sub's value, nothing else reads it, and nothing
    else writes its variable (its write moves); else None."""
    reader = rules.sole_consumer(extreme)
    sub = rules.sole_consumer(reader.outputs[0]) if reader is not None and reader.type in _CLAMPS \
        else reader
    if sub is None or sub.type != "Sub":
        return None
    average = _debiased_average(sub, rules)
    if average is None or average.inputs[0] is not extreme or not _sole_writer(
            average.ops[-1], rules):
        return None
    return average


def _sole_writer(writer, rules):
    """Whether `writer` is the only op of the plan that writes its variable (every other reader
    of the variable's tensor is an Identity, a read) and the variable is not fed or fetched."""
    variable = writer.inputs[0]
    return not rules.pinned(variable) and all(
        r is writer or r.type == "Identity" for r in rules.readers(variable))


def _range_pair(op, rules, taken):
    """A RangePair of `op` (a Min or a Max) and the first later Max or Min of the plan that reads
    the same float32 tensor over the same constant axes with the same keep_dims."""
    other = {"Min": "Max", "Max": "Min"}.get(op.type)
    if other is None or op.inputs[0].dtype != FLOAT32 or not rules.fusable(op):
        return None
    axes = constant_value(op.inputs[1])
    if axes is None:
        return None
    keep = op.attrs.get("keep_dims", False)
    readers = rules.readers(op.inputs[0])
    for partner in readers[readers.index(op) + 1:]:
        if partner.type != other or partner in taken or not rules.fusable(partner):
            continue
        partner_axes = constant_value(partner.inputs[1])
        if (partner_axes is not None and partner.attrs.get("keep_dims", False) == keep
                and np.array_equal(partner_axes, axes)):
            tails = tuple(_stored_tail(m.outputs[0], rules) for m in (op, partner))
            averages = tuple(None if tail else _averaged_tail(m.outputs[0], rules)
                             for m, tail in zip((op, partner), tails))
            # With an average the pair runs where its last op ran, if its outputs are read
            # only after that.
            last = None if averages == (None, None) else _runs_last(
                [op, partner] + [m for tail in tails for m in tail]
                + [m for average in averages if average is not None for m in average.ops], rules)
            if last is None:
                return RangePair(op, partner, np.asarray(axes), tails)
            return RangePair(op, partner, np.asarray(axes), tails, averages, last)
    return None


def _statistics_only(op, rules):
    """The BatchNormStatistics of `op` (a training FusedBatchNormV3 whose y nothing reads), with
    the MovingAverages of its batch mean and variance when it can run them."""
    if op.type != "FusedBatchNormV3" or not op.attrs.get("is_training", True):
        return None
    if not rules.fusable(op) or not rules.unread(op.outputs[0]):
        return None
    averages = []
    for statistic in op.outputs[1:3]:
        for reader in rules.readers(statistic):
            average = _moving_average(reader, rules)
            if average is not None and average.inputs[1] is statistic:
                averages.append(average)
    last = _runs_last([op] + [m for average in averages for m in average.ops], rules)
    if not averages or last is None:
        return BatchNormStatistics(op)
    return BatchNormStatistics(op, averages, last)


def _runs_last(ops, rules):
    """The op of `ops` the plan runs last, if a unit of them may run there: every reader of
    their outputs but themselves runs after it; else None."""
    last = max(ops, key=rules.position)
    place = rules.position(last)
    if any(rules.position(r) <= place and r not in ops
           for op in ops for t in op.outputs for r in rules.readers(t)):
        return None
    return last


def _conv_statistics(op, rules):
    """A ConvStatistics of `op` (a float32 1x1 Conv2D, stride 1, fewer input than output
    channels) and the one training FusedBatchNormV3 that reads its output, with contrib's
    gradient and no y read; any other reader may only ask the output's shape."""
    if op.type != "Conv2D" or not rules.fusable(op) or "_gradient_op_type" in op.attrs:
        return None
    x, w = op.inputs
    if (x.dtype != FLOAT32 or w.dtype != FLOAT32 or w.shape is None or None in w.shape
            or tuple(w.shape[:2]) != (1, 1) or w.shape[2] >= w.shape[3]):
        return None
    args = conv_args(op)
    if args["strides"] != (1, 1) or args["padding"] not in ("SAME", "VALID"):
        return None
    y = op.outputs[0]
    readers = rules.readers(y)
    statistics = [r for r in readers if r.type == "FusedBatchNormV3"]
    shape_readers = [r for r in readers if r.type in ConvStatistics.SHAPE_READERS]
    if rules.pinned(y) or len(statistics) != 1 or len(statistics) + len(shape_readers) != len(readers):
        return None
    bn = statistics[0]
    if (bn.inputs[0] is not y or any(t is y for t in bn.inputs[1:])
            or bn.attrs.get("_gradient_op_type") != FOLDED_GRADIENT
            or _statistics_only(bn, rules) is None
            or bn.attrs.get("exponential_avg_factor", 1.0) != 1.0
            or bn.attrs.get("data_format", "NHWC") != "NHWC"
            or not all(rules.fusable(r) for r in shape_readers)):
        return None
    return ConvStatistics(op, bn, shape_readers)


def _columns_conv(op, rules, owners):
    """A ColumnsConv2D for a float32 Conv2D that takes TF's gradient, sharing the columns of an
    earlier one with the same input and geometry (`owners`, filled here)."""
    if op.type != "Conv2D" or not rules.fusable(op) or "_gradient_op_type" in op.attrs:
        return None
    x, w = op.inputs
    if x.dtype != FLOAT32 or w.dtype != FLOAT32 or w.shape is None or None in w.shape[:3]:
        return None
    args = conv_args(op)
    key = (x, tuple(w.shape[:3]), args["strides"], args["padding"], args["dilations"])
    unit = ColumnsConv2D(op, args, owners.get(key))
    owners.setdefault(key, unit)
    return unit


def _paired_depthwise(op, rules, owners):
    """A PairedDepthwise for a float32 DepthwiseConv2dNative that takes TF's gradient when another
    of the plan reads the same input with the same filter shape and geometry; the first of them
    is the owner (`owners`, filled here)."""
    if op.type != "DepthwiseConv2dNative" or not rules.fusable(op) or "_gradient_op_type" in op.attrs:
        return None
    x, w = op.inputs
    if x.dtype != FLOAT32 or w.dtype != FLOAT32 or w.shape is None or None in w.shape:
        return None
    args = conv_args(op)
    key = ("depthwise", x, tuple(w.shape), args["strides"], args["padding"], args["dilations"])
    owner = owners.get(key)
    if owner is None:
        partners = [r for r in rules.readers(x) if r is not op and r.type == op.type
                    and rules.fusable(r) and "_gradient_op_type" not in r.attrs
                    and r.inputs[0] is x and r.inputs[1].dtype == FLOAT32
                    and r.inputs[1].shape is not None and tuple(r.inputs[1].shape) == tuple(w.shape)
                    and conv_args(r) == args]
        if not partners:
            return None
        unit = owners[key] = PairedDepthwise(op, args)
        return unit
    return PairedDepthwise(op, args, owner)


def _clipped_fake_quant(op, rules, unit_of):
    """A ClippedFakeQuant of `op` (a FakeQuantWithMinMaxVars of float32) when its input is a
    FusedChannelChain's or an AddActivation's output (`unit_of`: the units so far, by op)."""
    if op.type != "FakeQuantWithMinMaxVars" or not rules.fusable(op) or "_gradient_op_type" in op.attrs:
        return None
    x = op.inputs[0]
    chain = unit_of.get(x.op)
    if (x.dtype != FLOAT32 or not isinstance(chain, (FusedChannelChain, AddActivation))
            or chain.outputs[0] is not x):
        return None
    return ClippedFakeQuant(op)


def _chain_from(op, rules):
    """The FusedChannelChain that starts at `op`, or None."""
    if not rules.fusable(op) or not op.outputs:
        return None
    scaled = _scale_of(op, _channels(op.outputs[0])) if op.type == "Mul" else None
    if scaled is not None:
        x, scale, shifts = scaled[0], scaled[1], []
    else:
        if op.type not in _ADDS + ("BiasAdd",):
            return None
        x = op.inputs[0] if op.type == "BiasAdd" else None
        for candidate in ([op.inputs[0]] if op.type == "BiasAdd" else op.inputs):
            channels = _channels(candidate)
            if channels is not None and _shift_of(op, candidate, channels) is not None:
                x = candidate
                break
        if x is None or _channels(x) is None:
            return None
        scale, shifts = None, [_shift_of(op, x, _channels(x))]
    channels = _channels(x)
    ops, running, activation = [op], op.outputs[0], None
    while activation is None:
        nxt = rules.sole_consumer(running)
        if nxt is None or not rules.fusable(nxt):
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


class DebiasedMovingAverage(Unit):
    """assign_moving_average with zero_debias, as contrib.quantize's range trackers build it
    (`ops`, in this order, the first only when the value is a clamp that only the Sub reads):

        value = Minimum / Maximum(extreme, bound); sub = read - value; mul = sub * d; biased' = AssignSub(biased, mul);
        step' = AssignAdd(local_step, increment); Pow(base, step'); sub_2 = one - Pow;
        truediv = biased' / sub_2; Assign(variable, truediv)

    with every operand a float32 scalar: the same operations in float32 arithmetic in one C call
    (fq_f32_debiased_average; the Pow as the op computes it), writing the three variables at the
    Assign's place in the plan, which nothing between can see (fusion asks that nothing else writes or reads the two shadow
    variables but their own reads). A run that does not update state runs the ops one by one."""

    type = "DebiasedMovingAverage"
    # The clamp, the step counter's AssignAdd, its Pow and sub_2 can be ready before the Sub:
    # they join the unit where it runs (every op of it is an ancestor of the Assign, so all its
    # inputs are ready there).
    gathers_earlier_ops = True

    def __init__(self, ops):
        self.ops = ops
        self.name = ops[-1].name
        sub, mul, assign_sub, assign_add, pow_, sub_2, _, assign = ops[-8:]
        # fq_f32_tracker_step's clamp: Minimum or Maximum(extreme, bound), or none.
        self.clamp = _CLAMP_CODES[ops[0].type] if len(ops) == 9 else _NO_CLAMP
        # The extreme (and with a clamp its bound), then the step's operands.
        values = list(ops[0].inputs) if len(ops) == 9 else [sub.inputs[1]]
        self.inputs = values + [sub.inputs[0], _other(mul, sub.outputs[0]), assign_add.inputs[1],
                                pow_.inputs[0], sub_2.inputs[0]]
        self.outputs = [assign.outputs[0]]
        self.variables = [op.inputs[0].op.name for op in (assign_sub, assign_add, assign)]

    def forward(self, op, inputs, ctx):
        if not ctx.update_state:
            return tuple(_op_by_op(self.ops, zip(self.inputs, inputs), self.outputs, ctx))
        bound = inputs[1] if self.clamp != _NO_CLAMP else 0.0
        biased, step = ctx.current_variables(self.variables[:2])
        written = _kernels.tracker_step(inputs[0], self.clamp, bound, *inputs[-5:], biased, step)
        ctx.write_variables(self.variables, written)
        return (written[2],)

    def gradient(self, op, inputs, outputs, grads, needed):
        return [None] * len(inputs)  # variable writes: no gradient passes them, as in TF


def _other(op, tensor):
    """The input of a two-input `op` that is not `tensor` (None if both or neither are)."""
    a, b = op.inputs
    return b if a is tensor and b is not tensor else a if b is tensor and a is not tensor else None


def _scalar32(tensor):
    return tensor is not None and tensor.dtype == FLOAT32 and tensor.shape is not None and \
        tuple(tensor.shape) == ()


def _debiased_average(op, rules):
    """The DebiasedMovingAverage whose first op (the Sub) is `op`, or None."""
    if op.type != "Sub" or not _scalar32(op.outputs[0]):
        return None
    ops, running = [op], op.outputs[0]
    # Each op reads the previous one's output (the one the chain passes on) and nothing else
    # reads it; the writers' first input is their variable.
    mul = rules.sole_consumer(running)
    if mul is None or mul.type != "Mul" or _other(mul, running) is None:
        return None
    assign_sub = rules.sole_consumer(mul.outputs[0])
    if (assign_sub is None or assign_sub.type != "AssignSub"
            or assign_sub.inputs[1] is not mul.outputs[0]):
        return None
    truediv = rules.sole_consumer(assign_sub.outputs[0])
    if truediv is None or truediv.type != "RealDiv" or truediv.inputs[0] is not assign_sub.outputs[0]:
        return None
    sub_2 = truediv.inputs[1].op
    pow_ = sub_2.inputs[1].op if sub_2.type == "Sub" and len(sub_2.inputs) == 2 else None
    assign_add = pow_.inputs[1].op if pow_ is not None and pow_.type == "Pow" else None
    assign = rules.sole_consumer(truediv.outputs[0])
    if (assign_add is None or assign_add.type != "AssignAdd" or assign is None
            or assign.type != "Assign" or assign.inputs[1] is not truediv.outputs[0]
            or rules.sole_consumer(sub_2.outputs[0]) is not truediv
            or rules.sole_consumer(pow_.outputs[0]) is not sub_2
            or rules.sole_consumer(assign_add.outputs[0]) is not pow_):
        return None
    ops = [op, mul, assign_sub, assign_add, pow_, sub_2, truediv, assign]
    clamp = op.inputs[1].op
    if clamp.type in _CLAMPS and rules.sole_consumer(op.inputs[1]) is op:
        ops.insert(0, clamp)
    tensors = [t for member in ops for t in list(member.inputs) + list(member.outputs)]
    if not all(rules.fusable(member) for member in ops) or not all(map(_scalar32, tensors)):
        return None
    # The shadow variables' writes move to the Assign's place: nothing else may touch them.
    if not _sole_writer(assign_sub, rules) or not _sole_writer(assign_add, rules):
        return None
    return DebiasedMovingAverage(ops)


def _op_by_op(ops, inputs, tensors, ctx):
    """The values of `tensors` after running `ops` (in an order their data allows) on `inputs`
    ((tensor, value) pairs: what they read from outside)."""
    values = dict(inputs)
    for member in ops:
        outputs = op_def(member.type).forward(member, [values.get(t) for t in member.inputs], ctx)
        values.update(zip(member.outputs, outputs))
    return [values[t] for t in tensors]


class MovingAverage(Unit):
    """assign_moving_average without debiasing (`ops`: sub = read - value; mul = sub * d;
    AssignSub(variable, mul)), a batch norm's moving statistics: the same numpy operations in one
    step; a run that does not update state yields the stored value, as the AssignSub does."""

    type = "MovingAverage"

    def __init__(self, ops):
        self.ops = ops
        self.name = ops[-1].name
        sub, mul, assign_sub = ops
        self.inputs = [sub.inputs[0], sub.inputs[1], _other(mul, sub.outputs[0])]
        self.outputs = [assign_sub.outputs[0]]
        self.variable = assign_sub.inputs[0].op.name

    def forward(self, op, inputs, ctx):
        if not ctx.update_state:
            return (ctx.current_variable(self.variable),)
        read, value, d = inputs
        current = ctx.current_variable(self.variable)
        new = np.subtract(current, np.asarray(np.multiply(np.subtract(read, value), d),
                                              current.dtype))
        ctx.write_variable(self.variable, new)
        return (new,)

    def gradient(self, op, inputs, outputs, grads, needed):
        return [None] * len(inputs)  # a variable write: no gradient passes it, as in TF


def _moving_average(op, rules):
    """The MovingAverage whose Sub is `op` (float32 operands of one shape, d a float32 scalar;
    nothing else reads the Sub's or the Mul's output, nothing else writes the variable), or None."""
    if op.type != "Sub" or not rules.fusable(op):
        return None
    mul = rules.sole_consumer(op.outputs[0])
    if mul is None or mul.type != "Mul" or not rules.fusable(mul) or not _scalar32(
            _other(mul, op.outputs[0])):
        return None
    assign_sub = rules.sole_consumer(mul.outputs[0])
    if (assign_sub is None or assign_sub.type != "AssignSub" or not rules.fusable(assign_sub)
            or assign_sub.inputs[1] is not mul.outputs[0] or not _sole_writer(assign_sub, rules)):
        return None
    shape = op.inputs[0].shape
    same = [op.inputs[0], op.inputs[1], op.outputs[0], mul.outputs[0], assign_sub.inputs[0]]
    if shape is None or None in shape or not all(
            t.dtype == FLOAT32 and t.shape is not None and tuple(t.shape) == tuple(shape)
            for t in same):
        return None
    return MovingAverage([op, mul, assign_sub])


class ShapeFunction(Unit):
    """Ops that compute from one tensor's shape and the plan's constants alone (`ops`, in an
    order their data allows, the last the one whose output others read): run op by op once per
    shape of that tensor, the value kept for the runs after."""

    type = "ShapeFunction"
    # Shapes kept per unit: batch sizes a run can take (beyond this the memory starts over).
    MAX_SHAPES = 64

    def __init__(self, ops, x, constants):
        self.ops = ops
        self.name = ops[-1].name
        self.inputs = [x] + constants
        self.outputs = [ops[-1].outputs[0]]
        self.values = {}

    def forward(self, op, inputs, ctx):
        shape = _shape(inputs[0])
        value = self.values.get(shape)
        if value is None:
            if len(self.values) >= self.MAX_SHAPES:
                self.values.clear()
            value = self.values[shape] = _op_by_op(self.ops, zip(self.inputs, inputs),
                                                   self.outputs, ctx)[0]
        return (value,)

    def gradient(self, op, inputs, outputs, grads, needed):
        return [None] * len(inputs)  # a shape and constants take no gradient


# Ops a ShapeFunction may hold: stateless, and computing from their operands' values.
_SHAPE_READERS = ("Size", "Shape")
_NOT_SHAPE_FUNCTION = {"Switch", "Merge", "Gradients", "Placeholder", "NoOp"}


def _shape_function(op, rules):
    """The ShapeFunction that starts at `op` (a Size or Shape): the ops that read only what it
    and they make and the plan's constants, when one tensor of theirs is all that others read
    (or fetch), so that all of them run before its maker; None if that is `op` alone."""
    if op.type not in _SHAPE_READERS or not rules.fusable(op):
        return None
    members, made = [op], set(op.outputs)
    grew = True
    while grew:
        grew = False
        for t in list(made):
            for reader in rules.readers(t):
                if (reader in members or not rules.fusable(reader)
                        or reader.type in _NOT_SHAPE_FUNCTION or op_def(reader.type).stateful
                        or not all(i in made or rules.constant(i) for i in reader.inputs)):
                    continue
                members.append(reader)
                made.update(reader.outputs)
                grew = True
    exits = [t for t in made if rules.pinned(t) or not rules.readers(t)
             or any(r not in members for r in rules.readers(t))]
    if len(members) < 2 or len(exits) != 1:
        return None
    members.sort(key=lambda m: m._index)  # creation order: each op after its inputs' makers
    if exits[0].op is not members[-1]:
        return None
    constants = list(dict.fromkeys(i for m in members for i in m.inputs if i not in made))
    return ShapeFunction(members, op.inputs[0], constants)


class VectorProgram(Unit):
    """Element-wise ops on float32 vectors as one C call each way (see the module docstring):
    `ops` in plan order; runs at `runs_at`, the first of them after every input is made. Its
    outputs: the tensors other ops read or the run fetches (`exits`), then a Hidden holding the
    program's registers for the gradient."""

    type = "VectorProgram"
    # The set is found at the first of its ops that fusion visits: an earlier one may have been
    # visited alone (refused by a rule of its own), and joins the unit.
    gathers_earlier_ops = True

    def __init__(self, ops, inputs, exits, runs_at):
        self.ops = ops
        self.name = f"{ops[0].name} .. {ops[-1].name}"
        self.inputs = inputs
        self.exits = exits
        self.outputs = exits + [Hidden(f"{self.name}/registers")]
        self._runs_at = runs_at
        self.program = vector_program.Forward(ops, inputs)
        self.length = vector_program.elements(exits[0])
        self.no_rows = np.empty((0, self.length), FLOAT32)
        self.exit_places = self._exit_places()
        # (needed, which exits have a gradient) -> _gradient_program(...)
        self.gradients = {}

    @property
    def runs_at(self):
        return self._runs_at

    def _value(self, row, shape, sources, registers):
        """A tensor's value from its row (a source's, or a register's) in its own shape."""
        if row < len(sources):
            return np.reshape(sources[row], shape)
        return registers[row - len(sources)].reshape(shape)

    def _exit_places(self):
        """Where forward finds each exit: (whether among the sources, row there or in the
        registers, the exit's shape or None where a register row has it)."""
        sources, places = len(self.inputs), []
        for t in self.exits:
            row = self.program.row[t]
            places.append((True, row, t.shape) if row < sources else
                          (False, row - sources, self._row_shape(t)))
        return places

    def _row_shape(self, tensor):
        """The shape a register row takes to be `tensor`'s value: None where it has it already
        (a vector of the program's length; one reshape fewer a value)."""
        return None if tuple(tensor.shape) == (self.length,) else tensor.shape

    def forward(self, op, inputs, ctx):
        program = self.program
        registers = np.empty((program.registers, self.length), FLOAT32)
        # A 0-d value may be a numpy scalar: the binding takes it.
        sources = _run_program(program.code, self.no_rows, inputs, registers)
        if sources is None:
            raise ValueError(f"{self.name}: the inputs must be float32, got "
                             f"{[np.asarray(v).dtype.name for v in inputs]}")
        values = [np.asarray(sources[row]).reshape(shape) if in_sources else
                  registers[row] if shape is None else registers[row].reshape(shape)
                  for in_sources, row, shape in self.exit_places]
        return (*values, registers)

    def gradient(self, op, inputs, outputs, grads, needed):
        exit_grads = grads[:len(self.exits)]
        given = tuple(map(is_not, exit_grads, repeat(None)))
        planned = self.gradients.get((needed, given))
        if planned is None:
            planned = self.gradients[needed, given] = self._gradient_program(needed, given)
        program, returned = planned
        if program.possible:
            sources = list(inputs)  # a 0-d value may be a numpy scalar: the binding takes it
            sources.extend(vector_program.CONSTANTS)
            sources.extend(compress(exit_grads, given))
            registers = np.empty((program.registers, self.length), FLOAT32)
            sources = _run_program(program.code, outputs[-1], sources, registers)
            if sources is not None:  # else a gradient that is not float32: numpy's types decide
                result = [None] * len(inputs)
                for k, in_registers, row, shape in returned:
                    if not in_registers:
                        result[k] = np.asarray(sources[row]).reshape(shape)
                    elif shape is None:
                        result[k] = registers[row]
                    else:
                        result[k] = registers[row].reshape(shape)
                return result
        return self._op_by_op_gradient(inputs, outputs[-1], exit_grads, needed)

    def _gradient_program(self, needed, given):
        """The gradient's program for the inputs `needed` and the exits `given` a gradient, and
        where each input's gradient comes from: (input position, whether in the registers, row
        there or in the sources, the input's shape or, in the registers, None where the row
        has it)."""
        program = vector_program.Gradient(
            self.program, self.ops, self.inputs, [t for t, g in zip(self.exits, given) if g],
            needed, self.length)
        kept = self.program.registers  # the forward's registers come first in the gradient's rows
        returned = [(k, True, row - program.first_register, self._row_shape(self.inputs[k]))
                    if row >= program.first_register else
                    (k, False, row - kept, self.inputs[k].shape) for k, row in program.returned]
        return program, returned

    def _op_by_op_gradient(self, inputs, registers, exit_grads, needed):
        values = dict(zip(self.inputs, inputs))
        for member in self.ops:
            t = member.outputs[0]
            values[t] = self._value(self.program.row[t], t.shape, list(inputs), registers)
        return _gradients_op_by_op(self.ops, self.inputs, values, self.exits, exit_grads, needed)


def _gradients_op_by_op(ops, inputs, values, exits, exit_grads, needed):
    """The gradients of a unit's `inputs` (where `needed`) from its ops' own gradient functions in
    reverse order, summed as reverse mode sums them; `values` holds every tensor's value, and the
    gradients of the `exits` are `exit_grads` (None: none)."""
    useful = {t for t, need in zip(inputs, needed) if need}
    for member in ops:  # in plan order: each after the ops that make its inputs
        if any(t in useful for t in member.inputs):
            useful.add(member.outputs[0])
    local = {t: g for t, g in zip(exits, exit_grads) if g is not None}
    for member in reversed(ops):
        incoming = local.get(member.outputs[0])
        if incoming is None:
            continue
        parts = gradient_function(member)(member, [values.get(t) for t in member.inputs],
                                          [values[member.outputs[0]]], [incoming])
        for t, part in zip(member.inputs, parts):
            if part is not None and t in useful:
                earlier = local.get(t)
                local[t] = part if earlier is None else earlier + part
    return [local.get(t) if need else None for t, need in zip(inputs, needed)]


def _run_program(code, kept, sources, registers):
    """Runs a vector program on `sources` (a sequence), or on copies of them in the kernels' form
    (C-contiguous, aligned) where the binding refuses one that is not; the sources it ran on, or
    None where one is not float32."""
    try:
        _kernels.vector_program(code, kept, tuple(sources), registers)
        return sources
    except ValueError:
        sources = [_kernel_form(np.asarray(v)) for v in sources]
        if any(v.dtype != FLOAT32 for v in sources):
            return None
        _kernels.vector_program(code, kept, tuple(sources), registers)
        return sources


def _fixed32(tensor):
    """A float32 tensor of a fully known shape."""
    shape = tensor.shape
    return tensor.dtype == FLOAT32 and shape is not None and None not in shape


def _vector_op(op, length, rules):
    """An op a VectorProgram of vectors of `length` elements (None: any) can run: element-wise
    on fixed-shape float32 operands of one shape (or a scalar and a vector), making a vector;
    not a variable's read, not what the plan folds, not what a MovingAverage or a
    FusedChannelChain would take."""
    if (op.type not in vector_program.FORWARD and op.type not in vector_program.PASSING
            or rules.position(op) < 0 or not rules.fusable(op) or len(op.outputs) != 1
            or rules.constant(op.outputs[0])):
        return False
    if op.type == "Identity" and op.inputs[0].op.type == "VariableV2":
        return False  # a variable's read: the run makes it before any step
    if op.type == "Reshape" and constant_value(op.inputs[1]) is None:
        return False
    data, out = vector_program.data_inputs(op), op.outputs[0]
    if not all(map(_fixed32, list(data) + [out])) or len(out.shape) == 0:
        return False
    size = vector_program.elements(out)
    if (length is not None and size != length) or (
            op.type not in vector_program.PASSING
            and not all(tuple(t.shape) in ((), tuple(out.shape)) for t in data)):
        return False
    if op.type == "Reshape" and vector_program.elements(data[0]) != size:
        return False
    return not _in_moving_average(op, rules) and _chain_from(op, rules) is None


def _in_moving_average(op, rules):
    """Whether `op` is the Sub or the Mul of a MovingAverage (which that unit takes)."""
    if op.type == "Sub":
        return _moving_average(op, rules) is not None
    return op.type == "Mul" and any(
        t.op.type == "Sub" and rules.sole_consumer(t) is op and _moving_average(t.op, rules)
        for t in op.inputs)


def _vector_program(op, rules):
    """The VectorProgram of the connected element-wise ops around `op` (two or more), when one
    place in the plan has every input made and every reader outside still to run."""
    if not _vector_op(op, None, rules):
        return None
    length = vector_program.elements(op.outputs[0])
    members, stack = {op}, [op]
    while stack:  # the ops joined to it through the tensors they pass each other
        current = stack.pop()
        neighbours = [t.op for t in vector_program.data_inputs(current)] + [
            r for t in current.outputs for r in rules.readers(t)]
        for other in neighbours:
            if other not in members and _vector_op(other, length, rules):
                members.add(other)
                stack.append(other)
    if len(members) < 2:
        return None
    ops = sorted(members, key=rules.position)
    made = {m.outputs[0] for m in ops}
    inputs = list(dict.fromkeys(t for m in ops for t in vector_program.data_inputs(m)
                                if t not in made))
    exits = [t for t in made if rules.pinned(t) or any(r not in members for r in rules.readers(t))]
    exits.sort(key=lambda t: rules.position(t.op))
    ready = max((rules.position(t.op) for t in inputs), default=-1)
    runs_at = next((m for m in ops if rules.position(m) > ready), None)
    if not exits or runs_at is None or any(
            rules.position(r) <= rules.position(runs_at)
            for t in exits for r in rules.readers(t) if r not in members):
        return None
    return VectorProgram(ops, inputs, exits, runs_at)


class FilterScaling(Unit):
    """Muls of a filter by vectors in turn (see the module docstring): `ops` in order, `filter`
    the first one's filter operand, `vectors` the vector operand of each. Outputs: the last
    product, then a Hidden holding the products (the later Muls' filter operands)."""

    type = "FilterScaling"

    def __init__(self, ops, filter_operand, vectors):
        self.ops = ops
        self.name = ops[-1].name
        self.inputs = [filter_operand] + vectors
        self.outputs = [ops[-1].outputs[0], Hidden(f"{self.name}/products")]
        self.shape = tuple(filter_operand.shape)
        self.size = vector_program.elements(filter_operand)

    def forward(self, op, inputs, ctx):
        products = np.empty((len(self.ops), self.size), FLOAT32)
        try:
            _kernels.filter_scaling(inputs[0], tuple(inputs[1:]), products)
        except ValueError:  # an operand not in the kernels' form: copies that are
            _kernels.filter_scaling(_kernel_form(inputs[0]), tuple(map(_kernel_form, inputs[1:])),
                                    products)
        return products[-1].reshape(self.shape), products

    def gradient(self, op, inputs, outputs, grads, needed):
        g, products = grads[0], outputs[1]
        if g is None:
            return [None] * len(inputs)
        filters = (inputs[0],) + tuple(products[:-1])
        df0 = np.empty(self.shape, FLOAT32) if needed[0] else None
        # A list, not a generator, under the tuple: one frame, where a generator resumes once for
        # each vector (the demo's step makes about a hundred such calls fewer in all).
        dvectors = tuple([np.empty(t.shape, FLOAT32) if need else None
                          for t, need in zip(self.inputs[1:], needed[1:])])
        try:
            _kernels.filter_scaling_grad(filters, tuple(inputs[1:]), g, df0, dvectors)
        except ValueError:  # an operand or a gradient that is not a C-contiguous float32 array
            values = dict(zip(self.inputs, inputs))
            values.update((m.outputs[0], p.reshape(self.shape)) for m, p in zip(self.ops, products))
            return _gradients_op_by_op(self.ops, self.inputs, values, self.outputs[:1], [g], needed)
        return [df0, *dvectors]


def _repeated_vector(op, running):
    """The other operand of a Mul of `running` (a fixed-shape float32 filter) when it is a
    float32 vector of two or more elements whose shape is the filter's last dimensions (it repeats
    down the filter's rows: numpy sums its gradient down them in row order), else None."""
    if op.type != "Mul" or running not in op.inputs or op.inputs[0] is op.inputs[1]:
        return None
    other = _other(op, running)
    shape, filter_shape = other.shape, running.shape
    if (not _fixed32(other) or not 0 < len(shape) < len(filter_shape)
            or tuple(filter_shape[-len(shape):]) != tuple(shape)
            or vector_program.elements(other) < 2 or op.outputs[0].shape != filter_shape):
        return None
    return other


def _filter_scaling(op, rules):
    """The FilterScaling that starts at `op`: a Mul of a fixed-shape float32 filter (rank two or
    more) by a repeated vector, and each Mul that alone reads the product before it, up to
    kernels' FILTER_SCALING_MAX."""
    if op.type != "Mul" or not rules.fusable(op):
        return None
    filter_operand = next((t for t in op.inputs if _fixed32(t) and len(t.shape) >= 2
                           and _repeated_vector(op, t) is not None), None)
    if filter_operand is None or rules.constant(op.outputs[0]):
        return None
    ops, vectors, running = [op], [_repeated_vector(op, filter_operand)], op.outputs[0]
    while len(ops) < _kernels.FILTER_SCALING_MAX:
        reader = rules.sole_consumer(running)
        vector = None if reader is None or not rules.fusable(reader) else _repeated_vector(
            reader, running)
        if vector is None:
            break
        ops.append(reader)
        vectors.append(vector)
        running = reader.outputs[0]
    return FilterScaling(ops, filter_operand, vectors)


class MomentumUpdates(Unit):
    """ApplyMomentum ops that the plan runs one after another, on float32 variables of distinct
    names with float32 scalar learning rates and momenta: every update in one call
    (_kernels.momentum_group), the same bits as op by op. Nothing runs between them, and no
    two write one variable, so no op can see the order change. A run that does not update state
    yields the stored values, as the ops do."""

    type = "MomentumUpdates"

    def __init__(self, ops):
        self.ops = ops
        self.name = f"{ops[0].name} .. {ops[-1].name}"
        count = len(ops)
        # In three runs: the gradients, the learning rates, the momenta.
        self.inputs = ([op.inputs[3] for op in ops] + [op.inputs[2] for op in ops]
                       + [op.inputs[4] for op in ops])
        self.runs = (slice(0, count), slice(count, 2 * count), slice(2 * count, 3 * count))
        self.outputs = [op.outputs[0] for op in ops]
        self.variables = tuple(op.inputs[0].op.name for op in ops)
        self.accumulators = tuple(op.inputs[1].op.name for op in ops)
        self.nesterov = tuple(bool(op.attrs.get("use_nesterov", False)) for op in ops)

    def forward(self, op, inputs, ctx):
        if not ctx.update_state:
            return ctx.current_variables(self.variables)
        gradients, learning_rates, momenta = (tuple(inputs[run]) for run in self.runs)
        new_variables, new_accumulators = _kernels.momentum_group(
            ctx.current_variables(self.variables), ctx.current_variables(self.accumulators),
            gradients, learning_rates, momenta, self.nesterov)
        ctx.write_variables(self.accumulators, new_accumulators)
        ctx.write_variables(self.variables, new_variables)
        return tuple(new_variables)

    def gradient(self, op, inputs, outputs, grads, needed):
        return [None] * len(inputs)  # variable writes: no gradient passes them, as in TF


def _momentum_update(op, rules):
    """Whether `op` is an ApplyMomentum a MomentumUpdates can run: no dead branch reaches it;
    float32 variable and accumulator (two variables) of the gradient's static shape; float32
    scalar learning rate and momentum."""
    if op is None or op.type != "ApplyMomentum" or not rules.live(op):
        return False
    var, accum, lr, grad, momentum = op.inputs
    shape = grad.shape
    return (var.op.type == accum.op.type == "VariableV2" and var.op is not accum.op
            and _scalar32(lr) and _scalar32(momentum) and shape is not None and None not in shape
            and all(t.dtype == FLOAT32 and t.shape is not None and tuple(t.shape) == tuple(shape)
                    for t in (var, accum, grad)))


def _momentum_updates(op, rules):
    """The MomentumUpdates of `op` and the ApplyMomentum ops the plan runs right after it, up to
    the first that writes a variable an earlier one writes; None when there is no second."""
    if not _momentum_update(op, rules):
        return None
    ops, names = [op], {op.inputs[0].op.name, op.inputs[1].op.name}
    nxt = rules.following(op)
    while _momentum_update(nxt, rules):
        variables = {nxt.inputs[0].op.name, nxt.inputs[1].op.name}
        if variables & names:
            break
        ops.append(nxt)
        names |= variables
        nxt = rules.following(nxt)
    return MomentumUpdates(ops) if len(ops) >= 2 else None
