"""TierML on a replayed trace (scarjax.cluster.tierml): every spot machine is one of the trace's
nodes, drawn from the market when it starts and never one the run already holds; a purchase the
trace cannot fill waits for the market's next offer; nothing runs past the horizon. A hand-worked
trace, a property test over random traces ("no two machines hold one trace node at the same
time"), each check shown to fail on a planted violation (nodes drawn without excluding the held
ones, the old behaviour)."""

from __future__ import annotations

import collections
import re

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster import tierml as tm
from scarjax.cluster.steptime import step_time_fixed
from scarjax.models import quadratic

H = 3600.0
TOL = 0.01  # seconds: lifetimes are float32 on the market's clock

JOB = ck.Job(quadratic.fig53_problem(), target_loss=-1.0, step_time=step_time_fixed(60.0), workers=3,
             max_steps=1000)


def _market(add, remove, *, warning_s=120.0, startup=None, start_time_s=0.0):
    trace = mk.replay((np.asarray(add, float), np.asarray(remove, float)), warning_s=warning_s)
    return mk.Market(mk.MachineType("m", 1.0, spot=0.3), trace, billing="per_second", startup=startup,
                     start_time_s=start_time_s)


def check_one_machine_per_node(run, markets, horizon_s):
    """Every spot machine on a replayed class ran on one trace node, within that node's presence,
    and no two machines held one node at the same time; nothing is billed past the horizon."""
    t0 = float(markets[0].start_time_s)
    spans = {e.machine_id: (e.start, e.stop) for e in run.ledger.entries}
    spot = [e.machine_id for e in run.ledger.entries if e.tier == "transient"]
    nodes = run.meta["trace_nodes"]
    assert sorted(b for b, _, _ in nodes) == sorted(spot), "a spot machine without its trace node (or the reverse)"
    for e in run.ledger.entries:
        assert e.stop is not None and e.stop <= t0 + horizon_s + TOL, f"{e.machine_id} billed past the horizon"
    by = collections.defaultdict(list)
    for bid, cls, node in nodes:
        a, b = spans[bid]
        p = markets[cls].process
        add, rem = float(np.asarray(p.add_s)[node]), float(np.asarray(p.remove_s)[node])
        assert node >= 0 and add <= a + TOL and b <= rem + TOL, \
            f"{bid} ran [{a}, {b}) on node {node}, present [{add}, {rem}): a machine the market did not offer"
        by[(cls, node)].append((a, b, bid))
    for (cls, node), iv in by.items():
        iv.sort()
        for (a0, b0, i0), (a1, _, i1) in zip(iv, iv[1:]):
            assert a1 >= b0 - TOL, f"two machines hold trace node {node} of class {cls} at once: {i0} and {i1}"


def check_waits(run):
    """A refused purchase waits: after a ``'wait'`` event no spot machine is requested before the
    offer it names."""
    req = [t for t, kind, d in run.events if kind == "request" and " spot " in d]
    for t, kind, d in run.events:
        if kind == "wait":
            offer = float(re.search(r"next offer at (\S+) s", d).group(1))
            early = [r for r in req if t < r < offer - TOL]
            assert not early, f"spot requested at {early} while waiting (from {t}) for the offer at {offer}"


def _no_exclusion(monkeypatch):
    """Planted: nodes drawn without excluding the held ones (TierML before it used the market's
    held nodes)."""
    monkeypatch.setattr(tm._Controller, "held", lambda self, cls, t: np.zeros(
        int(self.markets[cls].process.add_s.shape[0]), bool))


# ---------------------------------------------------------------------------------------------
# Hand-worked


HAND = ([0.0, 0.0, 3000.0], [1000.0, np.inf, np.inf])


def test_hand_worked_trace_waits_for_a_free_node():
    """Nodes 0 [0, 1000 s) and 1 [0, inf) at the start, node 2 added at 3000 s; 1 reliable + 2
    transient, 120 s notice, 60 s iterations. Both starting nodes are bought at 0; node 0's
    notice comes at 880 s and its replacement is requested then: node 1 is held, node 0 is
    leaving, so it is refused and waits (no retry at the 300 s checks) until node 2 is added
    at 3000 s, which it gets. Node 1 runs to the horizon."""
    m = _market(*HAND)
    run = tm.tierml(JOB, m, key=jax.random.key(0), horizon_s=2 * H, reliable=1, transient=2)
    spans = {e.machine_id: (e.start, e.stop, e.revoked) for e in run.ledger.entries if e.tier == "transient"}
    got = sorted((node, spans[bid]) for bid, _, node in run.meta["trace_nodes"])
    assert got == [(0, (0.0, 1000.0, True)), (1, (0.0, 2 * H, False)), (2, (3000.0, 2 * H, False))]
    waits = [(t, d) for t, kind, d in run.events if kind == "wait"]
    assert len(waits) == 1 and waits[0][0] == pytest.approx(880.0) and "at 3000 s" in waits[0][1]
    assert [round(t) for t, kind, d in run.events if kind == "request" and " spot " in d] == [0, 880, 3000]
    assert run.end_s == 2 * H
    check_one_machine_per_node(run, [m], 2 * H)
    check_waits(run)
    # per-second billing: 0.3 $/h over the machines' seconds, 1.0 $/h for the reliable one
    want = 0.3 * (1000.0 + 2 * H + (2 * H - 3000.0)) / H + 1.0 * 2
    assert sum(run.cost_by_tier.values()) == pytest.approx(want, rel=1e-9)


def test_node_check_catches_a_run_holding_one_node_twice(monkeypatch):
    _no_exclusion(monkeypatch)
    m = _market(*HAND)
    run = tm.tierml(JOB, m, key=jax.random.key(0), horizon_s=2 * H, reliable=1, transient=2)
    with pytest.raises(AssertionError, match="two machines hold trace node"):
        check_one_machine_per_node(run, [m], 2 * H)


def test_wait_check_catches_a_retry_while_waiting():
    run = tm.tierml(JOB, _market(*HAND), key=jax.random.key(0), horizon_s=2 * H, reliable=1, transient=2)
    bad = run.events + [(1500.0, "request", "1 spot m (ready at 1500 s)")]
    with pytest.raises(AssertionError, match="while waiting"):
        check_waits(type("R", (), {"events": sorted(bad, key=lambda e: e[0])})())


def test_pick_nodes_excludes_held_nodes_and_names_bad_input():
    p = mk.replay((np.array([0.0, 0.0, 0.0]), np.array([100.0, 200.0, 300.0])), warning_s=0.0)
    key = jax.random.key(1)
    node, life, _ = tm.pick_nodes(p, key, 3, 50.0, np.array([False, True, False]))
    assert sorted(node[node >= 0].tolist()) == [0, 2] and node[life == 0].tolist() == [-1]
    # nothing held: the market's own draws with the same key
    node, life, warn = tm.pick_nodes(p, key, 2, 50.0, np.zeros(3, bool))
    want_life, want_warn = mk.Market(mk.MachineType("m", 1.0, spot=0.1), p).revocations(key, 2, 50.0)
    np.testing.assert_array_equal(life, want_life)
    np.testing.assert_array_equal(warn, want_warn)
    with pytest.raises(ValueError, match="held"):
        tm.pick_nodes(p, key, 2, 50.0, np.zeros(2, bool))
    with pytest.raises(TypeError, match="process"):
        tm.pick_nodes(mk.exponential(10.0), key, 2, 50.0, np.zeros(3, bool))
    with pytest.raises(ValueError, match="t"):
        tm.pick_nodes(p, key, 2, float("nan"), np.zeros(3, bool))


# ---------------------------------------------------------------------------------------------
# Property


@st.composite
def traces(draw):
    k = draw(st.integers(1, 5))
    add = np.array(draw(st.lists(st.integers(0, 40), min_size=k, max_size=k)), float) * 180.0
    dur = np.array(draw(st.lists(st.one_of(st.integers(1, 60), st.just(-1)), min_size=k, max_size=k)), float)
    rem = np.where(dur < 0, np.inf, add + dur * 180.0)
    return add, rem


@settings(max_examples=12, deadline=None)
@given(traces(), st.integers(1, 4), st.sampled_from([0.0, 120.0]), st.sampled_from([None, 90.0]),
       st.sampled_from([0.0, 1800.0]), st.integers(0, 2**31 - 1))
def test_no_two_machines_hold_one_trace_node_at_the_same_time(trace, transient, warning_s, startup, t0, seed):
    add, rem = trace
    m = _market(add + t0, rem + t0, warning_s=warning_s, start_time_s=t0,
                startup=None if startup is None else mk.fixed_startup(startup))
    horizon = 2 * H
    run = tm.tierml(JOB, m, key=jax.random.key(seed), horizon_s=horizon, reliable=1, transient=transient,
                    check_every_s=300.0)
    assert run.end_s <= horizon and np.all(np.diff(run.time_s) >= 0)
    check_one_machine_per_node(run, [m], horizon)
    check_waits(run)
