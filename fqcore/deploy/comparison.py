"""compare(): the integer model against the fake-quant graph it was exported from, layer by layer
(share of elements that differ, largest difference in quantization steps) and on the task."""
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np


@dataclass
class LayerDifference:
    """One quantized tensor of the model against its twin in the fake-quant graph.

    Parameters
    ----------
    name : str
        The tensor's name (the graph tensor's op name).
    elements : int
        Its number of elements.
    differing : float
        The share of its elements whose integer value differs from the fake-quant graph's (on
        the same grid).
    max_steps : float
        The largest difference, in quantization steps.

    Examples
    --------
    >>> from fqcore.deploy import LayerDifference
    >>> print(f"{LayerDifference('conv1/act_quant', 4096, 0.0125, 1.0).differing:.2%}")
    1.25%
    """
    name: str
    elements: int
    differing: float
    max_steps: float


@dataclass
class Comparison:
    """What :func:`compare` found; ``str()`` gives a table, one layer a line.

    Parameters
    ----------
    layers : list of LayerDifference
        Every model tensor that has a graph twin, in the model's order.
    graph_accuracy, model_accuracy : float or None
        With labels: the accuracy of the graph's and of the model's first output.

    Examples
    --------
    >>> from fqcore.deploy import Comparison, LayerDifference
    >>> print(Comparison([LayerDifference("logits", 30, 0.1, 1.0)], 0.9, 0.9))
    layer   elements   differ  max steps
    logits        30   10.00%          1
    accuracy: fake-quant graph 90.00%, integer model 90.00%
    """

    layers: list
    graph_accuracy: Optional[float] = None
    model_accuracy: Optional[float] = None

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


def compare(session: Any, model: Any, feeds: Dict[str, Any], labels: Optional[Any] = None, *,
            rounding: str = "tflite_reference") -> Comparison:
    """The integer model against the fake-quant graph it was exported from, layer by layer.

    Runs `feeds` through the session's graph and through `model` with the reference interpreter,
    and compares every model tensor that has a graph twin.

    Parameters
    ----------
    session : fqcore.graph.Session
        The session the model was exported from.
    model : ExportedModel, bytes, str, Model or Interpreter
        The integer model: as exported, its bytes or path, a Model or an Interpreter.
    feeds : dict
        Graph placeholder name -> array.
    labels : array_like, optional
        Class indices: also compare the accuracy of the model's first output with the graph's.
    rounding : str, default "tflite_reference"
        The interpreter's arithmetic (see :class:`Interpreter`), unless `model` is one.

    Returns
    -------
    Comparison
        One LayerDifference per compared tensor, and the accuracies with `labels`.

    Raises
    ------
    TypeError
        `feeds` is not a dict.
    ValueError
        As :class:`Interpreter` raises for the model or the feeds.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> from fqcore import deploy, quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 4], name="x")
    ...     scaled = G.fake_quant_with_min_max_args(x, min=-1.0, max=1.0, name="x_quant")
    ...     logits = G.layers.dense(scaled, 3, scope="fc")
    >>> quantize.create_eval_graph(g, weight_per_channel=True)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> output = g.get_tensor_by_name("fc/act_quant/FakeQuantWithMinMaxVars:0")
    >>> exported = deploy.to_tflite(session, [x], [output])
    >>> result = deploy.compare(session, exported, {"x": np.full((2, 4), 0.5, np.float32)})
    >>> [layer.name for layer in result.layers]
    ['x_quant', 'fc/act_quant/FakeQuantWithMinMaxVars']
    >>> max(layer.max_steps for layer in result.layers) <= 1
    True
    """
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
