"""Fake-quant insertion (contrib's quantize.Quantize): the layer patterns, where each quantizer
goes, its name and range tracker, quant_delay, scope filtering and leftover Add/Mul ops; plus
fqcore's weight options (symmetric weights alone, per-channel weights for int8 backends)."""
import numpy as np

from ..graph import build
from . import common, fold_fused, fold_unfused, quant_ops
from .patterns import ANY, OneOf, Op, get_op, get_tensor, match_graph

_QUANTIZABLE = "Conv2D|MatMul|DepthwiseConv2dNative"
_ACTIVATION_TYPES = {"Relu", "Relu6", "Identity"}
_RELU_TYPES = {"Relu", "Relu6"}
_FAKE_QUANT_TYPES = {"FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs",
                     "FakeQuantWithMinMaxVarsPerChannel"}
_LEFTOVER_TYPES = {"Add", "AddV2", "Mul"}
# Ops a quantized tensor passes through unchanged on its way to a leftover Add/Mul.
_PASS_THROUGH = {"Reshape", "Identity", "BatchToSpaceND", "SpaceToBatchND", "MaxPool", "Max"}


class _Patterns:
    """contrib's patterns: weight -> layer -> [BatchToSpaceND] -> [fold correction] ->
    [bias add] -> [bypass] -> activation -> [post-activation bypass]."""

    def __init__(self):
        self.weight_read = Op("Identity", [Op("Variable|VariableV2")])
        self.folded_weight = Op("Mul")
        self.layer = Op(_QUANTIZABLE, [ANY, OneOf([self.weight_read, self.folded_weight])],
                        ordered=False)
        # An atrous layer's output comes back through BatchToSpaceND.
        layer_output = OneOf([Op("BatchToSpaceND", [self.layer, ANY, ANY]), self.layer])
        folded_bias_mul = Op("Mul", [ANY, layer_output], ordered=False)
        correction = Op("Add|AddV2", [folded_bias_mul, ANY], ordered=False)
        self.folded_bias_add = Op("Add|AddV2", [correction, ANY], ordered=False)
        batch_norm_identity = Op("Identity", [self.folded_bias_add])
        self.bias_add = Op("Add|AddV2|BiasAdd", [layer_output, ANY], ordered=False)
        self.bypass = Op("Add|AddV2", [OneOf([self.bias_add, self.folded_bias_add,
                                              batch_norm_identity]), ANY], ordered=False)
        self.activation = Op("|".join(sorted(_ACTIVATION_TYPES)), [OneOf([
            self.bias_add, self.folded_bias_add, batch_norm_identity, self.bypass, self.layer])])
        self.post_bypass = Op("Add|AddV2", [ANY, self.activation], ordered=False)
        self.final = OneOf([self.bias_add, self.folded_bias_add])
        self.separable = Op(_QUANTIZABLE, [layer_output, ANY], ordered=False)

    def weight(self, found, folded=True):
        weight = get_tensor(found, self.weight_read)
        if weight is None and folded:
            weight = get_tensor(found, self.folded_weight)
        return weight

    def bias_add_op(self, found):
        return get_op(found, self.bias_add) or get_op(found, self.folded_bias_add)


class _LayerMatch:
    def __init__(self, layer_op, weight, activation_op, bypass_op, post_bypass_op, bias_add_op):
        self.layer_op = layer_op
        self.weight = weight
        self.activation_op = activation_op
        self.bypass_op = bypass_op
        self.post_bypass_op = post_bypass_op
        self.bias_add_op = bias_add_op


def _find_layers(graph):
    """Largest matches first (post-activation bypass, then activation, then the final bias add,
    then separable layers), each layer op once."""
    p = _Patterns()
    matches, seen = [], set()

    def add(layer_op, *rest):
        if layer_op is not None and layer_op not in seen:
            seen.add(layer_op)
            matches.append(_LayerMatch(layer_op, *rest))

    for found in match_graph(graph, p.post_bypass):
        add(get_op(found, p.layer), p.weight(found), get_op(found, p.activation),
            get_op(found, p.bypass), get_op(found, p.post_bypass), p.bias_add_op(found))
    for found in match_graph(graph, p.activation):
        if not _feeds_batch_norm(get_op(found, p.activation)):
            add(get_op(found, p.layer), p.weight(found), get_op(found, p.activation),
                get_op(found, p.bypass), None, p.bias_add_op(found))
    for found in match_graph(graph, p.final):
        add(get_op(found, p.layer), p.weight(found), p.bias_add_op(found), None, None, None)
    for found in match_graph(graph, p.separable):
        add(get_op(found, p.layer), p.weight(found, folded=False), get_op(found, p.layer), None,
            None, None)
    return matches


def _feeds_batch_norm(activation_op):
    """conv -> Identity -> batch norm: after folding, that Identity only feeds the statistics
    and is not quantized (contrib's _IsSkipLayer). An unfused batch norm reads it through its
    moments (Mean, SquaredDifference) and x * inv, a Mul feeding the chain's add_1."""
    if activation_op.type != "Identity":
        return False
    consumers = activation_op.outputs[0].consumers()
    if len(consumers) == 1 and consumers[0].type in fold_fused.BATCH_NORM_TYPES:
        return True
    x_times_inv = [c for c in consumers if c.type == "Mul" and any(
        fold_unfused.is_chain_end(d) for d in c.outputs[0].consumers())]
    return bool(x_times_inv) and all(
        c in x_times_inv or c.type in ("Mean", "SquaredDifference") for c in consumers)


class _Inserter:
    """Inserts quantizers with one set of options; consumers are those before any insertion."""

    def __init__(self, graph, is_training, weight_bits, activation_bits, symmetric, ema_decay,
                 quant_delay, scope, weight_symmetric=None, weight_per_channel=False,
                 vars_collection=None):
        self.graph = graph
        self.vars_collection = vars_collection
        self.is_training = is_training
        self.weight_bits = weight_bits
        self.activation_bits = activation_bits
        self.symmetric = symmetric
        self.weight_symmetric = symmetric if weight_symmetric is None else weight_symmetric
        self.weight_per_channel = weight_per_channel
        self.ema_decay = ema_decay
        self.quant_delay = quant_delay
        self.scope = _scope_prefix(scope)
        self.consumers = {}
        for op in graph.get_operations():
            for t in op.inputs:
                self.consumers.setdefault(t.op, [])
                if op not in self.consumers[t.op]:
                    self.consumers[t.op].append(op)

    def consumers_of(self, op):
        return list(self.consumers.get(op, []))

    def insert(self, context, name, producer, consumers, moving_avg, bits, init_min=-6.0,
               narrow_range=False, producer_scope=False, consumer_scope=False, symmetric=None,
               per_channel=False, depthwise=False):
        """contrib's _InsertQuantOp: skip out-of-scope producers/consumers and already
        quantized tensors; build the tracker and fake quant; reroute the consumers. Symmetric
        ranges follow the rewrite's option unless `symmetric` says otherwise; per_channel and
        depthwise go to last_value_quantize."""
        scope = self.scope
        if producer_scope and scope and not producer.name.startswith(scope):
            return
        if consumer_scope and scope and any(not c.name.startswith(scope) for c in consumers):
            return
        prefix = common.add_context(context, name)
        x = producer.outputs[0]
        if _followed_by_fake_quant(x):
            return
        g = self.graph
        symmetric = self.symmetric if symmetric is None else symmetric
        with g.name_scope(""):
            if moving_avg:
                quant = quant_ops.moving_avg_quantize(
                    g, x, prefix, self.is_training, init_min=init_min, ema_decay=self.ema_decay,
                    num_bits=bits, narrow_range=narrow_range, symmetric=symmetric,
                    vars_collection=self.vars_collection)
            else:
                quant = quant_ops.last_value_quantize(
                    g, x, prefix, self.is_training, init_min=init_min, num_bits=bits,
                    narrow_range=narrow_range, symmetric=symmetric, per_channel=per_channel,
                    depthwise=depthwise, vars_collection=self.vars_collection)
            if self.quant_delay and self.quant_delay > 0:
                active = build.greater_equal(common.quantization_step(g),
                                             np.int64(self.quant_delay),
                                             name=prefix + "/activate_quant")
                quant = build.cond(active, lambda: quant, lambda: x,
                                   name=prefix + "/delayed_quant")
        if consumers and common.reroute(quant, x, can_modify=consumers) < len(consumers):
            raise ValueError("no inputs quantized for ops: [" +
                             ", ".join(c.name for c in consumers) + "]")

    def quantize_layer(self, match):
        context = common.context_of(match.layer_op.name)
        if match.weight is not None:
            # Per channel: symmetric narrow ranges put every channel's zero point at int8 0,
            # which TFLite's int8 kernels require of weights.
            per_channel = self.weight_per_channel
            self.insert(context, "weights_quant", match.weight.op,
                        self.consumers_of(match.weight.op), moving_avg=False,
                        bits=self.weight_bits, narrow_range=True, consumer_scope=True,
                        symmetric=per_channel or self.weight_symmetric, per_channel=per_channel,
                        depthwise=per_channel and match.layer_op.type == "DepthwiseConv2dNative")
        quantized = set()
        add_context = context
        if match.activation_op is not None:
            if match.bypass_op is not None:
                add_context = common.context_of(context)
            self.insert(add_context, "act_quant", match.activation_op,
                        self.consumers_of(match.activation_op), moving_avg=True,
                        bits=self.activation_bits, init_min=0.0, producer_scope=True)
            quantized.add(match.activation_op)
        if match.bypass_op is not None:
            self.insert(context, "conv_quant", match.bias_add_op,
                        self.consumers_of(match.bias_add_op), moving_avg=True,
                        bits=self.activation_bits, producer_scope=True, consumer_scope=True)
            quantized.add(match.bias_add_op)
            consumers = self.consumers_of(match.bypass_op)
            if not any(c.type in _ACTIVATION_TYPES for c in consumers):
                self.insert(add_context, "add_quant", match.bypass_op, consumers,
                            moving_avg=True, bits=self.activation_bits, producer_scope=True,
                            consumer_scope=True)
                quantized.add(match.bypass_op)
        if match.post_bypass_op is not None:
            consumers = self.consumers_of(match.post_bypass_op)
            if not any(c.type in _RELU_TYPES for c in consumers):
                self.insert(common.context_of(match.post_bypass_op.name),
                            "post_activation_bypass_quant", match.post_bypass_op, consumers,
                            moving_avg=True, bits=self.activation_bits, producer_scope=True)
                quantized.add(match.post_bypass_op)
        return quantized

    def quantize_leftovers(self, quantized):
        """Add/Mul ops left unquantized that are fed (through pass-through ops and other
        Add/Mul) by a quantized tensor get `<op>/activation_<Type>_quant`, unless their only
        consumer is a ReLU that inference fuses into them (contrib's _QuantizeActivationLayers)."""
        for op in self.graph.get_operations():
            if _needs_leftover_quant(op, quantized):
                # contrib inserts these with asymmetric ranges whatever `symmetric` says.
                self.insert(op.name, f"activation_{op.type}_quant", op, self.consumers_of(op),
                            moving_avg=True, bits=self.activation_bits, producer_scope=True,
                            symmetric=False)


def _needs_leftover_quant(op, quantized):
    if op in quantized or op.type not in _LEFTOVER_TYPES:
        return False
    consumers = op.outputs[0].consumers()
    if len(consumers) == 1 and consumers[0].type in _RELU_TYPES:
        return False
    for tensor in op.inputs:
        source = tensor.op
        while source.type in _PASS_THROUGH and source.inputs:
            source = source.inputs[0].op
        if source.type == "FakeQuantWithMinMaxVars" or "delayed_quant/Merge" in source.name[1:]:
            return True
        if source.type in _LEFTOVER_TYPES and any(
                _needs_leftover_quant(t.op, quantized) for t in source.inputs):
            return True
    return False


def _followed_by_fake_quant(tensor):
    pending = tensor.consumers()
    while pending:
        consumer = pending.pop()
        if consumer.type in _FAKE_QUANT_TYPES:
            return True
        if consumer.type in _PASS_THROUGH:
            for output in consumer.outputs:
                pending.extend(output.consumers())
    return False


def _scope_prefix(scope):
    return scope + "/" if scope and not scope.endswith("/") else scope


def check_per_channel_weights(graph, scope=None):
    """Per-channel weight quantizers quantize along the weights' last axis, the output channels
    of a layer reading them as its second input (MatMul without transpose_b). Raises ValueError,
    before anything is rewritten, for a layer whose weights would be quantized otherwise."""
    scope = _scope_prefix(scope)
    for match in _find_layers(graph):
        op, weight = match.layer_op, match.weight
        if (weight is None or _followed_by_fake_quant(weight) or
                (scope and any(not c.name.startswith(scope) for c in weight.consumers()))):
            continue
        if op.inputs[1] is not weight or op.attrs.get("transpose_b"):
            raise ValueError(f"weight_per_channel=True quantizes weights along their last axis, "
                             f"but {op.type} {op.name!r} reads {weight.name} "
                             f"{'transposed' if op.inputs[1] is weight else 'as its first input'}")


def quantize(graph, is_training, weight_bits=8, activation_bits=8, symmetric=False,
             ema_decay=0.999, quant_delay=None, scope=None, weight_symmetric=None,
             weight_per_channel=False, vars_collection=None):
    """Inserts the fake quant ops into `graph` in place. weight_symmetric (None: `symmetric`)
    sets the weight quantizers' symmetric flag alone; weight_per_channel makes them per
    output channel, symmetric and narrow; vars_collection is a collection the range variables
    join besides the global variables."""
    inserter = _Inserter(graph, is_training, weight_bits, activation_bits, symmetric, ema_decay,
                         quant_delay, scope, weight_symmetric, weight_per_channel,
                         vars_collection)
    quantized = set()
    for match in _find_layers(graph):
        quantized |= inserter.quantize_layer(match)
    inserter.quantize_leftovers(quantized)
