"""asv benchmarks of fqcore: see bench_fake_quant.py; compare.py compares against numpy, TensorFlow and PyTorch."""
