"""Goodput-driven cluster autoscaling in the cloud (thesis Sec 3.5.4, Fig 3.14).

One ImageNet training job (the Pollux artifact's measured ImageNet traces) runs on a cloud
cluster whose size (nodes of 4 GPUs) is chosen by

* **Pollux's goodput autoscaler** (:mod:`scarjax.sched.autoscaler`, Sec 3.5.4): scale up when
  ``max GOODPUT_t(a) / SUM(a) > U * max GOODPUT_t(1)`` (U = 2/3) to the size whose predicted
  goodput is about ``L = 1/2`` of the ideal (linear) goodput; the batch size follows (Eq 3.10);
* **a throughput-based autoscaler** (Or et al., the paper's baseline): the same rule with the
  system throughput in place of the goodput (no statistical efficiency), so it scales out
  early and stays there;
* **fixed clusters** of the sizes in ``fixed_nodes`` (the job's batch size goodput-optimal for
  that size).

Cost is node-hours (x ``price_per_node_h``); JCT is the training time. The paper: the goodput
autoscaler trains ImageNet at 25% lower cost than Or et al.'s with a 6% longer JCT. Ours (full
mode, 60 s decisions as in the Pollux simulator): cost -22%, JCT +19%. The rule is the
thesis' as written; the JCT gap builds up while the goodput autoscaler climbs to the full
cluster (it waits for the PGNS to push its efficiency past U after every scale-up), and its
size depends on settings the thesis leaves open, so the full mode also runs the first
application under each of them (``SENSITIVITY``: the largest cluster, U, L, the ideal
goodput's base, the batch size the PGNS is measured at, the interval, the restart cost).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from experiments import _common, _plot
from scarjax.sched.apps import load_apps
from scarjax.sched.autoscaler import GoodputAutoscaler, simulate_autoscaling

NAME = "sched_autoscale"
DESCRIPTION = "Pollux Sec 3.5.4 / Fig 3.14: goodput vs throughput autoscaling of ImageNet, cost and JCT"

#: Fig 3.14 / Sec 3.5.4: goodput autoscaling vs Or et al.'s throughput autoscaling.
PAPER_COST_CHANGE = -0.25
PAPER_JCT_CHANGE = +0.06


@dataclasses.dataclass(frozen=True)
class Config:
    apps: tuple[str, ...] = ("imagenet", "yolov3", "deepspeech2", "bert")
    max_nodes: int = 16
    gpus_per_node: int = 4
    up: float = 2.0 / 3.0  # U
    target: float = 0.5  # L
    fixed_nodes: tuple[int, ...] = (1, 2, 4, 8, 16)
    interval_s: float = 60.0  # the Pollux simulator's scheduling interval (the thesis ran Fig 3.14 in it)
    restart_s: float = 30.0
    price_per_node_h: float = 12.24  # one node of 4 V100s: AWS p3.8xlarge on-demand, $/h
    sensitivity: bool = True  # the first application under the settings the thesis leaves open (SENSITIVITY)

    @classmethod
    def quick(cls) -> "Config":
        return cls(apps=("imagenet",), fixed_nodes=(4, 16), interval_s=300.0, sensitivity=False)


#: Variants of the first application's goodput-vs-throughput comparison: each changes one
#: setting that Sec 3.5.4 does not state (label -> GoodputAutoscaler fields, simulate_autoscaling
#: keywords); both autoscalers get the same change.
SENSITIVITY = {
    "max_nodes 8": ({"max_nodes": 8}, {}),
    "max_nodes 12": ({"max_nodes": 12}, {}),
    "max_nodes 24": ({"max_nodes": 24}, {}),
    "U 0.60": ({"up": 0.6}, {}),
    "U 0.75": ({"up": 0.75}, {}),
    "L 0.40": ({"target": 0.4}, {}),
    "L 0.60": ({"target": 0.6}, {}),
    "ideal from one node": ({"ideal_base": "node"}, {}),
    "PGNS at the largest batch": ({}, {"stats_batch": "max"}),
    "interval 300 s": ({}, {"interval_s": 300.0}),
    "no restart cost": ({}, {"restart_s": 0.0}),
}


def _runs(app: str, config: Config, apps) -> dict:
    kw = dict(gpus_per_node=config.gpus_per_node, up=config.up, target=config.target)
    scalers = {"goodput": GoodputAutoscaler(max_nodes=config.max_nodes, **kw),
               "throughput": GoodputAutoscaler(max_nodes=config.max_nodes, use_efficiency=False, **kw)}
    for n in config.fixed_nodes:
        scalers[f"fixed-{n}"] = GoodputAutoscaler(min_nodes=n, max_nodes=n, **kw)
    out = {}
    for label, sc in scalers.items():
        r = simulate_autoscaling(apps, app, sc, interval_s=config.interval_s, restart_s=config.restart_s)
        # node-hours: the report's unit (the library's result is in node-seconds)
        d = {("node_hours" if k == "node_s" else k): (v / 3600.0 if k == "node_s" else v)
             for k, v in r.to_json().items()}
        if label.startswith("fixed-"):  # a constant size: its per-interval series say nothing the totals don't
            for k in ("time_s", "nodes", "batch_size", "efficiency", "progress"):
                d.pop(k)
        d["cost"] = float(d["node_hours"] * config.price_per_node_h)
        d["mean_nodes"] = float(r.node_s / r.jct_s) if np.isfinite(r.jct_s) else float("nan")
        out[label] = d
    return out


def _progress_at(d: dict, hours, target: float) -> list:
    """Fraction of the target progress reached at each of ``hours`` (interpolated)."""
    t = np.asarray(d["time_s"], float) / 3600
    p = np.asarray(d["progress"], float) / target
    return [float(np.interp(h, np.append(t, d["jct_s"] / 3600), np.append(p, 1.0))) for h in hours]


def _lag(r: dict, max_nodes: int, target: float) -> dict | None:
    """When the goodput autoscaler first holds ``max_nodes`` nodes, its time and progress, and
    when the throughput autoscaler had reached that progress: the JCT gap is made before."""
    g, t = r["goodput"], r["throughput"]
    n = np.asarray(g["nodes"])
    if not np.any(n == max_nodes):
        return None
    i = int(np.argmax(n == max_nodes))
    p = float(g["progress"][i])
    tt = np.append(np.asarray(t["time_s"], float), t["jct_s"])
    tp = np.append(np.asarray(t["progress"], float), target)
    return {"goodput_time_h": float(g["time_s"][i]) / 3600, "progress": p / target,
            "throughput_time_h": float(np.interp(p, tp, tt)) / 3600}


def _sensitivity(app: str, config: Config, apps) -> dict:
    a = apps.names.index(app)
    out = {}
    for label, (fields, kw) in SENSITIVITY.items():
        f = {"max_nodes": config.max_nodes, "gpus_per_node": config.gpus_per_node, "up": config.up,
             "target": config.target, **fields}
        sim = {"interval_s": config.interval_s, "restart_s": config.restart_s, **kw}
        if sim.pop("stats_batch", None) == "max":
            sim["stats_batch_size"] = float(apps[a].max_batch_size)
        g = simulate_autoscaling(apps, app, GoodputAutoscaler(**f), **sim)
        t = simulate_autoscaling(apps, app, GoodputAutoscaler(use_efficiency=False, **f), **sim)
        out[label] = {"goodput_jct_s": g.jct_s, "goodput_node_hours": g.node_s / 3600.0, "throughput_jct_s": t.jct_s,
                      "throughput_node_hours": t.node_s / 3600.0, "cost_change": g.node_s / t.node_s - 1.0,
                      "jct_change": g.jct_s / t.jct_s - 1.0,
                      "goodput_nodes": list(dict.fromkeys(g.nodes.tolist())),
                      "throughput_nodes": list(dict.fromkeys(t.nodes.tolist()))}
    return out


@_common.recorded(NAME)
def run(config: Config, out_dir) -> dict:
    t0 = time.perf_counter()
    apps = load_apps()
    res = {"config": dataclasses.asdict(config), "runs": {}}
    for app in config.apps:
        res["runs"][app] = _runs(app, config, apps)
    res["comparison"] = {}
    for app, r in res["runs"].items():
        g, t = r["goodput"], r["throughput"]
        best_fixed = min((k for k in r if k.startswith("fixed-")), key=lambda k: r[k]["cost"], default=None)
        res["comparison"][app] = {
            "cost_change_vs_throughput": g["node_hours"] / t["node_hours"] - 1.0,
            "jct_change_vs_throughput": g["jct_s"] / t["jct_s"] - 1.0,
            "cheapest_fixed": best_fixed,
            **({f"cost_change_vs_{k}": g["node_hours"] / r[k]["node_hours"] - 1.0 for k in r if k.startswith("fixed-")}),
            **({f"jct_change_vs_{k}": g["jct_s"] / r[k]["jct_s"] - 1.0 for k in r if k.startswith("fixed-")}),
        }
    for app, r in res["runs"].items():
        target = float(apps[apps.names.index(app)].target_progress)
        hours = [0.5, 1.0, 2.0, 3.0, 4.0]
        res["comparison"][app]["progress_at_h"] = {"hours": hours, "goodput": _progress_at(r["goodput"], hours, target),
                                                   "throughput": _progress_at(r["throughput"], hours, target)}
        res["comparison"][app]["reach_max_nodes"] = _lag(r, config.max_nodes, target)
    if config.sensitivity:
        first = config.apps[0]
        res["sensitivity"] = {"app": first, "variants": _sensitivity(first, config, apps)}
    res["paper"] = {"cost_change": PAPER_COST_CHANGE, "jct_change": PAPER_JCT_CHANGE}
    res["seconds"] = time.perf_counter() - t0
    return res


def plot(res: dict, out_dir) -> list:
    """Fig 3.14 for the first application: (a) nodes and (b) batch size over time, (c)
    statistical efficiency, for the goodput and throughput autoscalers; (d) cost vs JCT of
    every policy and fixed size, per application."""
    runs = res["runs"]
    first = next(iter(runs))
    fig, axes = _plot.figure(1, 4, panel=(4.2, 3.4))
    for k, label in enumerate(("goodput", "throughput")):
        r = runs[first][label]
        t = np.asarray(r["time_s"]) / 3600
        axes[0, 0].step(t, r["nodes"], where="post", color=f"C{k}", label=label)
        axes[0, 1].step(t, r["batch_size"], where="post", color=f"C{k}", label=label)
        axes[0, 2].plot(t, 100 * np.asarray(r["efficiency"]), color=f"C{k}", label=label)
    axes[0, 0].set_ylabel("nodes")
    axes[0, 0].set_title(f"(a) {first}: cluster size")
    axes[0, 1].set_ylabel("total batch size")
    axes[0, 1].set_yscale("log")
    axes[0, 1].set_title("(b) batch size")
    axes[0, 2].set_ylabel("statistical efficiency (%)")
    axes[0, 2].set_title("(c) efficiency")
    for ax in axes[0, :3]:
        ax.set_xlabel("time (hours)")
        ax.legend(fontsize=7)
    ax = axes[0, 3]
    # Markers name the autoscaler (a legend, not text labels: those ran into each other where
    # two runs land close), colours the application.
    fixed_max = f"fixed-{res['config']['max_nodes']}"
    marks = {"goodput": ("o", 6), "throughput": ("s", 6), fixed_max: ("^", 6)}
    for k, (app, r) in enumerate(runs.items()):
        for label, d in r.items():
            mk, ms = marks.get(label, (".", 5))
            ax.plot(d["jct_s"] / 3600, d["node_hours"], mk, ms=ms, color=f"C{k}", mfc="none" if mk != "." else None,
                    label=app if label == "goodput" else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plot.readable_log(ax)
    ax.set_xlabel("JCT (hours)")
    ax.set_ylabel("cost (node-hours)")
    ax.set_title("(d) cost vs JCT")
    apps_legend = ax.legend(fontsize=7, loc="upper left")
    ax.add_artist(apps_legend)
    proxies = [ax.plot([], [], m, color="k", mfc="none" if m != "." else None, ms=ms)[0] for m, ms in
               (marks["goodput"], marks["throughput"], marks[fixed_max], (".", 5))]
    ax.legend(proxies, ["goodput", "throughput", fixed_max, "other fixed sizes"], fontsize=7, loc="lower right")
    return [_plot.save(fig, out_dir, NAME)]


def report(res: dict) -> str:
    c, p = res["config"], res["paper"]
    lines = ["## Goodput-driven autoscaling (Sec 3.5.4, Fig 3.14)", "",
             f"One job alone, 1-{c['max_nodes']} nodes of {c['gpus_per_node']} GPUs, U = {c['up']:.2f}, "
             f"L = {c['target']:.2f}, a decision every {c['interval_s']:g} s, {c['restart_s']:g} s per rescale; "
             f"cost in node-hours (${c['price_per_node_h']:.2f}/node-hour).", "",
             "| application | policy | JCT (h) | node-hours | cost ($) | mean nodes | rescales |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for app, r in res["runs"].items():
        for label, d in r.items():
            lines.append(f"| {app} | {label} | {d['jct_s'] / 3600:.2f} | {d['node_hours']:.1f} | {d['cost']:.0f} | "
                         f"{d['mean_nodes']:.1f} | {d['rescales']} |")
    lines.append("")
    full = f"fixed-{c['max_nodes']}"
    for app, cmp_ in res["comparison"].items():
        paper = f" (paper, ImageNet: cost {p['cost_change']:+.0%}, JCT {p['jct_change']:+.0%})" if app == "imagenet" else ""
        vs_full = ""
        if f"cost_change_vs_{full}" in cmp_:
            vs_full = (f"; vs a fixed {c['max_nodes']}-node cluster: cost {cmp_['cost_change_vs_' + full]:+.0%}, "
                       f"JCT {cmp_['jct_change_vs_' + full]:+.0%}")
        lines.append(f"* {app}: goodput vs throughput autoscaling: cost {cmp_['cost_change_vs_throughput']:+.0%}, "
                     f"JCT {cmp_['jct_change_vs_throughput']:+.0%}{paper}{vs_full}; cheapest fixed size: "
                     f"{cmp_['cheapest_fixed']}.")
    for app, cmp_ in res["comparison"].items():
        pa, lag = cmp_.get("progress_at_h"), cmp_.get("reach_max_nodes")
        if pa is None:
            continue
        lines.append(f"* {app}: progress at " + ", ".join(f"{h:g}" for h in pa["hours"]) + " h: goodput "
                     + ", ".join(f"{v:.0%}" for v in pa["goodput"]) + "; throughput "
                     + ", ".join(f"{v:.0%}" for v in pa["throughput"]) + "."
                     + ("" if lag is None else
                        f" The goodput autoscaler first holds {c['max_nodes']} nodes at {lag['goodput_time_h']:.2f} h "
                        f"({lag['progress']:.0%} of training), a progress the throughput autoscaler had at "
                        f"{lag['throughput_time_h']:.2f} h: {lag['goodput_time_h'] - lag['throughput_time_h']:.2f} h "
                        "behind, and from there on both run the same cluster."))
    if "sensitivity" in res:
        sens = res["sensitivity"]
        base = res["comparison"][sens["app"]]
        lines += ["", f"### Settings the thesis does not state ({sens['app']}, goodput vs throughput autoscaling)", "",
                  "| variant | cost change | JCT change | goodput JCT (h) | throughput JCT (h) | goodput nodes | "
                  "throughput nodes |", "|---|---:|---:|---:|---:|---|---|",
                  f"| this run's settings | {base['cost_change_vs_throughput']:+.0%} | "
                  f"{base['jct_change_vs_throughput']:+.0%} | {res['runs'][sens['app']]['goodput']['jct_s'] / 3600:.2f} | "
                  f"{res['runs'][sens['app']]['throughput']['jct_s'] / 3600:.2f} | "
                  f"{list(dict.fromkeys(res['runs'][sens['app']]['goodput']['nodes']))} | "
                  f"{list(dict.fromkeys(res['runs'][sens['app']]['throughput']['nodes']))} |"]
        for label, v in sens["variants"].items():
            lines.append(f"| {label} | {v['cost_change']:+.0%} | {v['jct_change']:+.0%} | {v['goodput_jct_s'] / 3600:.2f} | "
                         f"{v['throughput_jct_s'] / 3600:.2f} | {v['goodput_nodes']} | {v['throughput_nodes']} |")
        jc = [v["jct_change"] for v in sens["variants"].values()]
        cc = [v["cost_change"] for v in sens["variants"].values()]
        both = [k for k, v in sens["variants"].items()
                if abs(v["jct_change"] - p["jct_change"]) <= 0.03 and abs(v["cost_change"] - p["cost_change"]) <= 0.03]
        lines.append(f"\nAcross these variants the JCT change spans {min(jc):+.0%} to {max(jc):+.0%} and the cost "
                     f"change {min(cc):+.0%} to {max(cc):+.0%} (paper: {p['jct_change']:+.0%}, {p['cost_change']:+.0%}); "
                     + (f"within 3 points of both: {', '.join(both)}." if both else
                        "no single variant is within 3 points of both (a shorter JCT gap comes with a smaller saving)."))
    lines += ["",
              "The throughput autoscaler sees no statistical efficiency, so it scales out at once to the size its "
              "rule picks (ImageNet: the whole cluster) and stays there; the goodput autoscaler starts small and grows "
              "as the PGNS rises during training (Fig 3.14a-b). Why our JCT gap is larger than the paper's +6%: the "
              "decision rule is Sec 3.5.4's as written (scale up when the goodput per GPU exceeds U of one GPU's, to "
              "the size whose predicted goodput is closest to L of the ideal), and the gap is made entirely before "
              "the goodput autoscaler reaches the full cluster (the progress line above): after each scale-up to "
              "efficiency ~L it waits until the PGNS has grown enough to pass U, while the throughput autoscaler's "
              "large batch costs it little, because ImageNet's PGNS grows about eightfold within the first tenth of "
              "training. How large that lag is depends on settings the thesis does not state (the sensitivity "
              "table: the largest cluster, U and L, the ideal's base, the PGNS's batch size); within them the JCT "
              "change spans the paper's +6%, at our defaults it does not. Other differences: the job's throughput "
              "comes from the artifact's measured ImageNet step times and the per-application fitted model (the "
              "paper ran its own simulator with online-fitted models), and our 'throughput' baseline is the same rule "
              "with the efficiency term removed rather than Or et al.'s own system."]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    cfg = Config.quick() if "--quick" in sys.argv else Config()
    r = run(cfg, "/tmp/sched_autoscale_out")
    print(report(r))
    print(r["seconds"])
