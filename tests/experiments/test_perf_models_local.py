"""experiments/perf_models_local: a tiny run end to end (JSON keys, leave-one-model-out entries,
PNG, report with the paper's numbers and the machine caveat). No timing thresholds."""

import json
import math

import pytest

from experiments import perf_models_local as m

TINY = m.Config(qp_dims=(32, 96), mlr_batches=(16,), mf_sizes=((30, 20, 2),), lda_docs=(10,), cnn_batches=(),
                heldout=("qp", 64), steps=2, repeats=1, ckpt_sizes_mb=(0.05, 0.1, 0.2), ckpt_tensors=(1, 2),
                ckpt_repeats=1, grid=((10.0, 100.0), (0.01, 0.1)))


def check_report(text: str) -> None:
    for needed in ("0.068", "0.031", "0.245", "5.4%", "9.0%", "machine-dependent", "Leave-one-model-out",
                   "step_time_model"):
        assert needed in text, f"the report lacks {needed!r}"


_TIMED = ("host_tflops", "measure_step_time", "measure_checkpoint_time")
_WARM_CKPT = "measure_checkpoint_time(0.01,)"  # the set-up's tiny checkpoint (discarded)


def check_untimed_set_up_first(events: list[str]) -> None:
    """Every compilation (``features`` with the placeholder throughput) before ``wait_alone``
    and every measurement that is kept after it: in ``scarjax reproduce --jobs N`` the part
    before it runs beside other experiments (EARLY_SET_UP)."""
    cut = events.index("wait_alone")
    timed = [e for e in events[:cut] if e.startswith(_TIMED) and e != _WARM_CKPT]
    assert not timed, f"timed before wait_alone: {events[:cut]}"
    assert "features:placeholder" not in events[cut:], f"compiled after wait_alone: {events[cut:]}"
    assert events[:cut].count("features:placeholder") == len(m._jobs(TINY)) + 1  # + the held-out job
    assert events[cut:].count("measure_step_time") == len(m._jobs(TINY)) + 1
    assert f"measure_checkpoint_time{TINY.ckpt_sizes_mb}" in events[cut:]


def test_perf_models_local_tiny_end_to_end(tmp_path, monkeypatch):
    events = []

    def record(name, fn):
        def wrapped(*a, **k):
            sizes = tuple(a[0]) if name == "measure_checkpoint_time" else ""
            events.append(f"{name}:placeholder" if k.get("tflops") == 1.0 else f"{name}{sizes}")
            return fn(*a, **k)
        return wrapped

    for name in ("features", *_TIMED):
        monkeypatch.setattr(m.pf, name, record(name, getattr(m.pf, name)))
    monkeypatch.setattr(m._common, "wait_alone", record("wait_alone", m._common.wait_alone))
    m.run(TINY, tmp_path)
    check_untimed_set_up_first(events)
    with pytest.raises(AssertionError, match="timed before wait_alone"):  # planted: a timing moved before it
        check_untimed_set_up_first(["measure_step_time"] + events)
    with pytest.raises(AssertionError, match="compiled after wait_alone"):  # planted: a compilation after it
        check_untimed_set_up_first(events + ["features:placeholder"])
    saved = json.loads((tmp_path / "results" / "perf_models_local.json").read_text())
    assert [r["model"] for r in saved["step_records"]] == ["qp", "qp", "mlr", "mf", "lda"]
    assert all(math.isfinite(r["step_s"]) and r["step_s"] > 0 for r in saved["step_records"])
    assert set(saved["step_fit"]) == set(m.pf.STEP_MODELS) and set(saved["ckpt_fit"]) == set(m.pf.CHECKPOINT_MODELS)
    for e in saved["step_fit"].values():
        assert [d["model"] for d in e["lomo"]] == ["qp", "mlr", "mf", "lda"]  # one entry per held-out model
        assert all(p > 0 for p in e["predicted"])
    assert len(saved["ckpt_records"]) == 6 and all(len(e["lomo"]) == 6 for e in saved["ckpt_fit"].values())
    h = saved["heldout_job"]
    assert h["predicted_s"] > 0 and h["measured_s"] > 0 and h["predicted_checkpoint_s"] > 0
    assert saved["meta"]["platform"] and saved["meta"]["mode"] == "custom"
    assert (tmp_path / "paper_figs" / "perf_models_local.png").stat().st_size > 10_000
    text = m.report(saved)
    check_report(text)
    with pytest.raises(AssertionError, match="lacks 'machine-dependent'"):
        check_report(text.replace("machine-dependent", "universal"))


def test_config_quick_is_smaller_and_bad_heldout(tmp_path):
    q, full = m.Config.quick(), m.Config()
    assert len(m._jobs(q)) < len(m._jobs(full)) and not q.cnn_batches and full.cnn_batches
    with pytest.raises(ValueError, match="heldout"):
        m.run(m.Config(qp_dims=(16, 24), mlr_batches=(8,), mf_sizes=((10, 8, 2),), lda_docs=(5,), cnn_batches=(),
                       heldout=("cnn", 1), steps=1, repeats=1, ckpt_sizes_mb=(0.01, 0.02), ckpt_tensors=(1, 2),
                       ckpt_repeats=1, grid=((10.0,), (0.1,))), tmp_path)
