"""`python -m fqcore export DIR --format tflite|onnx --out FILE`: a saved eval model (fqcore.graph.save
of a session holding an eval graph with trained variables) to an integer model file."""
import argparse
import sys

from .. import graph as G
from . import export

SERVING_INPUTS, SERVING_OUTPUTS = "serving_inputs", "serving_outputs"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fqcore export", description=__doc__)
    parser.add_argument("model", metavar="DIR",
                        help="checkpoint directory or prefix written by fqcore.graph.save "
                             "(e.g. fqcore-demo/model)")
    parser.add_argument("--format", choices=("tflite", "onnx"), default="tflite")
    parser.add_argument("--out", required=True, help="the model file to write")
    parser.add_argument("--input", action="append", dest="inputs", metavar="TENSOR",
                        help=f"an input placeholder (repeat for several; default: the graph's "
                             f"{SERVING_INPUTS!r} collection)")
    parser.add_argument("--output", action="append", dest="outputs", metavar="TENSOR",
                        help=f"an output tensor (default: the {SERVING_OUTPUTS!r} collection)")
    parser.add_argument("--dtype", choices=("int8", "uint8"), default=None,
                        help="force the integer type (default: int8 when every weight range is "
                             "symmetric, uint8 otherwise)")
    args = parser.parse_args(argv)
    try:
        graph, session = G.restore(args.model)
    except (OSError, ValueError) as error:
        parser.error(f"cannot read the model {args.model!r}: {error}")
    inputs = args.inputs or graph.get_collection(SERVING_INPUTS)
    outputs = args.outputs or graph.get_collection(SERVING_OUTPUTS)
    for flag, found, key in (("--input", inputs, SERVING_INPUTS),
                             ("--output", outputs, SERVING_OUTPUTS)):
        if not found:
            parser.error(f"{args.model!r} has no {key!r} collection: name the tensors with {flag}")
    write = export.to_tflite if args.format == "tflite" else export.to_onnx
    try:
        result = write(session, inputs, outputs, args.out, dtype=args.dtype)
    except (ValueError, ImportError) as error:  # ImportError: the writer's package is missing
        print(f"python -m fqcore export: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {result.dtype} {args.format} model, {len(result)} bytes, "
          f"{len(result.model.ops)} ops")
    return 0
