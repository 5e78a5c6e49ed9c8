"""The batch-norm section of benchmarks/compare.py: fqcore's fused batch norm against np.add, PyTorch and TensorFlow."""
import numpy as np

import fqcore

try:  # imported by asv, benchmarks/ is a package; run from benchmarks/, it is on sys.path
    from .placement import placed_arrays
except ImportError:
    from placement import placed_arrays

# ResNet-50 activations (stage 2 at batch 32, stage 4 at batch 64) in both layouts, and a 3-D conv's.
CASES = [("NHWC", (32, 56, 56, 64)), ("NCHW", (32, 64, 56, 56)), ("NHWC", (64, 14, 14, 256)),
         ("NCHW", (64, 256, 14, 14)), ("NDHWC", (8, 16, 16, 16, 32))]
HALF_CASES = [("NHWC", (64, 14, 14, 256)), ("NCHW", (64, 256, 14, 14))]
EPSILON = 1e-3
MOMENTUM = 0.1            # torch's momentum = TF's and fqcore's exponential_avg_factor: all three blend
TARGET_FWD = 1.6          # fqcore training forward / np.add(a, b, out=c), same element count
TARGET_GRAD = 1.8         # fqcore training gradient / np.add
TARGET_TORCH = 1.2        # torch time / fqcore time, forward and gradient
# TF time / fqcore time, forward and gradient, by TF's CPU kernels: its default (oneDNN) is about one
# pass over the data from the floor, so 3x of it is out of reach; its Eigen kernels are far slower.
TARGET_TF = {"oneDNN": 1.2, "Eigen": 3.0}
# Where torch's NCHW-indexed view of a channels-last array comes from (a permutation, no copy).
TO_TORCH = {"NHWC": (0, 3, 1, 2), "NDHWC": (0, 4, 1, 2, 3)}


def faulting(r, names, min_faults=16):
    """'name: faults/call' for candidates whose fastest batch still paid page faults."""
    return [f"{NAMES.get(k, k)} {r[k]['faults_per_call']:.0f}" for k in names
            if k in r and r[k].get("faults_per_call", 0) >= min_faults]


NAMES = {"np.add": "np.add", "fq_fwd": "fqcore fwd", "fq_grad": "fqcore grad", "fq_inf": "fqcore inference",
         "torch_fwd": "torch fwd", "torch_grad": "torch grad", "torch_inf": "torch inference",
         "tf_fwd": "TF fwd", "tf_grad": "TF grad", "tf_inf": "TF inference"}


def shape_text(shape):
    return "x".join(map(str, shape))


def channels(fmt, shape):
    return shape[-1] if fmt.endswith("C") else shape[1]


class BnCase:
    """Inputs for one shape and format, made once outside every timed region; each timed call allocates
    its outputs (none of the three libraries takes out= here) and returns them, dropped by the timer."""

    def __init__(self, fmt, shape, dtype=np.float32, torch=None, tf=None, seed=20240601):
        rng = np.random.default_rng(seed)
        self.fmt, self.shape, self.dtype = fmt, shape, np.dtype(dtype)
        self.n = int(np.prod(shape))
        c = channels(fmt, shape)
        self.x = (rng.standard_normal(shape, dtype=np.float32) * np.float32(2) + np.float32(0.5)).astype(dtype)
        self.dy = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        self.scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
        self.offset = rng.uniform(-0.5, 0.5, c).astype(np.float32)
        self.run_mean = np.zeros(c, np.float32)
        self.run_var = np.ones(c, np.float32)
        # The memory-bound floor: float32 whatever the case's dtype (numpy's float16 add converts element
        # by element and is compute-bound), pre-touched, its operands placed apart in a 4 KiB page
        # (benchmarks/placement.py). Allocated one after another, arrays whose size is a multiple of
        # 4 KiB (every case's) start a few bytes apart in it, and each store of c then holds up the
        # next loads of a and b: np.add of NHWC 32x56x56x64 took 5.8-6.1 ms instead of 4.6 (Intel
        # Xeon, one thread), which made fqcore's ratios to it look 1.3x better than they are.
        self.a, self.b, self.c = placed_arrays((self.n,), 3)
        self.a[:] = rng.standard_normal(self.n, dtype=np.float32)
        self.b[:] = rng.standard_normal(self.n, dtype=np.float32)
        fwd = self.fq_forward()()
        self.rs = (fwd.reserve_space_1, fwd.reserve_space_2, fwd.reserve_space_3)
        self.pop_mean, self.pop_var = fwd.batch_mean, fwd.batch_variance
        self.torch = self._torch_state(torch) if torch is not None else None
        self.tf = self._tf_state(tf) if tf is not None else None

    def numpy_add(self):
        a, b, c = self.a, self.b, self.c
        return lambda: np.add(a, b, out=c)

    def fq_forward(self, training=True):
        x, scale, offset, fmt = self.x, self.scale, self.offset, self.fmt
        if training:
            mean, var = self.run_mean, self.run_var
            return lambda: fqcore.fused_batch_norm(x, scale, offset, mean, var, EPSILON, MOMENTUM, fmt, True)
        mean, var = self.pop_mean, self.pop_var
        return lambda: fqcore.fused_batch_norm(x, scale, offset, mean, var, EPSILON, 1.0, fmt, False)

    def fq_gradient(self):
        dy, x, scale, fmt = self.dy, self.x, self.scale, self.fmt
        rs1, rs2, rs3 = self.rs
        return lambda: fqcore.fused_batch_norm_grad(dy, x, scale, rs1, rs2, rs3, EPSILON, fmt, True)

    # -- PyTorch: aten's native_batch_norm and its backward, the calls autograd makes (no graph kept).

    def _torch_state(self, torch):
        perm = TO_TORCH.get(self.fmt)

        def view(a):  # channels-last memory seen as N, C, spatial: torch's channels_last(_3d) format
            t = torch.from_numpy(a)
            return t.permute(*perm) if perm else t

        s = {"x": view(self.x), "dy": view(self.dy), "w": torch.from_numpy(self.scale),
             "b": torch.from_numpy(self.offset), "rm": torch.from_numpy(self.run_mean.copy()),
             "rv": torch.from_numpy(self.run_var.copy()), "pm": torch.from_numpy(self.pop_mean),
             "pv": torch.from_numpy(self.pop_var), "perm": perm}
        if perm:
            fmt = torch.channels_last if len(perm) == 4 else torch.channels_last_3d
            assert s["x"].is_contiguous(memory_format=fmt) and s["dy"].is_contiguous(memory_format=fmt)
        _, s["save_mean"], s["save_invstd"] = torch.native_batch_norm(
            s["x"], s["w"], s["b"], s["rm"], s["rv"], True, MOMENTUM, EPSILON)
        return s

    def torch_forward(self, torch, training=True):
        s = self.torch
        x, w, b = s["x"], s["w"], s["b"]
        if training:
            rm, rv = s["rm"], s["rv"]
            return lambda: torch.native_batch_norm(x, w, b, rm, rv, True, MOMENTUM, EPSILON)
        pm, pv = s["pm"], s["pv"]
        return lambda: torch.native_batch_norm(x, w, b, pm, pv, False, MOMENTUM, EPSILON)

    def torch_gradient(self, torch):
        s = self.torch
        dy, x, w, rm, rv, sm, si = s["dy"], s["x"], s["w"], s["rm"], s["rv"], s["save_mean"], s["save_invstd"]
        backward = torch.ops.aten.native_batch_norm_backward
        return lambda: backward(dy, x, w, rm, rv, sm, si, True, EPSILON, [True, True, True])

    def torch_to_numpy(self, t):
        perm = self.torch["perm"]
        if perm:
            t = t.permute(*np.argsort(perm))
        return t.numpy()

    # -- TensorFlow: the raw ops, eagerly, on CPU constants.

    def _tf_state(self, tf):
        with tf.device("/CPU:0"):
            s = {"x": tf.constant(self.x), "dy": tf.constant(self.dy), "scale": tf.constant(self.scale),
                 "offset": tf.constant(self.offset), "rm": tf.constant(self.run_mean),
                 "rv": tf.constant(self.run_var), "pm": tf.constant(self.pop_mean),
                 "pv": tf.constant(self.pop_var)}
        s["fallback"] = {}
        for what in ("forward", "forward_inference", "gradient"):
            try:
                self._tf_call(tf, s, what, self.fmt)
            except Exception as error:  # noqa: BLE001 - TF raises several op-error types
                s["fallback"][what] = str(error).splitlines()[0][:160]
        return s

    def _tf_call(self, tf, s, what, fmt, transpose=None):
        """One raw-op call in `fmt`; with `transpose` (perm to channels-last, perm back), what TF's
        Python layer does when the CPU kernel refuses a format: transpose in, run NHWC, transpose out."""
        x, dy = s["x"], s["dy"]
        if transpose:
            x = tf.transpose(x, transpose[0])
            dy = tf.transpose(dy, transpose[0])
        if what == "gradient":
            rs = s["rs"]
            r = tf.raw_ops.FusedBatchNormGradV3(y_backprop=dy, x=x, scale=s["scale"], reserve_space_1=rs[0],
                                                reserve_space_2=rs[1], reserve_space_3=rs[2], epsilon=EPSILON,
                                                data_format=fmt, is_training=True)
        else:
            training = what == "forward"
            r = tf.raw_ops.FusedBatchNormV3(x=x, scale=s["scale"], offset=s["offset"],
                                            mean=s["rm"] if training else s["pm"],
                                            variance=s["rv"] if training else s["pv"], epsilon=EPSILON,
                                            exponential_avg_factor=MOMENTUM if training else 1.0,
                                            data_format=fmt, is_training=training)
            if training and "rs" not in s:
                s["rs"] = (r[3], r[4], r[5])
        if transpose:
            r = (tf.transpose(r[0], transpose[1]),) + tuple(r[1:])
        return r

    def tf_fn(self, tf, what):
        s = self.tf
        if what not in s["fallback"]:
            return lambda: self._tf_call(tf, s, what, self.fmt)
        rank = len(self.shape)
        to_last = (0,) + tuple(range(2, rank)) + (1,)
        to_first = (0, rank - 1) + tuple(range(1, rank - 1))
        fmt = "NHWC" if rank == 4 else "NDHWC"
        if "rs" not in s:
            self._tf_call(tf, s, "forward", fmt, (to_last, to_first))
        return lambda: self._tf_call(tf, s, what, fmt, (to_last, to_first))


def agreement(case, torch, tf):
    """Largest |difference| from fqcore's y and x_backprop (training), for torch and TF: the same work?"""
    y = case.fq_forward()()[0].astype(np.float64)
    dx = case.fq_gradient()()[0].astype(np.float64)
    out = {}
    if torch is not None:
        ty = case.torch_to_numpy(case.torch_forward(torch)()[0]).astype(np.float64)
        tdx = case.torch_to_numpy(case.torch_gradient(torch)()[0]).astype(np.float64)
        out["torch"] = (float(np.max(np.abs(ty - y))), float(np.max(np.abs(tdx - dx))))
    if tf is not None:
        ty = case.tf_fn(tf, "forward")()[0].numpy().astype(np.float64)
        tdx = case.tf_fn(tf, "gradient")()[0].numpy().astype(np.float64)
        out["tf"] = (float(np.max(np.abs(ty - y))), float(np.max(np.abs(tdx - dx))))
    return out


def candidates(case, torch, tf, inference=True):
    c = {"np.add": case.numpy_add(), "fq_fwd": case.fq_forward(), "fq_grad": case.fq_gradient()}
    if inference:
        c["fq_inf"] = case.fq_forward(training=False)
    if torch is not None:
        c["torch_fwd"] = case.torch_forward(torch)
        c["torch_grad"] = case.torch_gradient(torch)
        if inference:
            c["torch_inf"] = case.torch_forward(torch, training=False)
    if tf is not None:
        c["tf_fwd"] = case.tf_fn(tf, "forward")
        c["tf_grad"] = case.tf_fn(tf, "gradient")
        if inference:
            c["tf_inf"] = case.tf_fn(tf, "forward_inference")
    return c


def _ms(t):
    return f"{t * 1e3:.3f}" if t < 1e-2 else f"{t * 1e3:.2f}"


def _cells(t, fq, target, label, failures, where):
    """'t ms', 'ratio x' cells for a framework's time `t` against fqcore's `fq`; records a missed target."""
    ratio = t / fq
    cell = f"{ratio:.2f}x"
    if target is not None and ratio < target:
        failures.append(f"bn {where}: {label} / fqcore = {ratio:.2f} < {target}")
        cell += " **FAIL**"
    return [_ms(t), cell]


def _speedup(r, key, fq, stat, target, label, failures, where):
    """_cells for candidate `key` of the measurement `r`, if it was timed."""
    return _cells(r[key][stat], fq, target, label, failures, where) if key in r else []


def measure_tf_cases(timer, tf):
    """fqcore's and TF's training forward and gradient, interleaved, on every case: the TF columns of
    run() for the kernels another process imported (each ratio against that process's own fqcore time)."""
    fqcore.set_num_threads(1)
    out = []
    for fmt, shape in CASES:
        case = BnCase(fmt, shape, tf=tf)
        both = {k: f for k, f in candidates(case, None, tf, inference=False).items() if k != "np.add"}
        out.append({"format": fmt, "shape": list(shape), "times_s": timer.measure(both),
                    "tf_fallback": case.tf["fallback"]})
        del case
    return out


def run(timer, torch, tf, stat, quick=False, tf_kernels=None, tf_other=None):
    """Measures every case; returns (tables: [(title, intro, header, rows)], notes, results, failures).
    tf_kernels: which kernels (a key of TARGET_TF) `tf` runs; tf_other: measure_tf_cases's cases for the other
    kernels, from a child process, as {"kernels": ..., "cases": [...]}, or None."""
    fqcore.set_num_threads(1)
    failures, results = [], []
    rows_np, rows_fw, rows_inf, rows_half, rows_agree, fallbacks, faults = [], [], [], [], [], {}, []
    other = {}
    if tf_other is not None:
        other = {(c["format"], tuple(c["shape"])): c for c in tf_other["cases"]}
        for c in tf_other["cases"]:
            if c["tf_fallback"]:
                fallbacks[f"{c['format']} {shape_text(c['shape'])} ({tf_other['kernels']})"] = c["tf_fallback"]
    timed = ({tf_kernels} if tf is not None else set()) | ({tf_other["kernels"]} if tf_other is not None else set())
    kinds = [k for k in TARGET_TF if k in timed]  # columns in one order, whichever process ran which kernels
    for fmt, shape in CASES:
        case = BnCase(fmt, shape, torch=torch, tf=tf)
        if tf is not None and case.tf["fallback"]:
            fallbacks[f"{fmt} {shape_text(shape)} ({tf_kernels})"] = case.tf["fallback"]
        r = timer.measure(candidates(case, torch, tf, inference=not quick))
        where = f"{fmt} {shape_text(shape)}"
        paid = faulting(r, r)
        if paid:
            faults.append(f"{where}: " + ", ".join(paid))
        add, fwd, grad = r["np.add"][stat], r["fq_fwd"][stat], r["fq_grad"][stat]
        ok_fwd, ok_grad = fwd / add <= TARGET_FWD, grad / add <= TARGET_GRAD
        if not ok_fwd:
            failures.append(f"bn {where}: forward / np.add = {fwd / add:.2f} > {TARGET_FWD}")
        if not ok_grad:
            failures.append(f"bn {where}: gradient / np.add = {grad / add:.2f} > {TARGET_GRAD}")
        rows_np.append([fmt, shape_text(shape), f"{case.n / 1e6:.2f}M", _ms(add), _ms(fwd), f"{fwd / add:.2f}",
                        "pass" if ok_fwd else "**FAIL**", _ms(grad), f"{grad / add:.2f}",
                        "pass" if ok_grad else "**FAIL**"])
        # kind -> (TF forward, fqcore forward, TF gradient, fqcore gradient, process), each pair from one process
        tf_times = {}
        if "tf_fwd" in r:
            tf_times[tf_kernels] = (r["tf_fwd"][stat], fwd, r["tf_grad"][stat], grad, "this")
        if other:
            t = other[(fmt, tuple(shape))]["times_s"]
            tf_times[tf_other["kernels"]] = (t["tf_fwd"][stat], t["fq_fwd"][stat], t["tf_grad"][stat],
                                             t["fq_grad"][stat], "child")
        row = [fmt, shape_text(shape), _ms(fwd)]
        row += _speedup(r, "torch_fwd", fwd, stat, TARGET_TORCH, "torch forward", failures, where)
        for kind in kinds:
            tf_fwd, fq_fwd = tf_times[kind][:2]
            row += _cells(tf_fwd, fq_fwd, TARGET_TF[kind], f"TF {kind} forward", failures, where)
        row += [_ms(grad)]
        row += _speedup(r, "torch_grad", grad, stat, TARGET_TORCH, "torch gradient", failures, where)
        for kind in kinds:
            tf_grad, fq_grad = tf_times[kind][2:4]
            row += _cells(tf_grad, fq_grad, TARGET_TF[kind], f"TF {kind} gradient", failures, where)
        rows_fw.append(row)
        speedups = {}
        if "torch_fwd" in r:
            speedups["torch"] = {"forward": r["torch_fwd"][stat] / fwd, "gradient": r["torch_grad"][stat] / grad,
                                 "target": TARGET_TORCH, "process": "this"}
        for kind, (tf_fwd, fq_fwd, tf_grad, fq_grad, process) in tf_times.items():
            speedups[f"tf_{kind}"] = {"forward": tf_fwd / fq_fwd, "gradient": tf_grad / fq_grad,
                                      "target": TARGET_TF[kind], "process": process}
        for entry in speedups.values():
            entry["pass"] = min(entry["forward"], entry["gradient"]) >= entry["target"]
        if "fq_inf" in r:
            inf = r["fq_inf"][stat]
            row = [fmt, shape_text(shape), _ms(inf), f"{inf / add:.2f}"]
            row += _speedup(r, "torch_inf", inf, stat, None, "", failures, where)
            row += _speedup(r, "tf_inf", inf, stat, None, "", failures, where)
            rows_inf.append(row)
        agree = agreement(case, torch, tf) if (torch is not None or tf is not None) else {}
        if agree:
            row = [fmt, shape_text(shape)]
            for key in ("torch", "tf"):
                if key in agree:
                    row += [f"{agree[key][0]:.2g}", f"{agree[key][1]:.2g}"]
            rows_agree.append(row)
        results.append({"format": fmt, "shape": shape, "dtype": "float32", "n": case.n, "threads": 1,
                        "times_s": r, "fwd_over_add": fwd / add, "grad_over_add": grad / add,
                        "target_fwd_over_add": TARGET_FWD, "target_grad_over_add": TARGET_GRAD,
                        "pass_fwd": ok_fwd, "pass_grad": ok_grad, "speedups": speedups,
                        "tf_other_times_s": other[(fmt, tuple(shape))]["times_s"] if other else None,
                        "max_abs_diff_y_dx": agree, "tf_fallback": case.tf["fallback"] if case.tf else None})
        del case

    if not quick:
        for fmt, shape in HALF_CASES:
            case = BnCase(fmt, shape, dtype=np.float16, torch=torch, tf=tf)
            r = timer.measure(candidates(case, torch, tf, inference=False))
            where = f"{fmt} {shape_text(shape)} float16"
            paid = faulting(r, r)
            if paid:
                faults.append(f"{where}: " + ", ".join(paid))
            add, fwd, grad = r["np.add"][stat], r["fq_fwd"][stat], r["fq_grad"][stat]
            row = [fmt, shape_text(shape), _ms(add), _ms(fwd), f"{fwd / add:.2f}", _ms(grad), f"{grad / add:.2f}"]
            for key, fq in (("torch_fwd", fwd), ("tf_fwd", fwd), ("torch_grad", grad), ("tf_grad", grad)):
                row += _speedup(r, key, fq, stat, None, "", failures, where)
            rows_half.append(row)
            results.append({"format": fmt, "shape": shape, "dtype": "float16", "n": case.n, "threads": 1,
                            "times_s": r, "fwd_over_add": fwd / add, "grad_over_add": grad / add})
            del case

    tables = [
        ("fqcore against np.add(a, b, out=c) on the same element count (training, float32, 1 thread)",
         f"Targets: forward <= {TARGET_FWD}x, gradient <= {TARGET_GRAD}x np.add. fqcore allocates its outputs "
         "(a new y or x_backprop array each call, as torch and TF do); np.add writes a pre-touched out=.",
         ["format", "shape", "elements", "np.add ms", "fq fwd ms", "fwd / add", "fwd", "fq grad ms", "grad / add",
          "grad"], rows_np),
    ]
    fw_header = ["format", "shape", "fq fwd ms"]
    if torch is not None:
        fw_header += ["torch fwd ms", "torch / fq"]
    for kind in kinds:
        fw_header += [f"TF {kind} fwd ms", f"TF {kind} / fq"]
    fw_header += ["fq grad ms"]
    if torch is not None:
        fw_header += ["torch grad ms", "torch / fq"]
    for kind in kinds:
        fw_header += [f"TF {kind} grad ms", f"TF {kind} / fq"]
    if torch is not None or kinds:
        intro = (f"Targets, forward and gradient: PyTorch >= {TARGET_TORCH}x; TensorFlow's default (oneDNN) "
                 f"kernels >= {TARGET_TF['oneDNN']}x; TensorFlow's Eigen kernels (TF_ENABLE_ONEDNN_OPTS=0) "
                 f">= {TARGET_TF['Eigen']}x.")
        if tf is not None:
            intro += f" TF {tf_kernels}: TensorFlow in this process."
        if tf_other is not None:
            intro += (f" TF {tf_other['kernels']}: TensorFlow in a child process (TF_ENABLE_ONEDNN_OPTS="
                      f"{tf_other['TF_ENABLE_ONEDNN_OPTS']}) that timed fqcore too, interleaved with it; each "
                      "ratio is against that process's fqcore time.")
        tables.append(("Training against PyTorch and TensorFlow (float32, 1 thread; their time / fqcore's)",
                       intro, fw_header, rows_fw))
    if rows_inf:
        header = ["format", "shape", "fq inference fwd ms", "fq / np.add"]
        if torch is not None:
            header += ["torch ms", "torch / fq"]
        if tf is not None:
            header += [f"TF {tf_kernels} ms", "TF / fq"]
        tables.append(("Inference forward (float32, 1 thread)", "No targets; y = x * a[c] + b[c] reads x once "
                       "and writes y (8 bytes an element, where np.add moves 12).", header, rows_inf))
    if rows_half:
        header = ["format", "shape", "np.add f32 ms", "fq fwd ms", "fwd / add", "fq grad ms", "grad / add"]
        for key in ("torch fwd", "TF fwd", "torch grad", "TF grad"):
            if (torch if key.startswith("torch") else tf) is not None:
                name = key.replace("TF", f"TF {tf_kernels}")
                header += [f"{name} ms", f"{key.split()[0]} / fq"]
        tables.append(("Training with float16 elements (1 thread)",
                       "Baseline: np.add on float32 arrays of the same element count (numpy's float16 add "
                       "converts element by element and is compute-bound, ~20x slower); float16 moves half "
                       "the bytes. No targets.", header, rows_half))
    if rows_agree:
        header = ["format", "shape"]
        if torch is not None:
            header += ["torch max|dy|", "torch max|d dx|"]
        if tf is not None:
            header += [f"TF {tf_kernels} max|dy|", f"TF {tf_kernels} max|d dx|"]
        header = [h.replace("max|dy|", "max |y diff|").replace("max|d dx|", "max |dx diff|") for h in header]
        tables.append(("The same work? Largest |difference| from fqcore's y and x_backprop (training, float32)",
                       "Inputs N(0.5, 2); y and dx are O(1), so float32 rounding shows as ~1e-6.", header,
                       rows_agree))

    notes = []
    if torch is not None:
        notes.append("PyTorch: torch.native_batch_norm(x, weight, bias, running_mean, running_var, training, "
                     f"momentum={MOMENTUM}, eps) and torch.ops.aten.native_batch_norm_backward(..., "
                     "output_mask=[True, True, True]) with save_mean/save_invstd from an untimed forward; "
                     "channels-last formats (NHWC, NDHWC) are the numpy array seen through a permuted view, "
                     "torch's channels_last / channels_last_3d memory format (no copy).")
    if kinds:
        notes.append(f"TF: eager tf.raw_ops.FusedBatchNormV3 (exponential_avg_factor={MOMENTUM} with running "
                     "mean/variance) and FusedBatchNormGradV3 on CPU constants, in the case's own data_format.")
        if fallbacks:
            for where, refused in fallbacks.items():
                for what, message in refused.items():
                    notes.append(f"TF refused {what} in {where} ({message}); timed as TF's Python layer does "
                                 "it: transpose to channels-last, run, transpose back (inside the timed call).")
        else:
            notes.append("TF's CPU raw ops accepted every format here (NCHW included): no transposes added.")
    if faults:
        notes.append("Page faults per call in the reported (fastest) batch, where 16 or more (each ~2 us "
                     "here; an output's fresh pages): " + "; ".join(faults) + ".")
    else:
        notes.append("No candidate's reported batch paid page faults (< 16 a call).")
    return tables, notes, results, failures
