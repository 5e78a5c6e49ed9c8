"""What the ops-loop benchmarks (ops_loop_memory.py, ops_loop_threads.py) share: timing a step in
this process, and a report that runs each variant in a fresh process of its own, alternating (a
variant may change process-wide state: glibc's policy, BLAS's threads)."""
import argparse
import os
import subprocess
import sys
import time

try:
    from .machine import cpu_model
except ImportError:  # run as a script
    from machine import cpu_model


def step_times(step, warmup=5, timings=10, steps=20):
    """`step` run `warmup` times untimed, then `timings` timings of `steps` steps: their ms per
    step, sorted (the best first)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(timings):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - start) / steps * 1e3)
    return sorted(times)


def main(script, description, variants, run_variant, columns):
    """The command line of a benchmark `script`: with --variant (its own child processes), runs
    run_variant(name), which prints one line of fields, the variant's name first; else runs every
    variant --repeats times in child processes, alternating, and prints a markdown table of the
    first len(columns) fields of their lines under the CPU model and the load average."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="processes per variant")
    parser.add_argument("--variant", choices=variants, help=argparse.SUPPRESS)  # a child's
    args = parser.parse_args()
    if args.variant:
        run_variant(args.variant)
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, "
          f"1-minute load average {os.getloadavg()[0]:.2f}")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for _ in range(args.repeats):
        for variant in variants:
            fields = subprocess.run([sys.executable, os.path.abspath(script), "--variant", variant],
                                    check=True, capture_output=True, text=True).stdout.split()
            print("| " + " | ".join(fields[:len(columns)]) + " |")
