"""scikit-learn's 8x8 handwritten digits (embedded, no download).

The small stand-in for MNIST in the MLR experiments (thesis Sec 5.5.1): 1,797 images,
10 classes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["load_digits"]


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Return ``(X, y)``: ``X`` float32 ``[1797, 64]`` pixel intensities in ``[0, 1]``
    (the 0..16 grey levels divided by 16), ``y`` int32 ``[1797]`` digits 0..9.

    >>> X, y = load_digits()
    >>> X.shape, y.shape, float(X.max())
    ((1797, 64), (1797,), 1.0)
    """
    # scikit-learn is slow to import and needed only here
    from sklearn.datasets import load_digits as _sk_load_digits

    bunch = _sk_load_digits()
    X = (np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0))
    return X, np.asarray(bunch.target, dtype=np.int32)
