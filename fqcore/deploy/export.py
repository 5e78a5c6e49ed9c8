"""to_tflite / to_onnx: a trained fake-quant eval graph to an integer model file, written
atomically, returned as bytes that also say what was chosen."""
from ..atomic_file import write_atomically
from .lower import lower


class ExportedModel(bytes):
    """The model file's bytes. `.dtype` is the integer type chosen ('int8' when every weight range
    is symmetric, 'uint8' otherwise), `.model` the integer Model written, `.format` 'tflite' or
    'onnx'."""

    def __new__(cls, data, model, file_format):
        self = super().__new__(cls, data)
        self.model, self.format = model, file_format
        return self

    @property
    def dtype(self):
        return self.model.integer_dtype


def _finish(data, model, file_format, path):
    if path is not None:
        write_atomically(path, lambda f: f.write(data))
    return ExportedModel(data, model, file_format)


def to_tflite(session, inputs, outputs, path=None, *, input_type="float32",
              output_type="float32", dtype=None, zero_point_rule="training"):
    """The `.tflite` integer model of `session`'s eval graph from `inputs` to `outputs` (tensors
    or names), also written to `path` when given. dtype: None chooses (int8 for symmetric weights,
    else uint8), 'int8' or 'uint8' forces. input_type / output_type: 'float32' (QUANTIZE /
    DEQUANTIZE at the boundary) or the model's integer type. zero_point_rule: 'training' (the
    float32 nudge training used) or 'converter' (TF's converter, double precision)."""
    from . import tflite_format
    model = lower(session, inputs, outputs, dtype, input_type, output_type, zero_point_rule)
    return _finish(tflite_format.write(model), model, "tflite", path)


def to_onnx(session, inputs, outputs, path=None, *, opset=17, dtype=None,
            zero_point_rule="training"):
    """The ONNX (QDQ) integer model of `session`'s eval graph, with a float input and output;
    see to_tflite for the arguments."""
    from . import onnx_format
    model = lower(session, inputs, outputs, dtype, "float32", "float32", zero_point_rule)
    return _finish(onnx_format.write(model, opset=opset), model, "onnx", path)
