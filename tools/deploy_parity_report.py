"""Trains the demo's model (int8: per-channel symmetric weights; uint8: contrib's weights), exports
it, and prints markdown tables of what the README reports: the integer model against the real
runtimes on the 359 test digits, the accuracies, compare()'s per-layer figures, and timings.

Usage:  python tools/deploy_parity_report.py [--weights per-channel contrib] [--repeats 7]
"""
import argparse
import io
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from machine import cpu_model  # noqa: E402

import fqcore.graph as G  # noqa: E402
from fqcore import demo  # noqa: E402
from fqcore.datasets import load_digits  # noqa: E402
from fqcore.deploy import Interpreter, compare, runtimes, to_onnx, to_tflite  # noqa: E402


def _best(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), float(np.median(times))


def _steps(a, b, scale):
    return np.rint(np.abs(a.astype(np.float64) - b) / scale)


def _agreement(name, ours, theirs, scale):
    steps = _steps(ours, theirs, scale)
    return (f"| {name} | {np.mean(steps == 0):.4%} | {np.mean(steps > 0):.4%} | "
            f"{steps.max():.0f} |")


def report(weights, data, repeats, workdir):
    _, session, _ = demo.train(data, 12, 64, 4, 9, 0.05, 0, io.StringIO(), weights)
    _, variables = G.save(session, os.path.join(workdir, weights + "-training"))
    accuracy, graph, eval_session = demo.evaluate(variables, data, True, weights)
    float_accuracy, _, _ = demo.evaluate(variables, data, False)
    inputs, outputs = (graph.get_collection(k) for k in ("serving_inputs", "serving_outputs"))
    export_time = _best(lambda: to_tflite(eval_session, inputs, outputs), repeats)
    model = to_tflite(eval_session, inputs, outputs)
    x, y = data.x_test, data.y_test
    out = model.model.outputs[0]
    scale = np.float64(model.model.tensors[model.model.ops[-1].inputs[0]].quantization.scale[0])
    print(f"\n## {weights} weights: a {model.dtype} model, {len(model)} bytes\n")
    print("| engines compared (359 x 10 outputs) | identical | differ | max steps |")
    print("|---|---|---|---|")
    engines = {mode: Interpreter(model, rounding=mode) for mode in
               ("tflite_reference", "float32_half_even", "single")}
    ours = {mode: e.run(x)[out] for mode, e in engines.items()}
    accuracies = {"float graph": float_accuracy, "fake-quant graph": accuracy}
    for mode, values in ours.items():
        accuracies[f"interpreter {mode}"] = float(np.mean(values.argmax(1) == y))
    if runtimes.litert_available():
        for resolver, mode in (("reference", "tflite_reference"), ("default", "float32_half_even")):
            theirs = runtimes.run_litert(model, [x], resolver)[0]
            accuracies[f"LiteRT {resolver}"] = float(np.mean(theirs.argmax(1) == y))
            print(_agreement(f"LiteRT {resolver} vs interpreter {mode}", ours[mode], theirs, scale))
    try:
        onnx_model = to_onnx(eval_session, inputs, outputs)
    except ImportError:
        onnx_model = None
    if onnx_model is not None and runtimes.onnxruntime_available():
        theirs = runtimes.run_onnxruntime(onnx_model, [x])[0]
        accuracies["ONNX Runtime"] = float(np.mean(theirs.argmax(1) == y))
        print(_agreement("ONNX Runtime vs interpreter float32_half_even",
                         ours["float32_half_even"], theirs, scale))
    print("\n| model | test accuracy |\n|---|---|")
    for name, value in accuracies.items():
        print(f"| {name} | {value:.2%} |")
    print("\ncompare(session, model, test set), tflite_reference:\n")
    print("```")
    print(compare(eval_session, model, {"images": x}, y))
    print("```")
    print("\n| timing (359 images, one thread) | best ms | median ms |\n|---|---|---|")
    print(f"| to_tflite (export) | {export_time[0] * 1e3:.1f} | {export_time[1] * 1e3:.1f} |")
    rows = {f"interpreter {mode}": (lambda e=e: e.run(x)) for mode, e in engines.items()}
    if runtimes.litert_available():
        for resolver in runtimes.LITERT_RESOLVERS:
            litert = runtimes.LiteRT(model, resolver)
            rows[f"LiteRT {resolver}"] = lambda litert=litert: litert.run([x])
    for name, fn in rows.items():
        best, median = _best(fn, repeats)
        print(f"| {name} | {best * 1e3:.1f} | {median * 1e3:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", nargs="+", choices=sorted(demo.WEIGHT_OPTIONS),
                        default=["per-channel", "contrib"])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; load average {os.getloadavg()[0]:.2f}")
    data = load_digits()
    with tempfile.TemporaryDirectory() as workdir:
        for weights in args.weights:
            report(weights, data, args.repeats, workdir)


if __name__ == "__main__":
    main()
