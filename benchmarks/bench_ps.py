"""Sharded parameter server benchmarks (JSON, side by side in one run).

1. ``step``: seconds per iteration of the parameter server (all-gather pull, workers,
   reduce-scatter push, sharded Adam update, full-data loss) on 1, 2, 4, 8 devices vs
   ``scarjax.run`` on one device, for the same global batch.
2. ``topk``: distributed (per-server distances + local top-k + merge) vs centralised
   (``scarjax.scar.checkpoint.select`` on one device) priority selection, 10^6 and 10^7
   parameters, r = 0.1.
3. ``bytes``: bytes per device of a 10^8-parameter model with Adam (params + two
   moments) on 1–8 server shards, computed from the layout (nothing allocated).

Run: ``python benchmarks/bench_ps.py [--quick]`` (``--quick``, under a minute: a smaller step
problem on 1 and 8 devices, 10^5 parameters for ``topk``, 3 rounds; each parameter-server
program is seconds of CPU time to compile). Ratios of the medians over rounds and, as
``*_min``, of the fastest rounds. On CPU the devices are forced host
devices sharing this machine's cores (``--xla_force_host_platform_device_count=8``), so
the step times show the overhead of the collectives, not a speed-up; run it on a
multi-GPU machine for real scaling.
"""

from __future__ import annotations

import os
import statistics
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scarjax  # noqa: E402
from scarjax.scar import checkpoint as ck
from scarjax.scar import partition as pt
from scarjax import ps as sps  # noqa: E402
from scarjax.core import State  # noqa: E402
from scarjax.models import mlr  # noqa: E402
from scarjax.ps import topk  # noqa: E402
from scarjax.ps.store import Layout  # noqa: E402

from _timing import emit, interleaved_samples  # noqa: E402


def bench_step(quick: bool) -> dict:
    rng = np.random.default_rng(0)
    n, d, k, batch, steps = (1024, 128, 10, 256, 10) if quick else (4096, 512, 10, 1024, 20)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k, n)
    out = {"examples": n, "features": d + 1, "classes": k, "global_batch": batch, "steps": steps}
    rows = []
    # same global batch: each of the D workers draws batch / D examples; one algorithm for every
    # D, so the single-device run is compiled once
    alg = mlr.mlr(x, y, num_classes=k, batch_size=batch, optimizer=optax.adam(1e-2))
    for D in (1, 8) if quick else (1, 2, 4, 8):
        if D > len(jax.devices()):
            break
        part = pt.by_row(alg.init(jax.random.key(0), alg.data), num_servers=D, key=0)
        ps = sps.ParameterServer(alg, part, sps.make_mesh(D, 1), workers=D)
        st0 = ps.init(0)
        samples = interleaved_samples({
            "ps": lambda: ps.run(st0, steps, 0)[1].loss,
            "single": lambda: scarjax.run(alg, None, steps, 0)[1].loss,
        }, rounds=3 if quick else 5)
        t = {k: statistics.median(v) for k, v in samples.items()}
        rows.append({"devices": D, "ps_step_s": t["ps"] / steps, "single_device_step_s": t["single"] / steps,
                     "ratio_ps_over_single": t["ps"] / t["single"],
                     "ratio_ps_over_single_min": min(samples["ps"]) / min(samples["single"])})
    out["rows"] = rows
    return out


def _select_problem(P_total: int, width: int = 10):
    R = P_total // width
    rng = np.random.default_rng(1)
    params = {"w": jnp.asarray(rng.normal(size=(R, width)).astype(np.float32))}
    data = {"x": jnp.zeros((1, 1))}
    alg = scarjax.from_optax(lambda p, b: jnp.sum(p["w"] ** 2), optax.sgd(0.1), params, data)
    return alg, params


def bench_topk(quick: bool) -> dict:
    sizes = (10**5,) if quick else (10**6, 10**7)
    rows = []
    S = min(8, len(jax.devices()))
    for P_total in sizes:
        alg, params = _select_problem(P_total)
        state = State(params, alg.init(jax.random.key(0), alg.data).aux)
        part = pt.by_row(state, num_servers=S, key=0)
        ps = sps.ParameterServer(alg, part, sps.make_mesh(S, 1))
        saved = State({"w": jnp.zeros_like(params["w"])}, state.aux)
        pst = ps.from_logical(state, saved=saved)
        key = jax.random.key(3)
        spec = ck.Checkpoint("priority", 0.1)
        cstate = ck.init(saved, part)
        central = jax.jit(lambda s, c, k: ck.select(spec, c, s, part, k))
        samples = interleaved_samples({
            "distributed": lambda: topk.select(ps, pst, key, 0.1),
            "centralised": lambda: central(state, cstate, key),
        }, rounds=3 if quick else 5)
        t = {k: statistics.median(v) for k, v in samples.items()}
        same = bool(np.array_equal(np.asarray(topk.select(ps, pst, key, 0.1)), np.asarray(central(state, cstate, key))))
        rows.append({"parameters": P_total, "blocks": part.num_blocks, "servers": S,
                     "distributed_s": t["distributed"], "centralised_s": t["centralised"],
                     "ratio_distributed_over_centralised": t["distributed"] / t["centralised"],
                     "ratio_distributed_over_centralised_min": min(samples["distributed"]) / min(samples["centralised"]),
                     "same_selection": same})
    return {"fraction": 0.1, "rows": rows}


def bench_bytes() -> dict:
    R, F = 10**6, 100  # 1e8 parameters, row blocks of 100 entries
    params = {"w": jax.ShapeDtypeStruct((R, F), jnp.float32)}
    aux = jax.eval_shape(optax.adam(1e-3).init, params)
    state = State(params, aux)
    rows = []
    for S in (1, 2, 4, 8):
        part = pt.by_row(state, num_servers=S, key=0)
        for headroom in (1.0, 2.0):
            b = Layout.build(state, part, headroom=headroom).bytes_per_device()
            rows.append({"servers": S, "headroom": headroom, "state_bytes_per_device": b["per_device"],
                         "with_checkpoint_cache": 2 * b["per_device"], "logical_state_bytes": b["logical"],
                         "fraction_of_logical": b["per_device"] / b["logical"]})
    return {"parameters": R * F, "optimizer": "adam (params + mu + nu, co-located)", "rows": rows}


def _platform() -> dict:
    """Where the numbers were taken: the default backend and its devices (on CPU, forced
    host devices share the machine's cores)."""
    devs = jax.devices()
    return {"backend": jax.default_backend(), "devices": len(devs), "device_kind": devs[0].device_kind}


def main(quick: bool = False) -> dict:
    res = {
        "step": bench_step(quick),
        "topk": bench_topk(quick),
        "bytes": bench_bytes(),
        "platform": _platform(),
    }
    emit("ps", res)
    return res


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
