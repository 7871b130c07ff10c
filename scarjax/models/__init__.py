"""Model factories returning :class:`~scarjax.Algorithm` instances (thesis Sec 5.5.1).

* :mod:`quadratic` – gradient descent on a strongly convex QP (Fig 5.3);
* :mod:`mlr` – multinomial logistic regression by (minibatch) SGD;
* :mod:`mf` – matrix factorisation by alternating least squares;
* :mod:`lda` – latent Dirichlet allocation by collapsed Gibbs sampling;
* :mod:`cnn` – a small convolutional network (flax nnx) trained with Adam.
"""

from scarjax.models import cnn, lda, mf, mlr, quadratic

__all__ = ["cnn", "lda", "mf", "mlr", "quadratic"]
