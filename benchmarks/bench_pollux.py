"""Pollux benchmarks, measured side by side in one run; prints JSON.

1. PGNS overhead: an Adam step on the mean gradient of a batch of ``K*b`` examples
   (plain) vs the same step through ``with_pgns`` on ``K`` stacked micro-batch
   gradients (``vmap(grad)``), MLR (digits, 650 parameters; MNIST-5k, 7,850), the small CNN.  Target: <= 10% with K=8 on MLR.
   Both stackings: micro-batch axis first (``vmap``'s default) and last
   (``vmap(..., out_axes=-1)`` with ``with_pgns(..., microbatch_axis=-1)``, ``*_axis_last``).
   Also the same ``vmap(grad)`` + mean + Adam without the statistics, to separate the
   cost of per-micro-batch gradients from that of the PGNS statistics (XLA may fuse
   ``mean(vmap(grad))`` back into one full-batch gradient), and the data-parallel
   baseline whose ``K`` replica gradients are materialised (as on ``K`` devices before the
   all-reduce): ``overhead_vs_replica_grads`` is the cost of the statistics alone.
   MLR is timed twice: with XLA's default thread pools (all cores) and in a subprocess
   pinned to one core (``pgns_overhead_one_core``), which separates the estimator's own
   cost from the multi-threaded runtime's per-kernel dispatch.
2. AdaptDL (petuum/adaptdl 0.2.11, ``adaptdl.goodput``) vs scarjax on the same data:
   ``fit_perf_params`` vs :func:`scarjax.pollux.fit_throughput` (time, prediction error)
   and ``GoodputFunction.optimize`` vs :func:`scarjax.pollux.optimize_batch_size`
   (time, goodput of the chosen configuration under the same model) at 8 allocations
   and at 1024 random allocations (a cluster scheduler's call); ours both with the
   exact binary search (default) and the exhaustive grid (``method='exhaustive'``).
3. AdaptDL's PyTorch PGNS path on one CPU process (if it runs): per-step overhead.

AdaptDL needs an old NumPy (``np.int``/``np.float``), so it lives in its own virtualenv
(:func:`setup_adaptdl_venv`, default ``/tmp/adaptdl-venv``) and is driven through a
subprocess running ``benchmarks/adaptdl/run_adaptdl.py``; it is never a dependency of
scarjax.  Usage: ``python benchmarks/bench_pollux.py [--no-adaptdl] [--no-overhead] [--measured PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ADAPTDL_VENV = Path(os.environ.get("ADAPTDL_VENV", "/tmp/adaptdl-venv"))
ADAPTDL_PINS = [
    "torch==2.13.0",
    "numpy==1.23.5",
    "scipy<1.12",
    "adaptdl==0.2.11",
    "requests",
    "setuptools<70",
]


def setup_adaptdl_venv(path: Path = ADAPTDL_VENV) -> Path:
    """Create (once) a virtualenv with AdaptDL and the old NumPy it needs; return its python."""
    py = path / "bin" / "python"
    ok = (
        py.exists()
        and subprocess.run(
            [str(py), "-c", "import adaptdl.goodput, requests, pkg_resources"], capture_output=True
        ).returncode
        == 0
    )
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *ADAPTDL_PINS], check=True)
    return py


# ----------------------------------------------------------------------------- 1. overhead


def bench_overhead(
    k: int = 8, b: int = 32, reps: int = 300, rounds: int = 7, problems=("mlr", "mlr_mnist", "cnn")
) -> dict:
    import jax
    import optax

    from scarjax import pollux as px
    from scarjax.pollux import _problems

    out = {}
    for name in problems:
        prob = getattr(_problems, name)()
        n_reps = reps if name.startswith("mlr") else max(reps // 10, 20)
        plain_opt = optax.adam(1e-3)
        pgns_opt = px.with_pgns(optax.adam(1e-3), microbatch_size=b)
        last_opt = px.with_pgns(optax.adam(1e-3), microbatch_size=b, microbatch_axis=-1)

        def make_run(opt, microbatches, step_grads):
            """Jitted ``n`` optimizer steps; ``step_grads(p, xb, yb)`` -> what ``opt`` takes."""

            def run(params, state, key, n):
                def body(c, key):
                    p, s = c
                    xb, yb = _problems.sample_microbatches(
                        key, prob.x, prob.y, microbatches, k * b // microbatches
                    )
                    u, s = opt.update(step_grads(p, xb, yb), s, p)
                    return (optax.apply_updates(p, u), s), None

                return jax.lax.scan(body, (params, state), jax.random.split(key, n))[0]

            return jax.jit(run, static_argnums=3)

        grads_k = jax.vmap(jax.grad(prob.loss), (None, 0, 0))
        grads_k_last = jax.vmap(jax.grad(prob.loss), (None, 0, 0), -1)  # micro-batch axis last

        def mean0(g):
            return jax.tree.map(lambda x: x.mean(0), g)

        # plain: one gradient of the K*b batch; pgns: K stacked micro-batch gradients through
        # with_pgns; vmap: the same micro-batch gradients averaged, no statistics; replicas:
        # data-parallel baseline whose K replica gradients are materialised (as on K devices
        # before the all-reduce) and averaged, no statistics.
        fp = make_run(plain_opt, 1, lambda p, xb, yb: jax.grad(prob.loss)(p, xb[0], yb[0]))
        fq = make_run(pgns_opt, k, grads_k)
        fl = make_run(last_opt, k, grads_k_last)
        fv = make_run(plain_opt, k, lambda p, xb, yb: mean0(grads_k(p, xb, yb)))
        fr = make_run(plain_opt, k, lambda p, xb, yb: mean0(jax.lax.optimization_barrier(grads_k(p, xb, yb))))
        sp, sq = plain_opt.init(prob.params), pgns_opt.init(prob.params)
        runs = {
            "plain": (fp, sp),
            "pgns": (fq, sq),
            "pgns_axis_last": (fl, last_opt.init(prob.params)),
            "vmap": (fv, sp),
            "replicas": (fr, sp),
        }
        for f, st in runs.values():  # compile
            jax.block_until_ready(f(prob.params, st, jax.random.PRNGKey(0), n_reps))
        times = {v: [] for v in runs}
        for r in range(rounds):  # interleaved: every variant sees the same machine noise
            key = jax.random.PRNGKey(r)
            for v, (f, st) in runs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(prob.params, st, key, n_reps))
                times[v].append((time.perf_counter() - t0) / n_reps)
        tp, tq, tv, tr = (times[v] for v in ("plain", "pgns", "vmap", "replicas"))
        out[name] = {
            "microbatches": k,
            "microbatch_size": b,
            "plain_step_s": float(np.min(tp)),
            "pgns_step_s": float(np.min(tq)),
            "overhead_ratio": float(np.min(tq) / np.min(tp)),
            "overhead_ratio_median": float(np.median(np.array(tq) / np.array(tp))),
            # with_pgns(..., microbatch_axis=-1) fed by vmap(grad, out_axes=-1)
            "pgns_axis_last_step_s": float(np.min(times["pgns_axis_last"])),
            "overhead_ratio_axis_last": float(np.min(times["pgns_axis_last"]) / np.min(tp)),
            "overhead_ratio_axis_last_median": float(
                np.median(np.array(times["pgns_axis_last"]) / np.array(tp))
            ),
            "microbatch_grads_only_step_s": float(np.min(tv)),
            "microbatch_grads_only_ratio": float(np.min(tv) / np.min(tp)),
            "stats_only_ratio": float(np.min(tq) / np.min(tv)),
            # PGNS vs data-parallel training whose K replica gradients exist anyway: the
            # cost of the statistics alone (Pollux's setting, Sec 3.2).
            "replica_grads_step_s": float(np.min(tr)),
            "overhead_vs_replica_grads": float(np.min(tq) / np.min(tr)),
            "loadavg": os.getloadavg()[0],
        }
    return out


def bench_overhead_one_core(reps: int = 300, problems=("mlr", "mlr_mnist")) -> dict:
    """:func:`bench_overhead` in a subprocess pinned to one core before JAX starts (XLA then
    sizes its thread pools for one core).  On a small step the multi-threaded runtime's
    per-kernel dispatch, not arithmetic, dominates what the statistics add; this run
    shows the estimator's own cost (and is the setting of one process per core)."""
    code = (
        "import os, sys, json; os.sched_setaffinity(0, {0}); sys.path.insert(0, 'benchmarks'); "
        "import bench_pollux as b; "
        f"print('@@' + json.dumps(b.bench_overhead(reps={int(reps)}, problems={tuple(problems)!r})))"
    )
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1][2:])


# ------------------------------------------------------------------ 2. AdaptDL comparison

TRUE = dict(
    alpha_grad=2e-3,
    beta_grad=6e-5,
    alpha_sync_local=4e-3,
    beta_sync_local=1e-3,
    alpha_sync_node=1.5e-2,
    beta_sync_node=3e-3,
    gamma=1.5,
)


def synthetic_data(noise: float = 0.05, seed: int = 0) -> dict:
    """Per-(N, K, m) measurements of the accumulation step and the sync step, as AdaptDL
    records them, plus the T_iter records (s = 0 and s = 2) built from the same numbers."""
    import jax.numpy as jnp

    from scarjax import pollux as px
    from scarjax.pollux.throughput import _overlap, _t_grad, _t_sync

    p = px.ThroughputParams(**TRUE)
    rng = np.random.default_rng(seed)
    base = [
        (n, k, m) for n, k in [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8), (4, 16)] for m in (8, 32, 128, 512)
    ]
    n, k, m = (np.array(c, float) for c in zip(*base))
    tg = np.asarray(_t_grad(p, jnp.asarray(m)))
    to = np.asarray(_overlap(jnp.asarray(tg), _t_sync(p, jnp.asarray(n), jnp.asarray(k)), p.gamma))
    t_accum = tg * np.exp(noise * rng.standard_normal(tg.size))
    t_optim = to * np.exp(noise * rng.standard_normal(to.size))
    return dict(nodes=n, replicas=k, local_bsz=m, t_accum=t_accum, t_optim=t_optim, truth=p)


def measured_data(path: Path) -> dict | None:
    if not path.exists():
        return None
    recs = [r for r in json.loads(path.read_text())["records"] if "t_accum" in r]
    # The process-per-core records: the devices compute in parallel, as Eq 3.5 assumes.
    recs = [r for r in recs if r.get("backend", "processes") == "processes"]
    if not recs:
        return None
    g = {
        k: np.array([r[k] for r in recs], float)
        for k in ("nodes", "replicas", "local_bsz", "t_accum", "t_optim")
    }
    g["truth"] = None
    return g


def _records(d: dict, s_values=(0, 2)):
    """T_iter records for scarjax: T_iter = s * t_accum + t_optim (Eq 3.8, same numbers)."""
    cols = {k: [] for k in ("nodes", "replicas", "local_bsz", "accum_steps", "t_iter")}
    for s in s_values:
        cols["nodes"].append(d["nodes"])
        cols["replicas"].append(d["replicas"])
        cols["local_bsz"].append(d["local_bsz"])
        cols["accum_steps"].append(np.full(d["nodes"].size, float(s)))
        cols["t_iter"].append(s * d["t_accum"] + d["t_optim"])
    return {k: np.concatenate(v) for k, v in cols.items()}


def _err(pred, obs):
    pred, obs = np.asarray(pred, float), np.asarray(obs, float)
    return {
        "rmsle": float(np.sqrt(np.mean(np.log(pred / obs) ** 2))),
        "mean_rel_error": float(np.mean(np.abs(pred - obs) / obs)),
    }


OPT_REPEATS = 50
LARGE_ALLOCATIONS = 1024


def bench_vs_adaptdl(data: dict, label: str, py: Path, repeats: int = 5, torch_pgns=None) -> dict:
    import jax

    from scarjax import pollux as px

    rec = _records(data)
    # scarjax fit: first call (includes jit compilation) and warm calls
    t0 = time.perf_counter()
    fit = px.fit_throughput(
        rec["nodes"], rec["replicas"], rec["local_bsz"], rec["accum_steps"], rec["t_iter"]
    )
    first = time.perf_counter() - t0
    warm = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fit = px.fit_throughput(
            rec["nodes"], rec["replicas"], rec["local_bsz"], rec["accum_steps"], rec["t_iter"]
        )
        warm.append(time.perf_counter() - t0)

    # optimisation problem: same model and PGNS for both
    phi, m0 = 500.0, 32
    nodes = np.array([1, 1, 1, 2, 2, 4, 4, 8])
    reps = np.array([1, 2, 4, 4, 8, 16, 32, 64])
    max_bsz, max_m = 4096, 256
    rng = np.random.default_rng(0)  # a cluster scheduler's call: many candidate allocations
    large_reps = rng.integers(1, 65, size=LARGE_ALLOCATIONS)
    large_nodes = np.minimum(rng.integers(1, 17, size=LARGE_ALLOCATIONS), large_reps)
    perf = fit.params
    adl_perf = [
        perf.alpha_grad,
        perf.beta_grad,
        perf.alpha_sync_node,
        perf.beta_sync_node,
        perf.alpha_sync_local,
        perf.beta_sync_local,
        perf.gamma,
    ]
    req = {
        "repeats": repeats,
        "fit_data": {
            k: np.asarray(data[k]).tolist() for k in ("nodes", "replicas", "local_bsz", "t_accum", "t_optim")
        },
        "predict": {k: rec[k].tolist() for k in ("nodes", "replicas", "local_bsz", "accum_steps")},
        # AdaptDL's GradParams(sqr, var): efficiency = Eq 3.3 with phi = var * M0 / sqr.
        "optimize": {
            "perf_params": [float(v) for v in adl_perf],
            "sqr": 1.0,
            "var": phi / m0,
            "init_batch_size": m0,
            "nodes": nodes.tolist(),
            "replicas": reps.tolist(),
            "max_batch_size": max_bsz,
            "max_local_bsz": max_m,
            "repeats": OPT_REPEATS,
            "large_nodes": large_nodes.tolist(),
            "large_replicas": large_reps.tolist(),
            "large_repeats": 5,
        },
        "torch_pgns": torch_pgns,
    }
    proc = subprocess.run(
        [str(py), str(HERE / "adaptdl" / "run_adaptdl.py")],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:]}
    adl = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1][2:])

    ours_pred = np.asarray(
        px.t_iter(fit.params, rec["nodes"], rec["replicas"], rec["local_bsz"], rec["accum_steps"])
    )
    res = {
        "data": label,
        "records_scarjax": int(rec["t_iter"].size),
        "records_adaptdl": int(data["nodes"].size),
        "fit": {
            "scarjax_first_call_s": first,
            "scarjax_s": float(np.median(warm)),
            "adaptdl_s": float(np.median(adl["fit_seconds"])),
            "speedup_vs_adaptdl": float(np.median(adl["fit_seconds"]) / np.median(warm)),
            "scarjax_error_vs_obs": _err(ours_pred, rec["t_iter"]),
            "adaptdl_error_vs_obs": _err(adl["pred_t_iter"], rec["t_iter"]),
        },
    }
    if data.get("truth") is not None:
        truth = np.asarray(
            px.t_iter(data["truth"], rec["nodes"], rec["replicas"], rec["local_bsz"], rec["accum_steps"])
        )
        res["fit"]["scarjax_error_vs_truth"] = _err(ours_pred, truth)
        res["fit"]["adaptdl_error_vs_truth"] = _err(adl["pred_t_iter"], truth)

    def time_ours(nd, rp, method, n_rep):
        kw = dict(max_batch_size=max_bsz, max_local_bsz=max_m, method=method)
        t0 = time.perf_counter()
        cfg = jax.block_until_ready(px.optimize_batch_size(perf, phi, m0, nd, rp, **kw))
        first = time.perf_counter() - t0
        ts = []
        for _ in range(n_rep):
            t0 = time.perf_counter()
            cfg = jax.block_until_ready(px.optimize_batch_size(perf, phi, m0, nd, rp, **kw))
            ts.append(time.perf_counter() - t0)
        return cfg, first, float(np.median(ts))

    def adl_goodput(a_m, a_s, nd, rp):
        a_ok = a_m * rp * (a_s + 1) <= max_bsz
        return np.where(a_ok, np.asarray(px.goodput(perf, phi, m0, nd, rp, np.maximum(a_m, 1), a_s)), 0.0)

    def compare_optimize(nd, rp, key, n_search, n_exh):
        """Ours (exact binary search, default; exhaustive reference; first call compiles)
        vs AdaptDL's ``optimize`` on the same allocations."""
        cfg, first, t_search = time_ours(nd, rp, "search", n_search)
        ex, _, t_exh = time_ours(nd, rp, "exhaustive", n_exh)
        a_m = np.asarray(adl[key]["local_bsz"])
        a_s = np.asarray(adl[key]["accum_steps"])
        a_gp = adl_goodput(a_m, a_s, nd, rp)
        t_adl = float(np.median(adl[f"{key}_seconds"]))
        ours = np.asarray(cfg.goodput)
        out = {
            "allocations": len(rp),
            "scarjax_first_call_s": first,
            "scarjax_s": t_search,
            "scarjax_exhaustive_s": t_exh,
            "adaptdl_s": t_adl,
            "speedup_vs_adaptdl": t_adl / t_search,
            "exhaustive_speedup_vs_adaptdl": t_adl / t_exh,
            "search_equals_exhaustive_goodput_maxrel": float(
                np.max(np.abs(ours - np.asarray(ex.goodput)) / np.asarray(ex.goodput))
            ),
        }
        return out, cfg, ours, a_m, a_s, a_gp

    res["optimize"], cfg, ours, a_m, a_s, a_gp = compare_optimize(
        nodes, reps, "optimize", OPT_REPEATS, OPT_REPEATS
    )
    res["optimize"].update(
        {
            "scarjax_goodput": ours.tolist(),
            "adaptdl_goodput_same_model": a_gp.tolist(),
            "goodput_ratio_scarjax_over_adaptdl": float(np.mean(ours / np.maximum(a_gp, 1e-12))),
            "scarjax_config": [
                list(map(int, c)) for c in zip(np.asarray(cfg.local_bsz), np.asarray(cfg.accum_steps))
            ],
            "adaptdl_config": [list(map(int, c)) for c in zip(a_m, a_s)],
        }
    )
    res["optimize_large"], _, ours, _, _, a_gp = compare_optimize(
        large_nodes, large_reps, "optimize_large", 30, 3
    )
    ok = a_gp > 0  # AdaptDL's choice can break max_batch_size (goodput 0 here): count those apart.
    res["optimize_large"].update(
        {
            "adaptdl_infeasible_allocations": int(np.sum(~ok)),
            "goodput_ratio_scarjax_over_adaptdl_mean_feasible": float(np.mean(ours[ok] / a_gp[ok])),
            "goodput_ratio_scarjax_over_adaptdl_min": float(np.min(ours[ok] / a_gp[ok])),
        }
    )
    if "torch_pgns" in adl:
        res["adaptdl_torch_pgns"] = adl["torch_pgns"]
    if "torch_pgns_error" in adl:
        res["adaptdl_torch_pgns_error"] = adl["torch_pgns_error"]
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-adaptdl", action="store_true")
    ap.add_argument("--measured", default="results/pollux_throughput.json")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--no-overhead", action="store_true", help="skip the PGNS-overhead part")
    args = ap.parse_args(argv)
    out = {"loadavg_start": os.getloadavg()[0]}
    if not args.no_overhead:
        out["pgns_overhead"] = bench_overhead(reps=args.reps)
        if hasattr(os, "sched_setaffinity"):
            out["pgns_overhead_one_core"] = bench_overhead_one_core(reps=args.reps)
    if not args.no_adaptdl:
        try:
            py = setup_adaptdl_venv()
        except Exception as e:  # noqa: BLE001
            out["adaptdl"] = {"error": f"could not set up the AdaptDL venv: {e}"}
        else:
            out["adaptdl_synthetic"] = bench_vs_adaptdl(
                synthetic_data(),
                "synthetic (Eq 3.8 + 5% log-normal noise)",
                py,
                torch_pgns={"batch": 256, "steps": 60},
            )
            md = measured_data(Path(args.measured))
            if md is not None:
                out["adaptdl_measured"] = bench_vs_adaptdl(md, f"measured ({args.measured})", py)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
