"""Sync-on-the-fly E1-E5 (Zhao, Gao & Irwin, Sec IV): the flexible barrier on transient
workers vs a Spark-like checkpoint-recompute baseline, on the cluster clock with real training.

Setting (paper Sec IV-A, scaled down): ``workers`` workers, half m4.large (``fast`` points/s)
and half t2.micro stragglers (half speed); logistic regression on a synthetic binary data set
(stands in for YearPredictionMSD) and NMF by projected gradient descent on a synthetic
non-negative matrix (stands in for Netflix); ``points_per_worker`` points per worker. Time per
barrier = the points each worker processed at its speed + ``sync_s``
(:class:`scarjax.cluster.syncfly.Fleet`); the losses come from the real training. Revocations:
exponential lifetimes (:func:`scarjax.cluster.market.exponential`), a replacement running
``restart_s`` = 3 min later (paper). Both policies see the same draws (same key).

* E1/E2 (Fig 3): LR and NMF under the low (one revocation every 10 min in the cluster) and
  high (every 2 min) rate; time to the target loss (the loss the revocation-free BSP run
  reaches after ``target_iters`` iterations), Sync-on-the-fly vs checkpoint-recompute.
* E3 (Fig 4): weak scaling, data growing with the workers, each *worker* revoked every 10 /
  2 min on average (Sec IV-B.2's reading); time to target relative to 2 workers.
* E4 (Sec IV-B.3): revoked workers never replaced; time relative to the revocation-free run
  (the baseline cannot recompute the lost partitions: censored).
* E5 (Fig 5): cost on spot (m4.large $0.0189-0.0244/h) vs on-demand ($0.10/h).

**Stated and calibrated clock.** The barrier costs ``sync_s`` (stated: 2 s). The calibrated
clock (:func:`calibrated_sync_s`, results key ``calibrated``) sets it from the cluster
engine's real runs: the share of an iteration the engine spends outside the divided compute
(``experiments/_calibration.py``) applied to a BSP iteration; E1/E2 are run with both.

**The largest deviation** (NMF: our 92% / 99% time reductions against the paper's 23% / 39%)
is the data and the model, not a bug (:func:`deviation_note` computes the evidence from the
results): without any revocation SotF already reaches the NMF target in as many barriers as BSP
needs full-batch iterations, each barrier covering a small share of the points (on the
synthetic NMF a partial gradient is nearly the full one), so most of the reduction exists
without revocations; the part revocations make (:func:`revocation_reduction`) is of the
paper's size at the low rate and larger at the high rate, where the straggler-bound BSP
iteration is about as long as the cluster's mean time between revocations and the baseline
waits for every replacement and reloads its last checkpoint (Spark recomputes only the lost
partitions).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from experiments import _calibration, _common, _plot
from experiments._common import revive
from scarjax.cluster import market as mk
from scarjax.cluster import syncfly as sf

NAME = "sync_on_the_fly"
DESCRIPTION = "Sync-on-the-fly E1-E5: flexible barrier vs Spark-like checkpoint-recompute on revoked workers (LR, NMF)"

PAPER = {
    "LR": {"low": 0.54, "high": 0.85},
    "NMF": {"low": 0.23, "high": 0.39},
    "scaling_max_increase": 0.10,
    "not_replaced": (0.30, 0.50),
    "cost_reduction": (0.76, 0.85),
}


@dataclasses.dataclass(frozen=True)
class Config:
    workers: int = 8
    points_per_worker: int = 500
    fast: float = 10.0            # m4.large points/s; t2.micro half of it
    report_points: int = 25       # r: points per progress report
    sync_s: float = 2.0
    restart_s: float = 180.0      # paper: 3 minutes to a replacement
    checkpoint_s: float = 10.0
    restore_s: float = 10.0
    low_mean_s: float = 600.0     # mean time between revocations (low rate)
    high_mean_s: float = 120.0    # (high rate)
    lam: float = 0.8
    lr_lr: float = 2.0
    nmf_lr: float = 2.0
    target_iters_lr: int = 10
    target_iters_nmf: int = 40
    trials: int = 3
    scaling: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    scaling_trials: int = 2
    horizon_s: float = 40_000.0
    seed: int = 0

    @classmethod
    def quick(cls) -> "Config":
        return cls(trials=1, scaling=(2, 8, 32), scaling_trials=1, points_per_worker=200, target_iters_nmf=30,
                   horizon_s=15_000.0)


_PROBLEMS: dict = {}


def _problem(kind: str, workers: int, cfg: Config) -> sf.Problem:
    """One Problem per (kind, workers, config): the compiled barrier is reused across runs."""
    k = (kind, workers, cfg.points_per_worker, cfg.lr_lr, cfg.nmf_lr, cfg.seed)
    if k not in _PROBLEMS:
        _PROBLEMS[k] = _make_problem(kind, workers, cfg)
    return _PROBLEMS[k]


def _make_problem(kind: str, workers: int, cfg: Config) -> sf.Problem:
    n = workers * cfg.points_per_worker
    if kind == "LR":
        x, y = sf.synthetic_logistic(n, 20, seed=cfg.seed)
        return sf.logistic_regression(x, y, lr=cfg.lr_lr)
    m = max(20, int(math.sqrt(n / 0.5 * 1.25)))
    cols = max(16, int(round(n / 0.5 / m)))
    r, c, v, shape = sf.synthetic_nmf(m, cols, rank=5, density=min(1.0, n / (m * cols)), seed=cfg.seed)
    return sf.nmf(r, c, v, shape, rank=5, lr=cfg.nmf_lr, init_scale=0.3)


def _fleet(workers: int, cfg: Config, sync_s: float | None = None) -> sf.Fleet:
    return sf.mixed_fleet(workers, cfg.fast, report_points=cfg.report_points,
                          sync_s=cfg.sync_s if sync_s is None else sync_s)


def calibrated_sync_s(cfg: Config) -> tuple[float, float]:
    """``(sync_s, share)``: the barrier cost calibrated on the cluster engine. ``share`` is the
    part of an iteration on ``cfg.workers`` machines that the engine's real runs spend outside
    the divided compute (:func:`experiments._calibration.barrier_share`); the barrier then costs
    that share of a BSP iteration, whose compute is a straggler's whole shard
    (``points_per_worker`` at half of ``fast`` points/s)."""
    share = _calibration.barrier_share(cfg.workers)
    compute = cfg.points_per_worker / (0.5 * cfg.fast)
    return share / (1.0 - share) * compute, share


def _target(pb, fleet, iters: int, key) -> float:
    ref = sf.checkpoint_recompute(pb, fleet, None, key=key, horizon_s=1e9, max_iterations=iters, tier="reliable")
    return float(ref.loss[-1])


def _summ(run, target) -> dict:
    o = run.to_target(target)
    return {"reached": bool(o.reached), "time_s": o.time_s if o.reached else math.inf, "dollars": o.dollars,
            "end_s": float(run.end_s), "revocations": run.count("revocation"), "barriers": int(run.steps[-1]),
            "curve": {"t": run.time_s.tolist(), "loss": run.loss.tolist()} if len(run.loss) <= 2000 else
            {"t": run.time_s[:: max(1, len(run.loss) // 1000)].tolist(),
             "loss": run.loss[:: max(1, len(run.loss) // 1000)].tolist()}}


def _mean_time(rows) -> float:
    t = np.asarray([r["time_s"] for r in rows], float)
    return float(np.mean(t))  # inf if any trial is censored


def _e12(cfg: Config, key, sync_s: float) -> dict:
    """E1/E2: cluster-level revocation every ``mean_s`` (per worker ``M * mean_s``), LR and NMF,
    with a barrier of ``sync_s`` seconds."""
    M = cfg.workers
    rates = {"low": cfg.low_mean_s, "high": cfg.high_mean_s}
    out = {}
    for kind, iters in (("LR", cfg.target_iters_lr), ("NMF", cfg.target_iters_nmf)):
        pb, fleet = _problem(kind, M, cfg), _fleet(M, cfg, sync_s)
        target = _target(pb, fleet, iters, key)
        e = {"target_loss": target, "none": {}, "rates": {}}
        for pol, fn in (("sof", sf.sync_on_the_fly), ("bsp", sf.checkpoint_recompute)):
            e["none"][pol] = _summ(fn(pb, fleet, None, key=key, horizon_s=cfg.horizon_s, target_loss=target), target)
        for rate, mean in rates.items():
            mkt = sf.m4_large_market(mk.exponential(M * mean))
            rows = {"sof": [], "bsp": []}
            for i in range(cfg.trials):
                k = jax.random.fold_in(key, 100 + i)
                common = dict(key=k, horizon_s=cfg.horizon_s, target_loss=target, restart_s=cfg.restart_s)
                rows["sof"].append(_summ(sf.sync_on_the_fly(pb, fleet, mkt, lam=cfg.lam, **common), target))
                rows["bsp"].append(_summ(sf.checkpoint_recompute(pb, fleet, mkt, checkpoint_s=cfg.checkpoint_s,
                                                                 restore_s=cfg.restore_s, **common), target))
            ts, tb = _mean_time(rows["sof"]), _mean_time(rows["bsp"])
            e["rates"][rate] = {"mean_s": mean, "runs": rows, "time_sof": ts, "time_bsp": tb,
                                "reduction": (1.0 - ts / tb) if math.isfinite(tb) else None,
                                "bsp_censored": int(sum(not r["reached"] for r in rows["bsp"]))}
        out[kind] = e
    return out


@_common.recorded(NAME)
def run(config: Config, out_dir) -> dict:
    cfg = config
    key = jax.random.key(cfg.seed)
    M = cfg.workers
    out: dict = {"config": dataclasses.asdict(cfg), "paper": PAPER, "e12": {}, "e3": {}, "e4": {}, "e5": {}}
    spot_mean = float(np.mean(sf.M4_LARGE_SPOT))
    rates = {"low": cfg.low_mean_s, "high": cfg.high_mean_s}
    out["e12"] = _e12(cfg, key, cfg.sync_s)
    cal_sync, share = calibrated_sync_s(cfg)
    out["calibrated"] = {"sync_s": cal_sync, "barrier_share": share, "engine": _calibration.summary(),
                         "e12": _e12(cfg, key, cal_sync)}
    # E3: weak scaling (per-worker mean lifetimes), LR
    for rate, mean in rates.items():
        rows = {}
        for W in cfg.scaling:
            pb, fleet = _problem("LR", W, cfg), _fleet(W, cfg)
            target = _target(pb, fleet, cfg.target_iters_lr, key)
            mkt = sf.m4_large_market(mk.exponential(mean))
            times = []
            for i in range(cfg.scaling_trials):
                r = sf.sync_on_the_fly(pb, fleet, mkt, key=jax.random.fold_in(key, 200 + i), horizon_s=cfg.horizon_s,
                                       target_loss=target, lam=cfg.lam, restart_s=cfg.restart_s)
                times.append(r.to_target(target).time_s if r.to_target(target).reached else math.inf)
            rows[str(W)] = {"target_loss": target, "times": times, "time": float(np.mean(times))}
        base = rows[str(cfg.scaling[0])]["time"]
        for W in cfg.scaling:
            rows[str(W)]["relative"] = rows[str(W)]["time"] / base
        out["e3"][rate] = rows
    # E4: revoked workers never replaced (LR and NMF, both rates)
    for kind, iters in (("LR", cfg.target_iters_lr), ("NMF", cfg.target_iters_nmf)):
        pb, fleet = _problem(kind, M, cfg), _fleet(M, cfg)
        target = out["e12"][kind]["target_loss"]
        t0 = out["e12"][kind]["none"]["sof"]["time_s"]
        e4 = {"no_revocation_s": t0, "rates": {}}
        for rate, mean in rates.items():
            mkt = sf.m4_large_market(mk.exponential(M * mean))
            ts, bs = [], []
            for i in range(cfg.trials):
                common = dict(key=jax.random.fold_in(key, 300 + i), horizon_s=cfg.horizon_s, target_loss=target,
                              restart_s=None)
                s = sf.sync_on_the_fly(pb, fleet, mkt, lam=cfg.lam, **common)
                b = sf.checkpoint_recompute(pb, fleet, mkt, checkpoint_s=cfg.checkpoint_s, restore_s=cfg.restore_s,
                                            **common)
                ts.append(_summ(s, target))
                bs.append(bool(b.to_target(target).reached))
            tm = _mean_time(ts)
            e4["rates"][rate] = {"runs": ts, "time": tm, "increase": tm / t0 - 1.0,
                                 "workers_lost": [r["revocations"] for r in ts], "bsp_reached": bs}
        out["e4"][kind] = e4
    # E5: cost, LR and NMF at the high rate, spot vs on-demand
    for kind in ("LR", "NMF"):
        e = out["e12"][kind]
        pb, fleet = _problem(kind, M, cfg), _fleet(M, cfg)
        target = e["target_loss"]
        od = sf.m4_large_market(None)
        common = dict(key=key, horizon_s=cfg.horizon_s, target_loss=target)
        ond_sof = sf.sync_on_the_fly(pb, fleet, od, tier="reliable", **common).to_target(target).dollars
        ond_bsp = sf.checkpoint_recompute(pb, fleet, od, tier="reliable", **common).to_target(target).dollars
        spot = {}
        for label, price in (("low", sf.M4_LARGE_SPOT[0]), ("mean", spot_mean), ("high", sf.M4_LARGE_SPOT[1])):
            mkt = sf.m4_large_market(mk.exponential(M * cfg.high_mean_s), spot=price)
            d = []
            for i in range(cfg.trials):
                r = sf.sync_on_the_fly(pb, fleet, mkt, lam=cfg.lam, restart_s=cfg.restart_s,
                                       **{**common, "key": jax.random.fold_in(key, 100 + i)})
                d.append(r.to_target(target).dollars if r.to_target(target).reached else math.inf)
            spot[label] = {"price": price, "dollars": float(np.mean(d)), "vs_on_demand_sof": 1 - float(np.mean(d)) / ond_sof,
                           "vs_on_demand_bsp": 1 - float(np.mean(d)) / ond_bsp}
        out["e5"][kind] = {"on_demand_sof": ond_sof, "on_demand_bsp": ond_bsp, "spot_high_rate": spot}
    return out


def plot(res: dict, out_dir) -> list:
    res = revive(res)
    fig, axes = _plot.figure(2, 3, panel=(5.0, 3.6))
    for j, kind in enumerate(("LR", "NMF")):
        e = res["e12"][kind]
        for i, rate in enumerate(("low", "high")):
            ax = axes[i, j]
            rr = e["rates"][rate]
            for pol, c, lab in (("sof", "C0", "Sync-on-the-fly"), ("bsp", "C3", "checkpoint-recompute")):
                cur = rr["runs"][pol][0]["curve"]
                ax.plot(np.asarray(cur["t"]) / 60, cur["loss"], c, label=lab)
            ax.axhline(e["target_loss"], color="gray", ls=":", lw=0.8, label="target loss")
            ax.set_yscale("log")
            ax.set_xlabel("simulated time (min)")
            ax.set_ylabel("loss")
            red = rr["reduction"]
            ax.set_title(f"{kind}, {rate} rate: {'-' if red is None else f'{-100 * red:+.0f}%'} time")
            ax.legend(fontsize=7)
            _plot.readable_log(ax, "y")
    ax = axes[0, 2]
    for rate, c in (("low", "C0"), ("high", "C3")):
        rows = res["e3"][rate]
        ws = sorted(int(w) for w in rows)
        ax.plot(ws, [rows[str(w)]["relative"] for w in ws], c + "o-", label=f"{rate} rate")
    ax.axhline(1 + PAPER["scaling_max_increase"], color="gray", ls=":", lw=0.8,
               label=f"paper: at most +{100 * PAPER['scaling_max_increase']:.0f}%")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers (data grows with them)")
    ax.set_ylabel("time to target / 2 workers")
    ax.set_title("E3 weak scaling (LR)")
    ax.legend(fontsize=7)
    ax = axes[1, 2]
    labels, vals = [], []
    for kind in ("LR", "NMF"):
        e = res["e5"][kind]
        labels += [f"{kind} BSP\non-demand", f"{kind} SotF\non-demand", f"{kind} SotF\nspot"]
        vals += [e["on_demand_bsp"], e["on_demand_sof"], e["spot_high_rate"]["mean"]["dollars"]]
    ax.bar(range(len(vals)), vals, color=["C3", "C0", "C2"] * 2)
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel("USD to target")
    ax.set_title("E5 cost (spot: high revocation rate)")
    return [_plot.save(fig, out_dir, NAME)]


def deviation_note(res: dict) -> str:
    """Why NMF's E1/E2 reductions exceed the paper's, from the results: how much of the
    reduction exists without revocations, and what each barrier / iteration costs."""
    c = res["config"]
    parts = []
    for kind in ("LR", "NMF"):
        e = res["e12"][kind]
        s0, b0 = e["none"]["sof"], e["none"]["bsp"]
        per = [e["rates"][r]["runs"]["bsp"] for r in ("low", "high")]
        rev = [float(np.mean([x["revocations"] for x in rows])) / max(b0["barriers"], 1) for rows in per]
        parts.append(
            f"{kind}: without revocations SotF is already {_pct(1 - s0['time_s'] / b0['time_s'])} faster "
            f"({s0['barriers']} barriers of {s0['time_s'] / max(s0['barriers'], 1):.1f} s against {b0['barriers']} "
            f"BSP iterations of {b0['time_s'] / max(b0['barriers'], 1):.0f} s); the baseline's iterations are "
            f"interrupted {rev[0]:.2f} (low) and {rev[1]:.2f} (high) times per needed iteration")
    return ("**Why NMF deviates from the paper (23% / 39%).** " + "; ".join(parts) + ". "
            "The NMF gap is mostly not about revocations: on the synthetic NMF a barrier's gradient over the "
            "few points processed since the last barrier is nearly the full gradient, so the flexible barrier "
            "reaches the target in as many updates as full-batch BSP, each far shorter; the paper's total "
            "reductions (23% / 39%) bound its own revocation-free gap. What revocations add is the \"from revocations only\" column: "
            "at the low rate it is of the paper's size; at the high rate the baseline's straggler-bound "
            f"iteration ({c['points_per_worker']} points at {c['fast'] / 2:g} points/s) is about as long as the "
            "mean time between revocations in the cluster, and the baseline waits for every replacement "
            f"({c['restart_s']:.0f} s) and reloads its checkpoint, where Spark recomputes only the lost "
            "partitions. Verdict: the data (synthetic NMF) and the model (the worker-speed clock and the "
            "baseline's whole-job rollback), not a bug.")


def revocation_reduction(e: dict, rate: str) -> float | None:
    """The part of E1/E2's time reduction that revocations make: ``1 - (T_sof / T0_sof) /
    (T_bsp / T0_bsp)``, each policy's mean time to target relative to its own revocation-free
    time (``None`` where the baseline is censored)."""
    r = e["rates"][rate]
    t0s, t0b = e["none"]["sof"]["time_s"], e["none"]["bsp"]["time_s"]
    if not (np.isfinite(r["time_bsp"]) and np.isfinite(r["time_sof"]) and np.isfinite(t0s) and np.isfinite(t0b)):
        return None
    return 1.0 - (r["time_sof"] / t0s) / (r["time_bsp"] / t0b)


def _pct(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.0f}%"


def _signed(x) -> str:
    return "censored (target not reached)" if x is None or not np.isfinite(x) else f"{100 * x:+.0f}%"


def report(res: dict) -> str:
    res = revive(res)
    c = res["config"]
    P = res["paper"]
    L = [
        "## Sync-on-the-fly E1-E5 (Zhao, Gao & Irwin, Sec IV)",
        "",
        f"{c['workers']} workers (half at {c['fast']} points/s, half stragglers at half speed), "
        f"{c['points_per_worker']} points per worker, progress reports every r = {c['report_points']} points, "
        f"λ = {c['lam']}, barrier {c['sync_s']} s, replacement after {c['restart_s']:.0f} s, "
        f"{c['trials']} trial(s) per cell; real training (LR and projected-gradient NMF, synthetic data); "
        "time from the worker speeds.",
        "",
        "| E1/E2 | rate | time to target SotF | checkpoint-recompute | time reduction (ours, stated clock) | "
        "calibrated barrier | from revocations only (stated / calibrated) | paper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cal = res.get("calibrated")
    for kind in ("LR", "NMF"):
        e = res["e12"][kind]
        ec = cal["e12"][kind] if cal else None
        for rate in ("low", "high"):
            r = e["rates"][rate]
            rc = ec["rates"][rate] if ec else None
            tb = f"{r['time_bsp'] / 60:.1f} min" if np.isfinite(r["time_bsp"]) else f"censored ({r['bsp_censored']})"
            L.append(f"| {kind} | {rate} | {r['time_sof'] / 60:.1f} min | {tb} | {_pct(r['reduction'])} | "
                     f"{_pct(rc['reduction']) if rc else 'not run'} | {_pct(revocation_reduction(e, rate))} / "
                     f"{_pct(revocation_reduction(ec, rate)) if ec else 'not run'} | {100 * P[kind][rate]:.0f}% |")
    if cal:
        L += ["", f"Calibrated barrier: {cal['sync_s']:.2f} s (stated {c['sync_s']:g} s): the engine's real runs spend "
              f"{100 * cal['barrier_share']:.2f}% of an iteration on {c['workers']} machines outside the divided compute "
              "(experiments/_calibration.py), here applied to a BSP iteration. \"From revocations only\" divides "
              "out each policy's revocation-free time: 1 − (SotF / SotF without revocations) / (BSP / BSP without "
              "revocations), the part of the reduction that revocations make."]
    L += ["", "Without revocations (same target): "
          + "; ".join(f"{k}: SotF {res['e12'][k]['none']['sof']['time_s'] / 60:.1f} min, BSP "
                      f"{res['e12'][k]['none']['bsp']['time_s'] / 60:.1f} min" for k in ("LR", "NMF")) + ".", ""]
    L += [deviation_note(res), ""]
    for rate in ("low", "high"):
        rows = res["e3"][rate]
        ws = sorted(int(w) for w in rows)
        worst = max(rows[str(w)]["relative"] for w in ws) - 1.0
        L.append(f"E3 weak scaling, {rate} rate (per worker): time to target relative to {ws[0]} workers "
                 + ", ".join(f"{w}: {rows[str(w)]['relative']:.2f}" for w in ws)
                 + f"; largest change {100 * worst:+.0f}% (paper: an increase of at most "
                 f"{100 * P['scaling_max_increase']:.0f}%).")
    L.append("")
    for kind in ("LR", "NMF"):
        e4 = res["e4"][kind]
        parts = [f"{rate} rate {_signed(e4['rates'][rate]['increase'])} (workers lost {e4['rates'][rate]['workers_lost']}, "
                 f"baseline reached: {e4['rates'][rate]['bsp_reached']})" for rate in ("low", "high")]
        L.append(f"E4 {kind}, revoked workers never replaced, time vs no revocations: " + "; ".join(parts)
                 + f" (paper: +{100 * P['not_replaced'][0]:.0f}-{100 * P['not_replaced'][1]:.0f}%; Spark cannot finish).")
    L.append("")
    for kind in ("LR", "NMF"):
        e = res["e5"][kind]
        s = e["spot_high_rate"]
        L.append(f"E5 {kind} cost to target: on-demand BSP ${e['on_demand_bsp']:.4f}, on-demand SotF "
                 f"${e['on_demand_sof']:.4f}; SotF on spot at the high rate ${s['mean']['dollars']:.4f}: "
                 f"{_pct(s['low']['vs_on_demand_sof'])}-{_pct(s['high']['vs_on_demand_sof'])} lower than on-demand SotF "
                 f"(spot $0.0189-0.0244/h vs $0.10/h), {_pct(s['mean']['vs_on_demand_bsp'])} lower than on-demand BSP "
                 f"(paper: {100 * P['cost_reduction'][0]:.0f}-{100 * P['cost_reduction'][1]:.0f}% lower).")
    L += [
        "",
        "Notes: synthetic data sets stand in for YearPredictionMSD and Netflix, and the clock is a "
        "stated worker-speed model, so absolute times are not comparable. Our checkpoint-recompute "
        "baseline rolls the whole job back to the last checkpoint (Young/Daly interval) and waits for "
        "every replacement, and it is full-batch BSP (MLlib's default), so part of the reduction "
        "comes from the flexible barrier's smaller, more frequent updates and from not waiting for "
        "the stragglers, visible in the revocation-free times above. The paper's revocation "
        "rates are read as one revocation per 10 / 2 min in the cluster for E1/E2 and per worker "
        "for E3 (its Sec IV-B.2). NMF updates W and H jointly (the paper alternates).",
        "",
        "E3: our time to a fixed loss mostly *falls* with the cluster size: the flexible barrier's "
        "updates do not have to cover the (growing) data set, so more workers reach the same progress "
        "sooner; the paper's running times scale with the data. E4: our runs lose "
        + ", ".join(f"{kind} {min(min(res['e4'][kind]['rates'][r]['workers_lost']) for r in ('low', 'high'))}-"
                    f"{max(max(res['e4'][kind]['rates'][r]['workers_lost']) for r in ('low', 'high'))}"
                    for kind in ("LR", "NMF"))
        + f" of {c['workers']} workers during the run, and each barrier needs only as much "
        "progress as the last one, so losing throughput costs less time than the paper's +30-50%.",
    ]
    return "\n".join(L)
