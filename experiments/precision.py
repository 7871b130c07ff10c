"""Error floor and rework vs mantissa bits and named formats, with the B.1.1 floor (thesis
Example 5.2.1, Example 5.3.4, Appendix B.1.1 Eq B.1–B.2).

The stored parameters are rounded to ``m`` mantissa bits (float32 exponent range; m = 2 …
23) or to a named format (bfloat16, float16, float8 e4m3/e5m2, emulated exactly) at every
step, round-to-nearest and stochastic. Perturbations every step of size ``≤ Δ`` leave an
irreducible error ``F = cΔ/(1 − c)`` (Eq B.1); we measure Δ (the largest ‖δ_k‖ in the
second half of the run), the achieved floor (the largest ‖y_k − w*‖ over the last
iterations) and compare, together with B.2's rework bound and iterations-to-ε prediction.
One compiled program per problem covers every precision (traced format parameters).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import scarjax
from experiments import _common, _plot, _stats
from experiments._common import revive
from experiments._problems import problem
from experiments._rework import finite
from scarjax import bounds, rework
from scarjax.perturb import precision as P

NAME = "precision"
DESCRIPTION = "Error floor and rework vs mantissa bits (2-23) and bf16/fp16/fp8 formats, with the B.1.1 floor c/(1-c)Δ"

NAMED = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


@dataclasses.dataclass(frozen=True)
class Config:
    bits: tuple[int, ...] = tuple(range(2, 24))
    formats: tuple[str, ...] = NAMED
    qp_steps: int = 4000
    qp_eps_iters: int = 1000
    mlr_steps: int = 1200
    mlr_eps_iters: int = 300
    tail: int = 200
    seed: int = 0

    @classmethod
    def quick(cls) -> "Config":
        return cls(bits=(2, 4, 7, 10, 14, 18, 23), qp_steps=2000, qp_eps_iters=500, mlr_steps=500, mlr_eps_iters=150, tail=100)


def _rows(cfg):
    rows = []
    for m in cfg.bits:
        vmax = float(np.float32((2.0 - 2.0 ** -m) * 2.0**127))
        rows.append((f"m={m}", m, -126, vmax))
    for f in cfg.formats:
        m, emin, _ = P.FORMATS[f]
        rows.append((f, m, emin, P.format_max(f)))
    return [(lab, m, e, v, sto) for sto in (False, True) for (lab, m, e, v) in rows]


def _hook(args):
    m, emin, vmax, sto = args

    def q(x, key):
        near = P.round_float(x, m, min_exponent=emin, max_value=vmax)
        st = P.round_float(x, m, min_exponent=emin, max_value=vmax, stochastic=True, key=key)
        return jnp.where(sto, st, near)

    return P.precision(q, point="write", name="precision")


def _sweep(alg, c, cfg, steps, eps_iters):
    rows = _rows(cfg)
    args = (  # host arrays (NumPy): built without compiling an XLA program per operation
        np.asarray([r[1] for r in rows], np.int32),
        np.asarray([r[2] for r in rows], np.int32),
        np.asarray([r[3] for r in rows], np.float32),
        np.asarray([r[4] for r in rows], bool),
    )
    keys = jnp.tile(jax.random.key(cfg.seed)[None], len(rows))
    _, tr = scarjax.run_trials(alg, _hook, steps, keys, hook_args=args)
    dist = finite(tr.distance)
    norms = np.asarray(tr.delta["precision"], np.float64)
    d0 = float(np.asarray(tr.initial_distance)[0])
    # ε: what the float32 run (m = 23, nearest: the identity) reaches at eps_iters.
    i23 = next((i for i, r in enumerate(rows) if r[1] == 23 and r[0].startswith("m=") and not r[4]), None)
    ref = dist[i23] if i23 is not None else dist[0]
    eps = float(rework.calibrate_eps(ref, eps_iters, metric="distance"))
    kappa_w = float(eps_iters)
    f32_floor = float(ref[-cfg.tail :].max())
    out = []
    k0 = steps - cfg.tail
    for i, (lab, m, emin, vmax, sto) in enumerate(rows):
        # Δ = sup_k ‖δ_k‖ over the whole run (B.1's hypothesis), F = cΔ/(1 − c); at finite
        # k, Eq B.1 reads ‖y_k − w*‖ ≤ c^k d0 + F (1 − c^k): its value at the start of the
        # tail window bounds every distance in the window.
        Delta = float(norms[i].max())
        achieved = float(dist[i, -cfg.tail :].max())
        floor = float(bounds.error_floor(Delta, c))
        predicted = float(c**k0 * d0 + floor * (1 - c**k0))
        k_y = float(rework.iterations_to(dist[i], eps))
        pred_iters = float(bounds.infinite_iterations(Delta, d0, eps, c)) if Delta > 0 else float(np.log(d0 / eps) / np.log(1 / c))
        b2 = float(bounds.infinite_bound(Delta, d0, eps, c)) if Delta > 0 else 0.0
        out.append(
            {
                "label": lab,
                "mantissa_bits": m,
                "stochastic": bool(sto),
                "Delta": Delta,
                "achieved_floor": achieved,
                "floor": floor,
                "predicted_floor": predicted,
                "floor_ok": bool(achieved <= predicted) if Delta > 0 else None,
                "rework": k_y - kappa_w,
                "horizon": float(steps - kappa_w),
                "censored": bool(not np.isfinite(k_y)),
                "b2_bound": b2,
                "iters_to_eps": k_y,
                "predicted_iters": pred_iters,
                "final_error": float(dist[i, -1]),
            }
        )
    return {"c": c, "d0": d0, "eps": eps, "kappa_w": kappa_w, "steps": steps, "float32_floor": f32_floor, "rows": out}


@_common.recorded(NAME)
def run(config: Config, out_dir) -> dict:
    cfg = config
    results = {"config": dataclasses.asdict(cfg), "problems": {}}
    for p in _common.progress(("qp", "mlr"), "precision"):
        alg, c = problem(p)
        steps, eps_iters = (cfg.qp_steps, cfg.qp_eps_iters) if p == "qp" else (cfg.mlr_steps, cfg.mlr_eps_iters)
        results["problems"][p] = _sweep(alg, c, cfg, steps, eps_iters)
    results["checks"] = checks(results)
    return results


def checks(results: dict) -> dict:
    """The bound checks of the table, over every row (a row whose run never reaches ε is
    counted and never shown under a bound): ``floor`` (B.1: achieved ≤ bound, perturbed
    rows), ``iterations`` and ``rework`` (B.2, rows where it is finite: ε above the B.1
    floor), and ``below_floor`` (rows where ε lies below the floor, B.2 infinite: how many
    never reach ε)."""
    rows = [r for p in results["problems"].values() for r in p["rows"]]
    pert = [r for r in rows if r["Delta"] > 0]
    fin = [r for r in pert if np.isfinite(r["predicted_iters"])]
    below = [r for r in pert if not np.isfinite(r["predicted_iters"])]
    a = lambda rs, k: np.asarray([r[k] for r in rs], np.float64)  # noqa: E731
    return {
        "floor": {"held": sum(bool(r["floor_ok"]) for r in pert), "n": len(pert), "censored": 0, "slack": 0.0},
        "iterations": _stats.bound_check(a(fin, "iters_to_eps"), a(fin, "predicted_iters"), slack=1.0) if fin else None,
        "rework": _stats.bound_check(a(fin, "rework"), a(fin, "b2_bound"), slack=1.0) if fin else None,
        "below_floor": {"n": len(below), "censored": sum(r["censored"] for r in below)},
        "censored": sum(r["censored"] for r in rows),
        "rows": len(rows),
    }


def plot(results: dict, out_dir) -> list:
    """Achieved error floor against the B.1 floor, and rework against B.2, per mantissa
    width (named formats starred), per problem, from the results."""
    fig, axes = _plot.figure(2, 2, panel=(5.5, 3.8))
    for row, p in enumerate(("qp", "mlr")):
        d = results["problems"][p]
        for sto, col in ((False, "C0"), (True, "C1")):
            rs = [r for r in d["rows"] if r["label"].startswith("m=") and r["stochastic"] == sto]
            m = [r["mantissa_bits"] for r in rs]
            tag = "stochastic" if sto else "nearest"
            axes[row, 0].semilogy(m, [r["achieved_floor"] for r in rs], "o-", color=col, label=f"achieved ({tag})")
            axes[row, 0].semilogy(m, [max(r["floor"], 1e-12) for r in rs], "--", color=col, label=f"B.1 floor cΔ/(1−c) ({tag})")
            fr = [r for r in d["rows"] if not r["label"].startswith("m=") and r["stochastic"] == sto]
            axes[row, 0].scatter([r["mantissa_bits"] for r in fr], [r["achieved_floor"] for r in fr], marker="*", s=90, color=col, zorder=5)
            for i, r in enumerate(fr):
                if not sto:  # alternately above and below, so that neighbouring formats stay legible
                    axes[row, 0].annotate(r["label"], (r["mantissa_bits"], r["achieved_floor"]), fontsize=7,
                                          xytext=(4, 7 if i % 2 == 0 else -13), textcoords="offset points")
            rw = [r["rework"] if not r["censored"] else np.nan for r in rs]
            b2 = [r["b2_bound"] if np.isfinite(r["b2_bound"]) else np.nan for r in rs]
            axes[row, 1].plot(m, rw, "o-", color=col, label=f"measured rework ({tag})")
            axes[row, 1].plot(m, b2, "--", color=col, label=f"B.2 bound ({tag})")
        axes[row, 0].axhline(d["float32_floor"], color="gray", lw=0.8, label="float32 run (m = 23) at the end")
        axes[row, 0].axhline(d["eps"], color="k", lw=0.8, ls=":", label="ε")
        axes[row, 0].set_title(f"{p.upper()}: error floor vs mantissa bits (★ named formats)")
        axes[row, 0].set_ylabel("‖y − w*‖, last iterations")
        axes[row, 1].set_ylabel("rework (iterations)")
        axes[row, 1].set_title(f"{p.upper()}: rework to ε vs mantissa bits (gaps: never re-converged)")
        for ax in axes[row]:
            ax.set_xlabel("stored mantissa bits m (p = m + 1)")
            ax.legend(fontsize=6)
        axes[row, 1].set_yscale("symlog", linthresh=1)
    return [_plot.save(fig, out_dir, NAME)]


def _g(x):
    return _stats.fmt_value(x)


def _b2(x) -> str:
    """A B.2 bound: infinite where ε lies below the B.1 floor (no finite bound)."""
    return "none (ε < F)" if x is not None and np.isinf(x) else _g(x)


def _rw(r: dict) -> str:
    """A row's rework: the value, or that the run never reached ε (censored: rework > the
    iterations it had left)."""
    return f"not re-conv. (> {r['horizon']:.0f})" if r["censored"] else _g(r["rework"])


def _it(r: dict, steps: int) -> str:
    return f"> {steps}" if r["censored"] else _g(r["iters_to_eps"])


def _prose(results: dict) -> str:
    ck = results.get("checks") or checks(results)
    rows = [r for p in ("qp", "mlr") for r in results["problems"][p]["rows"]]
    f = ck["floor"]
    out = [f"The achieved floor sits at or below the B.1 bound in {f['held']} of {f['n']} perturbed settings"
           + ("." if f["held"] == f["n"] else " (**✗ rows above it**).")]
    ratios = [r["floor"] / r["achieved_floor"] for r in rows
              if r["Delta"] > 0 and r["achieved_floor"] > 0 and r["floor"] >= 0.5 * r["predicted_floor"]]
    if ratios:
        out.append(f"Where the run has reached its floor (F dominates the bound, {len(ratios)} settings), "
                   f"F = cΔ/(1−c) exceeds the achieved error by {min(ratios):.2g}× to {max(ratios):.2g}×: Δ is the "
                   "worst step and successive rounding errors partly cancel.")
    b = ck["below_floor"]
    if b["n"]:
        out.append(f"In {b['n']} settings ε lies below the B.1 floor, where B.2 gives no finite bound; "
                   f"{b['censored']} of them never reach ε within the run"
                   + (f" and {b['n'] - b['censored']} do (the floor is a worst case)." if b["censored"] < b["n"] else "."))
    if ck["iterations"]:
        it, rw = ck["iterations"], ck["rework"]
        cens = f" ({it['censored']} never reach ε: counted as not shown under the bound)" if it["censored"] else ""
        out.append(f"Where B.2 is finite ({it['n']} settings{cens}), the measured hitting time is at most B.2's "
                   f"iterations to ε in {it['held']} of {it['n']} and the measured rework at most B.2's rework bound "
                   f"in {rw['held']} of {rw['n']} (+1 iteration for integer hitting times).")
    out.append(f"{ck['censored']} of the {ck['rows']} runs never reach ε within their length "
               "(table: \"not re-conv.\", rework above the iterations left).")
    # Named formats against the mantissa-bit row with the same bits (same problem, rounding).
    same, diff = [], []
    for p in ("qp", "mlr"):
        rs = results["problems"][p]["rows"]
        by_bits = {(r["mantissa_bits"], r["stochastic"]): r for r in rs if r["label"].startswith("m=")}
        for r in rs:
            if r["label"].startswith("m="):
                continue
            ref = by_bits.get((r["mantissa_bits"], r["stochastic"]))
            if ref is None or ref["achieved_floor"] <= 0:
                continue
            ratio = r["achieved_floor"] / ref["achieved_floor"]
            (same if 0.8 <= ratio <= 1.25 else diff).append(f"{p.upper()} {r['label']} "
                                                            f"({'stoch.' if r['stochastic'] else 'nearest'}, {ratio:.2g}×)")
    named = ", ".join(f"{f} = {P.FORMATS[f][0]} bits" for f in results["config"]["formats"])
    if same or diff:
        out.append(f"Named formats ({named}) against the m-bit row with their mantissa: within 25% of its "
                   f"achieved floor in {len(same)} of {len(same) + len(diff)} settings"
                   + (f"; off the curve: {'; '.join(diff)} — their exponent range matters "
                      f"(float8 e4m3 saturates at {P.format_max('float8_e4m3fn'):g} and flushes small weights to "
                      "subnormals)." if diff else "."))
    return " ".join(out)


def report(results: dict) -> str:
    results = revive(results)
    lines = [
        "## Reduced precision every step (thesis Example 5.2.1, Example 5.3.4, Appendix B.1.1)",
        "",
        "**Claim.** Rounding the stored parameters to a p-bit significand perturbs them by |δ| < 2^{−(p−1)}|y| "
        "(Example 5.2.1); perturbations of size ≤ Δ at every step leave an irreducible error c/(1−c)·Δ (Eq B.1), "
        "and B.2 bounds the rework to any ε above it. The thesis states these without a figure.",
        "",
        "**Measured** (stored parameters rounded at every step, one run per setting; Δ = largest measured ‖δ_k‖; "
        "floor F = cΔ/(1−c); achieved = largest ‖y_k − w*‖ over the last "
        f"{results['config']['tail']} iterations; bound = Eq B.1 at the start of that window, "
        "c^k‖w0 − w*‖ + F(1 − c^k), which tends to F; ✓ = achieved ≤ bound, – = no perturbation (m = 23 is float32 "
        "itself); \"not re-conv. (> h)\": the run never reached ε, its rework exceeds the h iterations it had "
        "left; \"none (ε < F)\": B.2 gives no finite bound, ε lying below the floor. The QP is Fig 5.3's with w* moved off the dyadic grid, so that no format represents it exactly):",
        "",
    ]
    for p in ("qp", "mlr"):
        d = results["problems"][p]
        steps = d.get("steps") or results["config"][f"{p}_steps"]
        lines += [
            f"*{p.upper()}* (c = {d['c']:.4f}, ‖w0 − w*‖ = {d['d0']:.3g}, ε = {d['eps']:.3g}, float32 floor "
            f"{d['float32_floor']:.2e}, {steps} iterations)",
            "",
            "| format | rounding | Δ | F = cΔ/(1−c) | achieved | B.1 bound | | rework | B.2 bound | iters to ε | B.2 iters |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in d["rows"]:
            ok = r["floor_ok"]
            mark = "–" if ok is None else ("✓" if ok else "✗")
            lines.append(
                f"| {r['label']} | {'stoch.' if r['stochastic'] else 'nearest'} | {r['Delta']:.2e} | {r['floor']:.2e} | {r['achieved_floor']:.2e} | "
                f"{r['predicted_floor']:.2e} | {mark} | {_rw(r)} | {_b2(r['b2_bound'])} | {_it(r, steps)} | {_b2(r['predicted_iters'])} |"
            )
        lines.append("")
    lines.append(_prose(results))
    lines += ["", f"![{NAME}]({NAME}.png)"]
    return "\n".join(lines)
