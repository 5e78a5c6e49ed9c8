"""Every kernel family's time with fqcore's default threads against one thread, on a quiet machine
and with other processes keeping CPUs busy: the check that threads never cost.

    python tools/kernels_under_load.py                  # quiet, then 1 busy process
    python tools/kernels_under_load.py --busy 2 --sizes 1048576

Fake quant (Args / Vars forward and gradient, per channel forward and gradient), batch norm
(training forward and gradient, NHWC, 64 channels), the range observer and the matrix product
([n / 64, 64] x [64, 64]), on float32 arrays of each size, out= buffers where the op has them. Each row interleaves rounds of one thread
(set_num_threads(1)) and the default (set_num_threads("auto"), or --threads) and prints the median
over rounds of each round's mean time, so a stall counts as users feel it. ratio = default / one
thread: the busy table should stay near 1, the quiet one show the threads' gain (1 / ratio)."""
import argparse
import os
import sys
import time

import numpy as np

import fqcore
from fqcore import _kernels, observe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from machine import busy_processes, cpu_model  # noqa: E402

CHANNELS = 64


def kernels(n):
    """{name: call} over arrays of n elements."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=n).astype(np.float32)
    g = rng.normal(size=n).astype(np.float32)
    out = np.empty_like(x)
    rows = x.reshape(-1, CHANNELS)
    lo, hi = np.full(CHANNELS, -3.0, np.float32), np.full(CHANNELS, 3.0, np.float32)
    images = rows.reshape(-1, 1, 1, CHANNELS)
    scale, offset = np.ones(CHANNELS, np.float32), np.zeros(CHANNELS, np.float32)
    saved = fqcore.fused_batch_norm(images, scale, offset, is_training=True)
    filters = rng.normal(size=(CHANNELS, CHANNELS)).astype(np.float32)
    return {
        "args forward": lambda: fqcore.fake_quant_with_min_max_args(x, -6.0, 6.0, out=out),
        "vars forward": lambda: fqcore.fake_quant_with_min_max_vars(x, -3.0, 3.0, out=out),
        "vars gradient": lambda: fqcore.fake_quant_with_min_max_vars_gradient(g, x, -3.0, 3.0,
                                                                               out=out),
        "per-channel forward": lambda: fqcore.fake_quant_with_min_max_vars_per_channel(
            rows, lo, hi, out=out.reshape(rows.shape)),
        "per-channel gradient": lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
            g.reshape(rows.shape), rows, lo, hi, out=out.reshape(rows.shape)),
        "batch norm forward": lambda: fqcore.fused_batch_norm(images, scale, offset,
                                                              is_training=True),
        "batch norm gradient": lambda: fqcore.fused_batch_norm_grad(
            g.reshape(images.shape), images, scale, saved.reserve_space_1,
            saved.reserve_space_2, is_training=True),
        "range": lambda: observe.batch_range(x),
        "matrix product": lambda: _kernels.matmul(rows, filters, out.reshape(rows.shape)),
    }


def mean_seconds(call, seconds):
    """Mean time of back-to-back calls over at least `seconds`."""
    call()
    count, start = 0, time.perf_counter()
    while True:
        call()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / count


def table(label, sizes, threads, rounds, seconds):
    print(f"{label}: threads {threads!r} against 1 (median of {rounds} rounds' means, us)")
    print(f"  {'kernel':<22}{'elements':>9}{'1 thread':>10}{'default':>10}{'ratio':>7}")
    saved = fqcore.get_num_threads()
    try:
        for n in sizes:
            for name, call in kernels(n).items():
                one, default = [], []
                for _ in range(rounds):
                    fqcore.set_num_threads(1)
                    one.append(mean_seconds(call, seconds))
                    fqcore.set_num_threads(threads)
                    default.append(mean_seconds(call, seconds))
                a, b = np.median(one) * 1e6, np.median(default) * 1e6
                print(f"  {name:<22}{n:>9}{a:>10.1f}{b:>10.1f}{b / a:>7.2f}")
    finally:
        fqcore.set_num_threads(saved)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=1, help="busy processes (default 1)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[65536, 262144, 1 << 20])
    parser.add_argument("--threads", default="auto", help='the setting to test (default "auto")')
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.03, help="per round and setting")
    args = parser.parse_args(argv)
    threads = args.threads if args.threads == "auto" else int(args.threads)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, fqcore ISA {fqcore.get_isa()}")
    table("quiet", args.sizes, threads, args.rounds, args.seconds)
    with busy_processes(args.busy) as load:
        table(f"{args.busy} busy process(es), load {load:.1f}", args.sizes, threads, args.rounds,
              args.seconds)


if __name__ == "__main__":
    main()
