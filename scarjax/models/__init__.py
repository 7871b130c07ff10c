"""Model factories returning :class:`~scarjax.Algorithm` instances (thesis Sec 5.5.1).

* :mod:`quadratic` – gradient descent on a strongly convex QP (Fig 5.3);
* :mod:`mlr` – multinomial logistic regression by (minibatch) SGD;
* :mod:`mf` – matrix factorisation by alternating least squares;
* :mod:`lda` – latent Dirichlet allocation by collapsed Gibbs sampling;
* :mod:`cnn` – a small convolutional network (flax nnx) trained with Adam.

:mod:`cnn` is imported on first use (``scarjax.models.cnn`` or ``from scarjax.models
import cnn``), so ``import scarjax`` does not import flax.
"""

import importlib
from typing import Any

from scarjax.models import lda, mf, mlr, quadratic

__all__ = ["cnn", "lda", "mf", "mlr", "quadratic"]

_LAZY = ("cnn",)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
