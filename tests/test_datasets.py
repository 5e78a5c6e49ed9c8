"""fqcore.datasets: the shipped digits file, the loader's shapes and scaling, and the stratified split's determinism and validation."""
import hashlib
import math
import re
from importlib import resources

import numpy as np
import pytest

from fqcore import datasets
from fqcore.datasets import DIGITS_SOURCE, Digits, load_digits

N = 1797
CLASS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def _round_half_up(x):
    return math.floor(x + 0.5)


def test_data_file_found_through_importlib_resources():
    ref = resources.files("fqcore.datasets").joinpath("digits.npz")
    assert ref.is_file()
    with ref.open("rb") as f, np.load(f, allow_pickle=False) as npz:
        assert set(npz.files) >= {"images", "labels", "source_wheel", "source_member", "source_sha256"}
        assert npz["images"].shape == (N, 8, 8) and npz["images"].dtype == np.uint8
        assert npz["labels"].shape == (N,) and npz["labels"].dtype == np.uint8
        assert str(npz["source_member"]) == "sklearn/datasets/data/digits.csv.gz"
        assert str(npz["source_wheel"]).startswith("scikit_learn-") and str(npz["source_wheel"]).endswith(".whl")
        assert len(str(npz["source_sha256"])) == 64
    assert resources.files("fqcore.datasets").joinpath("README.md").is_file()


def test_shipped_data_is_the_committed_data():
    # Pinned so that regenerating the file from a different source shows up here, not as a changed demo result.
    images, labels = datasets._raw_digits()
    assert hashlib.sha256(images.tobytes()).hexdigest() == "8f26b2bd9d135c256808f68f14fdabddde6d9c7f869ae419704b051f0f14b3b3"
    assert np.bincount(labels).tolist() == CLASS_COUNTS
    assert images.max() == 16 and images.min() == 0


def test_shapes_dtypes_and_range():
    d = load_digits()
    assert isinstance(d, Digits)
    assert d.x_train.shape == (1438, 8, 8, 1) and d.x_test.shape == (359, 8, 8, 1)
    assert d.y_train.shape == (1438,) and d.y_test.shape == (359,)
    for x in (d.x_train, d.x_test):
        assert x.dtype == np.float32
        assert x.min() == 0.0 and x.max() == 1.0
        np.testing.assert_array_equal(x * 16, np.round(x * 16))  # exact sixteenths, no rounding on the way in
    for y in (d.y_train, d.y_test):
        assert y.dtype == np.int32
        assert y.min() == 0 and y.max() == 9


@pytest.mark.parametrize("test_fraction", [0.2, 0.5, 0.1, 0.9])
def test_every_class_on_both_sides_in_proportion(test_fraction):
    d = load_digits(test_fraction=test_fraction, seed=3)
    test_counts = np.bincount(d.y_test, minlength=10)
    train_counts = np.bincount(d.y_train, minlength=10)
    assert test_counts.tolist() == [_round_half_up(test_fraction * n) for n in CLASS_COUNTS]
    assert (train_counts + test_counts).tolist() == CLASS_COUNTS
    assert (test_counts > 0).all() and (train_counts > 0).all()


def test_tiny_fraction_still_tests_every_class():
    d = load_digits(test_fraction=1e-6)
    assert np.bincount(d.y_test, minlength=10).tolist() == [1] * 10
    d = load_digits(test_fraction=1 - 1e-6)
    assert np.bincount(d.y_train, minlength=10).tolist() == [1] * 10


@pytest.mark.parametrize("test_fraction", [0.2, 0.37])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_split_covers_every_image_exactly_once(seed, test_fraction):
    images, labels = datasets._raw_digits()
    train, test = datasets._split_indices(labels, test_fraction, seed)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(N))
    # load_digits returns exactly those images and labels, so train and test are disjoint by index.
    d = load_digits(test_fraction=test_fraction, seed=seed)
    np.testing.assert_array_equal(d.x_train[..., 0] * 16, images[train])
    np.testing.assert_array_equal(d.x_test[..., 0] * 16, images[test])
    np.testing.assert_array_equal(d.y_train, labels[train])
    np.testing.assert_array_equal(d.y_test, labels[test])


def test_same_seed_same_split_other_seed_other_split():
    a, b, c = load_digits(seed=7), load_digits(seed=7), load_digits(seed=8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.x_test, c.x_test)
    np.testing.assert_array_equal(load_digits(seed=np.int64(7)).x_test, a.x_test)


def test_seed_0_split_is_pinned():
    # The split comes from PCG64's raw stream, which NumPy guarantees per seed across versions; pinning it
    # catches any change to the shuffle or the rounding, which would silently move the demo's numbers.
    _, labels = datasets._raw_digits()
    _, test = datasets._split_indices(labels, 0.2, 0)
    assert test[:10].tolist() == [5, 6, 7, 8, 9, 11, 12, 18, 19, 26]
    digest = hashlib.sha256(test.astype("<i8").tobytes()).hexdigest()
    assert digest == "be0616f405011f318989dc293a6845e9ae56520693c057f09b2ba3b316ec2caf"


def test_results_are_independent_copies():
    d = load_digits()
    d.x_train[...] = -1.0
    d.y_test[...] = -1
    e = load_digits()
    assert e.x_train.min() == 0.0 and e.y_test.min() == 0


@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.0, -0.1, 1.5, float("nan"), float("inf"), "0.2", None, True])
def test_bad_test_fraction(bad):
    with pytest.raises(ValueError, match=r"test_fraction .*got " + _escaped(bad)):
        load_digits(test_fraction=bad)


@pytest.mark.parametrize("bad", [-1, 1.0, 0.5, "0", None, True, np.float64(3)])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match=r"seed .*got " + _escaped(bad)):
        load_digits(seed=bad)


def _escaped(value):
    return re.escape(repr(value))


def test_source_citation():
    for word in ("Alpaydin", "Kaynak", "UCI", "CC BY 4.0", "scikit-learn"):
        assert word in DIGITS_SOURCE
