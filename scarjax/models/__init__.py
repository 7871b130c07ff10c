"""Model factories returning :class:`~scarjax.Algorithm` instances (thesis Sec 5.5.1)."""

from scarjax.models import mlr, quadratic

__all__ = ["mlr", "quadratic"]
