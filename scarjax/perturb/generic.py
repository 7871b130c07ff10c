"""Generic perturbations of the parameters: Gaussian, adversarial, reset-to-init.

The δₖ of the perturbed scheme (thesis Eq 5.2) that Sec 5.3 uses to probe rework:
random (Figs 5.3, 5.5a), adversarial (Fig 5.5b) and resetting a fraction of the
parameters to their initial values (Fig 5.6, the perturbation of partial recovery from an
initial checkpoint). Each factory returns an unscheduled :class:`~scarjax.hooks.Hook`
that acts at every step with the hook's per-step key; say when with
:func:`scarjax.hooks.scheduled`:

  >>> from scarjax import hooks, schedules
  >>> from scarjax.perturb import generic
  >>> once = hooks.scheduled(generic.gaussian(1.0), 100)                    # at step 100
  >>> often = hooks.scheduled(generic.gaussian(0.5), schedules.with_probability(0.001))

Sizes and fractions may be traced (varied across trials of
:func:`scarjax.run_trials` through ``hook_args``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import rng
from scarjax import validate as va
from scarjax import tree as tu
from scarjax.hooks import Hook, param_hook, perturbation

PyTree = Any

__all__ = ["gaussian", "adversarial", "reset", "random_mask"]


def _check_nonneg(name: str, x: Any) -> None:
    va.check_real(name, x, lo=0.0)
    if not tu.is_traced(x) and np.ndim(x) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(x)}")


def gaussian(std: Any, *, point: str = "write", name: str = "gaussian") -> Hook:
    """Add i.i.d. ``N(0, std²)`` noise to every parameter entry (thesis Figs 5.3, 5.5a).

    ``E‖δ‖ ≈ std·√d`` for ``d`` parameters. ``std >= 0`` may be traced.
    """
    _check_nonneg("std", std)

    def delta_fn(params, hstate, ctx, key):
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(key, len(leaves))
        noise = [std * rng.normal(k, x.shape) for k, x in zip(keys, leaves)]
        return jax.tree.unflatten(treedef, noise)

    return perturbation(delta_fn, point=point, name=name)


def adversarial(size: Any, *, point: str = "write", name: str = "adversarial") -> Hook:
    """A perturbation of norm ``size`` pointing away from the optimum (Fig 5.5b).

    The direction is ``(y − w*)/‖y − w*‖`` when the algorithm's optimum is known (the
    worst case of Thm 5.3.1 for an isotropic contraction), otherwise the normalised
    ascent direction ``∇ loss(y)``. Norms are ℓ2 on the flattened parameters.
    ``size >= 0`` may be traced.
    """
    _check_nonneg("size", size)

    def delta_fn(params, hstate, ctx, key):
        alg = ctx.algorithm
        if alg.optimum is not None:
            direction = tu.tree_sub(params, alg.optimum)
        else:
            direction = jax.grad(lambda p: alg.loss(ctx.state._replace(params=p), alg.data))(params)
        n = tu.l2_norm(direction)
        scale = jnp.where(n > 0, size / jnp.where(n > 0, n, 1.0), 0.0)
        return tu.tree_scale(scale, direction)

    return perturbation(delta_fn, point=point, name=name)


def random_mask(key: jax.Array, tree: PyTree, fraction: jax.Array | float) -> PyTree:
    """Boolean masks over the entries of ``tree`` selecting exactly ``round(fraction·n)``
    of its ``n`` entries uniformly at random (``fraction`` in ``[0, 1]``; may be traced)."""
    va.check_real("fraction", fraction, lo=0.0, hi=1.0, scalar=True)
    leaves, treedef = jax.tree.flatten(tree)
    n = sum(x.size for x in leaves)
    u = rng.uniform(key, (n,))  # jax.random.uniform's numbers (scarjax.rng: drawn flat)
    count = jnp.round(jnp.asarray(fraction, jnp.float32) * n).astype(jnp.int32)
    threshold = jnp.where(count >= n, jnp.inf, jnp.sort(u)[jnp.clip(count, 0, n - 1)])
    flat = u < threshold
    out, i = [], 0
    for x in leaves:
        out.append(flat[i : i + x.size].reshape(x.shape))
        i += x.size
    return jax.tree.unflatten(treedef, out)


def reset(fraction: Any, *, name: str = "reset") -> Hook:
    """Reset a uniformly random ``fraction`` of the parameter entries to their initial
    values ``w⁽⁰⁾`` (thesis Fig 5.6: the perturbation partial recovery from an initial
    checkpoint causes). A write-point hook; ``fraction`` in ``[0, 1]`` may be traced."""
    _check_nonneg("fraction", fraction)
    va.check_real("fraction", fraction, lo=0.0, hi=1.0, scalar=True)

    def transform(params, hstate, ctx, key):
        mask = random_mask(key, params, fraction)
        return jax.tree.map(jnp.where, mask, ctx.initial_params, params)

    return param_hook(transform, point="write", name=name)
