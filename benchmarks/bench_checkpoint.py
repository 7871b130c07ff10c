"""Benchmark: SCAR checkpoint overhead relative to one training step (thesis Sec 5.4.3,
5.5.5 "System Overhead").

SCAR's checkpoint work on the training path is priority selection (per-block distances
to the in-memory cache + top-k, Sec 5.4.3 steps 1–3) and the cache update (step 4); the
disk write is asynchronous. For each model we time, side by side in one process and after
warm-up (compile excluded), medians over repeats:

* ``step_s``: one training iteration (from a compiled ``scarjax.run`` of ``steps``
  iterations, divided by ``steps``);
* ``select_update_s[strategy]``: one jit-compiled ``checkpoint.step`` that fires
  (selection + cache update), for priority / round_robin / random / full;
* ``in_loop_overhead``: per-iteration time of the compiled loop with the checkpoint hook
  (priority, r = 1/8 every C/8 iterations) divided by the plain loop's;
* ``persistent_save_call_s``: the blocking part of an asynchronous orbax write of the
  selected blocks (host transfer + hand-off), with the previous write finished.

Ratios are reported as ``*_per_step``. Models: MLR on digits and on the embedded
MNIST-5k sample (785 x 10 weights), and the CNN (by layer and by shard) when
``scarjax.models.cnn`` is available. Prints JSON.

    python benchmarks/bench_checkpoint.py [--repeats 20] [--steps 50] [--quick]

``--quick`` (under a minute on 2 CPU cores): the two MLR models, every ratio, with 10 steps per
timed loop and 5 repeats; no CNN (on CPU each of its compiled loops, plain and with the
checkpoint hook, takes tens of seconds to compile, and a step about 0.07 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import scarjax
from scarjax.scar import checkpoint as ck
from scarjax.scar import partition as P
from scarjax.scar import persistent as PS


def _median_time(fn, repeats):
    fn()  # warm-up (compile)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def bench_model(name, alg, part, *, repeats, steps, C=16):
    key = jax.random.key(0)
    state = alg.init(key, alg.data)
    # Move the state away from w(0) so priorities are meaningful.
    state, _ = scarjax.run(alg, None, 5, key, init_state=state)
    out = {"model": name, "num_blocks": part.num_blocks, "params": scarjax.tree.tree_size(state.params)}
    t_run = _median_time(lambda: scarjax.run(alg, None, steps, key, init_state=state)[1].loss, max(3, repeats // 4))
    step_s = t_run / steps
    out["step_s"] = step_s
    cache0 = ck.init(jax.tree.map(jnp.zeros_like, state), part)
    sel = {}
    for strategy, r in (("priority", 0.125), ("round_robin", 0.125), ("random", 0.125), ("full", 1.0)):
        spec = ck.Checkpoint(strategy, r, C)
        k_fire = jnp.asarray(int(ck.interval(spec)), jnp.int32)
        f = jax.jit(lambda c, s, kk, spec=spec: ck.step(spec, c, s, part, kk, jax.random.key(1), alg.norm))
        sel[strategy] = _median_time(lambda f=f: f(cache0, state, k_fire), repeats)
    out["select_update_s"] = sel
    out["select_update_per_step"] = {k: v / step_s for k, v in sel.items()}
    # In-loop: the checkpoint hook (fires every C/8 = 2 iterations) vs the plain loop.
    hook = ck.saver(part, ck.Checkpoint("priority", 0.125, C))
    t_hook = _median_time(lambda: scarjax.run(alg, hook, steps, key, init_state=state)[1].loss, max(3, repeats // 4))
    out["in_loop_overhead"] = t_hook / t_run
    # Persistent: blocking part of an asynchronous save of r = 1/8 of the blocks.
    mask = np.zeros(part.num_blocks, bool)
    mask[: max(1, part.num_blocks // 8)] = True
    with tempfile.TemporaryDirectory() as d:
        store = PS.PersistentCheckpoint(d, part, state)
        store.initialize(state)
        calls = []
        for i in range(1, min(repeats, 10) + 1):
            store.wait()
            calls.append(store.save(i, state, mask))
        store.close()
    out["persistent_save_call_s"] = float(np.median(calls[1:] if len(calls) > 1 else calls))
    out["persistent_save_call_per_step"] = out["persistent_save_call_s"] / step_s
    return out


def models(quick=False):
    from scarjax.data import load_mnist_5k
    from scarjax.models import mlr

    alg = mlr.digits(lr=0.5, batch_size=256)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    yield "mlr_digits", alg, P.by_row(s0, num_servers=8)
    x, y = load_mnist_5k()
    alg = mlr.mlr(x, y, num_classes=10, lr=0.5, batch_size=1000, name="mlr_mnist5k")
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    yield "mlr_mnist5k", alg, P.by_row(s0, num_servers=8)
    if quick:
        return
    try:
        from scarjax.models import cnn
    except ImportError:
        return
    alg = cnn.mnist_5k()
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    yield "cnn_by_layer", alg, P.by_layer(s0, num_servers=8)
    yield "cnn_by_shard", alg, P.by_shard(s0, shards=8, num_servers=8)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=None, help="default 20 (quick 5)")
    ap.add_argument("--steps", type=int, default=None, help="iterations per timed loop (default 50, quick 10)")
    ap.add_argument("--quick", action="store_true", help="10 steps, 5 repeats, the MLR models (under a minute)")
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (5 if args.quick else 20)
    args.steps = args.steps or (10 if args.quick else 50)
    results = []
    for name, alg, part in models(args.quick):
        results.append(bench_model(name, alg, part, repeats=args.repeats, steps=args.steps))
        print(f"{name}: done", file=sys.stderr)
    report = {
        "benchmark": "checkpoint_overhead",
        "device": str(jax.devices()[0].platform),
        "cpu_count": os.cpu_count(),
        "quick": bool(args.quick),
        "repeats": args.repeats,
        "steps": args.steps,
        "results": results,
    }
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
