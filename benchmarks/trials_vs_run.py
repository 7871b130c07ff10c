"""How far trial ``i`` of ``scarjax.run_trials`` is from ``scarjax.run`` with key ``i``
(the guarantee stated in ``run_trials``' docstring).

For each model (4-d and 50-d QPs, MLR on digits with minibatches of 64, MF by ALS on the
synthetic ratings, an element-wise fixed-point map) and each hook set (none; Gaussian
every 4 steps + adversarial; reset; a SCAR failure with the recovery named per trial
through ``hook_args``; SSP with 4 workers), runs ``n`` trials both ways and reports the
largest difference over the trials: in ulp of float32, and as ``max |trial − run| /
max |run|`` per leaf, separately for the final parameters and for the trace. Discrete
outputs (integer leaves) are checked to be equal. "factory" cases use a hook factory and
compare with ``run(..., hook_args=slice i)``.

Run: ``python benchmarks/trials_vs_run.py [--quick] [--models qp mlr ...]``; prints one
JSON object per case. ``--quick`` (under a minute; each case is two compiled programs): 2
trials x 10 steps on the cheap-to-compile models (``QUICK_MODELS``: the two QPs and the
fixed-point map; MLR's and MF's two programs take about 20 s of CPU time to compile), the
hook sets of ``QUICK_CASES`` (every kind of hook once) instead of every hook set on every
model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import scarjax
from scarjax import hooks, perturb, schedules
from scarjax.scar import checkpoint, faults, partition
from scarjax.perturb import staleness
from scarjax.models import mf, mlr, quadratic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """Largest distance between float32 values in units in the last place."""
    a = np.asarray(a, np.float32).ravel()
    b = np.asarray(b, np.float32).ravel()
    ia, ib = (x.view(np.int32).astype(np.int64) for x in (a, b))
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return int(np.max(np.abs(ia - ib))) if a.size else 0


def difference(trial, one) -> dict:
    out = {"ulp_params": 0, "ulp_trace": 0, "rel_params": 0.0, "rel_trace": 0.0}
    for group, x, y in (("params", trial[0].params, one[0].params), ("trace", trial[1], one[1])):
        for xl, yl in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
            xl, yl = np.asarray(xl), np.asarray(yl)
            if not np.issubdtype(xl.dtype, np.floating):
                if not np.array_equal(xl, yl):
                    raise AssertionError("a discrete output differs between run_trials and run")
                continue
            out[f"ulp_{group}"] = max(out[f"ulp_{group}"], ulps(xl, yl))
            scale = float(np.max(np.abs(yl))) if yl.size else 0.0
            if scale > 0:
                rel = float(np.max(np.abs(xl.astype(np.float64) - yl))) / scale
                out[f"rel_{group}"] = max(out[f"rel_{group}"], rel)
    return out


def compare(alg, steps, n, *, hooks_=None, factory=None, args=None, workers=None, precompile=False) -> dict:
    keys = jax.random.split(jax.random.key(11), n)
    if precompile:  # compile both programs at once (XLA compiles outside the GIL; --quick)
        if factory is None:
            _timing.precompile([lambda: scarjax.run_trials(alg, hooks_, steps, keys, workers=workers),
                                lambda: scarjax.run(alg, hooks_, steps, keys[0], workers=workers)])
        else:
            _timing.precompile([
                lambda: scarjax.run_trials(alg, factory, steps, keys, hook_args=args, workers=workers),
                lambda: scarjax.run(alg, factory, steps, keys[0], hook_args=jax.tree.map(lambda x: x[0], args),
                                    workers=workers)])
    if factory is None:
        trials = scarjax.run_trials(alg, hooks_, steps, keys, workers=workers)
    else:
        trials = scarjax.run_trials(alg, factory, steps, keys, hook_args=args, workers=workers)
    worst: dict = {}
    for i in range(n):
        if factory is None:
            one = scarjax.run(alg, hooks_, steps, keys[i], workers=workers)
        else:
            one = scarjax.run(alg, factory, steps, keys[i], hook_args=jax.tree.map(lambda x: x[i], args),
                              workers=workers)
        d = difference(scarjax.split_trials(trials, i), one)
        worst = {k: max(worst.get(k, 0), v) for k, v in d.items()}
    return worst


def models(names):
    table = {
        "qp": quadratic.fig53_problem,
        "qp50": lambda: quadratic.random_problem(0, 50, 4.0, c=0.9),
        "mlr": lambda: mlr.digits(batch_size=64),
        "mf": mf.synthetic,
        "fixed_point": lambda: scarjax.fixed_point(
            lambda w, d: 0.5 * w + 1.0, jnp.zeros(3), lambda w, d: jnp.sum((w - 2.0) ** 2), optimum=2.0 * jnp.ones(3)),
    }
    return {k: table[k]() for k in names}


#: The cases of each model in ``--quick`` mode: over ``QUICK_MODELS``, every hook set but "none"
#: once (MLR and MF, given with ``--models``, get one case each).
QUICK_CASES = {
    "qp": ("gaussian+adversarial", "ssp(4, 2)"),
    "qp50": ("reset", "factory scar(recovery names)"),
    "mlr": ("ssp(4, 2)",),
    "mf": ("factory scar(recovery names)",),
    "fixed_point": ("factory gaussian+adversarial",),
}
#: The models ``--quick`` checks by default.
QUICK_MODELS = ("qp", "qp50", "fixed_point")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 trials x 10 steps, the QUICK_MODELS (default) with the QUICK_CASES")
    parser.add_argument("--models", nargs="*", default=None,
                        help="default: qp qp50 mlr mf fixed_point (quick: qp qp50 fixed_point)")
    a = parser.parse_args(argv)
    if a.models is None:
        a.models = list(QUICK_MODELS) if a.quick else ["qp", "qp50", "mlr", "mf", "fixed_point"]
    steps, n = (10, 2) if a.quick else (30, 3)
    pert = hooks.chain(hooks.scheduled(perturb.gaussian(0.05), schedules.every(4)), hooks.scheduled(perturb.adversarial(0.1), 6))

    def pert_factory(s):
        return hooks.chain(hooks.scheduled(perturb.gaussian(s), schedules.every(4)), hooks.scheduled(perturb.adversarial(2 * s), 6))

    for name, alg in models(a.models).items():
        shapes = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
        part = (partition.by_axis(shapes, {"L": 0, "R": 1}) if name == "mf" else partition.by_row(shapes))

        def scar_factory(h):
            return faults.scar(part, checkpoint=checkpoint.Checkpoint("priority", 0.5, 4),
                               failure=faults.Failure(fraction=0.5, when=min(9, steps - 1)), recovery=h["recovery"])

        recoveries = {"recovery": np.array((["partial", "full"] * n)[:n])}
        cases = {
            "none": dict(hooks_=None),
            "gaussian+adversarial": dict(hooks_=pert),
            "factory gaussian+adversarial": dict(factory=pert_factory, args=jnp.linspace(0.01, 0.1, n)),
            "reset": dict(hooks_=hooks.scheduled(perturb.reset(0.3), 5)),
            "factory scar(recovery names)": dict(factory=scar_factory, args=recoveries),
        }
        if alg.has_workers and name != "mf":
            cases["ssp(4, 2)"] = dict(hooks_=staleness.ssp(4, 2), workers=4)
        if a.quick:
            cases = {c: cases[c] for c in QUICK_CASES.get(name, ()) if c in cases}
        for case, kw in cases.items():
            d = compare(alg, steps, n, precompile=a.quick, **kw)
            print(json.dumps({"model": name, "hooks": case, "trials": n, "steps": steps,
                              **{k: (v if isinstance(v, int) else float(f"{v:.3g}")) for k, v in d.items()}}),
                  flush=True)


if __name__ == "__main__":
    main()
