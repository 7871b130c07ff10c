"""The measuring side of :mod:`experiments.pollux_throughput`: what runs inside the processes
that :func:`experiments.pollux_throughput._measure` starts (:mod:`experiments._launch`), one
data-parallel MLP step per configuration compiled, warmed up, then timed.

A module of its own, importing only JAX, NumPy and :mod:`experiments._launch`: each of the
measuring processes imports it first, and scarjax's modules (SciPy among them) would add most
of a second of CPU time to each process's start-up.
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from experiments import _launch

__all__ = ["measure", "measure_process"]


def _read_inputs(path: str, timeout: float = 900.0) -> tuple[np.ndarray, np.ndarray, dict]:
    """``(x, y, params)`` from :func:`experiments.pollux_throughput._write_inputs`' file,
    waiting for it to appear (the launcher writes it while the measuring processes start)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no inputs file {path!r} after {timeout} s")
        time.sleep(0.02)
    with np.load(path) as d:
        return d["x"], d["y"], {n: d[n] for n in ("w1", "w2", "w3")}


def _loss(p, xb, yb):
    """The measured model's loss: a 64-h-h-10 ReLU MLP, cross-entropy on digits."""
    z = jax.nn.relu(jax.nn.relu(xb @ p["w1"]) @ p["w2"]) @ p["w3"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), yb[:, None], 1))


def _step(mesh, loss, s: int, sync: bool):
    """One data-parallel iteration: ``s + 1`` local gradients (accumulated with ``lax.scan``),
    then ``pmean`` over the mesh (``T_sync``) and an SGD update."""
    def local(p, xb, yb):  # xb: [1, s+1, m, 64] on each device
        def acc(g, i):
            gi = jax.grad(loss)(p, xb[0, i], yb[0, i])
            return jax.tree.map(jnp.add, g, gi), None

        g, _ = jax.lax.scan(acc, jax.tree.map(jnp.zeros_like, p), jnp.arange(s + 1))
        if sync:
            g = jax.lax.pmean(g, "d")
        return jax.tree.map(lambda w, d: w - 0.01 * d, p, g)

    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P(), check_vma=False)
    )


def _prepare(cfg: dict, inputs: str, mesh, place, draw) -> list:
    """Compile and warm up every (m, s) on ``mesh``: the jobs that :func:`_time` times.

    ``place(array, spec)`` makes a global array (forced host devices: from the global data;
    processes: from this process's shard) and ``draw(s, m, n)`` this placement's batch indices.
    """
    x, y, params = _read_inputs(inputs)
    pg = {n: place(v, P()) for n, v in params.items()}
    jobs = []
    for m in cfg["local_bsz"]:
        for s in cfg["accum_steps"]:
            idx = draw(s, m, len(x))
            xb, yb = place(x[idx], P("d")), place(y[idx], P("d"))
            # AdaptDL's separate measurements (s = 0): accumulation step and sync step.
            for sync in (True, False) if s == 0 else (True,):
                f = _step(mesh, _loss, s, sync)
                jax.block_until_ready(f(pg, xb, yb))  # compile + warm-up
                jobs.append(((m, s, sync), f, (pg, xb, yb), []))
    return jobs


def _time(cfg: dict, k: int, jobs: list) -> list[dict]:
    """Time :func:`_prepare`'s jobs on a ``k``-device mesh.

    The sweep over all configurations is repeated ``rounds`` times and the minimum over
    rounds x reps is kept (the least disturbed by other load; the median of all repeats is
    kept for reference).
    """
    for _ in range(cfg["rounds"]):
        for _, f, args, ts in jobs:
            jax.block_until_ready(f(*args))
            for _ in range(cfg["reps"]):
                t0 = time.perf_counter()
                jax.block_until_ready(f(*args))
                ts.append(time.perf_counter() - t0)
    t = {key: (float(np.min(ts)), float(np.median(ts))) for key, _, _, ts in jobs}
    out = []
    for m in cfg["local_bsz"]:
        for s in cfg["accum_steps"]:
            t_min, t_med = t[(m, s, True)]
            rec = dict(nodes=1, replicas=k, local_bsz=m, accum_steps=s, t_iter=t_min, t_iter_median=t_med)
            if s == 0:
                rec["t_accum"] = t[(m, 0, False)][0]
                rec["t_optim"] = t_min
            out.append(rec)
    return out


def measure(cfg_json: str, inputs: str) -> list[dict]:
    """Runs inside the subprocess (forced host devices): compile every configuration of every
    K, wait at the launcher's gate (:func:`experiments._launch.gate`), then time them."""
    cfg = json.loads(cfg_json)
    cfg["reps"] = cfg.get("forced_reps") or cfg["reps"]
    prepared = []
    for k in cfg["devices"]:
        mesh = jax.make_mesh((k,), ("d",), devices=jax.devices()[:k])
        rng = np.random.default_rng(1)
        prepared.append((k, _prepare(
            cfg,
            inputs,
            mesh,
            lambda a, spec, mesh=mesh: jax.device_put(a, jax.sharding.NamedSharding(mesh, spec)),
            lambda s, m, n, k=k, rng=rng: rng.integers(0, n, (k, s + 1, m)),
        )))
    _launch.gate()
    out = [r for k, jobs in prepared for r in _time(cfg, k, jobs)]
    for r in out:
        r["backend"] = "forced_host"
    return out


def measure_process(rank: int, world: int, port: int, cfg_json: str, inputs: str) -> list[dict]:
    """Runs in each of ``world`` processes, one CPU device each; gradients are averaged over
    gloo.  The caller pinned this thread to one core before JAX started, so XLA sized its
    thread pools for one core (one device = one core, as one GPU per replica in the thesis);
    the pin is lifted once JAX is up so that gloo's I/O threads are not starved.  Compiles,
    waits at the launcher's gate (:func:`experiments._launch.gate`), then times."""
    _launch.init_distributed(rank, world, port)
    mesh = jax.make_mesh((world,), ("d",))
    _launch.unpin_threads()
    rng = np.random.default_rng(1 + rank)

    def place(a, spec):
        sharding = jax.sharding.NamedSharding(mesh, spec)
        if spec == jax.sharding.PartitionSpec():
            return jax.make_array_from_callback(a.shape, sharding, lambda i: a[i])
        return jax.make_array_from_process_local_data(sharding, a)

    cfg = json.loads(cfg_json)
    jobs = _prepare(cfg, inputs, mesh, place, lambda s, m, n: rng.integers(0, n, (1, s + 1, m)))
    _launch.gate()
    out = _time(cfg, world, jobs)
    for r in out:
        r["backend"] = "processes"
    return out
