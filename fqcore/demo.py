"""`python -m fqcore demo`: quantization-aware training of a small CNN on the bundled digits, the
contrib.quantize way: float model -> experimental_create_training_graph -> train on the CPU ->
experimental_create_eval_graph -> load the trained variables -> float vs 8-bit accuracy, save ->
export the integer model (.tflite, and .onnx with onnx installed) and measure it."""
import argparse
import json
import math
import os
import sys
import time
from collections import namedtuple

import numpy as np

from . import graph as G
from . import quantize
from .atomic_file import write_atomically
from .datasets import load_digits
from .deploy import cli

CLASSES = 10


def build_model(training, width=32, seed=0):
    """The demo CNN in a fresh graph: conv+BN+relu6, a depthwise-separable block with a residual
    add, a strided conv block, global average pooling and a dense head. Returns
    (graph, images placeholder, labels placeholder, logits, loss)."""
    g = G.Graph()
    g.seed = seed
    L = G.layers
    with g.as_default():
        images = G.placeholder("float32", [None, 8, 8, 1], name="images")
        labels = G.placeholder("int32", [None], name="labels")
        # The input's range, for the integer model: pixels are k/16, so a scale of 1/16 holds
        # them exactly and this fake quant changes no value (training is as without it).
        x = G.fake_quant_with_min_max_args(images, min=0.0, max=255 / 16, name="input_quant")
        bn = dict(momentum=0.9, epsilon=1e-3)
        x = L.conv2d(x, width, 3, activation="relu6", batch_norm=bn, is_training=training,
                     scope="conv1")
        with g.name_scope("block1"):
            y = L.depthwise_conv2d(x, 3, activation="relu6", batch_norm=bn,
                                   is_training=training, scope="dw")
            y = L.conv2d(y, width, 1, activation=None, batch_norm=bn, is_training=training,
                         scope="pw")
            x = G.relu6(G.add(y, x, name="add"))
        x = L.conv2d(x, 2 * width, 3, stride=2, activation="relu6", batch_norm=bn,
                     is_training=training, scope="conv2")
        x = L.global_avg_pool(x, scope="pool")
        logits = L.dense(x, CLASSES, scope="logits")
        loss = L.sparse_softmax_cross_entropy(labels, logits)
    # What `python -m fqcore export` takes as the model's input and output.
    g.add_to_collection(cli.SERVING_INPUTS, images)
    g.add_to_collection(cli.SERVING_OUTPUTS, logits)
    return g, images, labels, logits, loss


TrainingSetup = namedtuple("TrainingSetup", ["graph", "session", "images", "labels", "logits",
                                             "loss", "train_op", "updates", "learning_rate"])


# How weights are quantized: "per-channel" (symmetric, a range per output channel: the int8
# model TFLite's int8 kernels run; the demo's default) or "contrib" (contrib's per-tensor
# asymmetric ranges: a uint8 model; the default of the functions below, as of the rewrite, so
# that benchmarks of the training step keep measuring contrib's graph).
WEIGHT_OPTIONS = {"per-channel": dict(weight_per_channel=True, weight_symmetric=True),
                  "contrib": {}}


def training_setup(quantized=True, quant_delay=0, freeze_bn_delay=None, learning_rate=None, seed=0,
                   weights="contrib"):
    """The demo model ready to train: rewritten by experimental_create_training_graph (unless
    quantized=False) with the WEIGHT_OPTIONS of `weights`, momentum-0.9 SGD attached, variables
    initialized in a new Session. With learning_rate=None the rate is a scalar placeholder
    (`.learning_rate`) fed each step."""
    g, images, labels, logits, loss = build_model(training=True, seed=seed)
    if quantized:
        quantize.experimental_create_training_graph(g, quant_delay=quant_delay,
                                                    freeze_bn_delay=freeze_bn_delay,
                                                    **WEIGHT_OPTIONS[weights])
    with g.as_default():
        rate = (G.placeholder("float32", [], name="learning_rate") if learning_rate is None
                else learning_rate)
        train_op = G.MomentumOptimizer(rate, 0.9).minimize(loss)
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    return TrainingSetup(g, session, images, labels, logits, loss, train_op,
                         g.get_collection(G.GraphKeys.UPDATE_OPS), rate)


class ProgressBar:
    """Training progress: epoch, steps, loss, speed. On a terminal, one line redrawn in place
    after every step; on anything else (a log file, CI, a pipe), where a redraw would pile up
    as carriage returns, one plain line at the end of each epoch."""

    def __init__(self, total, epochs, stream=sys.stdout, width=28):
        self.total, self.epochs, self.stream, self.width = total, epochs, stream, width
        self.tty = _isatty(stream)
        self.start = time.perf_counter()

    def _rate(self, done):
        return done / max(time.perf_counter() - self.start, 1e-9)

    def update(self, done, epoch, phase, loss):
        """After each step (`done` steps so far, in 1-based `epoch`)."""
        if not self.tty:
            return
        filled = int(self.width * done / self.total)
        self.stream.write(f"\r  [{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} "
                          f"epoch {epoch:2d} ({phase}) loss {loss:.3f} "
                          f"{self._rate(done):5.1f} steps/s")
        self.stream.flush()

    def end_epoch(self, done, epoch, phase, loss):
        """After an epoch's last step."""
        if self.tty:
            return
        self.stream.write(f"  epoch {epoch:{len(str(self.epochs))}d}/{self.epochs} ({phase}): "
                          f"steps {done}/{self.total}, loss {loss:.3f}, "
                          f"{self._rate(done):.1f} steps/s\n")
        self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\n")


def _isatty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed file
        return False


def accuracy(session, images, logits, x, y, batch=512):
    correct = 0
    for start in range(0, len(x), batch):
        out = session.run(logits, {images: x[start:start + batch]}, update_state=False)
        correct += int((out.argmax(axis=1) == y[start:start + batch]).sum())
    return correct / len(x)


def evaluate(checkpoint, data, quantized, weights="contrib"):
    """Accuracy of the trained variables in a fresh inference graph (batch norm on moving
    statistics), fake-quantized by experimental_create_eval_graph or left float. The variables
    are loaded by name; the training-only ones (EMA shadows, momentum, step counter) are not
    in this graph. Returns (accuracy, graph, session)."""
    g, images, labels, logits, loss = build_model(training=False)
    if quantized:
        quantize.experimental_create_eval_graph(g, **WEIGHT_OPTIONS[weights])
        # What the quantized model outputs: the logits after their act_quant.
        logits = g.get_tensor_by_name("logits/act_quant/FakeQuantWithMinMaxVars:0")
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    G.load_variables(session, checkpoint, strict=False)
    return accuracy(session, images, logits, data.x_test, data.y_test), g, session


def learning_rate_for(epoch, base, quant_delay_epochs, freeze_bn_epochs):
    """The schedule: `base` while training float, a fifth of it once fake quantization starts
    (fine-tuning), a twenty-fifth once batch-norm statistics are frozen (the folded layers are
    then no longer normalized per batch, and large steps undo the trained scaling)."""
    if epoch >= freeze_bn_epochs:
        return base / 25
    if epoch >= quant_delay_epochs:
        return base / 5
    return base


def train(data, epochs, batch, quant_delay_epochs, freeze_bn_epochs, learning_rate, seed, log,
          weights="contrib"):
    steps_per_epoch = -(-len(data.x_train) // batch)
    g, session, images, labels, logits, loss, train_op, updates, rate = training_setup(
        quant_delay=quant_delay_epochs * steps_per_epoch,
        freeze_bn_delay=freeze_bn_epochs * steps_per_epoch, seed=seed, weights=weights)
    rng = np.random.Generator(np.random.PCG64(seed))
    history = {"loss": [], "train_accuracy": [], "test_accuracy": []}
    bar = ProgressBar(epochs * steps_per_epoch, epochs, stream=log)
    step = 0
    for epoch in range(epochs):
        order = rng.permutation(len(data.x_train))
        losses, correct = [], 0
        step_rate = learning_rate_for(epoch, learning_rate, quant_delay_epochs, freeze_bn_epochs)
        phase = "float" if epoch < quant_delay_epochs else "8-bit"
        for start in range(0, len(order), batch):
            index = order[start:start + batch]
            feed = {images: data.x_train[index], labels: data.y_train[index], rate: step_rate}
            _, _, value, out = session.run([train_op, updates, loss, logits], feed)
            losses.append(float(value))
            correct += int((out.argmax(axis=1) == data.y_train[index]).sum())
            step += 1
            bar.update(step, epoch + 1, phase, np.mean(losses))
        bar.end_epoch(step, epoch + 1, phase, np.mean(losses))
        history["loss"].append(float(np.mean(losses)))
        history["train_accuracy"].append(correct / len(order))
        history["test_accuracy"].append(accuracy(session, images, logits, data.x_test,
                                                 data.y_test))
    bar.close()
    return g, session, history


def _accuracy_of(outputs, labels):
    return float(np.mean(outputs.argmax(axis=1) == labels))


def deploy(session, graph, data, out):
    """Exports the eval graph to out/model.tflite (and out/model.onnx when onnx is installed) and
    measures the integer model's test accuracy: with fqcore's reference interpreter, and in
    LiteRT and ONNX Runtime when they are installed. Without the writers' packages the
    interpreter still runs the integer model. Returns (accuracies by engine, the integer Model,
    the paths written, what was skipped)."""
    from .deploy import Interpreter, runtimes, to_onnx, to_tflite
    from .deploy.lower import lower
    inputs = graph.get_collection(cli.SERVING_INPUTS)
    outputs = graph.get_collection(cli.SERVING_OUTPUTS)
    x, y = data.x_test, data.y_test
    written, skipped = [], []
    try:
        exported = to_tflite(session, inputs, outputs, os.path.join(out, "model.tflite"))
    except ImportError as missing:
        exported, model = None, lower(session, inputs, outputs)
        skipped.append(f"model.tflite ({missing})")
    else:
        model = exported.model
        written.append(os.path.join(out, "model.tflite"))
    results = {"reference interpreter": _accuracy_of(
        Interpreter(model, rounding="tflite_reference").run(x)[model.outputs[0]], y)}
    if exported is not None and runtimes.litert_available():
        for resolver, label in (("reference", "LiteRT reference kernels"),
                                ("default", "LiteRT XNNPACK")):
            results[label] = _accuracy_of(runtimes.run_litert(exported, [x], resolver)[0], y)
    try:
        onnx_model = to_onnx(session, inputs, outputs, os.path.join(out, "model.onnx"))
    except ImportError as missing:
        skipped.append(f"model.onnx ({missing})")
        return results, model, written, skipped
    written.append(os.path.join(out, "model.onnx"))
    if runtimes.onnxruntime_available():
        results["ONNX Runtime"] = _accuracy_of(runtimes.run_onnxruntime(onnx_model, [x])[0], y)
    return results, model, written, skipped


def _print_ranges(graph, session):
    """Every quantizer's range; per-channel ones as the span of their channels."""
    print("quantization ranges [min, max] of the eval graph:")
    for var in G.global_variables(graph):
        if var.op.name.endswith("_quant/min"):
            scope = var.op.name[:-len("/min")]
            lo = session.variable_value(var.op.name)
            hi = session.variable_value(scope + "/max")
            channels = f" over {lo.size} channels" if lo.ndim else ""
            print(f"  {scope:<36} [{float(lo.min()):+8.4f}, {float(hi.max()):+8.4f}]{channels}")


def _phase_lines(history):
    """The phase changes the run reached, as (first epoch, line style, legend label)."""
    lines = []
    if history["quantized_from_epoch"] is not None:
        lines.append((history["quantized_from_epoch"], "--",
                      f"fake-quantized 8-bit from epoch {history['quantized_from_epoch']}"))
    if history["bn_frozen_from_epoch"] is not None:
        lines.append((history["bn_frozen_from_epoch"], ":",
                      f"batch-norm statistics frozen from epoch {history['bn_frozen_from_epoch']}"))
    return lines


def plot_history(history, path):
    """Training curves as a PNG when matplotlib is installed; returns the path or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    epochs = np.arange(1, len(history["loss"]) + 1)
    # constrained layout sizes the axes around their labels and legends, so nothing is cut off.
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    left.plot(epochs, history["loss"], marker="o", label="training loss")
    left.set(xlabel="epoch", ylabel="loss", title="training loss")
    right.plot(epochs, history["train_accuracy"], marker="o", label="train")
    right.plot(epochs, history["test_accuracy"], marker="o", label="test")
    right.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    for axis in (left, right):
        for first_epoch, style, label in _phase_lines(history):
            # Between the last epoch of the previous phase and the first of the new one.
            axis.axvline(first_epoch - 0.5, color="gray", linestyle=style, label=label)
        axis.set_xlim(0.5, len(epochs) + 0.5)
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.legend(fontsize="small")
    write_atomically(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    plt.close(fig)
    return path


def _integer_at_least(lowest, expected):
    """An argparse type: an int >= lowest. argparse prefixes the error with the option's name."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lowest:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


_positive = _integer_at_least(1, "a positive integer")
_non_negative = _integer_at_least(0, "a non-negative integer")


def _positive_rate(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return value


def _output_directory(parser, path):
    """Creates the output directory up front, so that a bad --out fails before any training."""
    try:
        os.makedirs(path, exist_ok=True)
    except (OSError, ValueError) as error:
        parser.error(f"--out {path!r}: cannot create that directory ({error})")
    if not os.access(path, os.W_OK | os.X_OK):
        parser.error(f"--out {path!r}: the directory is not writable")


# Training has diverged when its last epoch's loss is not finite or no lower than that of a
# uniform guess over the classes: the model knows nothing, and exporting it is useless.
DIVERGED_LOSS = math.log(CLASSES)
MIN_SHARE_OF_FLOAT = 0.95
EXIT_OK, EXIT_QUANTIZATION_LOST_ACCURACY, EXIT_BAD_OPTION, EXIT_DIVERGED = 0, 1, 2, 3

EXIT_STATUS = (
    f"exit status: {EXIT_OK} when the fake-quantized 8-bit model keeps at least "
    f"{MIN_SHARE_OF_FLOAT:.0%} of the float model's test accuracy; "
    f"{EXIT_QUANTIZATION_LOST_ACCURACY} when it keeps less; {EXIT_BAD_OPTION} for a bad option; "
    f"{EXIT_DIVERGED} when training diverged (the last epoch's loss is not finite or not below "
    f"ln {CLASSES} = {DIVERGED_LOSS:.2f}, a uniform guess's): the training state, history and "
    f"plot are saved, nothing is evaluated or exported; try a smaller --learning-rate.")


def diverged(history):
    """True when the last epoch's mean loss is not finite or not below DIVERGED_LOSS."""
    last = history["loss"][-1]
    return not math.isfinite(last) or last >= DIVERGED_LOSS


def _epochs(count):
    return f"{count} epoch{'' if count == 1 else 's'}"


def describe_run(epochs, quant_delay_epochs, freeze_bn_epochs, weights):
    """The header's account of the training: only the phases this run reaches, epochs numbered
    from 1 as in the progress lines."""
    if quant_delay_epochs == 0:
        training = f"{_epochs(epochs)}, all fake-quantized 8-bit ({weights} weights)"
    elif quant_delay_epochs >= epochs:
        training = (f"{_epochs(epochs)}, all float (the 8-bit model, {weights} weights, is "
                    f"evaluated with the ranges observed in training)")
    else:
        training = (f"{_epochs(epochs)}: float for {quant_delay_epochs}, then fake-quantized "
                    f"8-bit ({weights} weights)")
    frozen = _frozen_from(epochs, freeze_bn_epochs)
    return training + ("; batch-norm statistics never frozen in this run" if frozen is None
                       else f"; batch-norm statistics frozen from epoch {frozen}")


def _frozen_from(epochs, freeze_bn_epochs):
    """The 1-based epoch from which batch-norm statistics are frozen, None if after the run."""
    return freeze_bn_epochs + 1 if freeze_bn_epochs < epochs else None


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m fqcore demo", description=__doc__,
                                     epilog=EXIT_STATUS)
    parser.add_argument("--epochs", type=_positive, default=12, metavar="N",
                        help="epochs of training (default: %(default)s)")
    parser.add_argument("--batch", type=_positive, default=64, metavar="N",
                        help="images per training step (default: %(default)s)")
    parser.add_argument("--quant-delay-epochs", type=_non_negative, default=None, metavar="N",
                        help="epochs of float training before fake quantization starts "
                             "(default: 4, or every epoch of a shorter run)")
    parser.add_argument("--freeze-bn-epochs", type=_non_negative, default=9, metavar="N",
                        help="epochs before batch-norm statistics are frozen (default: "
                             "%(default)s, frozen from epoch 10)")
    parser.add_argument("--learning-rate", type=_positive_rate, default=0.05, metavar="RATE",
                        help="momentum SGD's rate while training float; a fifth of it once fake "
                             "quantization starts, a twenty-fifth once batch-norm statistics "
                             "are frozen (default: %(default)s)")
    parser.add_argument("--seed", type=_non_negative, default=0,
                        help="seeds the initial weights and the batches (default: %(default)s)")
    parser.add_argument("--weights", choices=sorted(WEIGHT_OPTIONS), default="per-channel",
                        help="per-channel: symmetric ranges per output channel, an int8 model; "
                             "contrib: contrib's per-tensor asymmetric ranges, a uint8 model "
                             "(default: %(default)s)")
    parser.add_argument("--out", default="fqcore-demo", metavar="DIR",
                        help="directory for the models, the history and the plot (default: "
                             "%(default)s)")
    return parser


def _save_history(history, out):
    """Writes history.json and the plot; returns [(path, what it holds)]."""
    history_path = os.path.join(out, "history.json")
    text = json.dumps(history, indent=1).encode("utf-8")
    write_atomically(history_path, lambda f: f.write(text))
    saved = [(history_path, "loss and accuracy per epoch")]
    plot = plot_history(history, os.path.join(out, "training_curves.png"))
    if plot:
        saved.append((plot, "training curves"))
    return saved


def _print_saved(saved):
    plotted = any(path.endswith(".png") for path, _ in saved)
    print("saved: " + ", ".join(f"{path} ({what})" for path, what in saved)
          + ("" if plotted else " (pip install matplotlib for training_curves.png)"))


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quant_delay_epochs is None:
        args.quant_delay_epochs = min(4, args.epochs)
    if not args.quant_delay_epochs <= args.epochs:
        parser.error(f"--quant-delay-epochs must be in [0, {args.epochs}], got {args.quant_delay_epochs}")
    _output_directory(parser, args.out)
    data = load_digits()
    print(f"fqcore demo: quantization-aware training on {len(data.x_train)} 8x8 digits "
          f"({len(data.x_test)} held out), "
          + describe_run(args.epochs, args.quant_delay_epochs, args.freeze_bn_epochs,
                         args.weights))
    start = time.perf_counter()
    g, session, history = train(data, args.epochs, args.batch, args.quant_delay_epochs,
                                args.freeze_bn_epochs, args.learning_rate, args.seed, sys.stdout,
                                args.weights)
    print(f"trained in {time.perf_counter() - start:.1f} s")
    history.update(
        epochs=args.epochs, diverged=diverged(history),
        quantized_from_epoch=(args.quant_delay_epochs + 1
                              if args.quant_delay_epochs < args.epochs else None),
        bn_frozen_from_epoch=_frozen_from(args.epochs, args.freeze_bn_epochs))
    train_graph, train_variables = G.save(session, os.path.join(args.out, "training"))
    saved = [(train_graph, "training graph"), (train_variables, "training state")]
    if history["diverged"]:
        print(f"training diverged: the last epoch's loss is {history['loss'][-1]:.4g}, not below "
              f"ln {CLASSES} = {DIVERGED_LOSS:.2f} (a uniform guess); nothing evaluated or "
              f"exported: try a smaller --learning-rate than {args.learning_rate:g}, or more "
              f"--epochs")
        _print_saved(saved + _save_history(history, args.out))
        return EXIT_DIVERGED
    float_accuracy, _, _ = evaluate(train_variables, data, quantized=False)
    quant_accuracy, qg, qsession = evaluate(train_variables, data, quantized=True,
                                            weights=args.weights)
    model_graph, model_variables = G.save(qsession, os.path.join(args.out, "model"))
    print(f"test accuracy: float {float_accuracy:.2%}, fake-quantized 8-bit {quant_accuracy:.2%} "
          f"({quant_accuracy / float_accuracy:.1%} of float)")
    integer_accuracy, model, exported, skipped = deploy(qsession, qg, data, args.out)
    print(f"integer model ({model.integer_dtype}, {len(model.ops)} ops): " + ", ".join(
        f"{engine} {value:.2%}" for engine, value in integer_accuracy.items()))
    for what in skipped:
        print(f"  not written: {what}")
    _print_ranges(qg, qsession)
    history.update(float_accuracy=float_accuracy, quantized_accuracy=quant_accuracy,
                   integer_accuracy=integer_accuracy)
    saved = ([(path, "integer model") for path in exported]
             + [(model_graph, "fake-quantized eval graph"), (model_variables, "trained values")]
             + saved + _save_history(history, args.out))
    _print_saved(saved)
    if quant_accuracy < MIN_SHARE_OF_FLOAT * float_accuracy:
        return EXIT_QUANTIZATION_LOST_ACCURACY
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
