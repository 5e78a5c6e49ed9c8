"""Small real datasets shipped inside fqcore so the QAT demo runs offline: `load_digits()` gives the UCI 8x8 handwritten digits with a deterministic stratified split."""

import functools
import math
import numbers
from importlib import resources
from typing import NamedTuple

import numpy as np

__all__ = ["DIGITS_SOURCE", "Digits", "load_digits"]

DIGITS_SOURCE = (
    "E. Alpaydin and C. Kaynak, Optical Recognition of Handwritten Digits, UCI Machine Learning Repository "
    "(1998), https://doi.org/10.24432/C50P49, licensed CC BY 4.0; the 1797-image 8x8 copy distributed with "
    "scikit-learn (sklearn/datasets/data/digits.csv.gz)"
)

_N_CLASSES = 10
_PIXEL_MAX = 16


class Digits(NamedTuple):
    """Images float32 NHWC [N, 8, 8, 1] in [0, 1]; labels int32 in 0..9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@functools.lru_cache(maxsize=1)
def _raw_digits():
    """The shipped uint8 images [1797, 8, 8] and labels [1797], read once and made read-only (shared by every call)."""
    # files() reads through the package's loader, so this works from a wheel, an editable install or a zip.
    with resources.files(__name__).joinpath("digits.npz").open("rb") as f:
        with np.load(f, allow_pickle=False) as npz:
            images, labels = npz["images"], npz["labels"]
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def _bounded(bitgen, n):
    """An unbiased integer in [0, n) from the raw 64-bit PCG64 stream (rejection sampling)."""
    limit = (1 << 64) - (1 << 64) % n
    while True:
        r = int(bitgen.random_raw())
        if r < limit:
            return r % n


def _split_indices(labels, test_fraction, seed):
    """(train, test) indices into `labels`, each sorted ascending; a stratified split, the same for a seed on every numpy version."""
    # NumPy promises a stable stream only for the BitGenerator (PCG64's docstring: "a fixed seed will always
    # produce the same random integer stream"); Generator methods such as permutation may change algorithm in
    # a feature release (numpy.random compatibility policy). So the Fisher-Yates shuffle below draws straight
    # from PCG64's raw 64-bit outputs, one stream walked through the classes in label order.
    bitgen = np.random.PCG64(seed)
    train, test = [], []
    for c in range(_N_CLASSES):
        idx = np.flatnonzero(labels == c)
        order = list(range(len(idx)))
        for i in range(len(order) - 1, 0, -1):
            j = _bounded(bitgen, i + 1)
            order[i], order[j] = order[j], order[i]
        # Round half up in float64 (exact IEEE, so platform-independent); keep at least one image of each class
        # on each side so every class is both trained on and measured.
        n_test = min(max(math.floor(test_fraction * len(idx) + 0.5), 1), len(idx) - 1)
        perm = idx[order]
        test.append(perm[:n_test])
        train.append(perm[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def load_digits(test_fraction=0.2, seed=0):
    """The UCI handwritten digits (see DIGITS_SOURCE) as a Digits tuple, split per class into train and test.

    Each class puts round(test_fraction * class size) images (at least 1, at most size - 1) in test, chosen by
    a Fisher-Yates shuffle driven by np.random.PCG64(seed)'s raw stream, which NumPy guarantees is the same
    for a seed on every version, so a seed names one split everywhere. Both sides keep the file's order
    (ascending image index); shuffle per epoch when training.
    """
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, numbers.Real)
        or not 0.0 < float(test_fraction) < 1.0
    ):
        raise ValueError(f"test_fraction must be a number in the open interval (0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    images, labels = _raw_digits()
    train, test = _split_indices(labels, float(test_fraction), int(seed))

    def x(idx):
        # Pixels are 0..16, so dividing by 16 is exact in float32.
        return (images[idx].astype(np.float32) / np.float32(_PIXEL_MAX))[..., np.newaxis]

    return Digits(x(train), labels[train].astype(np.int32), x(test), labels[test].astype(np.int32))
