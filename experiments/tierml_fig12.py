"""TierML Fig 12: cost relative to on-demand over every start minute of the AWS spot history.

Jobs of 2, 8 and 20 compute-hours (on 64 on-demand machines) started at every minute of the
2015 spot-price history (:mod:`scarjax.data.transient`: 3 zones x 5 instance types), under
TierML (1 reliable + 63 spot, stage 3, end-of-life flush, on-demand fall-back, proactive class
switching) and under checkpointing on spot machines (Young/Daly interval from the measured
MTTF, restart on the cheapest option), bidding the on-demand price or aggressively (the price
rounded up to a dime / nickel, paying the bid). The progress model and the market rules are
those of :mod:`scarjax.cluster.sweep` (a calibrated progress model, no training inside: tens
of millions of scenarios). The ablation "tierml_noswitch" stays on its home class (Sec 4.6's
proactive switching).

**Stated and calibrated model.** The sweep runs twice: with the stated progress model
(TierML's stage rates 63/64 and 1/64 of the on-demand fleet) and with TierML's rates
calibrated from the cluster engine's real runs (``experiments/_calibration.py``:
:meth:`scarjax.cluster.sweep.ProgressModel.from_step_time` on the seconds per iteration the
engine measures for 64, 63 and 1 workers); results key ``calibrated``, last column of the
report's table.

**The largest deviation** (TierML vs checkpointing: more expensive here, 46-50% cheaper in
the paper; also in ``tierml_fig1``, +11% vs -48%) is the data, not the model or a bug
(:func:`deviation_note` computes the evidence): the 2015 markets' measured MTTFs at the
on-demand bid are days to months, so checkpointing's Young/Daly overhead is a few percent
(the paper measured 18%, an MTTF of about 4 hours) and TierML's reliable on-demand machine
buys little; the calibrated model moves the savings by less than a point.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from experiments import _calibration, _common, _plot
from scarjax.cluster import sweep as sw
from scarjax.data import transient as td

NAME = "tierml_fig12"
DESCRIPTION = (
    "TierML Fig 12: cost vs on-demand over every start minute of the 2015 AWS spot history "
    "(TierML vs checkpointing, 2/8/20 h jobs, two bids; proactive switching ablation)"
)
# The full March-August 2015 history: ``$SCARJAX_SHARED_DATA/transient`` or the data folder
# beside a checkout (``../shared/data/transient``); absent on a fresh clone (then: embedded).
FULL_HISTORY = os.path.join(
    os.environ.get("SCARJAX_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")), "transient")

# TierML Sec 4.6 / 4.7 (2016 traces, us-east-1, c4.xlarge / c4.2xlarge).
PAPER = {
    "tierml_vs_od": (0.74, 0.78),
    "tierml_vs_ckpt": (0.46, 0.50),
    "tierml_vs_od_aggr": (0.66, 0.70),
    "tierml_vs_ckpt_aggr": (0.52, 0.55),
    "p95_vs_od": 0.59,
    "p95_vs_od_aggr": 0.32,
    "runtime_tierml": 0.11,
    "runtime_tierml_aggr": 0.23,
    "runtime_ckpt": 0.38,
    "runtime_ckpt_aggr": 0.62,
    "switching_saving": 0.34,
}


@dataclasses.dataclass(frozen=True)
class Config:
    stride: int = 1  # every start minute
    history: str = "full"  # "full": the March-August 2015 files when present, else the embedded month
    work_s: tuple[float, ...] = (7200.0, 28800.0, 72000.0)  # jobs of 2, 8 and 20 compute-hours
    machines: int = 64
    checkpoint_s: float = 240.0

    @classmethod
    def quick(cls) -> "Config":
        return cls(stride=60, history="embedded")


def _spot(history: str):
    if history not in ("full", "embedded"):
        raise ValueError(f"history must be 'full' or 'embedded', got {history!r}")
    if history == "full" and os.path.isdir(os.path.join(FULL_HISTORY, "aws-spot-2015")):
        return td.load_spot_market(FULL_HISTORY), f"full history ({_common.shown_path(os.path.join(FULL_HISTORY, 'aws-spot-2015'))})"
    return td.load_spot_market(), "embedded extract (April 2015)"


def _clean(cells):
    return [
        {k: ({kk: vv for kk, vv in v.items() if kk != "hist"} if isinstance(v, dict) else v) for k, v in c.items()}
        for c in cells
    ]


@_common.recorded(NAME)
def run(config: Config, out_dir) -> dict:
    cfg = config
    spot, source = _spot(cfg.history)
    model = dataclasses.replace(sw.default_model(), machines=cfg.machines, checkpoint_s=cfg.checkpoint_s)
    res = sw.sweep(spot, stride=cfg.stride, work_s=cfg.work_s, model=model, source=source)
    cells = _in_hours(res["cells"])
    rows = _rows(cells)
    # The same sweep with TierML's stage rates calibrated from the engine's real runs.
    cal_model = _calibration.progress_model(machines=cfg.machines, checkpoint_s=cfg.checkpoint_s)
    cal = sw.sweep(spot, stride=cfg.stride, work_s=cfg.work_s, model=cal_model, source=source)
    cal_rows = _rows(_in_hours(cal["cells"]))
    return {
        "config": dataclasses.asdict(cfg),
        "data": source,
        "model": dataclasses.asdict(model),
        "calibration": model.calibration,
        "scenarios": res["scenarios"],
        "minutes": res["minutes"],
        "mttf_min": {t: {b: [x / 60.0 for x in v] for b, v in d.items()} for t, d in res["mttf_s"].items()},
        "cells": _clean(cells),
        "summary": {k: _clean(v) for k, v in rows.items()},
        "headline": _headline(rows),
        "calibrated": {
            "model": dataclasses.asdict(cal_model),
            "engine": _calibration.summary(),
            "summary": {"by_work_bid_policy": _clean(cal_rows["by_work_bid_policy"]),
                        "by_bid_policy": _clean(cal_rows["by_bid_policy"])},
            "headline": _headline(cal_rows),
        },
    }


def _work_hours(cfg: dict) -> list[float]:
    """A results config's job lengths in compute-hours, as the paper states them (``work_s``;
    results recorded before the configuration took seconds state ``work_hours``)."""
    return [w / 3600.0 for w in cfg["work_s"]] if "work_s" in cfg else list(cfg["work_hours"])


def _checkpoint_min(cfg: dict) -> float:
    """A results config's checkpoint time in minutes (``checkpoint_s``; older results:
    ``checkpoint_min``)."""
    return cfg["checkpoint_s"] / 60.0 if "checkpoint_s" in cfg else cfg["checkpoint_min"]


def _in_hours(cells: list[dict]) -> list[dict]:
    """The sweep's cells with the job length as the paper states it (``work_h``, compute-hours)."""
    return [{("work_h" if k == "work_s" else k): (v / 3600.0 if k == "work_s" else v) for k, v in c.items()}
            for c in cells]


def _rows(cells) -> dict:
    return {
        "by_work_bid_policy": sw.summarise(cells, by=("work_h", "bid", "policy")),
        "by_zone_work_bid_policy": sw.summarise(cells, by=("zone", "work_h", "bid", "policy")),
        "by_type_bid_policy": sw.summarise(cells, by=("instance_type", "bid", "policy")),
        "by_bid_policy": sw.summarise(cells, by=("bid", "policy")),
    }


def _get(rows, **key):
    for r in rows:
        if all(r[k] == v for k, v in key.items()):
            return r
    raise KeyError(key)


def _headline(rows) -> dict:
    """Savings of TierML per zone and job length, pooled over the instance types."""
    out = {}
    z = rows["by_zone_work_bid_policy"]
    for bid in sw.BIDS:
        vs_od, vs_ck, p95, switch = [], [], [], []
        for r in z:
            if r["bid"] != bid or r["policy"] != "tierml":
                continue
            ck = _get(z, zone=r["zone"], work_h=r["work_h"], bid=bid, policy="checkpoint")
            ns = _get(z, zone=r["zone"], work_h=r["work_h"], bid=bid, policy="tierml_noswitch")
            vs_od.append(1 - r["cost"]["mean"])
            vs_ck.append(1 - r["cost"]["mean"] / ck["cost"]["mean"])
            p95.append(1 - r["cost"]["p95"])
            switch.append(1 - r["cost"]["mean"] / ns["cost"]["mean"])
        t = _get(rows["by_bid_policy"], bid=bid, policy="tierml")
        c = _get(rows["by_bid_policy"], bid=bid, policy="checkpoint")
        n = _get(rows["by_bid_policy"], bid=bid, policy="tierml_noswitch")
        out[bid] = {
            "tierml_vs_od_range": [min(vs_od), max(vs_od)],
            "tierml_vs_ckpt_range": [min(vs_ck), max(vs_ck)],
            "tierml_p95_vs_od_range": [min(p95), max(p95)],
            "switching_saving_range": [min(switch), max(switch)],
            "tierml_vs_od": 1 - t["cost"]["mean"],
            "tierml_vs_ckpt": 1 - t["cost"]["mean"] / c["cost"]["mean"],
            "tierml_p95_vs_od": 1 - t["cost"]["p95"],
            "ckpt_p95_vs_od": 1 - c["cost"]["p95"],
            "runtime_tierml": t["runtime"]["mean"] - 1,
            "runtime_ckpt": c["runtime"]["mean"] - 1,
            "switching_saving": 1 - t["cost"]["mean"] / n["cost"]["mean"],
            "overran": t["overran"] + c["overran"] + n["overran"],
        }
    return out


_STYLE = {
    ("tierml", "on_demand"): ("C0", "TierML, BidOnDemand"),
    ("checkpoint", "on_demand"): ("C3", "checkpointing, BidOnDemand"),
    ("tierml", "aggressive"): ("C2", "TierML, BidAggressive"),
    ("checkpoint", "aggressive"): ("C1", "checkpointing, BidAggressive"),
}


def plot(results: dict, out_dir) -> list:
    """Fig 12: mean cost relative to on-demand per zone (error bars: std), one panel per job
    length; second row: mean runtime relative to the on-demand fleet."""
    rows = results["summary"]["by_zone_work_bid_policy"]
    works = _work_hours(results["config"])
    zones = sorted({r["zone"] for r in rows})
    fig, axes = _plot.figure(2, len(works), panel=(4.4, 3.2))
    width = 0.2
    for j, w in enumerate(works):
        for i, ((pol, bid), (col, label)) in enumerate(_STYLE.items()):
            sel = [_get(rows, zone=z, work_h=w, bid=bid, policy=pol) for z in zones]
            x = np.arange(len(zones)) + (i - 1.5) * width
            axes[0][j].bar(x, [r["cost"]["mean"] for r in sel], width, yerr=[r["cost"]["std"] for r in sel],
                           color=col, label=label, capsize=2)
            axes[1][j].bar(x, [r["runtime"]["mean"] for r in sel], width, color=col, label=label)
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xticks(np.arange(len(zones)))
            ax.set_xticklabels(zones)
        axes[0][j].set_title(f"{w:g} compute-hours")
        axes[0][j].axhline(1.0, color="k", lw=0.8)
        axes[1][j].axhline(1.0, color="k", lw=0.8)
        axes[1][j].set_ylim(0.9, None)
        axes[0][j].set_ylim(0.0, max(axes[0][j].get_ylim()[1], 1.08))  # the on-demand line in view
    axes[0][0].set_ylabel("cost / on-demand")
    axes[1][0].set_ylabel("runtime / on-demand")
    _plot.legend_all(axes[0], below=True, fontsize=8)  # under the panels: no corner is free of bars
    fig.get_layout_engine().set(h_pad=0.1)
    return [_plot.save(fig, out_dir, NAME)]


def _rng(r) -> str:
    lo, hi = r
    return f"{100 * lo:.0f}–{100 * hi:.0f}%"


def _chg(saving) -> str:
    """A saving as a signed change of cost (0.2 -> '-20%', -0.1 -> '+10%')."""
    return f"{-100 * saving:+.0f}%"


def _chg_rng(r) -> str:
    lo, hi = r
    return f"{_chg(hi)} to {_chg(lo)}"


def deviation_note(results: dict) -> str:
    """Why TierML costs more than checkpointing here (the paper: 46-50% less), from the results:
    the markets' measured MTTFs make checkpointing's Young/Daly overhead small."""
    cfg = results["config"]
    delta = _checkpoint_min(cfg)
    mttf = np.array([m for v in results["mttf_min"].values() for m in v["on_demand"]], float)
    med = float(np.median(mttf))
    paper_overhead = 0.18  # TierML Sec 4.7: MF's checkpointing overhead at BidOnDemand
    rows = results["summary"]["by_work_bid_policy"]
    gap = {w: _get(rows, work_h=w, bid="on_demand", policy="tierml")["cost"]["mean"]
           / _get(rows, work_h=w, bid="on_demand", policy="checkpoint")["cost"]["mean"] - 1 for w in _work_hours(cfg)}
    ck = _get(results["summary"]["by_bid_policy"], bid="on_demand", policy="checkpoint")
    return (
        "**Why TierML costs more than checkpointing here (paper: 46–50% less).** The data: the median measured "
        f"MTTF over the 15 markets at BidOnDemand is {med:,.0f} min ({med / 1440:.0f} days), where checkpointing's "
        f"Young/Daly overhead sqrt(2 δ / MTTF) with δ = {delta:g} min is {100 * math.sqrt(2 * delta / med):.1f}%; the "
        f"paper's measured {100 * paper_overhead:.0f}% needs an MTTF of {2 * delta / paper_overhead ** 2:.0f} min. "
        f"Checkpointing saw {ck['revocations']:.2f} revocations per job and ran {100 * (ck['runtime']['mean'] - 1):.1f}% "
        "longer than on-demand (paper +38%), so TierML's reliable on-demand machine and its switches buy little. "
        "TierML vs checkpointing by job length (BidOnDemand, mean cost): "
        + ", ".join(f"{w:g} h {_chg(-g)}" for w, g in gap.items())
        + " (the 2 h jobs pay a third hour, note 4). " + _calibration_shift(results) + "Not a bug.")


def _calibration_shift(results: dict) -> str:
    cal = (results.get("calibrated") or {}).get("headline")
    if not cal:
        return ""
    h = results["headline"]
    d = max(abs(cal[b][k] - h[b][k]) for b in sw.BIDS for k in ("tierml_vs_ckpt", "tierml_vs_od"))
    return (f"Nor are the model's stated rates: calibrated on the engine, TierML's savings vs on-demand and vs "
            f"checkpointing move by at most {100 * d:.1f} points. ")


def _calibrated_note(results: dict) -> str:
    cal = results.get("calibrated")
    if not cal:
        return ""
    m = cal["model"]
    full = m["stage3_efficiency"] * (m["machines"] - m["reliable"]) / m["machines"]
    alone = m["stage1_efficiency"] * m["reliable"] / m["machines"]
    return ("Last column: the same sweep with TierML's rates calibrated on the cluster engine "
            "(`experiments/_calibration.py`: real MLR training under the engine's on-demand policy, seconds per "
            f"iteration from its {cal['engine']['step_time']} step time; "
            "`ProgressModel.from_step_time`): TierML's full fleet "
            f"{full:.4f} (stated {(m['machines'] - m['reliable']) / m['machines']:.4f}) and its reliable machine "
            f"alone {alone:.4f} (stated {m['reliable'] / m['machines']:.4f}) of the on-demand fleet's rate.")


_CLAIMS = (
    ("TierML cost vs on-demand, BidOnDemand (range over zone × job length)", "−74% to −78%",
     lambda od, ag: f"{_chg_rng(od['tierml_vs_od_range'])} (pooled {_chg(od['tierml_vs_od'])})"),
    ("TierML cost vs checkpointing, BidOnDemand", "−46% to −50%",
     lambda od, ag: f"{_chg_rng(od['tierml_vs_ckpt_range'])} (pooled {_chg(od['tierml_vs_ckpt'])})"),
    ("TierML cost vs on-demand, BidAggressive", "−66% to −70%",
     lambda od, ag: f"{_chg_rng(ag['tierml_vs_od_range'])} (pooled {_chg(ag['tierml_vs_od'])})"),
    ("TierML cost vs checkpointing, BidAggressive", "−52% to −55%",
     lambda od, ag: f"{_chg_rng(ag['tierml_vs_ckpt_range'])} (pooled {_chg(ag['tierml_vs_ckpt'])})"),
    ("TierML p95 cost vs on-demand (BidOnDemand / BidAggressive)", "−59% / −32%",
     lambda od, ag: f"{_chg(od['tierml_p95_vs_od'])} / {_chg(ag['tierml_p95_vs_od'])}"),
    ("checkpointing p95 cost vs on-demand (BidOnDemand / BidAggressive)", "no saving",
     lambda od, ag: f"{_chg(od['ckpt_p95_vs_od'])} / {_chg(ag['ckpt_p95_vs_od'])}"),
    ("runtime increase TierML (BidOnDemand / BidAggressive)", "+11% / +23%",
     lambda od, ag: f"+{100 * od['runtime_tierml']:.1f}% / +{100 * ag['runtime_tierml']:.1f}%"),
    ("runtime increase checkpointing (BidOnDemand / BidAggressive)", "+38% / +62%",
     lambda od, ag: f"+{100 * od['runtime_ckpt']:.1f}% / +{100 * ag['runtime_ckpt']:.1f}%"),
    ("proactive class switching (TierML vs TierML on its home class)", "−34% cost",
     lambda od, ag: f"{_chg(od['switching_saving'])} (BidOnDemand), {_chg(ag['switching_saving'])} (BidAggressive), "
                    f"range {_chg_rng(od['switching_saving_range'])}"),
)


def report(results: dict) -> str:
    h = results["headline"]
    od, ag = h["on_demand"], h["aggressive"]
    hc = (results.get("calibrated") or {}).get("headline") or {}
    odc, agc = hc.get("on_demand"), hc.get("aggressive")
    cfg = results["config"]
    starts = "every start minute" if cfg["stride"] == 1 else f"every {cfg['stride']}th start minute"
    lines = [
        f"## TierML Fig 12: cost vs on-demand over every start minute ({NAME})",
        "",
        f"**Setting.** Spot prices: {results['data']}, "
        f"{starts} "
        f"({results['scenarios']:,} scenarios: 3 zones × 5 instance types × jobs of "
        f"{', '.join(f'{w:g}' for w in _work_hours(cfg))} compute-hours × 2 bids × 3 policies). "
        f"{cfg['machines']} machines; TierML 1 reliable + {cfg['machines'] - 1} spot. Stated progress "
        "model of `scarjax.cluster.sweep` (TierML's stage rates 63/64 and 1/64 of the on-demand fleet, start-up "
        f"5 min, AWS 2-min warning, checkpoint {_checkpoint_min(cfg):g} min at the Young/Daly interval from "
        "each market's measured MTTF); no training inside the sweep. Vectorised NumPy sweep, equal to the "
        "plain Python event loop on random scenarios (tests/cluster/test_sweep.py). "
        + _calibrated_note(results),
        "",
        "| claim | paper (2016 traces) | ours (2015 traces), stated model | ours, model calibrated on the engine |",
        "|---|---|---|---|",
        *[f"| {claim} | {paper} | {fmt(od, ag)} | {fmt(odc, agc) if odc else 'not run'} |" for claim, paper, fmt in _CLAIMS],
        "",
        "Per job length, pooled over zones and instance types (cost relative to 64 on-demand machines: mean ± std, p95; runtime relative):",
        "",
        "| job | bid | policy | cost mean ± std | cost p95 | runtime | revocations/job | switches/job |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["summary"]["by_work_bid_policy"]:
        lines.append(
            f"| {r['work_h']:g} h | {r['bid']} | {r['policy']} | {r['cost']['mean']:.3f} ± {r['cost']['std']:.3f} | "
            f"{r['cost']['p95']:.3f} | {r['runtime']['mean']:.3f} | {r['revocations']:.2f} | {r['switches']:.2f} |"
        )
    lines += ["", "Per instance type (pooled over zones and job lengths; mean cost, runtime):", "",
              "| type | bid | TierML | TierML home only | checkpointing |", "|---|---|---|---|---|"]
    types = sorted({r["instance_type"] for r in results["summary"]["by_type_bid_policy"]})
    for it in types:
        for bid in sw.BIDS:
            cell = lambda p: _get(results["summary"]["by_type_bid_policy"], instance_type=it, bid=bid, policy=p)  # noqa: E731
            t, n, c = cell("tierml"), cell("tierml_noswitch"), cell("checkpoint")
            lines.append(
                f"| {it} | {bid} | {t['cost']['mean']:.3f} ({t['runtime']['mean']:.3f}) | "
                f"{n['cost']['mean']:.3f} ({n['runtime']['mean']:.3f}) | {c['cost']['mean']:.3f} ({c['runtime']['mean']:.3f}) |"
            )
    overran = od["overran"] + ag["overran"]
    lines += [
        "",
        "**Notes.** (1) The markets differ: the paper used Jan–Mar 2016 c4.xlarge/c4.2xlarge traces; the "
        "2015 history here has five unrelated types, and for several (c3.xlarge in 1b/1e, g2.2xlarge, "
        "d2.8xlarge in 1e) the spot price stays far below on-demand for weeks: measured MTTFs of days "
        "make checkpointing's Young/Daly overhead small (a few %), where the paper measured 18% (50% with "
        "aggressive bids). Checkpointing's weakness in the paper is that overhead; on calm markets the "
        "two policies cost about the same, and TierML also pays its reliable on-demand machine (1/64 of "
        "the fleet, ≈1.6% of the on-demand cost) and, on a proactive switch, the old fleet's current "
        "billing hour. Measured MTTFs (minutes, per zone): "
        + "; ".join(f"{t} {min(v['on_demand']):.0f}–{max(v['on_demand']):.0f}" for t, v in results["mttf_min"].items())
        + " (BidOnDemand). (2) Our classes for switching are the same type's three zones (equal machines), "
        "and both policies start in the scenario's zone; the paper's classes were two sizes of c4 in one "
        "zone. (3) Machines kept after a switch are billed but their extra work is not counted "
        "(conservative for TierML). (4) Hourly billing and TierML's 63 workers: a 2 h job takes 2 h 2 min "
        "on TierML's fleet and pays a third hour for its 63 spot machines and its reliable one, which is "
        "most of TierML's extra cost over checkpointing on 2 h jobs (compare the 8 h and 20 h rows). (5) The aggressive bid charges the bid (Sec 4.7); m3.medium's nickel "
        "rounding makes its aggressive bid 75% of on-demand. "
        f"(6) Scenarios whose job ran past the history's end (priced at the last price): {overran}.",
        "",
        deviation_note(results),
    ]
    return "\n".join(lines)
