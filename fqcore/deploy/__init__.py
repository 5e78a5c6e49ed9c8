"""fqcore.deploy: what fqcore trains, as a `.tflite` or ONNX integer model (no TensorFlow), an
integer reference interpreter with the runtimes' arithmetic, and a layer-by-layer comparison of
the integer model with the fake-quant graph it came from."""
from .export import ExportedModel, to_onnx, to_tflite

__all__ = ["ExportedModel", "Interpreter", "compare", "to_onnx", "to_tflite"]


def __getattr__(name):
    # The interpreter and the comparison load on first use.
    if name == "Interpreter":
        from .interpreter import Interpreter
        return Interpreter
    if name == "compare":
        from .compare import compare
        return compare
    raise AttributeError(f"module 'fqcore.deploy' has no attribute {name!r}")
