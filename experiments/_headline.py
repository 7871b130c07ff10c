"""The headline table of ``REPRODUCTION.md``: SCAR's rework reductions, ours beside the
thesis's (Sec 5.5.3–5.5.4, Figs 5.7–5.10).

* partial over full recovery when 3/4, 1/2 and 1/4 of the parameters fail
  (``fig5_7_partial_recovery``: ``1 − partial/full`` mean rework; thesis 12–42%,
  31–62%, 59–89% across its models);
* partial recovery + priority checkpoints of 1/8 of the parameters at 8× frequency over
  traditional recovery (full checkpoints, full recovery) when 1/2 fail
  (``fig5_9_priority_checkpoint``; thesis 78–95%).

Built only from the results JSON, so it is true of whatever run wrote them.
"""

from __future__ import annotations

import math

FRACTIONS = (0.75, 0.5, 0.25)
THESIS_PARTIAL = {0.75: (12, 42), 0.5: (31, 62), 0.25: (59, 89)}
THESIS_PRIORITY = (78, 95)


def _cell(x) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    if x > 100:  # partial-recovery rework below 0: inside the model's noise
        return f"{x:.0f}%*"
    return f"{x:.0f}%"


def table(results: dict[str, dict]) -> str | None:
    """Markdown headline table from ``{experiment NAME: results}``; ``None`` if neither
    SCAR figure has results."""
    partial = (results.get("fig5_7_partial_recovery") or {}).get("models", {})
    priority = (results.get("fig5_9_priority_checkpoint") or {}).get("models", {})
    if not partial and not priority:
        return None
    names = list(dict.fromkeys([*partial, *priority]))
    thesis = " | ".join(f"{lo}–{hi}%" for lo, hi in THESIS_PARTIAL.values())
    rows = [f"| thesis (range over its models) | {thesis} | {THESIS_PRIORITY[0]}–{THESIS_PRIORITY[1]}% |"]
    for name in names:
        p, q = partial.get(name, {}), priority.get(name, {})
        red = p.get("reduction_pct", {})
        cells = " | ".join(_cell(red.get(str(f))) for f in FRACTIONS)
        label = p.get("label") or q.get("label") or name
        rows.append(f"| {label} | {cells} | {_cell(q.get('reduction_priority8_vs_traditional_pct'))} |")
    flagged = any("*" in r for r in rows)
    footnote = "\n`*`: the partial-recovery rework is negative on average (inside the model's noise).\n" if flagged else ""
    trials = {
        n: (results.get(n) or {}).get("config", {}).get("trials")
        for n in ("fig5_7_partial_recovery", "fig5_9_priority_checkpoint")
    }
    return f"""## Headline: SCAR's rework reductions (thesis Secs 5.5.3–5.5.4)

Rework reduction (1 − ours/baseline, mean rework over trials; Fig 5.7: {trials['fig5_7_partial_recovery']}
trials per point, Fig 5.9: {trials['fig5_9_priority_checkpoint']}). Columns 2–4: partial over full
recovery with the given fraction of parameters failed; column 5: partial recovery with
priority checkpoints of 1/8 of the parameters at 8× frequency over traditional recovery,
half the parameters failed. Details, confidence intervals and differences in the
sections below.

| model | 3/4 failed | 1/2 failed | 1/4 failed | priority 1/8 @ 8× vs traditional |
|---|---|---|---|---|
{chr(10).join(rows)}
{footnote}"""
