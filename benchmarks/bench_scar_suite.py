"""Benchmark: wall time of the SCAR figure suite (thesis Figs 5.7–5.10) in full and quick mode.

The target: the full suite — Figs 5.7/5.8 (partial vs full recovery) and Figs
5.9/5.10 (prioritised running checkpoints) for every model (MLR, MF, LDA, CNN by layer,
CNN by shard) at 100 trials per point — runs in under 15 minutes on 2 CPU cores; its
``--quick`` mode is part of the < 5 minute quick reproduction.

Both modes run in one process, side by side, through the experiments' own ``run``
(exactly what ``scarjax reproduce fig5_7_partial_recovery fig5_9_priority_checkpoint``
does), so compilation is included, as a user would see it. Prints JSON: per-figure and
per-model seconds, trials that never re-converged, each figure's run metadata, totals,
and ``ratio_to_target`` (total / 900 s for full, / 300 s for
quick: below 1 meets the target).

    python benchmarks/bench_scar_suite.py [--quick-only | --quick] [--out DIR]

``--quick-only``: the quick suite alone (both figures, ``Config.quick()``). ``--quick`` (under
a minute; what the device check runs): Fig 5.7 alone at ``Config.quick()`` (one MLR program,
most of it compilation: the two figures' quick suite took about 60 s of CPU time), its
``ratio_to_target`` a lower bound of the quick suite's.

``--out DIR`` keeps the full run's ``results/*.json`` and ``paper_figs/*.png`` there
(they are the committed results when DIR is the repository root).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FIGURES = ("fig5_7_partial_recovery", "fig5_9_priority_checkpoint")
TARGET_FULL_S = 15 * 60
TARGET_QUICK_S = 5 * 60


def _censored(res: dict) -> dict:
    """``{model: [not re-converged, trials]}`` over all cells of a figure's results."""
    out = {}
    for m, r in res["models"].items():
        cells = [c for v in r.values() if isinstance(v, dict) for c in (v.get("cells") or [])]
        cells += [v["cell"] for v in r.values() if isinstance(v, dict) and "cell" in v]
        out[m] = [sum(c["censored"] for c in cells), sum(c["n"] for c in cells)]
    return out


def run_suite(quick: bool, out_dir: Path, figures: tuple = FIGURES) -> dict:
    """Run ``figures`` (default both; ``Config.quick()`` or ``Config()``) into ``out_dir``; timings."""
    import importlib

    out = {"figures": {}}
    t_all = time.perf_counter()
    for name in figures:
        mod = importlib.import_module(f"experiments.{name}")
        config = mod.Config.quick() if quick else mod.Config()
        t0 = time.perf_counter()
        res = mod.run(config, out_dir)
        out["figures"][name] = {
            "seconds": time.perf_counter() - t0,
            "trials": config.trials,
            "models": {m: r.get("seconds") for m, r in res["models"].items()},
            "skipped": res.get("skipped", []),
            # Trials that never re-reached ε, over every cell of the figure (restricted means).
            "not_reconverged": _censored(res),
            "meta": res["meta"],
        }
    out["total_s"] = time.perf_counter() - t_all
    target = TARGET_QUICK_S if quick else TARGET_FULL_S
    out["target_s"] = target
    out["ratio_to_target"] = out["total_s"] / target
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick-only", dest="quick_only", action="store_true",
                    help="skip the full (100-trial) suite")
    ap.add_argument("--quick", action="store_true",
                    help="Fig 5.7 alone at its quick config (under a minute; what the device check runs)")
    ap.add_argument("--out", default=None, help="keep the full run's results and figures here")
    args = ap.parse_args(argv)
    res = {"cpu_count": os.cpu_count(), "load_avg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        res["quick"] = run_suite(True, Path(tmp) / "quick", FIGURES[:1] if args.quick else FIGURES)
        if not (args.quick_only or args.quick):
            full_out = Path(args.out) if args.out else Path(tmp) / "full"
            res["full"] = run_suite(False, full_out)
    res["load_avg_after"] = os.getloadavg()
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
