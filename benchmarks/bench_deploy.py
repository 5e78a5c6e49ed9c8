"""asv benchmarks of fqcore.deploy on the demo's model: export to .tflite / ONNX, and the integer
model on the 359 held-out digits in fqcore's reference interpreter (each rounding mode), LiteRT
(reference kernels, and the default XNNPACK resolver) and ONNX Runtime."""
from fqcore import demo, quantize
from fqcore import graph as G
from fqcore.datasets import load_digits
from fqcore.deploy import Interpreter, runtimes, to_onnx, to_tflite

ENGINES = ["tflite_reference", "single", "float32_half_even", "litert reference",
           "litert default", "onnxruntime"]


def demo_eval_session(weights="per-channel"):
    """The demo's eval graph (fake-quantized with `weights`'s options) in a Session with
    initialized variables, and its serving input and output."""
    g, images, labels, logits, loss = demo.build_model(training=False)
    quantize.experimental_create_eval_graph(g, **demo.WEIGHT_OPTIONS[weights])
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    return session, images, logits


def _require(available, what):
    if not available:
        raise NotImplementedError(f"{what} is not installed")


class TimeExport:
    """to_tflite / to_onnx of the demo model (lowering, weights to integers, serialization)."""

    params = [["tflite", "onnx"]]
    param_names = ["format"]
    timeout = 120

    def setup(self, file_format):
        if file_format == "onnx":
            try:
                import onnx  # noqa: F401
            except ImportError:
                raise NotImplementedError("onnx is not installed") from None
        self.session, self.images, self.logits = demo_eval_session()
        self.export = to_tflite if file_format == "tflite" else to_onnx

    def time_export(self, file_format):
        self.export(self.session, self.images, self.logits)


class TimeIntegerModel:
    """The int8 model on the 359 test images, one thread, in each engine."""

    params = [ENGINES]
    param_names = ["engine"]
    timeout = 300

    def setup(self, engine):
        session, images, logits = demo_eval_session()
        self.x = load_digits().x_test
        if engine.startswith("litert"):
            _require(runtimes.litert_available(), "ai-edge-litert")
            litert = runtimes.LiteRT(to_tflite(session, images, logits), engine.split()[1])
            self.run = lambda: litert.run([self.x])
        elif engine == "onnxruntime":
            _require(runtimes.onnxruntime_available(), "onnxruntime")
            ort = runtimes.onnxruntime_session(to_onnx(session, images, logits))
            name = ort.get_inputs()[0].name
            self.run = lambda: ort.run(None, {name: self.x})
        else:
            interpreter = Interpreter(to_tflite(session, images, logits).model, rounding=engine)
            self.run = lambda: interpreter.run(self.x)
        self.run()

    def time_run(self, engine):
        self.run()
