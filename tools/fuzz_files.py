"""Fuzzes every fqcore file loader with damaged files and reports each outcome the file contract
does not allow (issue 19's audit): a ValueError naming the file is expected; any other exception,
a ValueError that does not name the file, a crash, a hang, a call that allocates more than
--max-peak-mb, or a checksum-protected file (.npz, restore) loading with other values than the
good file's is a finding, saved with a reproducer.

    python tools/fuzz_files.py --calls 1000000 --seed 1 --jobs 2 --out fuzz-findings
    python tools/fuzz_files.py --replay fuzz-findings/<finding>.json

Cases are numbered; case i of a seed is always the same file, so a finding replays from
(seed, i) alone. Each job is a worker process running cases i = job, job + jobs, ...; the parent
watches each call's start time (shared memory) and kills a worker whose call runs longer than
--timeout, and restarts a worker that dies (a crash), after saving the file it was loading."""
import argparse
import collections
import json
import mmap
import os
import random
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

# Relative frequency of each kind of case; the deploy loaders are slower, so fewer.
KINDS = {"quantizer npz": 14, "quantizer json": 8, "from_json": 6, "variables": 14,
         "variables demo": 4, "checkpoint graph": 6, "graph json": 8, "graph_from_json": 6,
         "graph json demo": 2, "restore": 10, "restore demo": 2, "tflite": 2, "onnx": 1}
_SLOT = struct.Struct("<qd")  # (case index running, its start time by CLOCK_MONOTONIC; 0: none)


# --- good files ---------------------------------------------------------------------------------

def make_good_files(directory):
    """{name: bytes} of good files of every kind, zip timestamps zeroed, written to `directory`,
    and the two graphs their variables belong to."""
    import numpy as np

    import fqcore
    import fqcore.graph as G
    from fqcore.graph import checkpoint as C
    from file_mutations import without_timestamps

    q = fqcore.MovingAverageQuantizer(8, True, True, True)
    state = q.build((2, 3), "q", None)
    state = {k: np.asarray(v, np.float32) + np.float32(0.5) for k, v in state.items()}
    fqcore.save_quantizer(os.path.join(directory, "q.npz"), q, state)
    fqcore.save_quantizer(os.path.join(directory, "q.json"), q, state)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder(np.float32, (None, 3), name="x")
        v = G.variable("v", np.arange(6, dtype=np.float32).reshape(2, 3))
        G.variable("scope/i", np.arange(3, dtype=np.int64))
        G.add(x, G.constant(np.float32([1, -0.0, np.nan])), name="sum")
        del v
        G.global_variables_initializer()
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    C.save(session, os.path.join(directory, "ck"))
    G.write_graph_json(g, os.path.join(directory, "g.json"))

    from fqcore import demo, quantize
    from fqcore.deploy import to_onnx, to_tflite
    dg, images, _, logits, _ = demo.build_model(training=False, width=8)
    quantize.experimental_create_eval_graph(dg, **demo.WEIGHT_OPTIONS["per-channel"])
    dsession = G.Session(dg)
    dsession.run(G.global_variables_initializer(dg))
    C.save(dsession, os.path.join(directory, "demo"))
    G.write_graph_json(dg, os.path.join(directory, "demo.json"))
    files = {name: without_timestamps(open(os.path.join(directory, name), "rb").read())
             for name in ("q.npz", "q.json", "ck.npz", "ck.graph.json", "g.json", "demo.npz",
                          "demo.graph.json", "demo.json")}
    files["model.tflite"] = bytes(to_tflite(dsession, images, logits))
    try:
        files["model.onnx"] = bytes(to_onnx(dsession, images, logits))
    except ImportError:
        pass
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    return files, g, dg


# --- one case -----------------------------------------------------------------------------------

class Cases:
    """Makes case i of a seed: (kind, {file name: bytes}) and runs it."""

    def __init__(self, seed, workdir):
        import numpy as np

        import fqcore
        import fqcore.graph as G
        from fqcore.graph import checkpoint as C
        self.np, self.fqcore, self.G, self.C = np, fqcore, G, C
        self.seed = seed
        self.workdir = workdir
        good_dir = os.path.join(workdir, "good")
        os.makedirs(good_dir, exist_ok=True)
        self.good, self.graph, self.demo_graph = make_good_files(good_dir)
        self.expected_quantizer = fqcore.load_quantizer(os.path.join(good_dir, "q.npz"))
        self.sessions = {}
        for key, graph, prefix in (("small", self.graph, "ck"), ("demo", self.demo_graph, "demo")):
            session = G.Session(graph)
            C.load_variables(session, os.path.join(good_dir, prefix + ".npz"))
            self.sessions[key] = (session, self._values(session))
        self.restored = {}
        for key, prefix in (("small", "ck"), ("demo", "demo")):
            graph, session = C.restore(os.path.join(good_dir, prefix))
            self.restored[key] = (C._dump_graph(graph), self._values(session))
        kinds = [k for k in KINDS if k != "onnx" or "model.onnx" in self.good]
        self.kinds, self.weights = kinds, [KINDS[k] for k in kinds]

    def _values(self, session):
        return {op.name: self.np.array(session.variable_value(op.name))
                for op in session.graph.get_operations() if op.type == "VariableV2"}

    def _same_values(self, a, b):
        return a.keys() == b.keys() and all(
            a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
            for k in a)

    def make(self, i):
        """(kind, {file name: damaged bytes}) of case i."""
        import file_mutations as M
        rng = _Recording(f"{self.seed}/{i}")
        self.mutations = rng.mutations
        kind = rng.choices(self.kinds, self.weights)[0]
        g = self.good
        if kind == "quantizer npz":
            return kind, {"q.npz": rng.choice(M.NPZ_MUTATIONS)(rng, g["q.npz"])}
        if kind in ("quantizer json", "from_json"):
            return kind, {"q.json": rng.choice(M.JSON_STRUCTURE_MUTATIONS)(rng, g["q.json"])
                          if kind == "quantizer json" else self._from_json_text(rng, M)}
        if kind in ("variables", "variables demo"):
            name = "ck.npz" if kind == "variables" else "demo.npz"
            return kind, {name: rng.choice(M.NPZ_MUTATIONS)(rng, g[name])}
        if kind == "checkpoint graph":
            return kind, {"ck.graph.json": rng.choice(M.JSON_STRUCTURE_MUTATIONS)(
                rng, g["ck.graph.json"])}
        if kind in ("graph json", "graph_from_json", "graph json demo"):
            name = "demo.json" if kind == "graph json demo" else "g.json"
            mutations = M.JSON_STRUCTURE_MUTATIONS
            if kind == "graph json demo":  # the big document: no whole-text parse per edit
                mutations = [m for m in mutations if m is not M.nest_deeply] + [M.nest_deeply]
            return kind, {name: rng.choice(mutations)(rng, g[name])}
        if kind in ("restore", "restore demo"):
            prefix = "ck" if kind == "restore" else "demo"
            npz, graph = g[prefix + ".npz"], g[prefix + ".graph.json"]
            damage = rng.randrange(4)  # the variables file, the graph file, both, graph missing
            files = {prefix + ".npz": rng.choice(M.NPZ_MUTATIONS)(rng, npz)
                     if damage in (0, 2, 3) else npz}
            if damage != 3:
                files[prefix + ".graph.json"] = rng.choice(M.JSON_STRUCTURE_MUTATIONS)(
                    rng, graph) if damage != 0 else graph
            return kind, files
        name = "model.tflite" if kind == "tflite" else "model.onnx"
        return kind, {name: rng.choice(M.BINARY_MUTATIONS)(rng, g[name])}

    def _from_json_text(self, rng, M):
        good = self.fqcore.to_json(self.fqcore.MovingAverageQuantizer(8, True, False, False))
        return rng.choice(M.JSON_STRUCTURE_MUTATIONS)(rng, good.encode("utf-8"))

    def run(self, kind, paths, files):
        """Runs the case's loader on the files at `paths` ({name: path}); returns
        (outcome, detail): outcome 'ok', 'ok-different' (checksummed content loaded with other
        values), 'value-error' (naming the file), 'unnamed-value-error', 'type-error-arg'
        (from text-argument parsers), or 'exception:<Type>'."""
        C, G, fqcore = self.C, self.G, self.fqcore
        path = next(iter(paths.values()))
        where = [path]
        arg_kinds = ("from_json", "graph_from_json")
        try:
            if kind in ("quantizer npz", "quantizer json"):
                q, weights = fqcore.load_quantizer(path)
                if kind == "quantizer npz":
                    return self._check_quantizer(q, weights)
            elif kind == "from_json":
                fqcore.from_json(files["q.json"])
            elif kind in ("variables", "variables demo"):
                session, before = self.sessions["small" if kind == "variables" else "demo"]
                strict = len(files[os.path.basename(path)]) % 2 == 0
                try:
                    result = C.load_variables(session, path, strict=strict)
                except ValueError:
                    if not self._same_values(self._values(session), before):
                        self._reset(session, before)
                        return "half-loaded", "a refused load changed the session's variables"
                    raise
                after = self._values(session)
                loaded = {k: after[k] for k in result.loaded}
                if not self._same_values(loaded, {k: before[k] for k in result.loaded}):
                    self._reset(session, before)
                    if CRAFTED & set(self.mutations):
                        return "ok-crafted", ""
                    return "ok-different", f"loaded {result}"
            elif kind == "checkpoint graph":
                C.load_graph(path)
            elif kind in ("graph json", "graph json demo"):
                G.read_graph_json(path)
            elif kind == "graph_from_json":
                text = files["g.json"]
                G.graph_from_json(text if len(text) % 2 else text.decode("utf-8", "surrogatepass"))
            elif kind in ("restore", "restore demo"):
                prefix = path[:-len(".npz")]
                where = [prefix + "."]
                graph, session = C.restore(prefix)
                dump, values = self.restored["small" if kind == "restore" else "demo"]
                if C._dump_graph(graph) != dump or not self._same_values(self._values(session),
                                                                          values):
                    if CRAFTED & set(self.mutations):
                        return "ok-crafted", ""
                    return "ok-different", "restored another graph or other values"
            else:
                from fqcore.deploy import Interpreter
                interpreter = Interpreter(path)
                x = self.np.zeros((1, 8, 8, 1), self.np.float32)
                try:
                    interpreter.run(x)
                except ValueError:
                    return "ran-refused", ""
        except ValueError as error:
            text = str(error)
            if kind in arg_kinds or any(w in text for w in where):
                return "value-error", ""
            return "unnamed-value-error", f"{text[:300]}"
        except FileNotFoundError as error:
            # restore of a variables file without its graph copy, and no graph file beside it
            if kind.startswith("restore") and len(files) == 1 and ".graph.json" in str(error):
                return "missing-graph-file", ""
            return "exception:FileNotFoundError", _trace(error)
        except TypeError as error:
            if kind in arg_kinds:
                return "type-error-arg", ""
            return "exception:TypeError", _trace(error)
        except RecursionError as error:
            return "exception:RecursionError", _trace(error)
        except Exception as error:  # noqa: BLE001 - every other type is a finding
            return f"exception:{type(error).__name__}", _trace(error)
        return "ok", ""

    def _check_quantizer(self, q, weights):
        """The outcome of an .npz quantizer file that loaded: its config and values are covered
        by CRC-32s, its entry names are not (a file with renamed entries is another file)."""
        from fqcore.safe_names import path_problem
        eq, ew = self.expected_quantizer
        if q.get_config() != eq.get_config() or type(q) is not type(eq):
            return "ok-different", f"config {q.get_config()}"
        unsafe = [k for k in weights if not k or path_problem(k)]
        if unsafe:
            return "ok-unsafe-weight-name", f"weight names {sorted(unsafe)}"
        if set(weights) < set(ew):
            return "ok-missing-weights", f"weights {sorted(weights)} of {sorted(ew)}"
        if set(weights) == set(ew):
            if not self._same_values(weights, ew):
                if CRAFTED & set(self.mutations):
                    return "ok-crafted", ""
                return "ok-different", "other weight values"
            return "ok", ""
        if sorted(v.tobytes() for v in weights.values()) == sorted(v.tobytes()
                                                                   for v in ew.values()):
            return "ok-renamed", ""
        return "ok-different", f"weights {sorted(weights)}"

    def _reset(self, session, values):
        for name, value in values.items():
            session.set_variable_value(name, value)


class _Recording(random.Random):
    """random.Random that notes the mutation functions it chooses (those of file_mutations)."""

    def __init__(self, seed):
        super().__init__(seed)
        self.mutations = []

    def choice(self, seq):
        value = super().choice(seq)
        if callable(value) and getattr(value, "__module__", "") == "file_mutations":
            self.mutations.append(value.__name__)
        return value


# Mutations that write entries afresh, with CRC-32s of their new bytes: what they load as is
# another well-formed file, not a damaged one.
CRAFTED = {"random_header_in", "huge_shape", "hostile_entry_name"}


def _trace(error):
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))[-3000:]


EXPECTED = {"ok", "value-error", "type-error-arg", "ran-refused", "missing-graph-file",
            "ok-renamed", "ok-crafted"}


# --- worker -------------------------------------------------------------------------------------

def worker(args):
    """Runs cases args.start, args.start + args.step, ... < args.calls; writes JSON lines."""
    warnings.simplefilter("ignore")
    workdir = tempfile.mkdtemp(prefix="fqfuzz-")
    slot_file = open(args.slot, "r+b")
    slot = mmap.mmap(slot_file.fileno(), _SLOT.size)
    cases = Cases(args.seed, workdir)
    damaged = os.path.join(workdir, "damaged")
    os.makedirs(damaged)
    max_peak = args.max_peak_mb << 20
    # Every call: an address-space limit (what the process maps now + --max-extra-mb), so a big
    # allocation is a MemoryError (ASan maps terabytes of shadow: there, ASAN_OPTIONS'
    # max_allocation_size_mb does it); every --trace-every'th call: tracemalloc's peak.
    if args.max_extra_mb and "asan" not in os.environ.get("LD_PRELOAD", ""):
        mapped = _vm_size()
        limit = mapped + (args.max_extra_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    counts = collections.Counter()
    done = 0
    last_report = time.monotonic()
    out = sys.stdout

    def report():
        out.write(json.dumps({"type": "progress", "counts": {"|".join(k): v
                                                             for k, v in counts.items()},
                              "done": done}) + "\n")
        out.flush()

    for i in range(args.start, args.calls, args.step):
        kind, files = cases.make(i)
        paths = {}
        for name in os.listdir(damaged):
            os.unlink(os.path.join(damaged, name))
        for name, data in files.items():
            paths[name] = os.path.join(damaged, name)
            with open(paths[name], "wb") as f:
                f.write(data)
        traced = args.trace_every and i % args.trace_every == 0
        if traced:
            tracemalloc.start(1)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        slot[:] = _SLOT.pack(i, time.monotonic())
        outcome, detail = cases.run(kind, paths, files)
        slot[:] = _SLOT.pack(i, 0.0)
        peak = tracemalloc.get_traced_memory()[1] if traced else 0
        if traced:
            tracemalloc.stop()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        size = sum(len(d) for d in files.values())
        if peak > max_peak and size < (1 << 20):
            report_finding(out, i, kind, "memory", f"traced peak {peak} bytes for {size} bytes")
        if (rss_after - rss_before) << 10 > max_peak and done > 50:
            report_finding(out, i, kind, "memory", f"max RSS grew by {rss_after - rss_before} KiB")
        if outcome not in EXPECTED:
            report_finding(out, i, kind, outcome, detail)
        counts[(kind, outcome)] += 1
        done += 1
        if time.monotonic() - last_report > 2.0:
            report()
            last_report = time.monotonic()
    report()
    out.write(json.dumps({"type": "done"}) + "\n")
    out.flush()
    shutil.rmtree(workdir, ignore_errors=True)


def _vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) << 10
    return 0


def report_finding(out, i, kind, outcome, detail):
    out.write(json.dumps({"type": "finding", "case": i, "kind": kind, "outcome": outcome,
                          "detail": detail}) + "\n")
    out.flush()


# --- parent -------------------------------------------------------------------------------------

class Job:
    def __init__(self, args, job, start):
        self.args, self.job, self.start = args, job, start
        self.slot_path = os.path.join(args.out, f".slot{job}")
        with open(self.slot_path, "wb") as f:
            f.write(bytes(_SLOT.size))
        self.slot_file = open(self.slot_path, "r+b")
        self.slot = mmap.mmap(self.slot_file.fileno(), _SLOT.size)
        self.stderr_path = os.path.join(args.out, f".stderr{job}")
        self.stderr = open(self.stderr_path, "wb")
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--seed",
                   str(args.seed), "--calls", str(args.calls), "--start", str(start), "--step",
                   str(args.jobs), "--slot", self.slot_path, "--max-peak-mb",
                   str(args.max_peak_mb), "--max-extra-mb", str(args.max_extra_mb),
                   "--trace-every", str(args.trace_every)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.stderr,
                                     bufsize=0)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""
        self.counts = collections.Counter()
        self.done_calls = 0
        self.finished = False

    def read(self, on_message):
        try:
            chunk = self.proc.stdout.read()
        except BlockingIOError:
            chunk = None
        if chunk:
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if message["type"] == "progress":
                    self.counts = collections.Counter(message["counts"])
                    self.done_calls = message["done"]
                elif message["type"] == "done":
                    self.finished = True
                else:
                    on_message(message)

    def running(self):
        i, started = _SLOT.unpack(self.slot[:])
        return i, started


def parent(args):
    os.makedirs(args.out, exist_ok=True)
    findings = []
    totals = collections.Counter()
    lost = 0
    start_time = time.monotonic()
    replayer = None

    signatures = collections.Counter()

    def save(message):
        nonlocal replayer
        lines = message["detail"].strip().splitlines()
        signature = (message["outcome"], re.sub(r"\d+", "N", lines[-1] if lines else "")[:200])
        signatures[signature] += 1
        if signatures[signature] > args.keep:  # the same finding again: counted, not saved
            return
        if replayer is None:
            replayer = Cases(args.seed, tempfile.mkdtemp(prefix="fqfuzz-replay-"))
        kind, files = replayer.make(message["case"])
        base = os.path.join(args.out, f"case{message['case']}")
        os.makedirs(base, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(base, name), "wb") as f:
                f.write(data)
        message = dict(message, kind=kind, seed=args.seed, files=sorted(files),
                       reproducer=f"python tools/fuzz_files.py --replay {base}.json")
        with open(base + ".json", "w") as f:
            json.dump(message, f, indent=1)
        findings.append(message)
        print(f"FINDING case {message['case']} ({message['kind']}): {message['outcome']}: "
              f"{message['detail'].strip().splitlines()[-1] if message['detail'].strip() else ''}"
              f"\n  reproducer: {message['reproducer']}", flush=True)

    jobs = [Job(args, j, j) for j in range(args.jobs)]
    last_print = time.monotonic()
    while jobs:
        time.sleep(0.2)
        for job in list(jobs):
            job.read(save)
            code = job.proc.poll()
            i, started = job.running()
            if code is None and started and time.monotonic() - started > args.timeout:
                job.proc.kill()
                job.proc.wait()
                save({"case": i, "kind": "?", "outcome": "hang",
                      "detail": f"a call ran longer than {args.timeout} s"})
                code = -9
            if code is None:
                continue
            job.read(save)
            totals.update(job.counts)
            if job.finished and code == 0:
                jobs.remove(job)
                continue
            # The worker died in case i (or before its first case): save it, go on after it.
            job.stderr.close()
            tail = open(job.stderr_path, "rb").read()[-4000:].decode("utf-8", "replace")
            if not started and i == 0 and not job.done_calls:
                sys.exit(f"worker {job.job} failed before its first case (exit {code}):\n{tail}")
            if code != -9:
                save({"case": i, "kind": "?", "outcome": f"crash (exit {code})", "detail": tail})
            executed = (i - job.start) // args.jobs + 1  # the fatal call included
            lost += max(0, executed - job.done_calls)
            jobs.remove(job)
            if i + args.jobs < args.calls:
                jobs.append(Job(args, job.job, i + args.jobs))
        if time.monotonic() - last_print > 30:
            running = sum(j.done_calls for j in jobs) + sum(totals.values())
            print(f"... {running} calls, {time.monotonic() - start_time:.0f} s", flush=True)
            last_print = time.monotonic()
    elapsed = time.monotonic() - start_time
    calls = sum(totals.values()) + lost
    by_kind = collections.defaultdict(collections.Counter)
    for key, value in totals.items():
        kind, outcome = key.split("|")
        by_kind[kind][outcome] += value
    print(f"\nseed {args.seed}: {calls} calls in {elapsed:.1f} s ({calls / elapsed:.0f}/s), "
          f"{args.jobs} processes")
    for kind in sorted(by_kind):
        print(f"  {kind:18s} {sum(by_kind[kind].values()):8d}  " + ", ".join(
            f"{o} {n}" for o, n in sorted(by_kind[kind].items())))
    if lost:
        print(f"  ({lost} calls before a crash or hang were not classified)")
    print(f"findings: {sum(signatures.values())}, {len(findings)} saved" +
          ("" if not findings else f" (see {args.out})"))
    for f in findings:
        print(f"  case {f['case']} {f['kind']}: {f['outcome']}  {f['reproducer']}")
    print(f"distinct findings: {len(signatures)}")
    for (outcome, last), n in signatures.most_common():
        print(f"  {n:7d} x {outcome}: {last}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"seed": args.seed, "calls": calls, "seconds": elapsed, "jobs": args.jobs,
                   "by_kind": {k: dict(v) for k, v in by_kind.items()},
                   "findings": sum(signatures.values()),
                   "distinct": [[o, last, n] for (o, last), n in signatures.most_common()]},
                  f, indent=1)
    return 1 if findings else 0


def replay(args):
    """Runs the loader of a saved finding on its files and prints the outcome."""
    with open(args.replay) as f:
        message = json.load(f)
    base = args.replay[:-len(".json")]
    workdir = tempfile.mkdtemp(prefix="fqfuzz-replay-")
    cases = Cases(message["seed"], workdir)
    kind, files = cases.make(message["case"])
    saved = {name: open(os.path.join(base, name), "rb").read() for name in message["files"]}
    assert saved == files, "the saved files differ from the seed's case"
    damaged = os.path.join(workdir, "damaged")
    os.makedirs(damaged)
    paths = {}
    for name, data in files.items():
        paths[name] = os.path.join(damaged, name)
        with open(paths[name], "wb") as f:
            f.write(data)
    print(f"case {message['case']} ({kind}):", *cases.run(kind, paths, files))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", default="fuzz-findings")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds a call may take")
    parser.add_argument("--max-peak-mb", type=int, default=64)
    parser.add_argument("--max-extra-mb", type=int, default=512,
                        help="address space a call may add (0: no limit)")
    parser.add_argument("--trace-every", type=int, default=10,
                        help="tracemalloc's peak on every n-th call (0: never)")
    parser.add_argument("--keep", type=int, default=5,
                        help="reproducers saved per distinct finding")
    parser.add_argument("--replay")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--step", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--slot", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.replay:
        return replay(args)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
