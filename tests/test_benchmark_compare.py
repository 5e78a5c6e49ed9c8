"""benchmarks/compare.py's report: each op against the memory-bound numpy ufunc that is its floor
(the Vars forwards against a division, as they divide like TF), and --isa all, the report once per
ISA the CPU runs."""
import json
import os
import sys

import fqcore

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import compare  # noqa: E402

FLOORS = {"args": "np.multiply(a, 2.0, out=c)", "vars": "np.divide(a, 3.0, out=c)",
          "vars_per_channel": "np.divide(a, 3.0, out=c)", "args_gradient": "np.add(a, b, out=c)",
          "vars_gradient": "np.add(a, b, out=c)", "vars_per_channel_gradient": "np.add(a, b, out=c)"}


def test_every_isa_reports_each_op_against_its_floor(tmp_path, capsys):
    isa = fqcore.get_isa()
    try:
        code = compare.main(["--isa", "all", "--sections", "numpy", "--sizes", "4096", "--no-torch",
                             "--no-tf", "--repeats", "2", "--sample-ms", "1",
                             "--json", str(tmp_path / "report.json")])
    finally:
        fqcore.set_isa(isa)
    assert code == 0
    out = capsys.readouterr().out
    for name in fqcore.available_isas():
        assert f"# ISA {name}" in out
        with open(tmp_path / f"report.{name}.json") as f:
            report = json.load(f)
        assert report["meta"]["isa"] == name and report["meta"]["cpu"]
        assert {row["op"]: row["baseline"] for row in report["vs_numpy"]} == FLOORS
