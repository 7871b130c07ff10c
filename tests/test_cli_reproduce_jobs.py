"""``scarjax reproduce --jobs N``: experiments in worker processes give what the sequential
command gives, and a failing (or dying) worker fails the command naming its experiment."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import experiments
from experiments import _launch
from experiments._parallel import schedule
from scarjax import cli

CHEAP = ["tierml_fig11", "tierml_fig12"]  # seconds each in quick mode


def _keys(x, prefix=""):
    """Every key path of a JSON value (lists by their first element), ``meta`` values aside."""
    if isinstance(x, dict):
        out = set()
        for k, v in x.items():
            out |= {f"{prefix}/{k}"} | (set() if k == "meta" else _keys(v, f"{prefix}/{k}"))
        return out
    if isinstance(x, list) and x:
        return _keys(x[0], prefix + "[]")
    return set()


def _without_timings(report: str) -> str:
    """REPRODUCTION.md without the run-settings paragraph and table (dates, wall times, load)."""
    return re.sub(r"\*\*Run settings\*\*.*?\n\n(\|.*\n)+", "", report, flags=re.S)


def test_jobs_2_gives_what_jobs_1_gives(tmp_path, capsys):
    outs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        assert cli.main(["reproduce", *CHEAP, "--quick", "--out", str(out), "--jobs", jobs]) == 0
        outs[jobs] = out
    printed = capsys.readouterr().out
    for name in CHEAP:  # the one-line completion of each experiment, in both runs
        assert len(re.findall(rf"\[scarjax\] {name}: done in \d+ s", printed)) == 2
    assert "2 experiments in 2 worker processes" in printed
    for name in CHEAP:
        r1, r2 = (json.loads((outs[j] / "results" / f"{name}.json").read_text()) for j in ("1", "2"))
        assert _keys(r1) == _keys(r2) and r1["meta"].keys() == r2["meta"].keys()
        assert r1["meta"]["mode"] == r2["meta"]["mode"] == "quick"
        assert sorted(p.name for p in (outs["1"] / "paper_figs").glob(f"{name}*.png")) == \
            sorted(p.name for p in (outs["2"] / "paper_figs").glob(f"{name}*.png")) != []
    rep1, rep2 = ((outs[j] / "paper_figs" / "REPRODUCTION.md").read_text() for j in ("1", "2"))
    assert "**Run settings**" in rep1 and "**Run settings**" in rep2
    assert _without_timings(rep1) == _without_timings(rep2)
    assert _without_timings(rep1) != rep1  # the timings were indeed cut (the comparison is not vacuous)


_FAKE = """
import dataclasses
import os

NAME = {name!r}
DESCRIPTION = "a planted failure (test)"


@dataclasses.dataclass(frozen=True)
class Config:
    @classmethod
    def quick(cls):
        return cls()


def run(config, out_dir):
    {body}
"""


def _write_fakes(tmp_path, monkeypatch, folder, bodies, header=""):
    """Write one fake experiment module per ``name: body`` of ``bodies`` (``_FAKE`` with
    ``header`` above it) into ``tmp_path / folder`` and put that folder on ``sys.path``."""
    src = tmp_path / folder
    src.mkdir()
    for name, body in bodies.items():
        (src / f"{name}.py").write_text(header + textwrap.dedent(_FAKE).format(name=name, body=body))
    monkeypatch.syspath_prepend(str(src))


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """Register fake experiment modules (importable in the spawned workers: they inherit
    ``sys.path``) whose ``run`` raises or kills its worker process."""
    fakes = {"planted_raise": "raise RuntimeError('planted failure inside the experiment')",
             "planted_exit": "os._exit(3)"}
    _write_fakes(tmp_path, monkeypatch, "fake_experiments", fakes)
    real = cli.experiments()
    mods = {name: __import__(name) for name in fakes}
    monkeypatch.setattr(cli, "experiments", lambda: {**real, **mods})
    return tmp_path / "out"


def test_failing_experiment_fails_the_command_naming_it(planted, capsys):
    rc = cli.main(["reproduce", "tierml_fig12", "planted_raise", "--quick", "--out", str(planted), "--jobs", "2"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "planted_raise" in err and "planted failure inside the experiment" in err  # name and traceback tail
    assert "Traceback" in err
    assert not (planted / "paper_figs" / "REPRODUCTION.md").exists()


def test_dying_worker_fails_the_command_naming_it(planted, capsys):
    rc = cli.main(["reproduce", "planted_exit", "tierml_fig12", "--quick", "--out", str(planted), "--jobs", "2"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "planted_exit" in err and "ended abnormally" in err


def test_schedule_longest_first_alone_last():
    cost = {"a": (1, 50), "b": (9, 5), "c": (5, 1), "t": (100, 100)}
    assert schedule(["a", "b", "c", "t"], True, cost, alone=["t"]) == ["b", "c", "a", "t"]
    assert schedule(["a", "b", "c", "t"], False, cost, alone=["t"]) == ["a", "b", "c", "t"]
    assert schedule(["a", "new", "b"], True, cost) == ["new", "b", "a"]  # unknown cost: counted longest
    names = set(cli.experiments())
    assert set(experiments.COST) == names and set(experiments.ALONE) <= names
    assert set(experiments.EARLY_SET_UP) <= set(experiments.ALONE)
    grouped = [n for group in experiments.TOGETHER for n in group]
    assert set(grouped) <= names and len(grouped) == len(set(grouped)) and not set(grouped) & set(experiments.ALONE)


def test_schedule_keeps_a_group_together():
    cost = {"a": (1, 1), "b": (9, 9), "c": (5, 5), "d": (6, 6), "t": (100, 100)}
    # (a, c) together weigh 6 + a tie with d: placed where the first of them stands, members in group order
    assert schedule(["a", "b", "c", "d", "t"], True, cost, alone=["t"], together=[("c", "a")]) == \
        ["b", "c", "a", "d", "t"]
    assert schedule(["a", "b", "c", "d"], True, cost, together=[("a", "c", "d")]) == ["a", "c", "d", "b"]
    assert schedule(["b", "d"], True, cost, together=[("a", "c", "d")]) == ["b", "d"]  # members not run: dropped
    assert schedule(["a", "b"], True, cost, together=[("a", "new")]) == ["b", "a"]
    with pytest.raises(ValueError, match="two groups"):
        schedule(["a", "b"], True, cost, together=[("a", "b"), ("b", "c")])
    with pytest.raises(ValueError, match="alone"):
        schedule(["a", "t"], True, cost, alone=["t"], together=[("a", "t")])


_PID_BODY = """(Path(out_dir) / (NAME + '.pid')).write_text(str(os.getpid()))
    # planted: with out_dir/WAIT, planted_pid_a waits for planted_pid_b to run elsewhere
    b = Path(out_dir) / 'planted_pid_b.pid'
    for _ in range(3000 if NAME == 'planted_pid_a' and (Path(out_dir) / 'WAIT').exists() else 0):
        if b.exists():
            break
        time.sleep(0.1)
    return {}"""


def test_a_group_runs_in_one_worker(tmp_path, monkeypatch):
    """The members of a group run one after another in the same worker process; the planted
    run without the group (a waiting for b to start) puts them in two workers."""
    names = ["planted_pid_a", "planted_pid_b", "planted_pid_c"]
    _write_fakes(tmp_path, monkeypatch, "fake_pid", dict.fromkeys(names, _PID_BODY),
                 "import time\nfrom pathlib import Path\n")
    cost = {"planted_pid_a": (3, 3), "planted_pid_b": (2, 2), "planted_pid_c": (1, 1)}
    for together, shared in (([("planted_pid_a", "planted_pid_b")], True), ((), False)):
        out = tmp_path / f"out_{shared}"
        out.mkdir()
        if not shared:
            (out / "WAIT").touch()
        finished = experiments.run_parallel({n: n for n in names}, True, out, 2, cost=cost, together=together)
        assert sorted(finished) == names
        pid = {n: (out / f"{n}.pid").read_text() for n in names}
        assert (pid["planted_pid_a"] == pid["planted_pid_b"]) is shared, (together, pid)


_EARLY_BODY = """out = Path(out_dir)
    if NAME == 'planted_busy':  # waits (at most `patience` s) for the early one to start beside it
        patience = float((out / 'PATIENCE').read_text())
        t0 = time.monotonic()
        while not (out / 'planted_early.start').exists() and time.monotonic() - t0 < patience:
            time.sleep(0.05)
        (out / 'busy.saw_early').write_text(str((out / 'planted_early.start').exists()))
        (out / 'busy.blas_threads').write_text(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))
        (out / 'busy.end').touch()
        return {}
    (out / (NAME + '.start')).touch()
    wait_alone()
    (out / (NAME + '.alone')).write_text(str((out / 'busy.end').exists()))
    return {}"""


@pytest.mark.parametrize("early", [True, False])
def test_early_set_up_runs_beside_others_and_times_alone(tmp_path, monkeypatch, early):
    """An ``alone`` experiment of ``early`` starts beside the last other one and passes
    ``wait_alone`` only once that has finished; without ``early`` (planted) it starts after."""
    names = ["planted_busy", "planted_early"]
    _write_fakes(tmp_path, monkeypatch, "fake_early", dict.fromkeys(names, _EARLY_BODY),
                 "import time\nfrom pathlib import Path\n" "from experiments._common import wait_alone\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "PATIENCE").write_text("120" if early else "2")
    cost = {"planted_busy": (2, 2), "planted_early": (1, 1)}
    finished = experiments.run_parallel({n: n for n in names}, True, out, 2, cost=cost, alone=["planted_early"],
                                        early=["planted_early"] if early else [])
    assert finished == names
    assert (out / "busy.saw_early").read_text() == str(early)  # started beside planted_busy (or not)
    assert (out / "planted_early.alone").read_text() == "True"  # wait_alone returned after planted_busy ended
    if "OPENBLAS_NUM_THREADS" not in os.environ:  # the workers' BLAS has one thread; the parent's is as it was
        assert (out / "busy.blas_threads").read_text() == "1"
        assert "OPENBLAS_NUM_THREADS" not in os.environ


_TWO_EARLY_BODY = """out = Path(out_dir)
    if NAME == 'planted_busy':  # waits (at most 120 s) for both early ones to start beside it
        t0 = time.monotonic()
        while not all((out / f'planted_early_{x}.start').exists() for x in 'ab') and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        (out / 'busy.saw_both').write_text(str(all((out / f'planted_early_{x}.start').exists() for x in 'ab')))
        (out / 'busy.end').touch()
        return {}
    (out / (NAME + '.start')).touch()
    if NAME == 'planted_early_b':  # a set-up longer than the busy one's wait: a must wait for it
        time.sleep(1.5)
        (out / 'b.set_up').touch()
    wait_alone()
    seen = {f.name: f.exists() for f in (out / 'busy.end', out / 'b.set_up', out / 'a.end', out / 'b.passed')}
    (out / (NAME + '.alone')).write_text(repr(seen))
    if NAME == 'planted_early_a':
        time.sleep(0.5)
        (out / 'a.end').touch()
    else:
        (out / 'b.passed').touch()
    return {}"""


def test_two_early_set_ups_run_beside_others_and_time_one_at_a_time(tmp_path, monkeypatch):
    """Two ``early`` experiments both start beside the last other one (in workers of their own:
    ``jobs`` = 1 here); the first passes ``wait_alone`` only once that one has ended and the
    second waits there (its set-up done, not yet passed), the second once the first has ended."""
    names = ["planted_busy", "planted_early_a", "planted_early_b"]
    _write_fakes(tmp_path, monkeypatch, "fake_two_early", dict.fromkeys(names, _TWO_EARLY_BODY),
                 "import time\nfrom pathlib import Path\n" "from experiments._common import wait_alone\n")
    out = tmp_path / "out"
    out.mkdir()
    cost = {"planted_busy": (3, 3), "planted_early_a": (2, 2), "planted_early_b": (1, 1)}
    early = ["planted_early_a", "planted_early_b"]
    finished = experiments.run_parallel({n: n for n in names}, True, out, 1, cost=cost, alone=early, early=early)
    assert finished == names
    assert (out / "busy.saw_both").read_text() == "True"
    seen = lambda name: eval((out / f"{name}.alone").read_text())  # noqa: E731
    assert seen("planted_early_a") == {"busy.end": True, "b.set_up": True, "a.end": False, "b.passed": False}
    assert seen("planted_early_b") == {"busy.end": True, "b.set_up": True, "a.end": True, "b.passed": False}


def test_jobs_must_be_positive(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["reproduce", "tierml_fig12", "--jobs", "0"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


_BACKEND_STARTED = ("import sys; {setup}; from jax._src import xla_bridge; "
                    "sys.exit(3 if xla_bridge.backends_are_initialized() else 0)")


@pytest.mark.parametrize("setup, started", [
    ("import experiments._pollux_measure", False),  # what pollux_throughput's jax.distributed processes import first
    ("import experiments.pollux_throughput", False),
    ("import experiments.pollux_throughput, jax.numpy as jnp; jnp.zeros(1)", True),  # planted: a computation
])
def test_importing_an_experiment_starts_no_jax_backend(setup, started):
    """pollux_throughput's worker processes (experiments._launch.call_processes) import it and
    then join ``jax.distributed``, which must come before JAX's backend starts; so importing
    scarjax and the experiment must not run a JAX computation (as optax's ``init`` would)."""
    proc = subprocess.run([sys.executable, "-c", _BACKEND_STARTED.format(setup=setup)], env=_launch.env(1),
                          cwd=_launch.ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == (3 if started else 0), proc.stderr[-2000:]
