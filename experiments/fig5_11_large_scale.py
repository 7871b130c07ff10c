"""Thesis Fig 5.11 analogue: a longer run where one of 4 parameter servers (25% of the
parameters) fails after epoch 7, with the persistent (orbax, on-disk, asynchronous)
running checkpoint (Sec 5.5.5).

SCAR saves the 1/8 highest-priority blocks every epoch and recovers only the failed
server's blocks from disk; traditional checkpointing saves every block every 8 epochs and
reloads the whole checkpoint. Both are compared with the same run without a failure (same
keys: every run is cut into per-epoch segments, so minibatches match). Rework is the
difference in iterations to reach ε (loss; ε calibrated so the no-failure run converges at
``converge_epoch``, per model by default), reported in epochs. The checkpoint overhead on the training path
(priority selection + cache update + the blocking part of handing the write to orbax) is
reported per epoch next to the epoch's compute time (thesis: < 1 s/epoch for MLR and
< 5 s for LDA, against ~140 s and ~220 s epochs).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments import _common, _plot, _scar, _stats
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults as F
from scarjax.scar import persistent as PS
from scarjax.rework import calibrate_near, iterations_to

NAME = "fig5_11_large_scale"
DESCRIPTION = "Fig 5.11 analogue: 25% of parameters fail after epoch 7; SCAR 1/8 priority per epoch vs full every 8 epochs, on disk"

TRAD_EVERY = 8  # traditional: everything every 8 epochs; SCAR: 1/8 of the blocks every epoch


@dataclass
class Config:
    models: tuple = ("mlr_digits", "lda_synthetic")
    epochs: int = 30
    fail_epoch: int = 7
    converge_epoch: int | None = None  # None: each model's own (see experiments._scar)
    servers: int = 4
    seeds: int = 5
    storage: str | None = None  # directory for the checkpoints (default: a temp dir)

    @classmethod
    def quick(cls) -> "Config":
        return cls(models=("mlr_digits",), seeds=1)


def run_model(name: str, config: Config, storage: Path) -> dict:
    spec, alg, part = _scar.setup(name, num_servers=config.servers, long=True)
    converge_epoch = config.converge_epoch or spec.long_converge_epoch
    E = spec.epoch
    steps = config.epochs * E
    T = config.fail_epoch * E
    schemes = {
        "scar": (ck.Checkpoint("priority", 1 / TRAD_EVERY, TRAD_EVERY * E, norm=spec.ckpt_norm), "partial"),
        "traditional": (ck.Checkpoint("full", 1.0, TRAD_EVERY * E), "full"),
    }
    out = {"label": spec.label, "epoch_iterations": E, "runs": [], "steps": steps}
    if name.startswith("mlr"):
        out["lr"] = _scar.MLR_LONG_LR
    for seed in range(config.seeds):
        key = seed
        base = PS.run(alg, part, schemes["scar"][0], steps, key, storage / f"{name}_{seed}_base",
                      segment=E)
        loss = base.loss[None]
        eps = calibrate_near(loss, converge_epoch * E)
        k_base = float(iterations_to(loss, eps)[0])
        run = {"seed": seed, "baseline_loss": base.loss, "eps": float(eps[0]), "converge_epoch": converge_epoch,
               # censoring time: the epochs the run has left after the baseline reached ε
               "horizon_epochs": (steps - k_base) / E}
        for scheme, (spec_ck, rec) in schemes.items():
            r = PS.run(alg, part, spec_ck, steps, key, storage / f"{name}_{seed}_{scheme}",
                       failure=F.Failure(servers=1, when=T), recovery=rec,
                       after_recovery=spec.after_recovery, segment=E)
            k = float(iterations_to(r.loss[None], eps)[0])
            ck_events = [e for e in r.events if e["kind"] == "checkpoint"]
            fail = [e for e in r.events if e["kind"] == "failure"][0]
            run[scheme] = {
                "loss": r.loss,
                "rework_epochs": (k - k_base) / E,
                "delta": fail["delta"],
                "lost_blocks": fail["blocks"],
                "checkpoints": len(ck_events),
                "ckpt_overhead_s_per_epoch": sum(e["select_s"] + e["save_call_s"] for e in ck_events) / config.epochs,
                "select_s_per_epoch": sum(e["select_s"] for e in ck_events) / config.epochs,
                "train_s_per_epoch": r.train_s / config.epochs,
            }
        out["runs"].append(run)
    horizon = np.array([r["horizon_epochs"] for r in out["runs"]])
    for scheme in schemes:
        rw = np.array([r[scheme]["rework_epochs"] for r in out["runs"]])
        cell = _stats.summary(rw, horizon)
        out[scheme] = {
            "rework": cell,
            "rework_epochs_mean": cell["mean"],
            "rework_epochs": rw,
            "ckpt_overhead_s_per_epoch": float(np.median([r[scheme]["ckpt_overhead_s_per_epoch"] for r in out["runs"]])),
            "select_s_per_epoch": float(np.median([r[scheme]["select_s_per_epoch"] for r in out["runs"]])),
            "train_s_per_epoch": float(np.median([r[scheme]["train_s_per_epoch"] for r in out["runs"]])),
        }
    return out


@_common.recorded(NAME)
def run(config: Config, out_dir) -> dict:
    names, results = _scar.start_results(config)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        storage = Path(config.storage) if config.storage else Path(tmp)
        for name in _common.progress(names, "fig5.11 models"):
            results["models"][name] = run_model(name, config, storage)
    results["seconds"] = time.perf_counter() - t0
    return results


def plot(results: dict, out_dir) -> list:
    """Fig 5.11 analogue from the results: the first seed's loss curves (no failure, SCAR,
    traditional) per model, the failure epoch dotted red, ε dashed."""
    cfg, models = results["config"], results["models"]
    fig, axes = _plot.figure(1, max(len(models), 1), panel=(4.4, 3.4),
                             title=f"Fig 5.11 analogue — one of {cfg['servers']} servers fails after epoch "
                                   f"{cfg['fail_epoch']} (persistent checkpoint)")
    for ax, r in zip(axes[0], models.values()):
        run0 = r["runs"][0]
        E = r["epoch_iterations"]
        x = np.arange(len(run0["baseline_loss"])) / E
        ax.plot(x, run0["baseline_loss"], color="k", lw=1, label="no failure")
        ax.plot(x, run0["scar"]["loss"], label=f"SCAR (rework {_stats.fmt_mean(r['scar']['rework'], 2)} ep)")
        ax.plot(x, run0["traditional"]["loss"],
                label=f"traditional (rework {_stats.fmt_mean(r['traditional']['rework'], 2)} ep)")
        ax.axvline(cfg["fail_epoch"], color="r", ls=":", lw=1, label="failure")
        ax.axhline(run0["eps"], color=_plot.COLORS["reference"], ls="--", lw=0.8, label="ε (rework target)")
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("loss")
        ax.set_title(r["label"])
        ax.legend()
        _plot.readable_log(ax, "y")
    return [_plot.save(fig, out_dir, NAME)]


def report(results: dict) -> str:
    cfg = results["config"]
    rows = []
    models = results["models"]
    for name, r in models.items():
        s, t = r["scar"], r["traditional"]
        rows.append(
            f"| {r['label']} | {_stats.fmt_cell(s['rework'], 2)} | {_stats.fmt_cell(t['rework'], 2)} | "
            f"{1e3 * s['select_s_per_epoch']:.2f} ms | "
            f"{1e3 * s['ckpt_overhead_s_per_epoch']:.1f} ms / {1e3 * s['train_s_per_epoch']:.1f} ms | "
            f"{1e3 * t['ckpt_overhead_s_per_epoch']:.1f} ms |"
        )
    skipped = results.get("skipped") or []
    note = f"\nModels not available in this build (skipped): {', '.join(skipped)}.\n" if skipped else ""
    F = cfg["fail_epoch"]
    K = TRAD_EVERY
    worst = (f"The failure at epoch {F} comes before the first traditional checkpoint (epoch {K}; the thesis's worst "
             f"case), so traditional recovery restarts from w⁽⁰⁾ and loses all {F} epochs of progress."
             if F < K else f"The failure at epoch {F} comes after a traditional checkpoint (every {K} epochs).")
    over = [1e3 * r["scar"]["ckpt_overhead_s_per_epoch"] for r in models.values()]
    comp = [1e3 * r["scar"]["train_s_per_epoch"] for r in models.values()]
    rng = lambda xs, d: f"{min(xs):.{d}f}" + (f"–{max(xs):.{d}f}" if len(xs) > 1 else "")  # noqa: E731
    cost = (f"Here SCAR's on-path overhead is {rng(over, 0)} ms per epoch against {rng(comp, 1)} ms of compute: "
            + ("our epochs are shorter than orbax's fixed per-save cost, which then dominates; the thesis's "
               "overhead ratio is for epochs of minutes, where the write hides behind compute."
               if max(over) > max(comp) else "the write hides behind compute, as in the thesis."))
    model_notes = []
    for r in models.values():
        if "lr" in r:
            model_notes.append(f"{r['label']} uses step {r['lr']:g} here, so that {cfg['epochs']} epochs stay in "
                               "the steadily converging regime")
        model_notes.append(f"{r['label']}: one epoch = {r['epoch_iterations']} iteration(s)")
    cens = sum(r[s]["rework"]["censored"] for r in models.values() for s in ("scar", "traditional"))
    return f"""## Fig 5.11 analogue — one of {cfg['servers']} servers fails after epoch {F} (`{NAME}`)

![fig]({NAME}.png)

Persistent running checkpoint on disk (orbax, asynchronous writes); SCAR saves the 1/{K}
highest-priority blocks every epoch and partially recovers; traditional saves everything
every {K} epochs and fully recovers. Runs of {cfg['epochs']} epochs; mean over {cfg['seeds']} seed(s)
(restricted mean: a run that never re-reaches ε counts at the epochs it had left, printed "≥"
then; {cens} such runs).

| model | SCAR rework (epochs) | traditional rework (epochs) | SCAR priority selection + cache update / epoch | SCAR total on-path overhead / epoch compute | traditional overhead / epoch |
|---|---|---|---|---|---|
| thesis: MLR on Criteo, LDA on ClueWeb12 | < 1 | 7 | – | < 1 s / ~140 s (MLR), < 5 s / ~220 s (LDA) | – |
{chr(10).join(rows)}
{note}
{worst} "Total on-path overhead" adds to the selection the time the training loop blocks
handing a write to orbax, which includes waiting for the previous asynchronous write (one write
in flight). {cost} {'; '.join(model_notes)}.
"""
