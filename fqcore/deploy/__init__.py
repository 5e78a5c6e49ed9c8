"""fqcore.deploy: what fqcore trains, as a `.tflite` or ONNX integer model (no TensorFlow), an
integer reference interpreter with the runtimes' arithmetic, and a layer-by-layer comparison of
the integer model with the fake-quant graph it came from."""
from .comparison import Comparison, LayerDifference, compare
from .export import ExportedModel, to_onnx, to_tflite
from .interpreter import Interpreter

__all__ = ["Comparison", "ExportedModel", "Interpreter", "LayerDifference", "compare", "to_onnx",
           "to_tflite"]
