"""TierML on the cluster clock (scarjax.cluster.tierml): the stage follows the transient:reliable
ratio thresholds and the roles follow the stage (property test); with every revocation warned no
parameter state is lost (property test: the real run equals the uninterrupted one at every
recorded step); a revocation without warning rolls the real state back to the BackupPS copy;
billing follows the AWS rules (free partial hour on revocation, old machines kept to the end of
their billing hour); the MTTF estimate uses no look-ahead. Every check is shown to fail on a
planted violation."""

import dataclasses
import math
import re

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import clock as ck

from scarjax.cluster.steptime import step_time_fixed, step_time_linear

from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster import tierml as tm
from scarjax.models import mlr, quadratic
from scarjax import ps as sps
from scarjax.ps import elastic
from scarjax.ps import tiers as ps_tiers
from scarjax.scar import partition as spt

from ._wallclock import within

H = 3600.0


# ---------------------------------------------------------------------------------------------
# Stage selection


def check_stage_rules(stage_fn, roles_fn, transient, reliable, th):
    """The stage is 1 for r <= stage1_max, 2 for r <= stage2_max, 3 above (r = T / R), and the
    roles follow it (Sec 3.2 / Table 1)."""
    r = transient / reliable
    want = 1 if r <= th.stage1_max else (2 if r <= th.stage2_max else 3)
    got = int(stage_fn(transient, reliable, th))
    assert got == want, f"stage {got} for ratio {transient}:{reliable} (thresholds {th}), expected {want}"
    ro = roles_fn(transient, reliable, th)
    assert ro.stage == want, f"roles report stage {ro.stage}, expected {want}"
    if want == 1:
        assert ro.param_servs == reliable and ro.active_ps == 0 and ro.backup_ps == 0, \
            f"stage 1 keeps ParamServs on the reliable machines only, got {ro}"
        assert not ro.state_on_transient, f"stage 1 holds no state on transient machines, got {ro}"
        assert ro.workers == transient + reliable, f"stage 1 runs workers everywhere, got {ro}"
    else:
        assert ro.param_servs == 0 and ro.backup_ps == reliable, f"BackupPSs on every reliable machine, got {ro}"
        assert ro.active_ps == max(1, transient // 2), f"ActivePSs on half of the transient machines, got {ro}"
        assert ro.state_on_transient
        want_rel = reliable if want == 2 else 0
        assert ro.workers_on_reliable == want_rel, \
            f"stage {want}: {want_rel} workers on reliable machines expected, got {ro}"
        assert ro.workers == transient + want_rel


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 200), st.integers(1, 16), st.floats(0.0, 4.0), st.floats(0.0, 40.0))
def test_stage_follows_the_ratio_thresholds(transient, reliable, a, b):
    th = tm.Thresholds(a, a + b)
    check_stage_rules(tm.select_stage, tm.roles, transient, reliable, th)


def test_stage_defaults_match_the_paper():
    # Fig 4/7: 1:1 stage 1; Fig 8: 60:4 = 15:1 stage 2; Fig 9: 63:1 stage 3
    assert tm.select_stage([32, 60, 63, 56], [32, 4, 1, 8]).tolist() == [1, 2, 3, 2]
    assert tm.roles(63, 1) == tm.Roles(3, 0, 31, 1, 63, 0, True)
    assert tm.roles(60, 4).workers_on_reliable == 4
    # vectorised over arrays
    assert tm.select_stage(np.arange(0, 40, 8), 2).tolist() == [1, 2, 2, 2, 3]


def test_stage_check_catches_planted_violations():
    th = tm.Thresholds()
    off_by_one = lambda t, r, th: tm.select_stage(t + (t == 15 * r), r, th)  # noqa: E731  (15:1 -> stage 3)
    with pytest.raises(AssertionError, match="stage 3 for ratio 15:1"):
        check_stage_rules(off_by_one, tm.roles, 15, 1, th)

    def workers_on_reliable(t, r, th):
        ro = tm.roles(t, r, th)
        return ro._replace(workers_on_reliable=r) if ro.stage == 3 else ro

    with pytest.raises(AssertionError, match="stage 3: 0 workers on reliable machines expected"):
        check_stage_rules(tm.select_stage, workers_on_reliable, 63, 1, th)

    def all_active(t, r, th):
        ro = tm.roles(t, r, th)
        return ro._replace(active_ps=t) if ro.stage > 1 else ro

    with pytest.raises(AssertionError, match="ActivePSs on half of the transient machines"):
        check_stage_rules(tm.select_stage, all_active, 20, 2, th)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="reliable must be >= 1"):
        tm.select_stage(3, 0)
    with pytest.raises(TypeError, match="transient must be integer"):
        tm.select_stage(2.5, 1)
    with pytest.raises(ValueError, match="stage2_max must be >= stage1_max"):
        tm.Thresholds(4.0, 2.0)
    with pytest.raises(ValueError, match="stage must be 1, 2 or 3"):
        tm.stage_slowdown(4, 1.0)


def test_stage_slowdown_interpolates_the_papers_points():
    np.testing.assert_allclose(tm.stage_slowdown([1, 1, 2, 2, 2, 3], [1, 15, 7, 15, 63, 63]),
                               [1.0, 7.0, 1.0, 1.18, 1.95, 1.0])
    # stage 2 beats stage 1 above 1:1 (the reason for the thresholds)
    r = np.linspace(1.5, 15, 20)
    assert np.all(tm.stage_slowdown(2, r) < tm.stage_slowdown(1, r))


# ---------------------------------------------------------------------------------------------
# Runs on the clock

ALG = quadratic.fig53_problem()
JOB = ck.Job(ALG, target_loss=-1.0, step_time=step_time_fixed(300.0), workers=16, max_steps=120)


def _reference_losses(key, steps):
    tr = Trainer(ALG, 0)  # the policy's default train_key
    return tr.train(steps)


def _market(mean_s, *, warned=True, bulk=False, price=0.1):
    proc = mk.exponential(mean_s, bulk=bulk, warning_s=mk.AWS_WARNING_S, unwarned=0.0 if warned else 1.0)
    return mk.Market(mk.MachineType("m", 1.0, price), proc, "hourly", mk.fixed_startup(60.0))


def check_no_state_lost(run, ref):
    """The real run never went back (no rollback) and its loss at every recorded step equals
    the uninterrupted run's: no parameter update was lost."""
    steps = np.asarray(run.steps)
    assert run.meta["rollbacks"] == 0 and run.meta["lost_iterations"] == 0, \
        f"parameter state lost: {run.meta['rollbacks']} rollbacks, {run.meta['lost_iterations']} iterations lost"
    assert np.all(np.diff(steps) >= 0), "parameter state lost: the iteration counter went back"
    k = steps > 0
    np.testing.assert_allclose(run.loss[k], ref[steps[k] - 1], rtol=1e-6, atol=0,
                               err_msg="the run's loss differs from the uninterrupted run's")


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 3), st.integers(4, 32), st.floats(0.5, 3.0), st.booleans())
def test_no_parameter_state_lost_when_every_revocation_is_warned(seed, reliable, transient, mean_h, bulk):
    key = jax.random.key(seed)
    run = tm.tierml(JOB, _market(mean_h * H, bulk=bulk), key=key, horizon_s=48 * H, reliable=reliable,
                    transient=transient, chunk=4)
    assert run.count("revocation") >= 1  # revocations did happen
    assert tm.warned_revocations(run) == run.count("revocation")  # every one warned
    check_no_state_lost(run, _reference_losses(key, JOB.max_steps))


def test_no_state_loss_check_catches_a_run_without_the_end_of_life_flush():
    key = jax.random.key(3)
    ref = _reference_losses(key, JOB.max_steps)
    run = tm.tierml(JOB, _market(0.5 * H, bulk=True), key=key, horizon_s=48 * H, reliable=1, transient=40,
                    chunk=4, push_every=8, flush_on_warning=False)
    with pytest.raises(AssertionError, match="parameter state lost"):
        check_no_state_lost(run, ref)
    # and a run whose losses were tampered with
    good = tm.tierml(JOB, _market(0.5 * H, bulk=True), key=key, horizon_s=48 * H, reliable=1, transient=40, chunk=4)
    check_no_state_lost(good, ref)
    bad = dataclasses.replace(good, loss=good.loss * (1 + 1e-3))
    with pytest.raises(AssertionError, match="differs from the uninterrupted run"):
        check_no_state_lost(bad, ref)


def _rollbacks(run):
    """``[(time, blocks lost, pushed_at, iterations lost)]`` of the run's rollback events."""
    out = []
    for t, kind, d in run.events:
        if kind == "rollback":
            m = re.search(r"(\d+) of \d+ blocks back to the BackupPS state of iteration (\d+) \((\d+) iter", d)
            out.append((t, int(m.group(1)), int(m.group(2)), int(m.group(3))))
    return out


def _after(run, t, step):
    """Index of the point recorded right after the rollback at time ``t`` (iteration ``step``)."""
    return int(np.flatnonzero((run.time_s == t) & (run.steps == step))[-1])


def check_rolled_back(run, ref, init_loss):
    """Every unwarned revocation of the ActivePSs rolls their blocks back to the BackupPS copy:
    each is reported, the iteration counter never goes back (the lost updates are not redone),
    the iterations lost since the last push sum to ``meta['lost_iterations']``; up to the first
    rollback the run is the uninterrupted one, and right after it (a bulk revocation: every
    ActivePS lost) the state is the uninterrupted run's at the last push."""
    steps = np.asarray(run.steps)
    rb = _rollbacks(run)
    assert run.meta["rollbacks"] >= 1 and len(rb) == run.meta["rollbacks"], \
        f"no rollback after an unwarned revocation ({run.meta})"
    assert np.all(np.diff(steps) >= 0), "the iteration counter went back"
    assert sum(r[3] for r in rb) == run.meta["lost_iterations"], \
        f"rollbacks lose {sum(r[3] for r in rb)} iterations, the policy reports {run.meta['lost_iterations']}"
    t, _, pushed, lost = rb[0]
    i = _after(run, t, pushed + lost)
    k = steps[:i] > 0
    np.testing.assert_allclose(run.loss[:i][k], ref[steps[:i][k] - 1], rtol=1e-6, atol=0,
                               err_msg="before the rollback the run is not the uninterrupted one")
    want = ref[pushed - 1] if pushed else init_loss
    assert run.loss[i] == pytest.approx(want, rel=1e-6), \
        f"after the rollback the state is not the BackupPS state: loss {run.loss[i]}, BackupPS {want}"


def test_rollback_to_the_backup_state_without_warning():
    key = jax.random.key(5)
    ref = _reference_losses(key, JOB.max_steps)
    init_loss = Trainer(ALG, 0).loss()
    run = tm.tierml(JOB, _market(0.5 * H, warned=False, bulk=True), key=key, horizon_s=48 * H, reliable=1,
                    transient=40, chunk=4, push_every=8)
    check_rolled_back(run, ref, init_loss)
    assert run.meta["lost_iterations"] > 0
    assert run.meta["trained_iterations"] == int(run.steps[-1])  # nothing redone
    # planted: the same run reporting no rollback, and one whose rolled-back state is wrong
    with pytest.raises(AssertionError, match="no rollback after an unwarned revocation"):
        check_rolled_back(dataclasses.replace(run, meta={**run.meta, "rollbacks": 0}), ref, init_loss)
    t, _, pushed, lost = _rollbacks(run)[0]
    loss = run.loss.copy()
    loss[_after(run, t, pushed + lost)] *= 1.01
    with pytest.raises(AssertionError, match="not the BackupPS state"):
        check_rolled_back(dataclasses.replace(run, loss=loss), ref, init_loss)


class _Spy(Trainer):
    """A real Trainer that records its snapshots ``(step, state)`` and its restores
    ``(step, state before, state after)``."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.snaps, self.restores = [], []

    def snapshot(self):
        self.snaps.append((self.step, self.state))
        return super().snapshot()

    def restore(self, state, step=None):
        self.restores.append((self.step, self.state, state))
        super().restore(state, step)


def check_partial_rollback(run, spy, lost_masks, ps_blocks):
    """After each rollback the lost blocks (``lost_masks[i]``, ``bool[ps_blocks]``: the blocks the
    plan lost) equal the BackupPS copy (the state of the last push) and every other entry keeps
    its value (Sec 3.3: only the failed ActivePSs' blocks are reloaded), bit for bit; the
    iteration counter is unchanged."""
    rb = _rollbacks(run)
    assert len(rb) == len(spy.restores) == len(lost_masks) >= 1, (len(rb), len(spy.restores), len(lost_masks))
    for (t, nb, pushed, lost), (step, before, after), mask in zip(rb, spy.restores, lost_masks):
        assert nb == int(mask.sum()) and step == pushed + lost
        backup = [s for k, s in spy.snaps if k == pushed][-1]
        part = tm.state_blocks(before, ps_blocks)
        ent = spt.expand_mask(spt.entry_masks(part, mask), before)
        for m, a, b, x in zip(jax.tree.leaves(ent), jax.tree.leaves(after), jax.tree.leaves(backup),
                              jax.tree.leaves(before)):
            m, a, b, x = (np.asarray(v) for v in (m, a, b, x))
            np.testing.assert_array_equal(a[m], b[m], err_msg="a lost block is not the BackupPS copy")
            np.testing.assert_array_equal(a[~m], x[~m], err_msg="a surviving block changed")


def _partial_loss_run(monkeypatch, reload=None):
    """Independent unwarned revocations of 8 transient machines (4 ActivePSs) of 1 + 8: each takes
    the blocks of one ActivePS (4 blocks: the problem's 4 rows); with the plan's lost blocks and
    the trainer's restores recorded."""
    plan, masks = ps_tiers.plan_revoke, []

    def recording(*a, warning, **k):
        out = plan(*a, warning=warning, **k)
        if out[2].any():
            masks.append(out[2])
        return out

    monkeypatch.setattr(tm.ps_tiers, "plan_revoke", recording)
    if reload is not None:
        monkeypatch.setattr(tm.ps_tiers, "reload_lost", reload)
    spy = _Spy(ALG, 0)
    job = dataclasses.replace(JOB, max_steps=60)
    run = tm.tierml(job, _market(3 * H, warned=False), key=jax.random.key(2), horizon_s=48 * H, reliable=1,
                    transient=8, chunk=4, push_every=8, ps_blocks=4, trainer=spy)
    return run, spy, masks


def test_partial_loss_rolls_back_only_the_lost_blocks(monkeypatch):
    run, spy, masks = _partial_loss_run(monkeypatch)
    assert any(m.any() and not m.all() for m in masks), "no partial loss in the scenario"
    assert run.meta["rollbacks"] >= 2 and run.meta["lost_iterations"] > 0
    check_partial_rollback(run, spy, masks, 4)
    assert np.all(np.diff(run.steps) >= 0)


def test_partial_rollback_check_catches_a_whole_state_rollback(monkeypatch):
    """Planted: the controller reloads every block (the whole state back to the last push)."""
    whole = ps_tiers.reload_lost
    run, spy, masks = _partial_loss_run(monkeypatch, lambda s, b, p, lo: whole(s, b, p, np.ones_like(lo)))
    with pytest.raises(AssertionError, match="a surviving block changed"):
        check_partial_rollback(run, spy, masks, 4)


def test_stage1_revocations_lose_nothing_even_without_warning():
    # 1:1 is stage 1: no parameter state on transient machines (Sec 3.2)
    key = jax.random.key(7)
    run = tm.tierml(JOB, _market(0.5 * H, warned=False, bulk=True), key=key, horizon_s=48 * H, reliable=4,
                    transient=4, chunk=4)
    assert run.meta["stages"] == [1] and run.count("revocation") >= 1
    check_no_state_lost(run, _reference_losses(key, JOB.max_steps))


def test_free_partial_hour_and_determinism():
    key = jax.random.key(11)
    m = _market(0.7 * H, bulk=True)
    a = tm.tierml(JOB, m, key=key, horizon_s=48 * H, reliable=1, transient=20, chunk=4)
    b = tm.tierml(JOB, m, key=key, horizon_s=48 * H, reliable=1, transient=20, chunk=4)
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.dollars, b.dollars)
    assert a.events == b.events
    assert a.free_seconds > 0  # revoked machines' last partial hours were free
    assert a.dollars[-1] == pytest.approx(sum(a.cost_by_tier.values()))


def test_fallback_to_on_demand_and_proactive_switch():
    """Price series: class A is above the bid (on-demand 1.0) for hours 2-4, class B is cheap
    throughout but was volatile in the past (low MTTF) until hour 3."""
    t = np.arange(0, 30 * H, 600.0)
    pa = np.where((t >= 26 * H) & (t < 27 * H), 2.0, 0.2)
    pb = np.where((t < 23 * H) & ((t // 1800) % 2 == 1), 1.5, 0.1)
    sa = mk.price_series(pa, t, end_s=30 * H, name="A")
    sb = mk.price_series(pb, t, end_s=30 * H, name="B")
    start = 24 * H

    def market(s, name):
        return mk.Market(mk.MachineType(name, 1.0, s), mk.price_driven(s, 1.0), "hourly", mk.fixed_startup(60.0),
                         start)

    job = dataclasses.replace(JOB, max_steps=400)
    run = tm.tierml(job, market(sa, "A"), alternatives=[market(sb, "B")], key=jax.random.key(0), horizon_s=5 * H,
                    reliable=1, transient=20, chunk=4, mttf_window_s=6 * H)
    kinds = [e[1] for e in run.events]
    # A is chosen first (B's recent history is volatile), revoked at hour 2 with a warning;
    # B is then granted (A above the bid)
    assert kinds.index("revocation") < kinds.index("flush")
    reqs = [e[2] for e in run.events if e[1] == "request"]
    assert "spot A" in reqs[1] and any("spot B" in r for r in reqs[2:]), reqs
    assert run.meta["rollbacks"] == 0
    # with B's market also above the bid the policy falls back to on-demand machines
    pb2 = np.where((t >= 26 * H) & (t < 27 * H), 2.0, 0.1)
    sb2 = mk.price_series(pb2, t, end_s=30 * H, name="B")
    run2 = tm.tierml(job, market(sa, "A"), alternatives=[market(sb2, "B")], key=jax.random.key(0), horizon_s=5 * H,
                     reliable=1, transient=20, chunk=4, mttf_window_s=6 * H)
    assert run2.count("fallback") >= 1 and run2.count("spot_back") >= 1
    assert run2.cost_by_tier["reliable"] > run.cost_by_tier["reliable"]
    # the on-demand stand-ins keep running workers to the end of their billing hour, then go
    joined = [e[0] for e in run2.events if e[1] == "scale" and "fallback" in e[2]][0]
    released = [e[0] for e in run2.events if e[1] == "release"]
    assert run2.count("switch") == 1 and len(released) == 1
    assert (released[0] - joined) / H == pytest.approx(round((released[0] - joined) / H)) and released[0] > joined
    assert run2.free_seconds > 0  # the revoked spot machines' last partial hour


def test_mttf_estimate_has_no_lookahead():
    t = np.array([0.0, 100.0, 200.0, 300.0, 400.0])
    p = np.array([0.1, 0.5, 0.1, 0.5, 0.1])
    # window [150, 350]: below 150-200 (50) + 200-300 (100) ... price 0.5 from 300 -> above
    assert tm.mttf_estimate(t, p, 0.3, 350.0, 200.0) == 0.0  # above the bid now
    # window [0, 250]: below for 100 + 50 = 150, one rise above the bid
    assert math.isclose(tm.mttf_estimate(t, p, 0.3, 250.0, 250.0), 150.0 / 2)
    # the future (after t) does not matter
    p2 = p.copy()
    p2[3:] = 9.0
    assert tm.mttf_estimate(t, p2, 0.3, 250.0, 250.0) == tm.mttf_estimate(t, p, 0.3, 250.0, 250.0)


def test_scripted_fig11_blip_and_pace():
    job = dataclasses.replace(JOB, step_time=step_time_linear(400.0, 1.0))
    out = tm.scripted(job, key=jax.random.key(0), iterations=45, reliable=4, add=60, add_at=11, remove_at=35,
                      param_bytes=2e9, bandwidth_bps=1e9)
    s = out.seconds
    t4 = tm.step_seconds(job.step_time, 0, 4)
    t64 = tm.step_seconds(job.step_time, 60, 4)
    np.testing.assert_allclose(s[:10], t4)
    np.testing.assert_allclose(s[10:34], t64)
    np.testing.assert_allclose(s[34], t4 + tm.flush_seconds(2e9, 4, 1e9))
    np.testing.assert_allclose(s[35:], t4)
    assert out.stage[:10].tolist() == [1] * 10 and set(out.stage[10:34].tolist()) == {2}
    assert out.run.meta["rollbacks"] == 0 and out.run.meta["flushes"] == 1
    ref = _reference_losses(jax.random.key(0), 45)
    np.testing.assert_allclose(out.loss, ref, rtol=1e-6)


def check_one_entry_per_machine(run, machines):
    """The ledger has one entry per machine (``machines``: how many were requested in all) and
    its machine-seconds are the machines' own, not a block's."""
    led = run.ledger
    assert len(led.entries) == machines, f"{len(led.entries)} ledger entries for {machines} machines"
    end = run.end_s + led.entries[0].start  # the ledger is on the market's clock (t0 = 0 here)
    want = sum(max(min(e.stop, end) - e.start, 0.0) for e in led.entries)
    got = sum(led.machine_seconds(end).values())
    assert got == pytest.approx(want), f"machine_seconds {got} vs {want}"


def test_one_ledger_entry_per_machine():
    """Machines bought together are billed as separate entries: machine_seconds counts each
    (several machines as one entry under-counted them), and the bill is the same sum."""
    key = jax.random.key(3)
    job = dataclasses.replace(JOB, max_steps=20)
    run = tm.tierml(job, _market(100 * H), key=key, horizon_s=48 * H, reliable=2, transient=6, chunk=4)
    requested = sum(int(d.split()[0]) for _, k, d in run.events if k == "request")
    assert requested == 8
    check_one_entry_per_machine(run, requested)
    sec = run.ledger.machine_seconds(run.end_s)
    assert sec["transient"] == pytest.approx(6 * (run.end_s - 60.0))  # 6 spot machines from their start (60 s)
    assert sec["reliable"] == pytest.approx(2 * (run.end_s - 60.0))
    with pytest.raises(AssertionError, match="ledger entries"):
        check_one_entry_per_machine(run, requested + 1)


# ---------------------------------------------------------------------------------------------
# One implementation: the ActivePS transitions are scarjax.ps's


@pytest.fixture(scope="module")
def ps4():
    """A real parameter server: full-batch MLR on 4 server shards (one forced host device each),
    server 0 reliable, 1-3 transient."""
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 (forced host) devices")
    alg = mlr.digits(batch_size=None, lr=0.5)
    part = spt.by_row(alg.init(jax.random.key(0), alg.data), num_servers=4, key=1)
    return sps.ParameterServer(alg, part, sps.make_mesh(4, 1), workers=4, headroom=4.0)  # all on one server


RELIABLE4 = np.array([True, False, False, False])


@pytest.mark.parametrize("warning", [False, True])
def test_revocation_plan_is_what_ps_tiers_revoke_does(ps4, warning):
    """The rule the cluster policy applies (``ps.tiers.plan_revoke``) is the one
    ``ps.tiers.revoke`` applies to the sharded store: the same new placement and lost blocks."""
    tiers = ps_tiers.make(ps4, RELIABLE4)
    st = ps4.init(jax.random.key(0))
    ts = ps_tiers.init(ps4, tiers, st)
    so, alive, lost = ps_tiers.plan_revoke(np.asarray(st.placement.server_of), np.asarray(st.placement.alive),
                                           RELIABLE4, [2, 3], warning=warning, layout=ps4.layout, key=4)
    st2, _, lost2 = ps_tiers.revoke(ps4, tiers, st, ts, [2, 3], warning=warning, step=0, key=4)
    np.testing.assert_array_equal(np.asarray(st2.placement.server_of), so)
    np.testing.assert_array_equal(np.asarray(st2.placement.alive), alive)
    np.testing.assert_array_equal(np.asarray(lost2), lost)
    assert lost.any() != warning  # servers 2-3 held blocks: lost without warning only
    with pytest.raises(ValueError, match="reliable"):
        ps_tiers.plan_revoke(so, alive, RELIABLE4, [0], warning=False)


def _rollback_point(run):
    """``(pushed_at, lost, loss)`` of the first rollback: the BackupPS iteration, the iterations
    lost, and the loss the run records right after it."""
    t, _, pushed, lost = _rollbacks(run)[0]
    return pushed, lost, float(run.loss[_after(run, t, pushed + lost)])


def check_same_rollback(ps, run):
    """The cluster policy's rollback after a bulk unwarned revocation is ``ps.tiers.revoke``'s
    state: a real parameter server trained the same iterations, pushed where the policy pushed,
    with every block on the revoked transient servers, comes back to the same loss."""
    pushed_at, lost, loss = _rollback_point(run)
    alg = ps.algorithm
    st = ps.from_logical(Trainer(alg, 0).state)  # the policy's training: train_key 0, full batch
    st = elastic.reassign(ps, st, 1 + np.arange(ps.layout.num_blocks) % 3)  # every block on 1-3
    tiers = ps_tiers.make(ps, RELIABLE4)
    key = jax.random.key(0)
    if pushed_at:
        st, _ = ps.run(st, pushed_at, key)
    ts = ps_tiers.init(ps, tiers, st)._replace(pushed_at=pushed_at)
    st, _ = ps.run(st, lost, key, start=pushed_at)
    st, ts, lost_blocks = ps_tiers.revoke(ps, tiers, st, ts, [1, 2, 3], warning=False, step=pushed_at + lost)
    assert lost_blocks.all()
    got = float(alg.loss(ps.logical(st), alg.data))
    assert got == pytest.approx(loss, rel=1e-5), f"ps.tiers rolls back to loss {got}, the policy to {loss}"


def test_bulk_rollback_is_the_ps_tiers_state(ps4):
    job = ck.Job(ps4.algorithm, -1.0, step_time_fixed(300.0), workers=16, max_steps=60)
    run = tm.tierml(job, _market(0.5 * H, warned=False, bulk=True), key=jax.random.key(5), horizon_s=48 * H,
                    reliable=1, transient=40, chunk=4, push_every=8)
    assert _rollback_point(run)[1] > 0
    check_same_rollback(ps4, run)
    # planted: a run whose rollback kept one of the lost iterations
    t, _, pushed, lost = _rollbacks(run)[0]
    i = _after(run, t, pushed + lost)
    loss = run.loss.copy()
    loss[i] = float(Trainer(ps4.algorithm, 0).train(pushed + 1)[-1])
    with pytest.raises(AssertionError, match="ps.tiers rolls back"):
        check_same_rollback(ps4, dataclasses.replace(run, loss=loss))


def test_rollback_check_catches_a_policy_that_ignores_the_ps_rule(monkeypatch):
    """Planted: the revocation rule loses no block (as if every ActivePS were warned): the
    unwarned bulk revocation no longer rolls back."""
    key = jax.random.key(5)
    ref = _reference_losses(key, JOB.max_steps)
    plan = ps_tiers.plan_revoke
    monkeypatch.setattr(tm.ps_tiers, "plan_revoke", lambda *a, warning, **k: plan(*a, warning=True, **k))
    run = tm.tierml(JOB, _market(0.5 * H, warned=False, bulk=True), key=key, horizon_s=48 * H, reliable=1,
                    transient=40, chunk=4, push_every=8)
    with pytest.raises(AssertionError, match="no rollback after an unwarned revocation"):
        check_rolled_back(run, ref, Trainer(ALG, 0).loss())


# ---------------------------------------------------------------------------------------------
# Termination (the policies' rule: the clock advances, every run ends)


def _short_job():
    return ck.Job(mlr.digits(lr=1.0, l2=1e-2), -1.0, step_time_fixed(300.0), workers=2, checkpoint_s=60.0,
                  restore_s=0.0, max_steps=12)


def test_machines_under_notice_from_their_start_do_not_stop_the_clock():
    """Lifetimes (mean 30 s) mostly within the 120 s warning: each machine is warned as it
    joins. Re-bought at once, its successors were too, at the same simulated time, without end;
    now they are replaced at the next check and the run reaches its step cap."""
    market = mk.Market(mk.MachineType("m", 1.0, spot=0.3), mk.exponential(30.0, warning_s=120.0),
                       billing="per_second")
    job = _short_job()
    run = within(60, lambda: tm.tierml(job, market, key=0, horizon_s=4 * H, transient=2))
    assert run.meta["executed_steps"] == job.max_steps and run.end_s <= 4 * H
    assert np.all(np.diff(run.time_s) >= 0)


def test_give_up_after_futile_revocations(monkeypatch):
    """Machines that live 1 ms, unwarned, holding ActivePS state: every revocation rolls the
    iteration back, forever; the stated give-up (``policies.MAX_FUTILE_RESTARTS`` revocations in
    a row without a completed iteration) ends the run. Planted: without it the run does not end."""
    market = mk.Market(mk.MachineType("m", 0.4, spot=0.05), mk.empirical([1e-3], warning_s=0.0))
    run = within(60, lambda: tm.tierml(_short_job(), market, key=0, horizon_s=4 * H, transient=2))
    assert run.count("give_up") == 1 and run.meta["rollbacks"] == po.MAX_FUTILE_RESTARTS + 1
    monkeypatch.setattr(po, "MAX_FUTILE_RESTARTS", 10**12)
    with pytest.raises(AssertionError, match="did not end within"):
        within(3, lambda: tm.tierml(_short_job(), market, key=0, horizon_s=4 * H, transient=2))
