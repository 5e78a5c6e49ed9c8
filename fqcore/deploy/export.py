"""to_tflite / to_onnx: a trained fake-quant eval graph to an integer model file, written
atomically, returned as bytes that also say what was chosen."""
import os
from typing import Any, Optional, Sequence, Union

from ..atomic_file import write_atomically
from .lower import lower


class ExportedModel(bytes):
    """The model file's bytes, which also say what was chosen; :func:`to_tflite` and
    :func:`to_onnx` return it.

    Parameters
    ----------
    data : bytes
        The file's content.
    model : fqcore.deploy.model.Model
        The integer model written, kept as ``.model``.
    file_format : {"tflite", "onnx"}
        Kept as ``.format``.

    Attributes
    ----------
    dtype : str
        The integer type chosen: ``'int8'`` when every weight range is symmetric, ``'uint8'``
        otherwise.

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
    >>> exported.format, exported.dtype, exported.model.inputs
    ('tflite', 'int8', ['x'])
    """

    model: Any
    format: str

    def __new__(cls, data: bytes, model: Any, file_format: str) -> "ExportedModel":
        self = super().__new__(cls, data)
        self.model, self.format = model, file_format
        return self

    @property
    def dtype(self) -> str:
        return self.model.integer_dtype


def _finish(data, model, file_format, path):
    if path is not None:
        write_atomically(path, lambda f: f.write(data))
    return ExportedModel(data, model, file_format)


def to_tflite(session: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              path: Optional[Union[str, "os.PathLike[str]"]] = None, *,
              input_type: str = "float32", output_type: str = "float32",
              dtype: Optional[str] = None, zero_point_rule: str = "training") -> ExportedModel:
    """The ``.tflite`` integer model of a session's eval graph, from `inputs` to `outputs`.

    Parameters
    ----------
    session : fqcore.graph.Session
        A session holding an eval graph (rewritten by ``create_eval_graph``) with trained
        variables.
    inputs, outputs : list of Tensor or str
        The model's inputs (placeholders, each behind a fake quant giving its range) and outputs
        (tensors or their names).
    path : str or os.PathLike, optional
        Also write the model there, atomically.
    input_type, output_type : str, default "float32"
        ``"float32"`` (QUANTIZE / DEQUANTIZE at the boundary) or the model's integer type.
    dtype : {None, "int8", "uint8"}
        None chooses (int8 when every weight range is symmetric, else uint8); a name forces.
    zero_point_rule : {"training", "converter"}, default "training"
        ``"training"``: the float32 nudge training used; ``"converter"``: TF's converter's, in
        double precision.

    Returns
    -------
    ExportedModel
        The file's bytes, with ``.model``, ``.dtype`` and ``.format``.

    Raises
    ------
    ValueError
        What the integer model cannot hold, naming the op and tensor: a tensor without a
        quantization range, an op the format lacks, a bad option value.
    ImportError
        The writer's package is missing (``pip install fqcore[deploy]``).

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
    >>> bytes(exported[4:8])                # the .tflite file identifier
    b'TFL3'
    """
    from . import tflite_format
    model = lower(session, inputs, outputs, dtype, input_type, output_type, zero_point_rule)
    return _finish(tflite_format.write(model), model, "tflite", path)


def to_onnx(session: Any, inputs: Sequence[Any], outputs: Sequence[Any],
            path: Optional[Union[str, "os.PathLike[str]"]] = None, *, opset: int = 17,
            dtype: Optional[str] = None, zero_point_rule: str = "training") -> ExportedModel:
    """The ONNX (QDQ) integer model of a session's eval graph, with a float input and output.

    Parameters
    ----------
    session : fqcore.graph.Session
        A session holding an eval graph (rewritten by ``create_eval_graph``) with trained
        variables.
    inputs, outputs : list of Tensor or str
        The model's inputs (placeholders, each behind a fake quant giving its range) and outputs
        (tensors or their names).
    path : str or os.PathLike, optional
        Also write the model there, atomically.
    opset : int, default 17
        The ONNX opset of the file.
    dtype : {None, "int8", "uint8"}
        None chooses (int8 when every weight range is symmetric, else uint8); a name forces.
    zero_point_rule : {"training", "converter"}, default "training"
        As for :func:`to_tflite`.

    Returns
    -------
    ExportedModel
        The file's bytes, with ``.model``, ``.dtype`` and ``.format``.

    Raises
    ------
    ValueError
        What the integer model cannot hold, naming the op and tensor: a tensor without a
        quantization range, an op the format lacks, a bad option value.
    ImportError
        The writer's package is missing (``pip install fqcore[deploy]``).

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
    >>> exported = deploy.to_onnx(session, [x], [output])
    >>> exported.format, exported.dtype
    ('onnx', 'int8')
    """
    from . import onnx_format
    model = lower(session, inputs, outputs, dtype, "float32", "float32", zero_point_rule)
    return _finish(onnx_format.write(model, opset=opset), model, "onnx", path)
