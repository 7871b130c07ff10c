"""Loop overhead and Monte-Carlo throughput of the core loop (the core loop's benchmarks).

1. ``scarjax.run`` with no hooks vs a hand-written ``lax.scan`` + optax loop on the same
   MLR problem, both recording the full-data loss every step (target ratio <= 1.05); the
   hand-written loop twice: closing over the data (XLA folds it as constants) and with the
   data as an argument of its compiled program, as ``run`` has it.
2. 100 trials via ``scarjax.run_trials`` (one vmapped program) vs 100 sequential calls of
   the same jitted single-trial program, on the QP and on MLR (target speed-up >= 10x).

Run: ``python benchmarks/bench_loop.py [--quick]``; prints JSON. ``--quick`` (under a minute):
part 1 with minibatches of 64 only on CPU (full batch too on a GPU/TPU, where compiling is
cheap and the full-batch loop is the one launch overhead shows in), part 2 on the QP only (20
trials of 100 steps): each MLR program takes seconds of CPU time to compile (the vmapped MLR
trials about 10 s), most of a quick run.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import scarjax  # noqa: E402
from scarjax.models import mlr, quadratic  # noqa: E402


def hand_written_mlr(x, y, lr, l2, steps, batch_size, data_as_argument=False):
    """The same MLR training as scarjax.models.mlr, written directly: lax.scan + optax.

    ``data_as_argument=False``: the jitted function closes over the data, which XLA then
    treats as constants (and may fold what depends on them alone, e.g. the label indices);
    ``True``: the data is an argument of the compiled program, as in ``scarjax.run`` (one
    program for any data of the same shape)."""
    opt = optax.sgd(lr)
    xb = jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], 1)
    data = {"x": xb, "y": y}

    def loss_fn(p, batch):
        return mlr.cross_entropy(p, batch, l2)

    if data_as_argument:
        compiled = jax.jit(functools.partial(_hand_train, opt, loss_fn, steps, batch_size))
        return lambda key: compiled(key, data)
    return jax.jit(lambda key: _hand_train(opt, loss_fn, steps, batch_size, key, data))


def _hand_train(opt, loss_fn, steps, batch_size, key, data):
    xb = data["x"]
    params = {"w": jnp.zeros((xb.shape[1], 10), jnp.float32)}
    k_init, k_hooks, k_loop = jax.random.split(key, 3)

    def step(carry, k):
        params, opt_state = carry
        kb = jax.random.split(jax.random.fold_in(k_loop, k))[0]
        if batch_size is None:
            batch = data
        else:
            idx = jax.random.randint(kb, (batch_size,), 0, xb.shape[0])
            batch = jax.tree.map(lambda a: a[idx], data)
        grads = jax.grad(loss_fn)(params, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), loss_fn(params, data)

    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(steps))
    return params, losses


def main(quick: bool = False) -> dict:
    from sklearn.datasets import load_digits

    ds = load_digits()
    x, y = jnp.asarray(ds.data / 16.0, jnp.float32), jnp.asarray(ds.target, jnp.int32)
    steps = 200 if quick else 500
    repeats = 5 if quick else 7
    out: dict = {"steps": steps, "quick": quick, "loadavg_start": _timing.loadavg()}

    # 1. loop overhead.
    overhead = {}
    part1 = {bs: (mlr.mlr(x, y, num_classes=10, batch_size=bs), hand_written_mlr(x, y, 1.0, 1e-2, steps, bs),
                  hand_written_mlr(x, y, 1.0, 1e-2, steps, bs, data_as_argument=True))
             for bs in ((64,) if quick and jax.default_backend() == "cpu" else (None, 64))}
    key = jax.random.key(0)
    n = 20 if quick else 100  # quick: the speed-up at 20 trials (a lower bound of 100's)
    t_steps = 100 if quick else steps  # quick: 100 steps a trial (the sequential runs were most of the time)
    keys = jax.random.split(jax.random.key(1), n)
    problems = {
        "qp": (quadratic.fig53_problem(), scarjax.hooks.scheduled(scarjax.perturb.gaussian(0.1), t_steps // 2)),
        "mlr_batch64": (mlr.mlr(x, y, num_classes=10, batch_size=64), scarjax.hooks.scheduled(scarjax.perturb.gaussian(0.01), t_steps // 2)),
        "mlr_full": (mlr.mlr(x, y, num_classes=10), scarjax.hooks.scheduled(scarjax.perturb.gaussian(0.01), t_steps // 2)),
    }
    if quick:
        problems = {"qp": problems["qp"]}
        # compile all four programs at once (XLA compiles outside the GIL); timed one at a time below
        calls = [lambda a=a: scarjax.run(a, None, steps, key) for a, _, _ in part1.values()]
        calls += [lambda h=h: h(key) for _, h, ha in part1.values() for h in (h, ha)]
        calls += [lambda a=a, h=h: scarjax.run(a, h, t_steps, keys[0])[1].loss for a, h in problems.values()]
        calls += [lambda a=a, h=h: scarjax.run_trials(a, h, t_steps, keys)[1].loss for a, h in problems.values()]
        out["compile_s"] = round(_timing.precompile(calls), 2)
    for bs, (alg, hand, hand_args) in part1.items():
        samples = _timing.interleaved_samples({
            "scarjax": lambda: scarjax.run(alg, None, steps, key),
            "hand": lambda: hand(key),
            "hand_data_as_argument": lambda: hand_args(key),
        }, rounds=repeats)
        r = _timing.ratios(samples, "hand")["scarjax"]
        r_args = _timing.ratios(samples, "hand_data_as_argument")["scarjax"]
        overhead[f"batch_{bs or 'full'}"] = {
            "scarjax_s": statistics.median(samples["scarjax"]), "hand_written_s": statistics.median(samples["hand"]),
            "ratio": r["ratio_median"], "ratio_min": r["ratio_min"], "ratio_median": r["ratio_median"], "rounds": repeats,
            # the hand-written loop with its data as an argument of the compiled program (as run has it)
            "hand_data_as_argument_s": statistics.median(samples["hand_data_as_argument"]),
            "ratio_vs_data_as_argument_min": r_args["ratio_min"],
            "ratio_vs_data_as_argument_median": r_args["ratio_median"],
        }
    out["loop_overhead_mlr"] = overhead

    # 2. vmapped trials vs sequential jitted runs.
    trials = {}
    for name, (alg, hook) in problems.items():
        def sequential():
            return [scarjax.run(alg, hook, t_steps, keys[i])[1].loss for i in range(n)]

        def vmapped():
            return scarjax.run_trials(alg, hook, t_steps, keys)[1].loss

        # quick: compiled above (one single run, not all n), two timed rounds
        samples = _timing.interleaved_samples({"sequential": sequential, "vmapped": vmapped},
                                              rounds=2 if quick else 3, warmup=0 if quick else 1)
        t = {k: statistics.median(v) for k, v in samples.items()}
        trials[name] = {"trials": n, "steps": t_steps, "sequential_s": t["sequential"], "run_trials_s": t["vmapped"],
                        "speedup": t["sequential"] / t["vmapped"],
                        "speedup_best": min(samples["sequential"]) / min(samples["vmapped"]), "rounds": len(samples["vmapped"])}
    out["monte_carlo_100_trials" if not quick else "monte_carlo_20_trials"] = trials
    out["loadavg_end"] = _timing.loadavg()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="200 steps, 5 rounds, minibatches of 64 only; part 2 with 20 trials of 100 steps of the QP "
                                                   "only, two rounds (under a minute)")
    args = ap.parse_args()
    _timing.emit("bench_loop", main(args.quick))
