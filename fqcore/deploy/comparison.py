"""compare(): the integer model against the fake-quant graph it was exported from, layer by layer
(share of elements that differ, largest difference in quantization steps) and on the task."""
from dataclasses import dataclass

import numpy as np


@dataclass
class LayerDifference:
    """One quantized tensor of the model: `differing` is the share of its elements whose integer
    value differs from the fake-quant graph's (on the same grid), `max_steps` the largest
    difference in quantization steps."""
    name: str
    elements: int
    differing: float
    max_steps: float


@dataclass
class Comparison:
    layers: list
    graph_accuracy: float = None
    model_accuracy: float = None

    def __str__(self):
        width = max([len(layer.name) for layer in self.layers] + [5])
        lines = [f"{'layer':<{width}}  {'elements':>9}  {'differ':>7}  {'max steps':>9}"]
        lines += [f"{layer.name:<{width}}  {layer.elements:>9}  {layer.differing:>7.2%}  "
                  f"{layer.max_steps:>9g}" for layer in self.layers]
        if self.graph_accuracy is not None:
            lines.append(f"accuracy: fake-quant graph {self.graph_accuracy:.2%}, integer model "
                         f"{self.model_accuracy:.2%}")
        return "\n".join(lines)


def _as_interpreter(model, rounding):
    from .export import ExportedModel
    from .interpreter import Interpreter
    if isinstance(model, Interpreter):
        return model
    if isinstance(model, ExportedModel):
        model = model.model
    return Interpreter(model, rounding=rounding)


def compare(session, model, feeds, labels=None, *, rounding="tflite_reference"):
    """Runs `feeds` (graph placeholder name -> array) through `session`'s fake-quant graph and
    through `model` (an exported model, its bytes or path, a Model or an Interpreter) with the
    reference interpreter, and compares every model tensor that has a graph twin. With `labels`
    (class indices), also the accuracy of the model's first output against the graph's."""
    interpreter = _as_interpreter(model, rounding)
    if not isinstance(feeds, dict):
        raise TypeError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    model_ir = interpreter.model
    values = interpreter.tensors(feeds)
    graph = session.graph
    twins = []
    for name, tensor in model_ir.tensors.items():
        if tensor.data is not None or tensor.quantization is None or tensor.dtype == "int32":
            continue
        try:
            twins.append((name, graph.get_tensor_by_name(name + ":0")))
        except (KeyError, ValueError):
            continue
    graph_feeds = {graph.get_tensor_by_name(k if ":" in k else k + ":0"): v
                   for k, v in feeds.items()}
    output = model_ir.outputs[0]
    fetched = session.run([t for _, t in twins] + [_graph_output(graph, model_ir)], graph_feeds,
                          update_state=False)
    layers = []
    for (name, _), graph_value in zip(twins, fetched):
        quant = model_ir.tensors[name].quantization
        steps = graph_value.astype(np.float64) / np.float64(quant.scale[0]) + quant.zero_point[0]
        difference = np.abs(values[name].astype(np.float64) - steps)
        layers.append(LayerDifference(name, int(difference.size),
                                      float(np.mean(np.rint(steps) != values[name])),
                                      float(np.round(difference.max(initial=0), 3))))
    result = Comparison(layers)
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        result.graph_accuracy = float(np.mean(fetched[-1].argmax(axis=-1) == labels))
        result.model_accuracy = float(np.mean(values[output].argmax(axis=-1) == labels))
    return result


def _graph_output(graph, model_ir):
    """The graph tensor behind the model's first output (its DEQUANTIZE reads the twin)."""
    name = model_ir.outputs[0]
    for op in model_ir.ops:
        if op.kind == "DEQUANTIZE" and op.outputs[0] == name:
            name = op.inputs[0]
    return graph.get_tensor_by_name(name + ":0")
