"""Times fqcore against numpy's memory-bound ufuncs, TensorFlow and PyTorch in one process; prints markdown tables.

Usage:  python benchmarks/compare.py [--quick] [--json FILE] [--isa NAME|all] [--sections ...] [--no-torch] [--no-tf]
                                    [--tf-path DIR] [--tf-onednn both|on|off] [--clip calibrated|wide|heavy]

Every figure is the minimum (--stat median: the median) over repeats of the mean time of a batch of calls (each batch
lasts at least --sample-ms); the JSON also holds medians. Candidates measured against each other are
interleaved batch by batch, in alternating order, so drift (turbo, a neighbour's build) hits all alike.
fqcore writes into out= buffers; TF and PyTorch have no out= for these ops, so their times include
allocating the result. The fake-quant inputs and both out= buffers are placed 1 KiB apart in a 4 KiB
page (benchmarks/placement.py): where they happened to be 16 bytes apart, numpy's floor at 64K took
twice its time. TF and PyTorch run on one thread (tf.config.threading, torch.set_num_threads).

The targets are issue 18's "Done when" list; each table shows them, the JSON holds them ("targets" and
every row's own), and the report ends with the targets missed and those it could not check. Batch
norm is checked against both of TF's CPU kernel kinds: the ones this process imported (TF's default,
oneDNN on x86) and, by default, the other kind timed in a child process (TF_ENABLE_ONEDNN_OPTS is
read once, when TF is imported).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import fqcore
from fqcore.malloc import keep_freed_memory

try:
    import resource
except ImportError:  # not on Windows: page faults go uncounted
    resource = None

try:  # run as a script, benchmarks/ is on sys.path; imported by asv, it is a package
    from . import compare_batch_norm
    from .machine import cpu_model
    from .placement import placed_arrays
except ImportError:
    import compare_batch_norm
    from machine import cpu_model
    from placement import placed_arrays

OPS = ["args", "args_gradient", "vars", "vars_gradient", "vars_per_channel", "vars_per_channel_gradient"]
SIZES = [65536, 1048576, 16777216]
CHANNELS = 128            # per-channel ops on n elements see the shape [n // 128, 128]
LAYOUTS = [(3, 3, 64, 128), (1024, 1024), (8192, 128)]
SMALL = 16
THREAD_N = 1048576
SECTIONS = ["numpy", "layout", "small", "threads", "tf_agreement", "bn"]
LO, HI, NUM_BITS = -6.0, 6.0, 8
TARGET_RATIO = 1.25       # fqcore time / numpy ufunc time at every n of SIZES
TARGET_LAYOUT = 1.25      # per-channel / per-tensor, forward and gradient, calibrated inputs
TARGET_LAYOUT_CLIPPED = 1.5   # per-channel / per-tensor gradient on LAYOUT_CLIPPED inputs
LAYOUT_CLIPPED = "wide"   # 4.6% clipped, where the per-channel gradient's sums cost it most
TARGET_SMALL_US = 1.0     # one call on 16 elements
TARGET_SPEEDUP = 1.7      # two threads against one at THREAD_N
TARGETS = {
    "vs_numpy_ratio_max": TARGET_RATIO,
    "per_channel_over_per_tensor_max": TARGET_LAYOUT,
    "per_channel_gradient_over_per_tensor_max_4.6%_clipped": TARGET_LAYOUT_CLIPPED,
    "small_call_us_max": TARGET_SMALL_US,
    "two_thread_speedup_min": TARGET_SPEEDUP,
    "bn_forward_over_add_max": compare_batch_norm.TARGET_FWD,
    "bn_gradient_over_add_max": compare_batch_norm.TARGET_GRAD,
    "bn_torch_speedup_min": compare_batch_norm.TARGET_TORCH,
    "bn_tf_speedup_min": compare_batch_norm.TARGET_TF,
}


def is_gradient(op):
    return op.endswith("gradient")


def divides(op):
    """The Vars forwards divide by the scale, as TF does (only a division gives TF's bits), so their
    floor is a division, not a multiply."""
    return op in ("vars", "vars_per_channel")


def baseline_name(op):
    if is_gradient(op):
        return "np.add(a, b, out=c)"
    return "np.divide(a, 3.0, out=c)" if divides(op) else "np.multiply(a, 2.0, out=c)"


def bytes_moved(op, n):
    return (12 if is_gradient(op) else 8) * n


# ---------------------------------------------------------------------------------------------------
# Timing


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0


class Timer:
    """Interleaved batches of calls; per-call minimum and median over the batches, and the page faults
    per call in the fastest batch (fresh pages for an output cost a fault each: first-touch, not work).

    Each batch's timed calls follow half as many untimed ones, so that every candidate is timed in
    the state its own calls leave, whichever candidate ran before it. Without them the order's
    first and last candidates (np.add is first) had every other batch follow one of their own, and
    the others had none. On an Intel Xeon (2 cores of a large L3), fqcore's gradient of a
    3.2M-element batch norm took 3.7, 3.0, 2.5, 2.4 and 2.3 ms for its first calls after a batch
    of np.add on other arrays, then 2.25-2.32 ms; after a batch of its own calls, 2.22-2.25 ms
    (minima of 15 sequences; likely its arrays coming back into the L3). In compare.py that
    gradient (AVX-512) read 1.71-1.79x np.add without the untimed calls and 1.68-1.69x with them."""

    def __init__(self, repeats, sample_s):
        self.repeats = repeats
        self.sample_s = sample_s

    def _calls_per_batch(self, fn):
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            elapsed = time.perf_counter() - start
            if elapsed >= 0.2 * self.sample_s or number >= 1 << 20:
                return max(1, int(round(number * self.sample_s / max(elapsed, 1e-9))))
            number *= 10

    def measure(self, candidates):
        """candidates: {name: fn} or {name: (fn, prepare)}; prepare runs before each batch, untimed."""
        entries = []
        for name, spec in candidates.items():
            fn, prepare = spec if isinstance(spec, tuple) else (spec, None)
            if prepare:
                prepare()
            for _ in range(2):  # warm up: page in the output, caches, lazy initialisation
                fn()
            entries.append((name, fn, prepare, self._calls_per_batch(fn)))
        samples = {name: [] for name, _, _, _ in entries}
        faults = {name: [] for name, _, _, _ in entries}
        for r in range(self.repeats):
            for name, fn, prepare, number in (entries if r % 2 == 0 else entries[::-1]):
                if prepare:
                    prepare()
                for _ in range(max(1, number // 2)):
                    fn()
                loop = range(number)
                faults_before = minor_faults()
                start = time.perf_counter()
                for _ in loop:
                    fn()
                samples[name].append((time.perf_counter() - start) / number)
                faults[name].append((minor_faults() - faults_before) / number)
        return {name: {"min": min(s), "median": statistics.median(s), "batches": len(s),
                       "calls_per_batch": number, "faults_per_call": faults[name][s.index(min(s))]}
                for (name, _, _, number), s in zip(entries, samples.values())}


# ---------------------------------------------------------------------------------------------------
# Optional frameworks (each set to one thread before it does any work)


def load_torch(enabled):
    if not enabled:
        return None, "disabled with --no-torch"
    try:
        import torch
    except ImportError as error:
        return None, f"not installed ({error})"
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    return torch, None


def load_tf(enabled, path=None, onednn=None):
    """path: a site-packages directory holding TensorFlow for this Python, searched after this
    interpreter's own; onednn: "on"/"off" sets TF_ENABLE_ONEDNN_OPTS (read when TF is imported),
    anything else leaves it as it is."""
    if not enabled:
        return None, "disabled with --no-tf"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if onednn in ("on", "off"):
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn == "on" else "0"
    if path and path not in sys.path:
        sys.path.append(path)
    try:
        import tensorflow as tf
    except ImportError as error:
        return None, f"not installed ({error})"
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    try:
        tf.config.set_visible_devices([], "GPU")
    except (RuntimeError, ValueError):
        pass
    return tf, None


def tf_kernels(tf):
    """"oneDNN" or "Eigen": the CPU kernels the imported TF runs. TF decides at import from its build
    and TF_ENABLE_ONEDNN_OPTS; IsMklEnabled is its own answer (a private module: without it, the
    variable decides, unset meaning TF's x86 default, oneDNN)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return "oneDNN" if _pywrap_util_port.IsMklEnabled() else "Eigen"
    except (ImportError, AttributeError):
        value = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").lower()
        return "Eigen" if value in ("0", "false") else "oneDNN"


def bn_tf_in_child(onednn, args, timer):
    """Batch norm's TF columns for the TF kernels this process did not import: compare_batch_norm.measure_tf_cases
    in a child process with TF_ENABLE_ONEDNN_OPTS set by `onednn` ("on"/"off"), the same fqcore (ISA
    included), timer and allocator settings. Returns (result, None) or (None, why not)."""
    config = {"onednn": onednn, "isa": fqcore.get_isa(), "tf_path": args.tf_path, "malloc": args.malloc,
              "repeats": timer.repeats, "sample_s": timer.sample_s}
    here = os.path.dirname(os.path.abspath(__file__))
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(fqcore.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([here, package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    code = "import sys, compare; compare.bn_tf_child(sys.argv[1])"
    try:
        done = subprocess.run([sys.executable, "-c", code, json.dumps(config)], env=env, capture_output=True,
                              text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        return None, "the child process took over an hour"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the child process failed (exit code {done.returncode}: {tail})"
    result = json.loads(lines[-1])
    return (None, result["error"]) if "error" in result else (result, None)


def bn_tf_child(config):
    """The child process of bn_tf_in_child: prints one JSON line."""
    c = json.loads(config)
    fqcore.set_isa(c["isa"])
    if c["malloc"] == "steady":
        keep_freed_memory()
    tf, note = load_tf(True, c["tf_path"], c["onednn"])
    if tf is None:
        print(json.dumps({"error": f"TensorFlow {note}"}))
        return
    timer = Timer(c["repeats"], c["sample_s"])
    print(json.dumps({"kernels": tf_kernels(tf), "tensorflow": tf.__version__,
                      "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                      "cases": compare_batch_norm.measure_tf_cases(timer, tf)}, default=str))


# ---------------------------------------------------------------------------------------------------
# Workloads


# Inputs against the range [-6, 6]. "calibrated": N(0, 2), the range at 3 sigma, as a range observer
# settles on it (0.27% clipped). "wide": N(0, 3), 4.6% clipped, issue 18's case for the per-channel
# gradient, at its slowest with a few percent clipped: each clipped vector adds to its float64 sums
# behind a branch that then mispredicts often. "heavy": uniform in [-8, 8], 25% clipped, where the
# gradients' sums take their slow path on almost every vector.
CLIPPING = {
    "calibrated": lambda rng, shape: rng.standard_normal(shape, dtype=np.float32) * np.float32(2),
    "wide": lambda rng, shape: rng.standard_normal(shape, dtype=np.float32) * np.float32(3),
    "heavy": lambda rng, shape: rng.random(shape, dtype=np.float32) * np.float32(16) - np.float32(8),
}
CLIPPING_TEXT = {"calibrated": "N(0, 2) (0.27% outside the range)",
                 "wide": "N(0, 3) (4.6% outside the range)",
                 "heavy": "uniform in [-8, 8] (25% outside the range)"}


class Case:
    """One input shape: arrays, out= buffers and ranges for fqcore and numpy, tensors for TF/torch.
    Inputs from CLIPPING[clip], by default the run's --clip."""

    clipping = "calibrated"

    def __init__(self, shape, torch=None, tf=None, seed=20240601, x=None, g=None, clip=None):
        rng = np.random.default_rng(seed)
        self.shape = shape
        self.n = int(np.prod(shape))
        # x, g, fqcore's out and numpy's c each at their own offset in a 4 KiB page (placement.py).
        self.x, self.g, self.out, self.c = placed_arrays(shape, 4)
        self.x[...] = x if x is not None else CLIPPING[clip or Case.clipping](rng, shape)
        self.g[...] = g if g is not None else rng.standard_normal(shape, dtype=np.float32)
        d = shape[-1]
        self.vmin, self.vmax = np.array(LO, np.float32), np.array(HI, np.float32)
        # Per-channel ranges all equal to the per-tensor one, so both do identical work.
        self.cmin, self.cmax = np.full(d, LO, np.float32), np.full(d, HI, np.float32)
        self.torch = self._torch_state(torch) if torch is not None else None
        self.tf = self._tf_state(tf) if tf is not None else None

    def fqcore(self, op):
        x, g, out = self.x, self.g, self.out
        vmin, vmax, cmin, cmax = self.vmin, self.vmax, self.cmin, self.cmax
        return {
            "args": lambda: fqcore.fake_quant_with_min_max_args(x, LO, HI, NUM_BITS, False, out=out),
            "args_gradient": lambda: fqcore.fake_quant_with_min_max_args_gradient(
                g, x, LO, HI, NUM_BITS, False, out=out),
            "vars": lambda: fqcore.fake_quant_with_min_max_vars(x, vmin, vmax, NUM_BITS, False, out=out),
            "vars_gradient": lambda: fqcore.fake_quant_with_min_max_vars_gradient(
                g, x, vmin, vmax, NUM_BITS, False, out=out),
            "vars_per_channel": lambda: fqcore.fake_quant_with_min_max_vars_per_channel(
                x, cmin, cmax, NUM_BITS, False, out=out),
            "vars_per_channel_gradient": lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
                g, x, cmin, cmax, NUM_BITS, False, out=out),
        }[op]

    def numpy(self, op):
        x, g, c = self.x, self.g, self.c
        if is_gradient(op):
            return lambda: np.add(g, x, out=c)
        if divides(op):
            return lambda: np.divide(x, 3.0, out=c)
        return lambda: np.multiply(x, 2.0, out=c)

    # -- PyTorch: the same range as (scale, zero_point) on [0, 255]; TF's nudge gives the same grid.

    def _torch_state(self, torch):
        scale = (HI - LO) / 255.0
        zp = int(round(-LO / scale))
        d, axis = self.shape[-1], len(self.shape) - 1
        x = torch.from_numpy(self.x)
        g = torch.from_numpy(self.g)
        s = {"x": x, "g": g, "scale": scale, "zp": zp, "axis": axis,
             "scale_t": torch.tensor([scale], dtype=torch.float32),
             "zp_t": torch.tensor([zp], dtype=torch.int32),
             "cscale": torch.full((d,), scale, dtype=torch.float32),
             "czp": torch.full((d,), zp, dtype=torch.int32)}
        return s

    def torch_fn(self, torch, op):
        s = self.torch
        x, g = s["x"], s["g"]
        if op == "args":
            return lambda: torch.fake_quantize_per_tensor_affine(x, s["scale"], s["zp"], 0, 255)
        if op == "vars":
            return lambda: torch.fake_quantize_per_tensor_affine(x, s["scale_t"], s["zp_t"], 0, 255)
        if op == "vars_per_channel":
            return lambda: torch.fake_quantize_per_channel_affine(x, s["cscale"], s["czp"], s["axis"], 0, 255)
        # Gradients: autograd.grad on a retained graph times the backward node alone.
        xr = x.detach().clone().requires_grad_(True)
        if op == "args_gradient":
            # Straight-through estimator; the backward applies the mask cached by the forward.
            y = torch.fake_quantize_per_tensor_affine(xr, s["scale"], s["zp"], 0, 255)
            wrt = (xr,)
        elif op == "vars_gradient":
            # Learnable range (LSQ): dx, d scale, d zero_point from x, like TF's dx, dmin, dmax.
            scale = torch.tensor([s["scale"]], dtype=torch.float32, requires_grad=True)
            zp = torch.tensor([float(s["zp"])], dtype=torch.float32, requires_grad=True)
            y = torch._fake_quantize_learnable_per_tensor_affine(xr, scale, zp, 0, 255, 1.0)
            wrt = (xr, scale, zp)
        else:
            scale = s["cscale"].clone().requires_grad_(True)
            zp = s["czp"].to(torch.float32).requires_grad_(True)
            y = torch._fake_quantize_learnable_per_channel_affine(xr, scale, zp, s["axis"], 0, 255, 1.0)
            wrt = (xr, scale, zp)
        return lambda: torch.autograd.grad(y, wrt, g, retain_graph=True)

    # -- TensorFlow: tf.quantization ops on constants, eagerly and inside a tf.function.

    def _tf_state(self, tf):
        with tf.device("/CPU:0"):
            return {"x": tf.constant(self.x), "g": tf.constant(self.g),
                    "vmin": tf.constant(self.vmin), "vmax": tf.constant(self.vmax),
                    "cmin": tf.constant(self.cmin), "cmax": tf.constant(self.cmax)}

    @staticmethod
    def tf_op(tf, op):
        q = tf.quantization
        kw = {"num_bits": NUM_BITS, "narrow_range": False}
        return {
            "args": lambda x, g, lo, hi: q.fake_quant_with_min_max_args(x, min=LO, max=HI, **kw),
            "args_gradient": lambda x, g, lo, hi: q.fake_quant_with_min_max_args_gradient(
                g, x, min=LO, max=HI, **kw),
            "vars": lambda x, g, lo, hi: q.fake_quant_with_min_max_vars(x, lo, hi, **kw),
            "vars_gradient": lambda x, g, lo, hi: q.fake_quant_with_min_max_vars_gradient(g, x, lo, hi, **kw),
            "vars_per_channel": lambda x, g, lo, hi: q.fake_quant_with_min_max_vars_per_channel(
                x, lo, hi, **kw),
            "vars_per_channel_gradient": lambda x, g, lo, hi:
                q.fake_quant_with_min_max_vars_per_channel_gradient(g, x, lo, hi, **kw),
        }[op]

    def tf_args(self, op):
        t = self.tf
        if "per_channel" in op:
            return t["x"], t["g"], t["cmin"], t["cmax"]
        return t["x"], t["g"], t["vmin"], t["vmax"]

    def tf_fns(self, tf, op):
        fn = self.tf_op(tf, op)
        args = self.tf_args(op)
        graph_fn = tf.function(fn)
        return (lambda: fn(*args)), (lambda: graph_fn(*args))


def framework_candidates(case, op, torch, tf):
    candidates = {}
    if tf is not None:
        eager, graph = case.tf_fns(tf, op)
        candidates["tf_eager"] = eager
        candidates["tf_function"] = graph
    if torch is not None:
        candidates["torch"] = case.torch_fn(torch, op)
    return candidates


# ---------------------------------------------------------------------------------------------------
# Output


def ms(t):
    return f"{t * 1e3:.4f}" if t < 1e-2 else f"{t * 1e3:.2f}"


def verdict(ok):
    return "pass" if ok else "**FAIL**"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def load_note():
    """The 1-minute load average: other busy processes skew every figure, two-thread ones most."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return ""
    busy = " (other processes were busy: treat these figures with care)" if load > 1.2 else ""
    return f"1-minute load average at the start of this table: {load:.2f}{busy}"


def tf_onednn_text():
    value = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    return "TF_ENABLE_ONEDNN_OPTS unset, TF's default" if value is None else f"TF_ENABLE_ONEDNN_OPTS={value}"


# ---------------------------------------------------------------------------------------------------
# Sections


def section_numpy_and_frameworks(timer, sizes, torch, tf, stat, results, failures):
    """Tables 1 and 5: every op at every n, fqcore, numpy and the frameworks interleaved."""
    rows1, rows5 = [], []
    fqcore.set_num_threads(1)
    for n in sizes:
        case = Case((n // CHANNELS, CHANNELS), torch=torch, tf=tf)
        for op in OPS:
            candidates = {"fqcore": case.fqcore(op), "numpy": case.numpy(op)}
            candidates.update(framework_candidates(case, op, torch, tf))
            r = timer.measure(candidates)
            fq, base = r["fqcore"][stat], r["numpy"][stat]
            ratio = fq / base
            ok = ratio <= TARGET_RATIO
            if not ok:
                failures.append(f"{op} n={n}: fqcore/numpy = {ratio:.2f} > {TARGET_RATIO}")
            gbs = bytes_moved(op, n) / fq / 1e9
            rows1.append([op, n, ms(fq), ms(base), baseline_name(op), f"{ratio:.2f}", f"<= {TARGET_RATIO}",
                          verdict(ok), f"{gbs:.1f}"])
            row5 = [op, n, ms(fq)]
            for key in ("tf_eager", "tf_function", "torch"):
                if key in r:
                    row5 += [ms(r[key][stat]), f"{r[key][stat] / fq:.2f}x"]
            rows5.append(row5)
            results["vs_numpy"].append({"op": op, "n": n, "threads": 1, "times_s": r, "ratio": ratio,
                                        "target": TARGET_RATIO, "pass": ok, "baseline": baseline_name(op)})
        del case
    return rows1, rows5


# Table 2's rows at each shape of LAYOUTS: (per-channel op, per-tensor op, inputs, target). The
# calibrated rows whatever --clip says, as the 1.25 is for calibrated inputs.
LAYOUT_ROWS = [("vars_per_channel", "vars", "calibrated", TARGET_LAYOUT),
               ("vars_per_channel_gradient", "vars_gradient", "calibrated", TARGET_LAYOUT),
               ("vars_per_channel_gradient", "vars_gradient", LAYOUT_CLIPPED, TARGET_LAYOUT_CLIPPED)]


def section_layout(timer, stat, results, failures):
    rows = []
    fqcore.set_num_threads(1)
    for shape in LAYOUTS:
        cases = {clip: Case(shape, clip=clip) for clip in {clip for _, _, clip, _ in LAYOUT_ROWS}}
        for per_channel, per_tensor, clip, target in LAYOUT_ROWS:
            case = cases[clip]
            r = timer.measure({"per_channel": case.fqcore(per_channel), "per_tensor": case.fqcore(per_tensor)})
            ratio = r["per_channel"][stat] / r["per_tensor"][stat]
            ok = ratio <= target
            if not ok:
                failures.append(f"{per_channel} {shape} {clip} inputs: per-channel/per-tensor = {ratio:.2f} "
                                f"> {target}")
            rows.append([f"{per_channel} / {per_tensor}", "x".join(map(str, shape)), CLIPPING_TEXT[clip],
                         ms(r["per_channel"][stat]), ms(r["per_tensor"][stat]), f"{ratio:.2f}", f"<= {target}",
                         verdict(ok)])
            results["layout"].append({"per_channel": per_channel, "per_tensor": per_tensor, "shape": shape,
                                      "inputs": clip, "times_s": r, "ratio": ratio, "target": target, "pass": ok})
        del cases
    return rows


def section_small(timer, torch, tf, stat, results, failures):
    rows = []
    fqcore.set_num_threads(1)
    case = Case((1, SMALL), torch=torch, tf=tf)  # 2-D: torch's learnable per-channel backward rejects 1-D
    for op in OPS:
        candidates = {"fqcore": case.fqcore(op), "numpy": case.numpy(op)}
        candidates.update(framework_candidates(case, op, torch, tf))
        r = timer.measure(candidates)
        us = r["fqcore"][stat] * 1e6
        ok = us <= TARGET_SMALL_US
        if not ok:
            failures.append(f"{op} {SMALL} elements: {us:.2f} us > {TARGET_SMALL_US} us")
        row = [op, f"{us:.2f}", f"<= {TARGET_SMALL_US}", verdict(ok), f"{r['numpy'][stat] * 1e6:.2f}"]
        for key in ("tf_eager", "tf_function", "torch"):
            if key in r:
                row.append(f"{r[key][stat] * 1e6:.1f}")
        rows.append(row)
        results["small"].append({"op": op, "n": SMALL, "times_s": r, "target_us": TARGET_SMALL_US, "pass": ok})
    return rows


def section_threads(timer, stat, results, failures):
    rows = []
    case = Case((THREAD_N // CHANNELS, CHANNELS))
    for op in OPS:
        fn = case.fqcore(op)
        r = timer.measure({"1": (fn, lambda: fqcore.set_num_threads(1)),
                           "2": (fn, lambda: fqcore.set_num_threads(2))})
        speedup = r["1"][stat] / r["2"][stat]
        ok = speedup >= TARGET_SPEEDUP
        if not ok:
            failures.append(f"{op} n={THREAD_N}: 2-thread speedup {speedup:.2f} < {TARGET_SPEEDUP}")
        rows.append([op, THREAD_N, ms(r["1"][stat]), ms(r["2"][stat]), f"{speedup:.2f}",
                     f">= {TARGET_SPEEDUP}", verdict(ok)])
        results["threads"].append({"op": op, "n": THREAD_N, "times_s": r, "speedup": speedup,
                                   "target": TARGET_SPEEDUP, "pass": ok})
    fqcore.set_num_threads(1)
    return rows


def section_tf_agreement(tf, results):
    """Same work? Elementwise outputs bitwise against TF, and dmin/dmax error against float64."""
    n = THREAD_N
    rng = np.random.default_rng(99)
    x = (rng.random((n // CHANNELS, CHANNELS), dtype=np.float32) * 24.0 - 12.0).astype(np.float32)
    g = rng.random(x.shape, dtype=np.float32)   # positive: the sums grow, float32 running sums drift
    case = Case(x.shape, tf=tf, x=x, g=g)
    rows = []
    lo, hi = np.float32(LO), np.float32(HI)
    scale = (hi - lo) / np.float32(255)
    zp = np.float32(np.floor(np.float32(0) - lo / scale + np.float32(0.5)))
    nmin, nmax = (np.float32(0) - zp) * scale, (np.float32(255) - zp) * scale
    g64 = g.astype(np.float64)
    exact_min = np.where(x < nmin, g64, 0.0).sum(axis=0)
    exact_max = np.where(x > nmax, g64, 0.0).sum(axis=0)
    for op in OPS:
        fq_out = case.fqcore(op)()
        tf_out = case.tf_op(tf, op)(*case.tf_args(op))
        fq_dx = fq_out[0] if isinstance(fq_out, tuple) else fq_out
        tf_dx = (tf_out[0] if isinstance(tf_out, (tuple, list)) else tf_out).numpy()
        mismatches = int(np.count_nonzero(np.asarray(fq_dx).view(np.uint32) != tf_dx.view(np.uint32)))
        row = [op, n, mismatches]
        entry = {"op": op, "n": n, "elementwise_mismatches": mismatches}
        if op == "vars_gradient":
            errs = [abs(float(fq_out[1]) - exact_min.sum()), abs(float(tf_out[1].numpy()) - exact_min.sum()),
                    abs(float(fq_out[2]) - exact_max.sum()), abs(float(tf_out[2].numpy()) - exact_max.sum())]
        elif op == "vars_per_channel_gradient":
            errs = [np.max(np.abs(fq_out[1] - exact_min)), np.max(np.abs(tf_out[1].numpy() - exact_min)),
                    np.max(np.abs(fq_out[2] - exact_max)), np.max(np.abs(tf_out[2].numpy() - exact_max))]
        else:
            errs = None
        if errs is None:
            row += ["", "", "", ""]
        else:
            errs = [float(e) for e in errs]
            row += [f"{e:.3g}" for e in errs]
            entry.update(dict(zip(["fq_dmin_err", "tf_dmin_err", "fq_dmax_err", "tf_dmax_err"], errs)))
        rows.append(row)
        results["tf_agreement"].append(entry)
    return rows


# ---------------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter batches (a rough look)")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    parser.add_argument("--isa", help="fqcore ISA to time (default: the active one, normally the best), or "
                                      "'all': the whole report once per ISA this CPU runs, best last")
    parser.add_argument("--repeats", type=int, help="batches per candidate (default 25, 7 with --quick)")
    parser.add_argument("--sample-ms", type=float, help="minimum batch duration (default 20, 5 with --quick)")
    parser.add_argument("--stat", choices=["min", "median"], default="min", help="statistic to report")
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="n for tables 1 and 5")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS,
                        help="which tables to produce (frameworks come with 'numpy')")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even if installed")
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow even if installed")
    parser.add_argument("--tf-path", metavar="DIR",
                        help="a site-packages holding TensorFlow for this Python (e.g. another venv's), "
                             "searched after this interpreter's own packages")
    parser.add_argument("--tf-onednn", choices=["both", "on", "off"], default="both",
                        help="TF's CPU kernels: 'on' sets TF_ENABLE_ONEDNN_OPTS=1 before importing TF (oneDNN), "
                             "'off' =0 (the Eigen kernels the spec names); 'both' (default) imports TF as the "
                             "environment says (TF's default: oneDNN on x86 Linux) and times batch norm's TF "
                             "columns for the other kernels in a child process, so one run checks both targets")
    parser.add_argument("--malloc", choices=["steady", "default"], default="steady",
                        help="batch norm: 'steady' (default) has glibc keep freed memory (mallopt: no mmap, "
                             "no trimming) from that section on, so no library's output allocations fault in "
                             "fresh pages; 'default' leaves glibc's adaptive policy")
    parser.add_argument("--clip", choices=sorted(CLIPPING), default="calibrated",
                        help="inputs of tables 1 and 3-5: a calibrated range (default, 0.27%% clipped), 'wide' "
                             "(4.6%%) or 'heavy' (25%%); table 2 always has calibrated and 4.6%%-clipped rows")
    args = parser.parse_args(argv)
    if args.isa == "all":
        return each_isa(argv if argv is not None else sys.argv[1:], args.json)
    Case.clipping = args.clip

    repeats = args.repeats or (7 if args.quick else 25)
    sample_s = (args.sample_ms or (5.0 if args.quick else 20.0)) / 1e3
    timer = Timer(repeats, sample_s)
    stat = args.stat
    if args.isa:
        fqcore.set_isa(args.isa)
    saved_threads = fqcore.get_num_threads()

    tf, tf_note = load_tf(not args.no_tf, args.tf_path, args.tf_onednn)
    torch, torch_note = load_torch(not args.no_torch)
    kernels = tf_kernels(tf) if tf else None

    meta = {
        "fqcore": fqcore.__version__, "isa": fqcore.get_isa(), "available_isas": fqcore.available_isas(),
        "python": sys.version.split()[0], "numpy": np.__version__,
        "torch": torch.__version__ if torch else None, "tensorflow": tf.__version__ if tf else None,
        "cpu": cpu_model(), "logical_cpus": os.cpu_count(),
        "kernel_choices": fqcore._runtime.config()["kernel_choices"],
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS") if tf else None,
        "tf_kernels": kernels, "statistic": stat, "repeats": repeats, "sample_ms": sample_s * 1e3, "quick": args.quick,
        "clipping": args.clip,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    results = {"meta": meta, "targets": TARGETS, "vs_numpy": [], "layout": [], "small": [], "threads": [],
               "tf_agreement": [], "batch_norm": []}
    failures, unchecked = [], []

    print("# fqcore performance comparison\n")
    print(f"- fqcore {meta['fqcore']}, ISA **{meta['isa']}** (available: {', '.join(meta['available_isas'])}); "
          f"Python {meta['python']}, numpy {meta['numpy']}")
    print(f"- CPU: {meta['cpu']}, {meta['logical_cpus']} logical CPUs; OPENBLAS_CORETYPE={meta['OPENBLAS_CORETYPE']}")
    print(f"- Kernel walks chosen for this CPU: {meta['kernel_choices']}")
    tf_text = (f"{tf.__version__} (CPU, 1 intra-op + 1 inter-op thread; {kernels} kernels: {tf_onednn_text()})"
               if tf else None)
    print(f"- TensorFlow: {tf_text or 'skipped: ' + tf_note}")
    print(f"- PyTorch: {torch.__version__ + ' (1 thread)' if torch else 'skipped: ' + torch_note}")
    print(f"- Timing: time.perf_counter; each batch runs back-to-back calls for >= {sample_s * 1e3:g} ms; "
          f"{repeats} batches per candidate, interleaved in alternating order after a warm-up, "
          f"each batch after half as many untimed calls; "
          f"reported: the **{stat}** over batches of the per-call time. fqcore uses out= buffers; "
          f"TF/PyTorch allocate their results (batch norm: all three allocate).")
    if set(args.sections) - {"bn"}:
        print(f"- Inputs {CLIPPING_TEXT[args.clip]} against the range [{LO:g}, {HI:g}] (table 2 names its own), "
              f"{NUM_BITS} bits; per-channel ops on n elements use shape [n/{CHANNELS}, {CHANNELS}] with every "
              "channel's range equal to the per-tensor range. x, g, fqcore's out= and numpy's out= start "
              "1 KiB apart in a 4 KiB page, so that no load waits on an unrelated store (benchmarks/placement.py).")
    print()
    sys.stdout.flush()

    rows5 = None
    if "numpy" in args.sections:
        note = load_note()
        rows1, rows5 = section_numpy_and_frameworks(timer, args.sizes, torch, tf, stat, results, failures)
        print("## 1. fqcore against numpy's memory-bound ufuncs (1 thread)\n")
        print("Forward ops move 8 bytes per element like their baseline: the Args forward "
              "`np.multiply(a, 2.0, out=c)`; the Vars forwards, which divide as TF does, "
              "`np.divide(a, 3.0, out=c)`. Gradient ops move 12 like `np.add(a, b, out=c)` (the vars "
              f"gradients also reduce dmin/dmax in the same pass). Target: fqcore/numpy <= {TARGET_RATIO} for "
              "every op at every n. " + note + "\n")
        print(table(["op", "n", "fqcore ms", "numpy ms", "numpy baseline", "fqcore/numpy", "target", "result",
                     "fqcore GB/s"], rows1))
        print()
        sys.stdout.flush()

    if "layout" in args.sections:
        note = load_note()
        print("## 2. Per-channel against per-tensor (Vars) at the same element count (1 thread)\n")
        rows = section_layout(timer, stat, results, failures)
        print(f"Targets: per-channel within {TARGET_LAYOUT}x per-tensor, forward and gradient; with "
              f"{CLIPPING_TEXT[LAYOUT_CLIPPED]} the per-channel gradient within {TARGET_LAYOUT_CLIPPED}x. "
              f"For this report's ISA ({meta['isa']}); --isa all gives every ISA's. " + note + "\n")
        print(table(["ops", "shape", "inputs", "per-channel ms", "per-tensor ms", "ratio", "target", "result"],
                    rows))
        print()
        sys.stdout.flush()

    if "small" in args.sections:
        small_header = ["op", "fqcore us/call", "target", "result", "numpy ufunc us"]
        if tf:
            small_header += ["TF eager us", "tf.function us"]
        if torch:
            small_header += ["torch us"]
        note = load_note()
        rows = section_small(timer, torch, tf, stat, results, failures)
        print(f"## 3. Per-call overhead: {SMALL} elements\n")
        print(f"Target: <= {TARGET_SMALL_US:g} us a call, every op. " + note + "\n")
        print(table(small_header, rows))
        print()
        sys.stdout.flush()

    if "threads" in args.sections:
        note = load_note()
        rows = section_threads(timer, stat, results, failures)
        print(f"## 4. Two threads against one at n = {THREAD_N} ({os.cpu_count()} logical CPUs)\n")
        print(f"Target: two threads >= {TARGET_SPEEDUP}x faster than one, every op. " + note + "\n")
        print(table(["op", "n", "1 thread ms", "2 threads ms", "speedup", "target", "result"], rows))
        print()
        sys.stdout.flush()

    if rows5 is not None:
        print("## 5. Against TensorFlow and PyTorch (1 thread; ratio = their time / fqcore's, >1 means fqcore "
              "is faster)\n")
        header5 = ["op", "n", "fqcore ms"]
        if tf:
            header5 += ["TF eager ms", "TF eager / fq", "tf.function ms", "tf.function / fq"]
        if torch:
            header5 += ["torch ms", "torch / fq"]
        notes = []
        if not tf:
            notes.append(f"TensorFlow columns skipped: {tf_note}.")
        if not torch:
            notes.append(f"PyTorch columns skipped: {torch_note}.")
        if torch:
            notes.append("PyTorch: fake_quantize_per_tensor_affine (args: float scale; vars: tensor scale) and "
                         "fake_quantize_per_channel_affine; args_gradient = autograd backward of the STE "
                         "(applies the 1-byte mask cached by the forward; the forward is not timed); "
                         "vars/per-channel gradients = autograd backward of "
                         "_fake_quantize_learnable_per_{tensor,channel}_affine (dx, dscale, dzero_point from x: "
                         "the analogue of TF's dx, dmin, dmax).")
        if tf:
            notes.append(f"TF ({kernels} kernels): tf.quantization.fake_quant_with_min_max_* on CPU constants, "
                         "eagerly and inside a tf.function taking the tensors as arguments. No targets.")
        if tf or torch:
            print(table(header5, rows5))
            print()
        print("\n".join(f"- {n}" for n in notes))
        print()

    if tf and "tf_agreement" in args.sections:
        print(f"## 6. Same results as TensorFlow? (n = {THREAD_N}, inputs in [-12, 12], gradients in [0, 1))\n")
        print("Elementwise outputs (forward, dx) compared bitwise; dmin/dmax absolute error against a "
              "float64 sum (per-channel: the largest over channels).\n")
        print(table(["op", "n", "elementwise mismatches vs TF", "fq dmin err", "TF dmin err", "fq dmax err",
                     "TF dmax err"], section_tf_agreement(tf, results)))
        print()

    if "bn" in args.sections:
        note = load_note()
        malloc_note = keep_freed_memory() if args.malloc == "steady" else "glibc's default policy"
        meta["bn_malloc"] = malloc_note
        tf_other, other_why = None, None
        if tf is None:
            unchecked.append(f"bn against TensorFlow (oneDNN >= {compare_batch_norm.TARGET_TF['oneDNN']}x, "
                             f"Eigen >= {compare_batch_norm.TARGET_TF['Eigen']}x): TensorFlow {tf_note}")
        else:
            other_kind = "Eigen" if kernels == "oneDNN" else "oneDNN"
            if args.tf_onednn == "both":
                tf_other, other_why = bn_tf_in_child("off" if kernels == "oneDNN" else "on", args, timer)
                if tf_other is not None and tf_other["kernels"] == kernels:
                    tf_other, other_why = None, f"this TensorFlow has no {other_kind} kernels"
            else:
                other_why = f"--tf-onednn {args.tf_onednn} (the default, both, times them in a child process)"
            if tf_other is None:
                unchecked.append(f"bn against TensorFlow's {other_kind} kernels "
                                 f"(>= {compare_batch_norm.TARGET_TF[other_kind]}x): {other_why}")
        if torch is None:
            unchecked.append(f"bn against PyTorch (>= {compare_batch_norm.TARGET_TORCH}x): PyTorch {torch_note}")
        meta["tf_other"] = ({k: tf_other[k] for k in ("kernels", "tensorflow", "TF_ENABLE_ONEDNN_OPTS")}
                            if tf_other else other_why)
        tables, notes, bn_results, bn_failures = compare_batch_norm.run(timer, torch, tf, stat, args.quick,
                                                                        kernels, tf_other)
        notes.append(f"Allocator: {malloc_note}.")
        results["batch_norm"] = bn_results
        failures += bn_failures
        print("## 7. Fused batch norm (1 thread)\n")
        print(note + "\n")
        for i, (title, intro, header, rows) in enumerate(tables):
            print(f"### 7{'abcdefgh'[i]}. {title}\n")
            print(intro + "\n")
            print(table(header, rows))
            print()
        if tf is None:
            notes.append(f"TensorFlow columns skipped: {tf_note}.")
        if torch is None:
            notes.append(f"PyTorch columns skipped: {torch_note}.")
        print("\n".join(f"- {n}" for n in notes))
        print()
        sys.stdout.flush()

    print("## Targets missed\n")
    if meta["isa"] == "scalar" and failures:
        print("The scalar path is the reference formulas, an element at a time: the targets are set "
              "for the vector paths, and its misses are listed for the record.\n")
    print("\n".join(f"- {f}" for f in failures) if failures else "None.")
    if unchecked:
        print("\n## Targets not checked\n")
        print("\n".join(f"- {u}" for u in unchecked))
    results["failures"] = failures
    results["unchecked"] = unchecked
    fqcore.set_num_threads(saved_threads)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
        print(f"\n(wrote {args.json})")
    return 0


def each_isa(argv, json_path):
    """main() once per ISA of fqcore.available_isas() (slowest first), each with --isa set and its
    JSON, when asked for, in FILE with the ISA's name before the extension; the worst exit code."""
    codes = []
    for isa in fqcore.available_isas():
        rest, skip = [], False
        for arg in argv:
            if skip:
                skip = False
            elif arg == "--isa" or arg == "--json":
                skip = True
            elif not arg.startswith(("--isa=", "--json=")):
                rest.append(arg)
        rest += ["--isa", isa]
        if json_path:
            stem, ext = os.path.splitext(json_path)
            rest += ["--json", f"{stem}.{isa}{ext}"]
        print(f"\n# ISA {isa}\n")
        codes.append(main(rest))
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
