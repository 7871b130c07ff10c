"""The headline table of ``REPRODUCTION.md``: SCAR's rework reductions, ours beside the
thesis's (Sec 5.5.3–5.5.4, Figs 5.7–5.10).

* partial over full recovery when 3/4, 1/2 and 1/4 of the parameters fail
  (``fig5_7_partial_recovery``: ``1 − partial/full`` mean rework; thesis 12–42%,
  31–62%, 59–89% across its models);
* partial recovery + priority checkpoints of 1/8 of the parameters at 8× frequency over
  traditional recovery (full checkpoints, full recovery) when 1/2 fail
  (``fig5_9_priority_checkpoint``; thesis 78–95%).

Means are the censoring-aware restricted means of :mod:`experiments._stats` (no trial
dropped); a reduction is printed "≤"/"≥" when trials that never re-converged leave only
a one-sided statement, and every cell's count of such trials is reported. Built only from
the results JSON, so it is true of whatever run wrote them.
"""

from __future__ import annotations

from experiments._stats import fmt_reduction

FRACTIONS = (0.75, 0.5, 0.25)
THESIS_PARTIAL = {0.75: (12, 42), 0.5: (31, 62), 0.25: (59, 89)}
THESIS_PRIORITY = (78, 95)


def _censored(p: dict, q: dict) -> tuple[int, int]:
    """(trials not re-converged, trials) over the cells the headline row uses."""
    cells = []
    fr = [str(f) for f in (p.get("_fractions") or [])]
    for rec in ("partial", "full"):
        for f, c in zip(fr, (p.get(rec) or {}).get("cells", [])):
            if float(f) in FRACTIONS:
                cells.append(c)
    if q.get("priority") and q.get("_i8") is not None:
        cells.append(q["priority"]["cells"][q["_i8"]])
    if q.get("traditional"):
        cells.append(q["traditional"]["cell"])
    return sum(c["censored"] for c in cells), sum(c["n"] for c in cells)


def table(results: dict[str, dict]) -> str | None:
    """Markdown headline table from ``{experiment NAME: results}``; ``None`` if neither
    SCAR figure has results."""
    f7 = results.get("fig5_7_partial_recovery") or {}
    f9 = results.get("fig5_9_priority_checkpoint") or {}
    partial, priority = f7.get("models", {}), f9.get("models", {})
    if not partial and not priority:
        return None
    fr7 = (f7.get("config") or {}).get("fractions") or []
    freqs = (f9.get("config") or {}).get("frequencies") or []
    i8 = list(freqs).index(8) if 8 in freqs else None
    names = list(dict.fromkeys([*partial, *priority]))
    thesis = " | ".join(f"{lo}–{hi}%" for lo, hi in THESIS_PARTIAL.values())
    rows = [f"| thesis (range over its models) | {thesis} | {THESIS_PRIORITY[0]}–{THESIS_PRIORITY[1]}% | – |"]
    for name in names:
        p, q = partial.get(name, {}), priority.get(name, {})
        red = p.get("reduction", {})
        cells = " | ".join(fmt_reduction(red.get(str(f))) for f in FRACTIONS)
        label = p.get("label") or q.get("label") or name
        n_c, n = _censored({**p, "_fractions": fr7}, {**q, "_i8": i8})
        rows.append(f"| {label} | {cells} | {fmt_reduction(q.get('reduction_priority8_vs_traditional'))} | "
                    f"{n_c} of {n} |")
    flagged = any("*" in r for r in rows)
    footnote = "\n`*`: above 100%: our mean rework is negative (inside the model's noise).\n" if flagged else ""
    bounded = any(("≤" in r or "≥" in r or "?" in r) for r in rows[1:])
    bnote = ("\n\"≤\"/\"≥\": some trials never re-converged, so the true reduction lies on that side; \"?\": "
             "both compared means are lower bounds.\n" if bounded else "")
    trials = {n: (results.get(n) or {}).get("config", {}).get("trials")
              for n in ("fig5_7_partial_recovery", "fig5_9_priority_checkpoint")}
    lost = (f9.get("config") or {}).get("fail_fraction")
    return f"""## Headline: SCAR's rework reductions (thesis Secs 5.5.3–5.5.4)

Rework reduction (1 − ours/baseline, mean rework over trials; Fig 5.7: {trials['fig5_7_partial_recovery']}
trials per point, Fig 5.9: {trials['fig5_9_priority_checkpoint']}). Columns 2–4: partial over full
recovery with the given fraction of parameters failed; column 5: partial recovery with
priority checkpoints of 1/8 of the parameters at 8× frequency over traditional recovery,
{'a fraction ' + format(lost, 'g') + ' of' if lost is not None else ''} the parameters failed; column 6: trials behind those columns that never re-reached ε
within their run (their rework counts at the iterations the run had left: restricted means).
Details, confidence intervals and differences in the sections below.

| model | 3/4 failed | 1/2 failed | 1/4 failed | priority 1/8 @ 8× vs traditional | not re-converged |
|---|---|---|---|---|---|
{chr(10).join(rows)}
{footnote}{bnote}"""
