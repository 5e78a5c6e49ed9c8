"""The real runtimes, when installed: a `.tflite` in LiteRT (ai-edge-litert: reference kernels or
the default XNNPACK-delegated resolver) and an ONNX model in ONNX Runtime, run on a whole batch."""
import numpy as np

LITERT_RESOLVERS = ("reference", "default")


def litert_available():
    try:
        import ai_edge_litert.interpreter  # noqa: F401
    except ImportError:
        return False
    return True


def onnxruntime_available():
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class LiteRT:
    """A `.tflite` model loaded in LiteRT's interpreter. resolver: 'reference'
    (OpResolverType.BUILTIN_REF, TFLite's reference kernels) or 'default' (the optimized kernels
    with XNNPACK, what a device runs)."""

    def __init__(self, model_bytes, resolver="reference", threads=1):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
        if resolver not in LITERT_RESOLVERS:
            raise ValueError(f"resolver must be one of {LITERT_RESOLVERS}, got {resolver!r}")
        kind = OpResolverType.BUILTIN_REF if resolver == "reference" else OpResolverType.AUTO
        self.interpreter = Interpreter(model_content=bytes(model_bytes), num_threads=threads,
                                       experimental_op_resolver_type=kind)
        self.shapes = None

    def run(self, inputs):
        """The outputs (a list, in the model's order) on `inputs` (arrays in the model's input
        order); the batch dimension is resized to theirs."""
        interpreter = self.interpreter
        details = interpreter.get_input_details()
        if len(inputs) != len(details):
            raise ValueError(f"the model has {len(details)} inputs, got {len(inputs)} arrays")
        shapes = [np.shape(value) for value in inputs]
        if shapes != self.shapes:
            for detail, shape in zip(details, shapes):
                interpreter.resize_tensor_input(detail["index"], list(shape))
            interpreter.allocate_tensors()
            self.shapes = shapes
        for detail, value in zip(details, inputs):
            interpreter.set_tensor(detail["index"], np.ascontiguousarray(value, detail["dtype"]))
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]).copy()
                for d in interpreter.get_output_details()]


def run_litert(model_bytes, inputs, resolver="reference", threads=1):
    """LiteRT(model_bytes, resolver, threads).run(inputs)."""
    return LiteRT(model_bytes, resolver, threads).run(inputs)


def onnxruntime_session(model_bytes, optimized_model_path=None, threads=1):
    """An onnxruntime InferenceSession with every graph optimization (the QDQ fusions into
    QLinearConv and friends), on the CPU; `optimized_model_path` saves the optimized graph."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    if optimized_model_path is not None:
        options.optimized_model_filepath = str(optimized_model_path)
    return onnxruntime.InferenceSession(bytes(model_bytes), options,
                                        providers=["CPUExecutionProvider"])


def run_onnxruntime(model_bytes, inputs, threads=1):
    """The outputs (a list) of an ONNX model on `inputs` (arrays in the model's input order)."""
    session = onnxruntime_session(model_bytes, threads=threads)
    names = [i.name for i in session.get_inputs()]
    if len(inputs) != len(names):
        raise ValueError(f"the model has {len(names)} inputs, got {len(inputs)} arrays")
    return session.run(None, dict(zip(names, inputs)))
