"""asv benchmarks of fqcore's float32 matrix product (fq_f32_matmul) against numpy's np.matmul (its
BLAS) at the products of the training benchmarks' convolutions, per ISA, on fqcore's default
threads and BLAS's. `python benchmarks/bench_matmul.py` prints the ratios for every available ISA.
"""
import numpy as np

import fqcore
from fqcore import _kernels

try:  # imported by asv, benchmarks/ is a package; run from benchmarks/, it is on sys.path
    from .bench_range import _best, _use_isa
except ImportError:
    from bench_range import _best, _use_isa

ISAS = ["scalar", "avx2", "avx512", "neon"]
# (name, m, depth, n, a transposed): the demo's stride-2 3x3 convolution forward, its input
# gradient (the fold's two products in one), its filter gradient, the demo's 1x1 forward, and a
# MobileNet-v2 1x1 projection to 16 channels (the kernel's narrow blocks).
PRODUCTS = {
    "forward_1024x288x64": (1024, 288, 64, False),
    "input_grad_1024x128x288": (1024, 128, 288, False),
    "filter_grad_288x1024x64": (288, 1024, 64, True),
    "forward_4096x32x32": (4096, 32, 32, False),
    "forward_8192x96x16": (8192, 96, 16, False),
}


class TimeMatmul:
    """One product: fqcore's kernel and np.matmul into the same output."""

    params = [list(PRODUCTS), ISAS]
    param_names = ["product", "isa"]
    timeout = 300

    def setup(self, product, isa):
        self._saved = fqcore.get_isa()
        _use_isa(isa)
        m, depth, n, transposed = PRODUCTS[product]
        rng = np.random.default_rng(20261202)
        self.a = (rng.standard_normal((depth, m), dtype=np.float32).T if transposed
                  else rng.standard_normal((m, depth), dtype=np.float32))
        self.b = rng.standard_normal((depth, n), dtype=np.float32)
        self.c = np.empty((m, n), np.float32)
        self.time_fqcore(product, isa)  # pages in c

    def teardown(self, *params):
        saved = getattr(self, "_saved", None)
        if saved is not None:
            fqcore.set_isa(saved)

    def time_fqcore(self, product, isa):
        _kernels.matmul(self.a, self.b, self.c)

    def time_numpy(self, product, isa):
        np.matmul(self.a, self.b, out=self.c)


def main():
    bench = TimeMatmul()
    print("| product | ISA | fqcore us | np.matmul us | fqcore / numpy |")
    print("|---|---|---|---|---|")
    for product in PRODUCTS:
        for isa in fqcore.available_isas():
            bench.setup(product, isa)
            ours = _best(lambda: bench.time_fqcore(product, isa), seconds=0.5)
            theirs = _best(lambda: bench.time_numpy(product, isa), seconds=0.5)
            bench.teardown()
            print(f"| {product} | {isa} | {ours * 1e6:.0f} | {theirs * 1e6:.0f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
