"""Prints fqcore's batch-norm errors on the golden data beside TF's, per output and ISA (exit 1 on a failure)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fqcore  # noqa: E402
import test_bn_golden as t  # noqa: E402


def main():
    failures = 0
    for isa in fqcore.available_isas():
        fqcore.set_isa(isa)
        t.SUMMARY.clear()
        t.TF_WORST.clear()
        for kind, cases in (("cases", t.CASES), ("bulk", t.BULK)):
            for op, i in cases:
                problems = t.check_case(t.case(op, kind, i))
                failures += bool(problems)
                for p in problems:
                    print(f"FAIL {isa} {t.case(op, kind, i).name}: {p}")
        print(f"\n{isa}: relative errors against the float64 model, in units of 2**-23")
        print(f"  {'output':44s} {'TF worst':>10s}  {'fqcore/allowed worst':>21s} {'(fqcore, TF there)':>24s}  case")
        for kind in sorted(t.SUMMARY):
            ratio, fq_err, tf_err, name = t.SUMMARY[kind]
            tf_worst = t.TF_WORST[kind][0]
            print(f"  {kind:44s} {tf_worst / t.ULP:10.4g}  {ratio:21.3g} "
                  f"({fq_err / t.ULP:10.4g}, {tf_err / t.ULP:10.4g})  {name}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
