import gzip
import shutil

import numpy as np
import pytest

from scarjax.data import DataFormatError, cache_dir, load_digits, load_mnist, load_mnist_5k, read_idx

T10K_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _check_xy(X, y, n, d):
    assert X.shape == (n, d) and X.dtype == np.float32
    assert y.shape == (n,) and y.dtype == np.int32
    assert X.min() >= 0.0 and X.max() == 1.0
    assert set(np.unique(y)) == set(range(10))


def test_digits():
    X, y = load_digits()
    _check_xy(X, y, 1797, 64)


def test_digits_read_from_the_file_are_scikit_learns(monkeypatch):
    """load_digits reads scikit-learn's digits file without importing scikit-learn: exactly
    the arrays of its loader; without the file it falls back to the loader (planted: a file
    read with the label column kept as a pixel shows up as a shape and value mismatch)."""
    from sklearn.datasets import load_digits as sk_load_digits  # the reference

    from scarjax.data import digits as dg

    ref = sk_load_digits()
    X, y = load_digits()
    assert dg._digits_file() is not None
    np.testing.assert_array_equal(X, np.asarray(ref.data, np.float32) / np.float32(16.0))
    np.testing.assert_array_equal(y, ref.target.astype(np.int32))
    with gzip.open(dg._digits_file(), mode="rt") as f:
        planted = np.loadtxt(f, delimiter=",")
    assert planted.shape != ref.data.shape
    monkeypatch.setattr(dg, "_digits_file", lambda: None)
    Xf, yf = load_digits()
    np.testing.assert_array_equal(Xf, X)
    np.testing.assert_array_equal(yf, y)


def test_mnist_5k():
    X, y = load_mnist_5k()
    _check_xy(X, y, 5000, 784)
    assert np.all(np.bincount(y) == 500)


def _write_idx(path, magic, arr):
    header = b"".join(int(v).to_bytes(4, "big") for v in (magic, *arr.shape))
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def test_mnist_idx_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (7, 28, 28))
    imgs[0, 0, 0] = 255
    labels = np.arange(7) % 10
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 2051, imgs)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", 2049, labels)
    X, y = load_mnist(tmp_path, split="test")
    np.testing.assert_allclose(X, imgs.reshape(7, -1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, labels)


def test_mnist_bad_magic_and_truncation(tmp_path):
    f = tmp_path / "x.gz"
    _write_idx(f, 2049, np.zeros((3, 28, 28)))
    with pytest.raises(DataFormatError, match=r"x\.gz, byte 0: .*magic 2049, expected 2051"):
        read_idx(f, 2051)
    with gzip.open(f, "wb") as g:
        g.write((2049).to_bytes(4, "big") + (10).to_bytes(4, "big") + b"\x01\x02")
    with pytest.raises(DataFormatError, match=r"x\.gz, byte 10: truncated: .* needs 10 bytes .* only 2 follow; "
                                              r"label 2 of 10"):
        read_idx(f, 2049)
    with gzip.open(f, "wb") as g:
        g.write((2049).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\x01\x02\x03")
    with pytest.raises(DataFormatError, match=r"byte 10: 1 unexpected byte"):
        read_idx(f, 2049)
    f.write_bytes(f.read_bytes()[:-6])  # cut the gzip stream itself
    with pytest.raises(DataFormatError, match=r"x\.gz: the gzip stream is truncated"):
        read_idx(f, 2049)
    with pytest.raises(ValueError, match="magic"):
        read_idx(f, 2050)


def test_mnist_labels_must_be_digits(tmp_path):
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 2051, np.zeros((3, 28, 28)))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", 2049, np.array([1, 12, 3]))
    with pytest.raises(DataFormatError, match=r"t10k-labels-idx1-ubyte\.gz, byte 9: label 12 of record 1"):
        load_mnist(tmp_path, "test")


def test_mnist_label_count_mismatch(tmp_path):
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 2051, np.zeros((3, 28, 28)))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", 2049, np.zeros(4))
    with pytest.raises(DataFormatError, match="labels-idx1-ubyte.gz: MNIST test: 3 images but 4 labels"):
        load_mnist(tmp_path, "test")


def test_mnist_bad_split():
    with pytest.raises(ValueError, match="split"):
        load_mnist("/nonexistent", split="validation")


def test_mnist_real_test_split(mnist_test):
    X, y = mnist_test
    _check_xy(X, y, 10000, 784)
    assert np.bincount(y).tolist() == T10K_COUNTS


def test_mnist_real_train_labels(shared_data):
    y = read_idx(shared_data("mnist") / "train-labels-idx1-ubyte.gz", 2049)
    assert y.shape == (60000,) and y.max() == 9
    with pytest.raises(FileNotFoundError, match="train-images"):  # not in the shared folder
        load_mnist(shared_data("mnist"), split="train")


def test_mnist_from_verified_cache(shared_data):
    """path=None reads the cache when the cached files carry the published checksums."""
    dest = cache_dir() / "mnist"
    dest.mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(shared_data("mnist") / name, dest / name)
    X, y = load_mnist(split="test")
    assert X.shape == (10000, 784) and np.bincount(y).tolist() == T10K_COUNTS
