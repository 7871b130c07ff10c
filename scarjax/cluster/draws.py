"""Many market draws as one call: Monte-Carlo over start offsets and revocation draws of
checkpoint-restart, SCAR (thesis Ch. 5, Sec 5.4) and TierML (Harlap et al. 2016) on one
market, with the same runs as the per-draw policies.

:func:`run` takes one key (and, optionally, one start offset on the market's clock) per
draw and returns the :class:`~scarjax.cluster.clock.ClusterRun` each per-draw call
(:func:`per_draw`: ``policy(job, replace(market, start_time_s=start), key=key, ...)``) returns;
:func:`summary` reduces runs to the per-draw arrays compared by :func:`mismatches`.

**What is shared, what is vectorised, what is not.**

1. *The market's draws* (every policy of :mod:`~scarjax.cluster.policies` buys through
   :meth:`~scarjax.cluster.market.Market.acquire`: purchase ``c`` of a draw uses
   ``fold_in(key, c)``). Their random parts do not depend on the path: the start-up delays, a
   replayed trace's node priorities (the uniforms :meth:`~scarjax.cluster.market.Replay.pick`
   ranks the free nodes by) and a parametric or empirical process's lifetimes. One jitted,
   ``vmap``-ped JAX program draws them for all draws x the first :data:`PURCHASES` purchases;
   the host then finishes each purchase from the tables in NumPy (``float32``, the same
   operations as :meth:`Replay.pick`: which nodes are present and not held at the request
   time, their order, ``remove - t``), bit for bit the per-call result. A price-driven
   process (lifetimes depend on the request time through the series) and purchases past the
   tables fall back to :meth:`Market.acquire` itself. TierML's controller draws through its own
   key chain (``key, k = split(key)`` per start-up and per purchase): the first
   :data:`TIER_CALLS` keys of every draw, their start-up delays and a replayed trace's node
   priorities come from one program too, the host finishing each purchase as
   :meth:`Replay.pick` does (when the trace's warning coin is certain); other lifetimes, other
   classes and later calls go to the market with the chain's key.
2. *The clocks* of checkpoint-restart and SCAR (revocations, start-ups, checkpoints, rework,
   recoveries, the ledger) are planned for all draws at once, in lock-step over arrays
   (:func:`plans`: for each draw the :class:`~scarjax.cluster.policies.Plan` that
   :func:`~scarjax.cluster.policies.plan_checkpoint_restart` /
   :func:`~scarjax.cluster.policies.plan_scar` returns). The fleets are ``[draws, machines]``
   arrays (revocation and ready times, trace nodes, billing starts) and every draw makes one
   pass of its planner's loop at a time, each pass one branch per draw picked by masks:
   checkpoint-restart's revocation (revoke the due machines, roll back, buy replacements,
   restore), checkpoint, or training chunk (to the next death, checkpoint, the step cap or the
   horizon; too short: wait for the death, or end); SCAR's running-checkpoint write, partial
   recovery (revoke, buy the replacements), wait while no machine runs, or training chunk on
   the live machines (to the next death or arrival). A purchase is ``_Fleet.buy``'s over the
   draws that buy (the cheapest option at the request time; a replayed trace's pick of the
   nodes the fleet does not hold in float32 NumPy from the tables, row by row as
   :meth:`Replay.pick`), the machine ids, events (their texts) and ledger entries are kept per
   draw in the per-draw order, and the ledgers are built in one pass
   (:func:`~scarjax.cluster.ledger.stopped_ledgers`: :func:`~scarjax.cluster.ledger.hourly_bill`
   over every entry of every draw at once). The float64 arithmetic is the planners' own,
   elementwise (``t + n dt``, ``max(t0 + d, billed)``, ``floor((min(td, horizon) - t) / dt +
   tol)``), so the plans are equal field for field (operations, events, ledger entries and
   charges, end, meta, counts; tested against the per-draw planners, which stay the oracle, over
   random traces and parametric markets). The lock-step applies to ``unavailable="on_demand"``
   on a market whose lifetimes do not depend on the request time and whose ``K`` does not
   depend on the start (no price-driven process or spot price series; a replayed trace, an
   exponential, empirical or uncapped Weibull process, or none); elsewhere, and for a draw
   that needs a purchase past the tables or reaches the give-up, the per-draw planner plans the
   draw on its :class:`_Drawn` market: ``unavailable="wait"`` (empty slots, retries at the next
   offer) would need one more branch per pass and is rare in Monte-Carlo studies. Each run is
   then recorded from its plan in one array pass (the points ``t + k dt`` of all its train
   ops, the global step moved by ``'save'``/``'rollback'``, cut at the first loss ``<=`` the
   target: :func:`~scarjax.cluster.policies.execute_plan`'s rule on a
   :class:`~scarjax.cluster.policies.LossReplay`, the same runs, tested against it).
   TierML's controller runs once per *start-up sequence* for the draws it takes through no
   event of their own, and once per draw for the others. On a replayed trace (tabled, no
   alternatives, no spot price series) the draws whose start-up delays are equal (all of them
   under a fixed start-up) share one *template* run (:func:`_tierml_templates`): the controller
   on the market started at 0 with its one purchase of trace nodes granted for ever. A draw is
   served by it when its own purchase (the same call of its key chain, at its own market time,
   picked for all the draws in one array pass: :func:`_tier_picks`) grants every machine and
   its first warning comes later than the template's end plus the longest iteration: then no
   warning, revocation, refusal or provider end reaches the draw's loop, which takes the
   template's branches, chunks and times; its run is the template's points and events with its
   own ledger (the template's entries at ``start +`` each elapsed time, built for all such
   draws in one pass, :func:`~scarjax.cluster.ledger.stopped_ledgers`) and trace nodes. A draw
   of the group that a warning reaches earlier (its purchase granted) is *resumed* from the
   template's state (:func:`_resume_at`): before each pass of its loop the template saves the
   controller's state (``tierml._Controller.save``: the groups and counters copied; the
   loop's time, fraction of the iteration done and next check; its points, events and ledger
   entries so far), and the draw's own controller adopts the state of the last pass that
   starts more than the longest iteration and a second before the draw's first warning
   (:func:`_resume_pass`: every earlier pass ends before it, so the warning neither
   interrupted nor cut a chunk of them), with its own trace nodes, lifetimes and warnings in
   place of the template's granted-for-ever ones, its own chain at the same call and the
   ledger entries at its ``t0 +`` each elapsed time; from there its own loop runs (the prefix
   is not simulated again). A draw warned within the first pass is resumed at the first pass
   (:func:`_first_pass`) unless one of its machines ends by then: no pass precedes it, and up
   to it the run only buys and joins the machines, reading no warning. The other draws (a
   refused purchase; a machine ending by the first pass; a parametric or price-driven market;
   random start-ups) run
   :func:`~scarjax.cluster.tierml.tierml` itself, one host loop per draw: its control flow is
   per draw and data dependent (which trace nodes are held, the
   cheapest-option choice, the give-up counter, the stage elections and class switches) and its
   number of events varies per draw. What is per
   run, not per draw, is computed once: the market's tables, a replayed trace's float64 copy
   (its availability and MTTF), ``K``, the step times and SCAR's write period. *The bills* of
   checkpoint-restart's and SCAR's draws are arrays: each run is recorded unbilled and
   :func:`~scarjax.cluster.clock.settle` bills every draw's machines at every recorded point
   (``dollars``), by tier and in free seconds in one vectorised NumPy call
   (:func:`~scarjax.cluster.ledger.bill_runs`: the one rule over ``[draws, points]`` arrays,
   bit for bit each ledger's own methods); TierML's draws too (``tierml(deferred=True)`` and
   the templates' runs, recorded unbilled), their machines' charges included (a deferred
   :class:`~scarjax.cluster.ledger.Ledger` leaves them pending;
   :func:`~scarjax.cluster.ledger.charge_pending` computes all of them in the same call).
   Within each draw's own loop the controller derives what it asks at every pass (live counts,
   next warning, next boundary event) once per change of its machine groups, so the passes
   that only train cost little.

   *TierML's controller over arrays (lock-step): not done*, and only partly possible. Its state per draw
   is a list of machine groups that grows with every purchase (a varying number per draw), its
   next event is the minimum over those groups, and at each event it branches on data: the
   stage election (thresholds on the live counts), an ActivePS loss with or without warning
   (flush, or roll the lost blocks back: the draw then leaves the shared trajectory and trains
   its own state, a Trainer per draw), a refused purchase on a replayed trace (wait for the
   next offer), the class choice and proactive switches (MTTF estimates per class), the
   on-demand fallback and the give-up counter. A lock-step form (all draws advanced to their
   own next event, masks for the branches, groups padded to the most any draw holds) could
   carry the counts, the stage, the time per iteration and the next event; the rollbacks
   (own training per draw), the ActivePS block placement (:mod:`scarjax.ps`'s deal, per input)
   and the ledger's per-machine entries would stay per draw. The draws an event reaches (a
   warning, a revocation, a refused purchase) are most of TierML's time here, now from their
   first warning on (the prefix resumed from the template's state, above).
3. *The training.* Checkpoint-restart restores only states of the one reliable trajectory
   (its checkpoints are taken from it) and a redone step draws the same minibatch
   (:class:`~scarjax.cluster.trainer.Trainer`'s keys are the global step's), so every draw's
   loss after global step ``k`` is the reliable run's: one real run serves all draws. TierML's
   draws share it too (also the loss of the state at each step, its recorded points) until a
   draw loses ActivePS blocks without warning: those blocks roll back to the BackupPS and the
   others do not, so from there that draw trains its own state with its own Trainer, as the
   per-draw policy does (the two states it mixes re-run from the start, bit for bit).
   SCAR's partial recovery makes each draw's trajectory its own from its first lost block; up
   to it the draw trains the reliable trajectory (the writes do not change the state), so the
   one real run serves a draw that loses no block and every draw up to its first loss: the one
   reliable :class:`~scarjax.cluster.trainer.Trainer` run, cut at the steps asked for, gives the
   states there and the running checkpoint (the per-draw policy's write,
   :func:`scarjax.scar.checkpoint.step`, on the reliable states at the write steps before;
   a draw whose writes before its first loss are not the others' starts at step 0). From there
   the draws train in one jitted program, ``vmap`` over draws of a ``lax.scan`` over
   :data:`SCAR_CHUNK` global steps ``g .. g + C - 1`` (``g`` a multiple of ``C``, one step for
   the whole batch), each step ``scarjax.core.run_one`` with the Trainer's key
   ``fold_in(train_key, step)``, the priority checkpoint write where the draw's plan writes one
   and the partial recovery (:func:`scarjax.scar.faults.recover`) of the servers the plan
   revokes at that step (masks ``bool[draws, C]`` and ``bool[draws, C, servers]``), the loss on
   the whole data after each. A draw joins at the chunk start before its first lost block (the
   reliable state and checkpoint there) and is dropped after the chunk that reaches its target
   (a draw whose reliable prefix reaches it never joins) or its plan's end; the batch is padded
   to one of a few sizes (:func:`_padded`: at most 8 per octave, each compiled once), its rows
   selected on the host between calls. On the benchmark's p3 runs (1,000 draws x 200 steps,
   measured) the program trains 68,096 draw-steps (padding and the chunk ends included; 56,196
   from the first lost blocks to the targets) where training every draw that loses a block
   from step 0 for all ``job.max_steps`` steps took 149,000.

**Identical.** For checkpoint-restart and TierML every field of every run equals the per-draw
policy's bit for bit (``==`` on float64: time and dollars to the target, the step, the counts,
the whole curves and events). For SCAR the schedule (event times, the ledger) is bit for bit,
so are the losses of every draw up to its first lost block (the one reliable run; all of a
draw that loses none), and from there a draw's losses equal the per-draw Trainer's to float32
rounding only (the steps from its chunk start to its first lost block are trained in the batch
too): XLA compiles the batched (``vmap``) matrix products differently from the unbatched ones
(measured: a few ``1e-7`` after 120 steps of MLR), so :func:`summary`'s fields - whether and at which step
the target is reached, its time and dollars, ``recoveries`` - are equal unless a draw's loss
crosses the target within that rounding (:func:`mismatches` reports any such draw).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import core
from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster import tierml as tml
from scarjax.cluster.ledger import Ledger, stopped_ledgers
from scarjax.cluster.trainer import Trainer
from scarjax.scar import checkpoint as sck
from scarjax.scar import faults as sfl
from scarjax.scar import partition as spt

__all__ = ["POLICIES", "PURCHASES", "COUNTS", "run", "plans", "per_draw", "summary", "mismatches"]

#: The policies :func:`run` vectorises, by name.
POLICIES = {"checkpoint_restart": po.checkpoint_restart, "scar": po.scar, "tierml": tml.tierml}
#: Purchases per draw drawn ahead in one program (later ones: :meth:`Market.acquire` itself).
PURCHASES = 32
#: The ``meta`` counts :func:`summary` reports per policy.
COUNTS = {"checkpoint_restart": ("rework_steps",), "scar": ("recoveries",),
          "tierml": ("rollbacks", "lost_iterations", "flushes")}


# --------------------------------------------------------------------------------------
# Inputs


def _policy_name(policy: Any) -> str:
    for name, fn in POLICIES.items():
        if policy is fn or policy == name:
            return name
    raise ValueError(f"policy must be one of {sorted(POLICIES)} (or the function), got {policy!r}")


def _draw_inputs(market, keys, start_s):
    if not isinstance(market, mk.Market):
        raise TypeError(f"market must be a scarjax.cluster.market.Market, got {type(market).__name__}")
    keys = jnp.asarray(keys) if not isinstance(keys, jax.Array) else keys
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        pass
    elif keys.dtype == jnp.uint32 and keys.ndim == 2:
        keys = jax.random.wrap_key_data(keys)
    else:
        raise TypeError(f"keys must be a batch of PRNG keys (jax.random.split(key, n)), got dtype {keys.dtype}")
    if keys.ndim != 1 or keys.shape[0] < 1:
        raise ValueError(f"keys must be one key per draw (a 1-D batch of >= 1), got shape {keys.shape}")
    n = int(keys.shape[0])
    if start_s is None:
        starts = np.full(n, float(market.start_time_s))
    else:
        starts = np.asarray(va.check_real("start_s", start_s, lo=0.0), np.float64).reshape(-1)
        if starts.shape != (n,):
            raise ValueError(f"start_s must have one start per key ({n}), got shape {np.shape(start_s)}")
    return keys, starts


def _market_at(market, start):
    return market if float(start) == float(market.start_time_s) else dataclasses.replace(market, start_time_s=float(start))


def per_draw(policy: Any, job: ck.Job, market: mk.Market, keys: Any, *, horizon_s: float, start_s: Any = None,
             **options: Any) -> list[ck.ClusterRun]:
    """The reference: one call of the per-draw ``policy`` per key (``start_s[i]``: draw ``i``'s
    start on the market's clock, default the market's), a Python loop."""
    name = _policy_name(policy)
    keys, starts = _draw_inputs(market, keys, start_s)
    fn = POLICIES[name]
    return [fn(job, _market_at(market, s), key=k, horizon_s=horizon_s, **options) for k, s in zip(keys, starts)]


# --------------------------------------------------------------------------------------
# 1. The market's draws, drawn ahead


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _tables(process, startup, keys, purchases, machines, nodes):
    """``(startup float32[n, C, M], u float32[n, C, K] | lifetime float32[n, C, M])`` for
    purchases ``c < C`` of every draw: the draws of ``Market.acquire`` that do not depend on
    the request (``nodes``: a replayed trace's node count, 0 otherwise)."""

    def one(key, c):
        k_up, k_life = jax.random.split(jax.random.fold_in(key, c))
        up = jnp.zeros((machines,), jnp.float32) if startup is None else startup.sample(k_up, machines)
        if nodes:
            k_pick, _ = jax.random.split(k_life)
            return up, jax.random.uniform(k_pick, (nodes,))
        if process is None:
            return up, jnp.full((machines,), jnp.inf, jnp.float32)
        return up, mk.sample_lifetimes(process, k_life, machines, 0.0).lifetime

    return jax.vmap(lambda k: jax.vmap(lambda c: one(k, c))(jnp.arange(purchases, dtype=jnp.int32)))(keys)


class _Tables(NamedTuple):
    """The first :data:`PURCHASES` purchases of every draw, drawn ahead by :func:`_tables`
    (row ``i``: draw ``i``), shared by the draws' :class:`_Drawn` markets.

    Attributes:
      machines: machines per purchase the tables hold (the job's workers).
      purchases: purchases per draw held (later ones: :meth:`Market.acquire` itself).
      nodes: a replayed trace's node count (0: not a replayed trace).
      up: ``float32[draws, purchases, machines]`` start-up delays.
      life: ``float32[draws, purchases, machines]`` lifetimes (not a replayed trace; else ``None``).
      u: ``float32[draws, purchases, nodes]`` node priorities (a replayed trace; else ``None``).
      add, rem: the trace's node add / remove times, float32 (as :meth:`Replay.pick`); ``None`` else.
      add64, rem64: the same in float64 (the planners' :meth:`available`); ``None`` else.
      mttf: the replayed trace's renewal MTTF (independent of the start); ``nan`` else.
    """

    machines: int
    purchases: int
    nodes: int
    up: np.ndarray
    life: Any = None
    u: Any = None
    add: Any = None
    rem: Any = None
    add64: Any = None
    rem64: Any = None
    mttf: float = math.nan


@dataclasses.dataclass(frozen=True)
class _Drawn(mk.Market):
    """A market whose first purchases are served from the tables of one draw (row ``row`` of
    ``tables``); everything else is the market's. Only :func:`run` builds it, with the draw's
    own key. A replayed trace's host questions the planners ask (:meth:`available`,
    :meth:`mttf_s`) are answered from float64 copies of the trace made once for all draws (the
    same operations as :class:`~scarjax.cluster.market.Replay`'s).

    Attributes (besides the :class:`~scarjax.cluster.market.Market`'s):
      tables: the :class:`_Tables` of all draws (``None``: the market's own draws throughout).
      row: this draw's row of ``tables``.
    """

    tables: Any = dataclasses.field(default=None, compare=False, repr=False)
    row: int = dataclasses.field(default=-1, compare=False)

    def available(self, t):
        tab = self.tables
        if tab is None or not tab.nodes:
            return super().available(t)
        t = float(t)
        return float(int(np.sum((tab.add64 <= t) & (t < tab.rem64))))

    def mttf_s(self):
        tab = self.tables
        if tab is None or not tab.nodes:
            return super().mttf_s()
        return tab.mttf  # a replayed trace's renewal MTTF: independent of the start

    def acquire(self, key, counter, n, t, *, held=None):
        tab = self.tables
        if tab is None or n != tab.machines or counter >= tab.purchases:
            return super().acquire(key, counter, n, t, held=held)
        up = tab.up[self.row, counter].astype(np.float64)
        if not tab.nodes:
            return up, tab.life[self.row, counter].astype(np.float64), np.full(n, -1, np.int64)
        add, rem, K = tab.add, tab.rem, tab.nodes
        t0 = np.float32(t)
        free = (add <= t0) & (t0 < rem)
        if held is not None:
            free &= ~np.asarray(held, bool)
        prio = np.where(free, tab.u[self.row, counter], np.float32(-1.0))
        order = np.argsort(-prio, kind="stable")
        idx = np.arange(n)
        pick = order[idx % K]
        ok = free[pick] & (idx < K)
        life = np.where(ok, rem[pick] - t0, np.float32(0.0)).astype(np.float32)
        node = np.where(ok, pick, -1).astype(np.int64)
        return up, life.astype(np.float64), node


def _market_tables(market, keys, machines):
    """The :class:`_Tables` of every draw's first purchases (``None``: a price-driven process,
    whose lifetimes depend on the request time, drawn per call)."""
    p = market.process
    if isinstance(p, mk.PriceDriven):
        return None
    replay = isinstance(p, mk.Replay)
    nodes = int(p.add_s.shape[0]) if replay else 0
    up, second = _tables(p, market.startup, keys, PURCHASES, int(machines), nodes)
    if replay:
        return _Tables(int(machines), PURCHASES, nodes, np.asarray(up), u=np.asarray(second),
                       add=np.asarray(p.add_s, np.float32), rem=np.asarray(p.remove_s, np.float32),
                       add64=np.asarray(p.add_s, np.float64), rem64=np.asarray(p.remove_s, np.float64),
                       mttf=p.mttf_s())
    return _Tables(int(machines), PURCHASES, nodes, np.asarray(up), life=np.asarray(second))


def _drawn(market, tab, row, start):
    """Draw ``row``'s :class:`_Drawn` market (started at ``start``; ``tab``: the tables or ``None``)."""
    return _Drawn(market.machine, market.process, market.billing, market.startup, float(start), tables=tab,
                  row=row if tab is not None else -1)


# --------------------------------------------------------------------------------------
# 2. The clocks of checkpoint-restart and SCAR over arrays (lock-step)


class _Clock(NamedTuple):
    """What :func:`~scarjax.cluster.policies.execute_plan` reads of a :class:`Plan`'s fleet: the
    draw's ledger, its start on the market's clock and its events."""

    ledger: Ledger
    t0: float
    events: list


def _lockstep_applies(market, unavailable) -> bool:
    """Whether :class:`_Fleets` plans the draws of ``market`` (module docstring, 2): machines
    the market does not grant are bought on-demand, a fixed transient price, and lifetimes
    that do not depend on the request time (not a price-driven process)."""
    return (unavailable == "on_demand" and not isinstance(market.process, mk.PriceDriven)
            and not isinstance(market.spot, mk.PriceSeries))


def _start_free(process) -> bool:
    """Whether the market's MTTF (hence ``K``) is the same at every start time."""
    return process is None or isinstance(process, (mk.Replay, mk.Exponential, mk.Empirical)) or (
        isinstance(process, mk.Weibull) and not math.isfinite(float(process.cap_s)))


class _Fleets:
    """Every draw's fleet at once (``[draws, machines]`` arrays; row ``b``: draw ``rows[b]``
    of the tables), bought as ``_Fleet.buy`` of :mod:`~scarjax.cluster.policies` buys under
    ``unavailable="on_demand"`` (module docstring, 2): the cheapest option at the request
    time, the first purchases from the :class:`_Tables` (a replayed trace's pick in float32
    NumPy as :meth:`Replay.pick`), every slot filled. A draw that needs a purchase past the
    tables is marked in :attr:`fallback` (then planned per draw). The ledger entries and
    events are kept per draw, in the order the per-draw fleet makes them."""

    def __init__(self, job, market, tab, starts):
        B, M = starts.size, job.workers
        self.market, self.tab, self.M = market, tab, M
        self.t0 = starts
        self.rows = np.arange(B)
        self.death = np.full((B, M), np.inf)
        self.ready = np.full((B, M), np.inf)
        self.node = np.full((B, M), -1, np.int64)
        self.billed = np.full((B, M), np.inf)
        self.owned = np.zeros((B, M), bool)
        self.entry = np.full((B, M), -1, np.int64)
        self.buys = np.zeros(B, np.int64)
        self.fallback = np.zeros(B, bool)
        self.events = [[] for _ in range(B)]
        self.entries = [[] for _ in range(B)]  # [machine id, tier, start, stop, revoked]
        od = float(market.machine.on_demand_price)
        self.cheaper = market.price_at("transient", float(starts[0]) if B else 0.0) < od
        self.absolute = isinstance(market.process, mk.Replay)
        self.price = {"transient": market.price("transient"), "reliable": market.price("reliable")}
        self.text = {tier: f" {tier} at {market.price_at(tier, 0.0):.4g} $/h" for tier in ("transient", "reliable")}

    def buy(self, b, slots, t):
        """Buy ``slots`` (``bool[len(b), M]``) of draws ``b`` at elapsed ``t`` (``float64[len(b)]``);
        returns when the last machine bought runs (``t`` for a draw that bought none). Draws out
        of drawn purchases are marked in :attr:`fallback` and buy nothing."""
        tab, M = self.tab, self.M
        last = t.copy()
        out = self.buys[b] >= tab.purchases
        if out.any():
            self.fallback[b[out]] = True
        go = ~out & slots.any(axis=1)
        if not go.any():
            return last
        b, slots, t = b[go], slots[go], t[go]
        c = self.buys[b]
        T = self.t0[b] + t
        up = tab.up[b, c].astype(np.float64)
        if tab.nodes:
            K = tab.nodes
            T32 = T.astype(np.float32)[:, None]
            free = (tab.add[None, :] <= T32) & (T32 < tab.rem[None, :])
            r, s = np.nonzero(self.owned[b] & (self.node[b] >= 0))
            free[r, self.node[b][r, s]] = False  # the nodes the fleet holds
            prio = np.where(free, tab.u[b, c], np.float32(-1.0))
            order = np.argsort(-prio, axis=1, kind="stable")
            idx = np.arange(M)
            pick = order[:, idx % K]
            ok = np.take_along_axis(free, pick, axis=1) & (idx < K)[None, :]
            life = np.where(ok, tab.rem[pick] - T32, np.float32(0.0)).astype(np.float32).astype(np.float64)
            node = np.where(ok, pick, -1).astype(np.int64)
            avail = np.sum((tab.add64[None, :] <= T[:, None]) & (T[:, None] < tab.rem64[None, :]), axis=1) >= 1
        else:
            life = tab.life[b, c].astype(np.float64)
            node = np.full((b.size, M), -1, np.int64)
            avail = np.ones(b.size, bool)
        self.buys[b] += 1
        # the k requested slots take the first k machines of the purchase, in slot order
        j = np.maximum(np.cumsum(slots, axis=1) - 1, 0)
        up, life, node = (np.take_along_axis(x, j, axis=1) for x in (up, life, node))
        tt = t[:, None]
        want = (self.cheaper & avail)[:, None]
        granted = want & (life > 0.0)
        death = tt + life if self.absolute else tt + up + life
        death = np.maximum(death, tt + up)
        br, bs = np.nonzero(slots)
        bb = b[br]
        tr = granted[br, bs]
        self.ready[bb, bs] = t[br] + up[br, bs]
        self.death[bb, bs] = np.where(tr, death[br, bs], np.inf)
        self.node[bb, bs] = np.where(tr, node[br, bs], -1)
        self.billed[bb, bs] = T[br] + up[br, bs]
        self.owned[bb, bs] = True
        last[go] = np.maximum(t, np.max(np.where(slots, tt + up, -np.inf), axis=1))
        billed = self.billed[bb, bs].tolist()
        n_of = self.buys[bb].tolist()
        for k, (i, s, g, n) in enumerate(zip(bb.tolist(), bs.tolist(), tr.tolist(), n_of)):
            ent = self.entries[i]
            self.entry[i, s] = len(ent)
            ent.append([f"t{n}.{s}" if g else f"r{n}.{s}", "transient" if g else "reliable", billed[k], None, False])
        n_tr = np.sum(granted & slots, axis=1).tolist()
        n_all = np.sum(slots, axis=1).tolist()
        for i, ti, a, z in zip(b.tolist(), t.tolist(), n_tr, n_all):
            ev = self.events[i]
            if a:
                ev.append((ti, "request", f"{a}" + self.text["transient"]))
            if z - a:
                ev.append((ti, "request", f"{z - a}" + self.text["reliable"]))
        return last

    def revoke_due(self, b, t):
        """Revoke the machines of draws ``b`` whose revocation is at or before ``t`` (+ the
        tolerance): their ledger entries stop (revoked), a ``'revocation'`` event each; returns
        ``bool[len(b), M]`` of the revoked slots."""
        dead = self.owned[b] & (self.death[b] <= (t + po.TIME_TOL_S)[:, None])
        r, s = np.nonzero(dead)
        bb = b[r]
        d = self.death[bb, s]
        stop = np.maximum(self.t0[bb] + d, self.billed[bb, s])
        for i, slot, di, st_ in zip(bb.tolist(), s.tolist(), d.tolist(), stop.tolist()):
            e = self.entries[i][self.entry[i, slot]]
            e[3], e[4] = st_, True
            self.events[i].append((di, "revocation", e[0]))
        self.death[bb, s] = np.inf
        self.ready[bb, s] = np.inf
        self.owned[bb, s] = False
        self.node[bb, s] = -1
        return dead

    def next_death(self, b):
        return np.min(np.where(self.owned[b], self.death[b], np.inf), axis=1)

    def clocks(self, b, t):
        """The :class:`_Clock` of each of draws ``b``, its fleet stopped by the user at elapsed
        ``t[b]`` (``_Fleet.stop_all``): all the draws' ledgers built in one pass
        (:func:`~scarjax.cluster.ledger.stopped_ledgers`)."""
        r, s = np.nonzero(self.owned[b])
        bb = b[r]
        stop = np.maximum(self.t0[bb] + t[bb], self.billed[bb, s])
        for i, slot, x in zip(bb.tolist(), s.tolist(), stop.tolist()):
            self.entries[i][self.entry[i, slot]][3] = x
        rows, ents = [], []
        for j, i in enumerate(b.tolist()):
            rows.extend([j] * len(self.entries[i]))
            ents.extend(self.entries[i])
        ids, tiers, t1, t2, rev = zip(*ents) if ents else ((),) * 5
        leds = stopped_ledgers(b.size, np.asarray(rows, np.int64), ids, tiers, [self.price[x] for x in tiers], t1, t2,
                               rev, billing=self.market.billing)
        return [_Clock(led, float(self.t0[i]), self.events[i]) for led, i in zip(leds, b.tolist())]


def _lockstep_start(job, market, tab, starts):
    """The set-up the lock-step planners share: the fleets (:class:`_Fleets`) with every draw's
    first ``job.workers`` machines bought at time 0, and per draw its time, global step,
    futile-recovery count (zeros), operations, marks and done flag (a draw planned per draw is
    done from the start): ``(fleets, t, step, futile, ops, marks, done)``."""
    B = starts.size
    fl = _Fleets(job, market, tab, starts)
    t = fl.buy(fl.rows, np.ones((B, job.workers), bool), np.zeros(B))
    return (fl, t, np.zeros(B, np.int64), np.zeros(B, np.int64), [[] for _ in range(B)], [[] for _ in range(B)],
            fl.fallback.copy())


def _lockstep_plans(fl, t, ops, marks, meta):
    """The :class:`~scarjax.cluster.policies.Plan` of every draw the lock-step planned
    (``meta(i)``: draw ``i``'s meta), ``None`` for a draw left to the per-draw planner."""
    plans = [None] * len(ops)
    ok = np.flatnonzero(~fl.fallback)
    for i, clock in zip(ok.tolist(), fl.clocks(ok, t)):
        plans[i] = po.Plan(ops[i], clock, float(t[i]), meta(i), marks[i])
    return plans


def _plan_checkpoint_restart_all(job, market, tab, starts, horizon_s, K, granularity):
    """:func:`~scarjax.cluster.policies.plan_checkpoint_restart` of every draw (its passes in
    lock-step, one branch per draw and pass, masks for the branches; module docstring, 2):
    ``[Plan | None]`` (``None``: the draw needs a purchase past the tables, planned per draw)."""
    B, M, delta = starts.size, job.workers, float(job.checkpoint_s)
    fl, t, step, futile, ops, marks, done = _lockstep_start(job, market, tab, starts)
    eps = po.TIME_TOL_S
    finite = math.isfinite(K)
    dt = po.seconds_per_step(job, market, M)
    ck_step = np.zeros(B, np.int64)
    executed = np.zeros(B, np.int64)
    rework = np.zeros(B, np.int64)
    while True:
        live = ~done & ~fl.fallback & (executed < job.max_steps) & (t < horizon_s)
        b = np.flatnonzero(live)
        if not b.size:
            break
        td = fl.next_death(b)
        tb, sb, cb = t[b], step[b], ck_step[b]
        due = finite & (sb == cb + K)
        rev = (td <= tb + eps) | (due & (tb + delta > td))
        # a revocation (possibly during a checkpoint's write: the write is lost)
        r = b[rev]
        if r.size:
            tr = np.maximum(t[r], td[rev])
            dead = fl.revoke_due(r, tr)
            back = step[r] - ck_step[r]
            rework[r] += back
            futile[r] += 1
            for i, ti, k, c, f in zip(r.tolist(), tr.tolist(), back.tolist(), ck_step[r].tolist(), futile[r].tolist()):
                if k > 0:
                    fl.events[i].append((ti, "rework", f"{k} steps back to {c}"))
                    marks[i].append((ti, "rework_steps", k))
                ops[i].append(("rollback",))
                if po.futile_give_up(f):  # the stated give-up: planned per draw
                    fl.fallback[i] = True
            step[r] = ck_step[r]
            tr = fl.buy(r, dead, tr) + float(job.restore_s)
            t[r] = tr
            for i, ti, c in zip(r.tolist(), tr.tolist(), ck_step[r].tolist()):
                fl.events[i].append((ti, "restart", f"from step {c}"))
        # a checkpoint due
        s = b[~rev & due]
        if s.size:
            t[s] = t[s] + delta
            ck_step[s] = step[s]
            for i, ti, k in zip(s.tolist(), t[s].tolist(), step[s].tolist()):
                ops[i].append(("save",))
                fl.events[i].append((ti, "checkpoint", f"step {k}"))
        # training up to the next event
        g = ~rev & ~due
        tg, bg, tdg = t[b[g]], b[g], td[g]
        left = job.max_steps - executed[bg]
        if finite:
            left = np.minimum(left, ck_step[bg] + int(K) - step[bg])
        fit = np.floor((np.minimum(tdg, horizon_s) - tg) / dt + eps)
        n = np.minimum(np.minimum(left, fit), granularity)  # float: fit may be huge
        short = n < 1
        wait = short & (tdg <= horizon_s)
        t[bg[wait]] = tdg[wait]  # the step in progress is lost with the machine
        done[bg[short & ~wait]] = True
        go = ~short
        if go.any():
            i_go, n_go, t_go = bg[go], n[go].astype(np.int64), tg[go]
            for i, ti, k in zip(i_go.tolist(), t_go.tolist(), n_go.tolist()):
                ops[i].append(("train", ti, dt, k))
            t[i_go] = t_go + n_go * dt
            step[i_go] += n_go
            executed[i_go] += n_go
            futile[i_go] = 0
    return _lockstep_plans(fl, t, ops, marks, lambda i: {
        "interval_steps": K, "rework_steps": int(rework[i]), "workers": M, "unavailable": "on_demand"})


def _plan_scar_all(job, market, tab, starts, horizon_s, K, fraction, granularity, spec):
    """:func:`~scarjax.cluster.policies.plan_scar` of every draw in lock-step (as
    :func:`_plan_checkpoint_restart_all`): ``[Plan | None]``."""
    B, M, delta = starts.size, job.workers, float(job.checkpoint_s)
    fl, t, step, futile, ops, marks, done = _lockstep_start(job, market, tab, starts)
    eps = po.TIME_TOL_S
    I = math.inf if spec.period is None else int(sck.interval(spec))
    finite = math.isfinite(I)
    dts = np.array([math.nan] + [po.seconds_per_step(job, market, m) for m in range(1, M + 1)])
    restore = float(job.restore_s)
    last_ck = np.zeros(B, np.int64)
    recoveries = np.zeros(B, np.int64)
    while True:
        b = np.flatnonzero(~done & ~fl.fallback & (step < job.max_steps) & (t < horizon_s))
        if not b.size:
            break
        # a running-checkpoint write due at this step boundary (before any recovery at it)
        if finite:
            sb = step[b]
            ckd = (sb > 0) & (sb % I == 0) & (last_ck[b] != sb)
        else:
            ckd = np.zeros(b.size, bool)
        c = b[ckd]
        if c.size:
            t[c] = t[c] + fraction * delta
            last_ck[c] = step[c]
            for i, ti, k in zip(c.tolist(), t[c].tolist(), step[c].tolist()):
                ops[i].append(("ckpt", k))
                fl.events[i].append((ti, "checkpoint", f"step {k}: {fraction:.3g} of the blocks"))
        b = b[~ckd]
        td = fl.next_death(b)
        tb = t[b]
        lose = td <= tb + eps
        r = b[lose]
        if r.size:  # a partial recovery of the revoked machines' blocks, their replacements bought
            dead = fl.revoke_due(r, t[r])
            nd = dead.sum(axis=1)
            futile[r] += 1
            recoveries[r] += 1
            tr = t[r] + restore * nd / M
            for i, t_was, ti, row, k, f in zip(r.tolist(), t[r].tolist(), tr.tolist(), dead.tolist(),
                                               step[r].tolist(), futile[r].tolist()):
                servers = [s for s, x in enumerate(row) if x]
                ops[i].append(("lose", tuple(servers)))
                marks[i].append((t_was, "recoveries", 1))
                if po.futile_give_up(f):  # the stated give-up: planned per draw
                    fl.fallback[i] = True
                fl.events[i].append((ti, "recovery", f"partial: blocks of servers {servers} at step {k}"))
            t[r] = tr
            fl.buy(r, dead, tr)
        b, td, tb = b[~lose], td[~lose], tb[~lose]
        if not b.size:
            continue
        owned, ready = fl.owned[b], fl.ready[b]
        live = owned & (ready <= (tb + eps)[:, None])
        m = live.sum(axis=1)
        # no machine running: wait for the first to join (or a revocation)
        z = m == 0
        if z.any():
            bz, tz = b[z], tb[z]
            t_next = np.minimum(np.min(np.where(owned[z], ready[z], np.inf), axis=1), td[z])
            lost = ~np.isfinite(t_next)
            fl.fallback[bz[lost]] = True  # the market offers no more: planned per draw
            over = ~lost & (t_next > horizon_s)
            t[bz[over]] = float(horizon_s)  # waited out to the horizon
            done[bz[over]] = True
            on = ~lost & ~over
            t[bz[on]] = np.maximum(tz[on], t_next[on])
        # training on the live machines up to the next change (a death, an arrival)
        g = ~z
        bg, tg, tdg, mg = b[g], tb[g], td[g], m[g]
        dt = dts[mg]
        arrivals = np.min(np.where(owned[g] & (ready[g] > (tg + eps)[:, None]), ready[g], np.inf), axis=1)
        t_change = np.minimum(tdg, arrivals)
        left = job.max_steps - step[bg]
        if finite:
            left = np.minimum(left, I - step[bg] % I)
        fit = np.floor((np.minimum(t_change, horizon_s) - tg) / dt + eps)
        n = np.minimum(np.minimum(left, fit), granularity)
        short = n < 1
        wait = short & (t_change <= horizon_s)
        t[bg[wait]] = t_change[wait]  # a death aborts the step in progress; an arrival joins at once
        done[bg[short & ~wait]] = True
        go = ~short
        if go.any():
            i_go, n_go, t_go, d_go = bg[go], n[go].astype(np.int64), tg[go], dt[go]
            for i, ti, d, k in zip(i_go.tolist(), t_go.tolist(), d_go.tolist(), n_go.tolist()):
                ops[i].append(("train", ti, d, k))
            t[i_go] = t_go + n_go * d_go
            step[i_go] += n_go
            futile[i_go] = 0
    return _lockstep_plans(fl, t, ops, marks, lambda i: {
        "interval_steps": K, "checkpoint_every": I, "fraction": fraction, "recoveries": int(recoveries[i]),
        "workers": M, "unavailable": "on_demand"})


# --------------------------------------------------------------------------------------
# 2-3. The policies


def run(policy: Any, job: ck.Job, market: mk.Market, keys: Any, *, horizon_s: float, start_s: Any = None,
        **options: Any) -> list[ck.ClusterRun]:
    """Draw ``i`` of ``policy`` (``'checkpoint_restart'``, ``'scar'``, ``'tierml'`` or the
    function) on ``market`` started at ``start_s[i]`` (default: the market's start) with the
    market key ``keys[i]``, for all draws at once (module docstring): the runs
    :func:`per_draw` returns. ``options``: the policy's keyword options (``train_key``,
    ``interval_steps``, ``fraction``, ``reliable``, ...)."""
    name = _policy_name(policy)
    if not isinstance(job, ck.Job):
        raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
    keys, starts = _draw_inputs(market, keys, start_s)
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    if name == "checkpoint_restart":
        return _checkpoint_restart(job, market, keys, starts, float(horizon_s), **options)
    if name == "scar":
        return _scar(job, market, keys, starts, float(horizon_s), **options)
    return _tierml(job, market, keys, starts, float(horizon_s), **options)


def _execute(plans, curves, job, policy, stop_at_target):
    """:func:`~scarjax.cluster.policies.execute_plan` (``deferred=True``) of every draw's plan
    on a :class:`~scarjax.cluster.policies.LossReplay` of its curve (``curves[i]``), each run
    recorded in one array pass instead of one :class:`~scarjax.cluster.clock.Recorder`
    interval per ``'train'`` op: the points ``t + k dt`` of every op (``k = 1..n``; ``'save'`` /
    ``'rollback'`` moving the global step as the replay does), cut at the first loss ``<=
    job.target_loss`` (``stop_at_target``; the clock only advances, so the points kept are those
    up to the end); the events, ``meta`` counts and ``executed_steps`` as ``execute_plan``
    keeps them. The same runs, field for field (tested against ``execute_plan``)."""
    eps = po.TIME_TOL_S
    target = job.target_loss
    hit_text = f"loss <= {target:g}"
    out = []
    for plan, curve in zip(plans, curves):
        curve = np.asarray(curve)
        ts, dts, ns, s0 = [], [], [], []
        step = saved = 0
        for op in plan.ops:
            kind = op[0]
            if kind == "train":
                ts.append(op[1])
                dts.append(op[2])
                ns.append(op[3])
                s0.append(step)
                step += op[3]
            elif kind == "save":
                saved = step
            elif kind == "rollback":
                step = saved
            else:
                raise ValueError(f"plan op {kind!r}: execute plan.training_only() (the state is batched)")
        n = np.asarray(ns, np.int64)
        total = int(n.sum())
        first = np.cumsum(n) - n
        k = np.arange(1, total + 1) - np.repeat(first, n)
        time_s = np.repeat(np.asarray(ts, np.float64), n) + k * np.repeat(np.asarray(dts, np.float64), n)
        steps = np.repeat(np.asarray(s0, np.int64), n) + k
        losses = curve[np.minimum(steps, curve.size) - 1] if total else curve[:0]
        end, hit, executed = plan.end_s, False, total
        if stop_at_target:
            below = np.flatnonzero(losses <= target)
            if below.size:
                j = int(below[0])
                end, hit, executed = float(time_s[j]), True, j + 1
        keep = time_s <= end + eps
        if total and int(steps[keep].max(initial=0)) > curve.size:
            raise ValueError(f"the curve has {curve.size} steps, the plan asks for step {int(steps[keep].max())}")
        events = [(float(e[0]), str(e[1]), str(e[2])) for e in plan.fleet.events if e[0] <= end + eps]
        if hit:
            events.append((float(end), "target", hit_text))
        meta = dict(plan.meta)
        for name in {nm for _, nm, _ in plan.marks} | {x for x in meta if x in po.COUNTED_META}:
            meta[name] = int(sum(a for tm, nm, a in plan.marks if nm == name and tm <= end + eps))
        meta["executed_steps"] = executed
        out.append(ck.ClusterRun(policy, time_s[keep], None, np.asarray(losses, np.float64)[keep], steps[keep], events,
                                 None, None, float(end), meta, plan.fleet.ledger))
    return out


def _cr_plans(job, market, keys, starts, horizon_s, interval_steps=None, granularity=25, unavailable="on_demand"):
    """Every draw's :func:`~scarjax.cluster.policies.plan_checkpoint_restart`: in lock-step
    where :func:`_lockstep_applies` (:func:`_plan_checkpoint_restart_all`), else (and for a
    draw past the tables) the per-draw planner on the draw's :class:`_Drawn` market."""
    po.check_arguments(job, market, horizon_s, granularity, unavailable)
    tab = _market_tables(market, keys, job.workers)
    plans = [None] * len(starts)
    if tab is not None and _lockstep_applies(market, unavailable) and _start_free(market.process):
        K = po.resolve_interval_steps(job, _drawn(market, tab, 0, starts[0]), interval_steps)
        plans = _plan_checkpoint_restart_all(job, market, tab, starts, horizon_s, K, granularity)
    for i in [i for i, p in enumerate(plans) if p is None]:  # the others: the per-draw planner
        m = _drawn(market, tab, i, starts[i])
        plans[i] = po.plan_checkpoint_restart(job, m, keys[i], horizon_s, po.resolve_interval_steps(job, m, interval_steps),
                                              granularity, unavailable)
    return plans


def _scar_plans(job, market, keys, starts, horizon_s, fraction=0.25, strategy="priority", granularity=25,
                partition_key=0, interval_steps=None, unavailable="on_demand"):
    """``(plans, setups)``: every draw's :func:`~scarjax.cluster.policies.plan_scar` (as
    :func:`_cr_plans`: :func:`_plan_scar_all` where it applies) and its
    :func:`~scarjax.cluster.policies.scar_setup` ``(K, partition, spec)``."""
    po.check_arguments(job, market, horizon_s, granularity, unavailable)
    tab = _market_tables(market, keys, job.workers)
    n = len(starts)
    plans = [None] * n
    if tab is not None and _lockstep_applies(market, unavailable) and _start_free(market.process):
        setups = [po.scar_setup(job, _drawn(market, tab, 0, starts[0]), fraction, strategy, partition_key,
                                interval_steps)] * n  # the same K at every start
        K, _, spec = setups[0]
        plans = _plan_scar_all(job, market, tab, starts, horizon_s, K, float(fraction), granularity, spec)
    else:
        setups = [po.scar_setup(job, _drawn(market, tab, i, s), fraction, strategy, partition_key, interval_steps)
                  for i, s in enumerate(starts)]
    for i in [i for i, p in enumerate(plans) if p is None]:  # the others: the per-draw planner
        K, _, spec = setups[i]
        plans[i] = po.plan_scar(job, _drawn(market, tab, i, starts[i]), keys[i], horizon_s, K, float(fraction),
                                granularity, spec, unavailable)
    return plans, setups


def plans(policy: Any, job: ck.Job, market: mk.Market, keys: Any, *, horizon_s: float, start_s: Any = None,
          **options: Any) -> list[po.Plan]:
    """The clock of draw ``i`` of ``policy`` (``'checkpoint_restart'`` or ``'scar'``) as
    :func:`run` plans it: the :class:`~scarjax.cluster.policies.Plan` that
    :func:`~scarjax.cluster.policies.plan_checkpoint_restart` /
    :func:`~scarjax.cluster.policies.plan_scar` returns for the market at ``start_s[i]`` and
    the key ``keys[i]`` (operations, events, ledger entries, end and counts equal; module
    docstring, 2). ``options``: the policy's planning options (``interval_steps``,
    ``granularity``, ``unavailable``; SCAR's ``fraction``, ``strategy``, ``partition_key``);
    its training options (``train_key``, ``stop_at_target``) are accepted and unused."""
    name = _policy_name(policy)
    if name not in ("checkpoint_restart", "scar"):
        raise ValueError(f"policy must be 'checkpoint_restart' or 'scar' (TierML plans as it trains), got {policy!r}")
    if not isinstance(job, ck.Job):
        raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
    keys, starts = _draw_inputs(market, keys, start_s)
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    options = {k: v for k, v in options.items() if k not in ("train_key", "stop_at_target")}
    if name == "checkpoint_restart":
        return _cr_plans(job, market, keys, starts, float(horizon_s), **options)
    return _scar_plans(job, market, keys, starts, float(horizon_s), **options)[0]


def _checkpoint_restart(job, market, keys, starts, horizon_s, *, train_key=0, stop_at_target=True, **planning):
    plans = _cr_plans(job, market, keys, starts, horizon_s, **planning)
    need = max([p.furthest_step() for p in plans] + [1])
    curve = Trainer(job.algorithm, train_key).train(need)
    runs = _execute(plans, [curve] * len(plans), job, "checkpoint_restart", stop_at_target)
    return ck.settle(runs, starts)  # every draw's machines billed in one vectorised call


# ---- SCAR: the reliable run up to each draw's first lost block, then one vmapped program in chunks

#: Global steps per call of SCAR's chunk program (module docstring, 3): after each call the
#: draws that reached their target or their plan's end are dropped.
SCAR_CHUNK = 16

_SCAR_PROGRAMS: dict = {}


def _padded(n: int) -> int:
    """The draw count a chunk call is padded to: ``n`` rounded up to a multiple of ``max(4,
    2^(b - 4))`` (``b``: the bit length of ``n - 1``), at least 8: at most 8 sizes per octave
    compiled, at most an eighth of a large call (a third of a small one) padding."""
    q = max(4, 1 << max(0, (n - 1).bit_length() - 4))
    return max(8, -(-n // q) * q)


def _scar_program(algorithm, partition, spec):
    """The jitted SCAR training of a batch of draws over global steps ``start .. start + C - 1``
    (cached per algorithm, partition and spec objects): ``(key, ck_key, state, ckpt, start
    int32, write bool[b, C], lost bool[b, C, servers]) -> (state, ckpt, losses float32[b,
    C])``. At step ``s = start + i``: the running checkpoint write
    (:func:`scarjax.scar.checkpoint.step` with ``fold_in(ck_key, s)``) of the draws with
    ``write[:, i]``, the partial recovery (:func:`scarjax.scar.faults.recover`) of the
    servers ``lost[:, i]``, one ``scarjax.core.run_one`` step with the Trainer's key
    ``fold_in(key, s)`` and the loss after it. The write and the recovery are computed only
    when some draw of the batch has one at ``i``."""
    k = (id(algorithm), id(partition), id(spec))
    hit = _SCAR_PROGRAMS.get(k)
    if hit is not None and hit[0] is algorithm and hit[1] is partition and hit[2] is spec:
        return hit[3]

    def program(key, ck_key, state, ckpt, start, write, lost):
        def write_one(s, st, c, w):
            new_c = sck.step(spec, c, st, partition, s, jax.random.fold_in(ck_key, s), algorithm.norm)[0]
            return jax.tree.map(lambda a, b: jnp.where(w, a, b), new_c, c)

        def recover_one(st, c, fl):
            rec = sfl.recover("partial", st, c.saved, partition, spt.server_blocks(partition, fl))
            return core.State(*jax.tree.map(lambda a, b: jnp.where(jnp.any(fl), a, b), rec, st))

        def train_one(s, st):
            new, tr = core.run_one(algorithm, jax.random.fold_in(key, s), None, st, (), (1, False, None))
            return core.State(*new), tr.loss[1]

        def body(carry, xs):
            st, c = carry
            s, w, fl = xs
            c = jax.lax.cond(jnp.any(w), lambda c: jax.vmap(write_one, (None, 0, 0, 0))(s, st, c, w), lambda c: c, c)
            st = jax.lax.cond(jnp.any(fl), lambda st: jax.vmap(recover_one)(st, c, fl), lambda st: st, st)
            st, loss = jax.vmap(train_one, (None, 0))(s, st)
            return (st, c), loss

        xs = (start + jnp.arange(write.shape[1], dtype=jnp.int32), jnp.swapaxes(write, 0, 1), jnp.swapaxes(lost, 0, 1))
        (state, ckpt), losses = jax.lax.scan(body, (state, ckpt), xs)
        return state, ckpt, losses.T

    fn = jax.jit(program)
    _SCAR_PROGRAMS[k] = (algorithm, partition, spec, fn)
    return fn


def _scar_marks(plan, steps, servers):
    """``(write bool[steps], lost bool[steps, servers])``: at which step boundaries (steps done)
    the plan writes the running checkpoint and which servers' blocks it loses."""
    write = np.zeros(steps, bool)
    lost = np.zeros((steps, servers), bool)
    step = 0
    for op in plan.ops:
        if op[0] == "train":
            step += op[3]
        elif step < steps and op[0] == "ckpt":
            write[step] = True
        elif step < steps and op[0] == "lose":
            lost[step, list(op[1])] = True
    return write, lost


def _reliable_run(algorithm, train_key, upto, at, target):
    """The one reliable :class:`Trainer` run (every draw's trajectory before its first lost
    block) to ``upto`` steps, cut at the steps ``at``: ``(curve float64[<= upto], {step:
    state})``. With ``target`` (not ``None``) it stops at the first loss ``<= target`` (the
    draws then end there)."""
    trainer = Trainer(algorithm, train_key)
    states, parts = {}, []
    for s in sorted({int(x) for x in at if x <= upto} | {int(upto)}):
        if s > trainer.step:
            parts.append(trainer.train(s - trainer.step))
            if target is not None and np.any(parts[-1] <= target):
                break
        states[s] = trainer.state
    return (np.concatenate(parts) if parts else np.zeros(0)), states


def _scar_chunks(program, keys, at, join, first, end, write, lost, target):
    """The draws of one program trained in calls of :data:`SCAR_CHUNK` global steps ``g .. g +
    C - 1`` (``g`` a multiple of ``C``; one step ``s`` for the whole batch, padded to
    :func:`_padded` draws): draw ``j`` joins at ``g = join[j]`` from ``at[g]`` (the reliable
    ``(state, ckpt)`` there) and is dropped after the call that reaches ``end[j]`` or a loss
    ``<= target`` (not ``None``) at a step past ``first[j]``: ``float64[draws, steps +
    SCAR_CHUNK]``, the loss after each step trained (``NaN`` elsewhere)."""
    C = SCAR_CHUNK
    n, steps = write.shape
    pad = ((0, 0), (0, C)) + ((0, 0),) * (lost.ndim - 2)
    write, lost = np.pad(write, pad[:2]), np.pad(lost, pad)
    out = np.full((n, steps + C), np.nan)
    rows = np.zeros(0, np.int64)
    batch = None  # the draws' (state, ckpt) rows, on the host (selecting rows op by op costs ms)
    for g in range(int(join.min()), int(end.max()), C):
        new = np.flatnonzero(join == g)
        if new.size:  # the joining draws from the reliable state and checkpoint at g
            fresh = jax.tree.map(lambda x: _host_rows(x)[None].repeat(new.size, axis=0), at[g])
            batch = fresh if batch is None else jax.tree.map(lambda a, b: _host_rows(a[: rows.size], b), batch, fresh)
            rows = np.concatenate([rows, new])
        if not rows.size:
            continue
        P = _padded(rows.size)
        if jax.tree.leaves(batch)[0].shape[0] != P:
            idx = np.concatenate([np.arange(rows.size), np.zeros(P - rows.size, np.int64)])
            batch = jax.tree.map(lambda x: x[idx], batch)
        sel = np.concatenate([rows, np.full(P - rows.size, rows[0])])
        st, ck, losses = program(*keys, *batch, np.int32(g), write[sel, g:g + C], lost[sel, g:g + C])
        losses = np.asarray(losses, np.float64)[: rows.size]
        out[rows, g:g + C] = losses
        done = g + C >= end[rows]
        if target is not None:
            steps_at = g + np.arange(C)
            mine = (steps_at >= first[rows][:, None]) & (steps_at < end[rows][:, None])
            done |= np.any((losses <= target) & mine, axis=1)
        keep = np.flatnonzero(~done)
        rows = rows[keep]
        batch = None if keep.size == 0 else jax.tree.map(lambda x: _host_rows(x)[keep], (st, ck))
    return out


def _host_rows(a, b=None):
    """``a`` (or ``a`` and ``b`` concatenated) as a NumPy array; a PRNG key array stays a JAX array."""
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        return a if b is None else jnp.concatenate([a, b])
    return np.asarray(a) if b is None else np.concatenate([np.asarray(a), np.asarray(b)])


def _scar(job, market, keys, starts, horizon_s, *, train_key=0, stop_at_target=True, **planning):
    plans, setups = _scar_plans(job, market, keys, starts, horizon_s, **planning)
    tk = core.as_key(train_key)
    ck_key = jax.random.fold_in(tk, 7)
    steps, C = int(job.max_steps), SCAR_CHUNK
    target = float(job.target_loss) if stop_at_target else None
    marks = [_scar_marks(p, steps, job.workers) for p in plans]
    end = np.array([min(p.furthest_step(), steps) for p in plans], np.int64)
    # the first step boundary at which a draw loses blocks (its end: none before it); up to it
    # the draw trains the reliable trajectory (the writes do not change the state)
    first = np.minimum([int(np.argmax(lo.any(axis=1))) if lo.any() else steps for _, lo in marks], end)
    own = first < end
    groups: dict = {}  # one program per (partition, spec): draws whose K differs (price-driven starts)
    for i in np.flatnonzero(own).tolist():
        groups.setdefault((id(setups[i][1]), id(setups[i][2])), []).append(i)
    # a draw joins its program at the chunk start before its first loss, from the reliable state
    # and running checkpoint there (the writes before it on the reliable states: a draw whose
    # writes before its first loss are not its group's joins at step 0)
    writes = {}
    for g, idx in groups.items():
        W = np.unique(np.concatenate([np.flatnonzero(marks[i][0][: first[i]]) for i in idx]))
        for i in idx:
            if not np.array_equal(np.flatnonzero(marks[i][0][: first[i]]), W[W < first[i]]):
                first[i] = 0
        writes[g] = W
    join = first // C * C
    cuts = {0} | set(join[own].tolist()) | {int(w) for W in writes.values() for w in W if w < join[own].max()}
    upto = int(max(first[own].max(initial=0), end[~own].max(initial=0), 1))
    reliable, states = _reliable_run(job.algorithm, train_key, upto, cuts, target)
    if target is not None:  # a draw whose reliable prefix reaches the target ends there
        below = np.flatnonzero(reliable <= target)
        if below.size:
            own &= first < below[0] + 1
    curves = [reliable] * len(plans)
    for g, idx in groups.items():
        idx = np.array([i for i in idx if own[i]], np.int64)
        if not idx.size:
            continue
        _, partition, spec = setups[idx[0]]
        write_fn = po._scar_programs(partition, spec, job.algorithm.norm)[0]  # the per-draw policy's write
        W = set(writes[g][writes[g] < join[idx].max()].tolist())
        at, c = {}, sck.init(states[0], partition, spec)
        for s in sorted(set(join[idx].tolist()) | W):
            if s in states:
                at.setdefault(s, (states[s], c))  # the checkpoint before the write at s
            if s in W:
                c = write_fn(c, states[s], jnp.int32(s), jax.random.fold_in(ck_key, s))
        out = _scar_chunks(_scar_program(job.algorithm, partition, spec), (tk, ck_key), at, join[idx], first[idx],
                           end[idx], np.stack([marks[i][0] for i in idx]), np.stack([marks[i][1] for i in idx]),
                           target)
        for j, i in enumerate(idx.tolist()):
            curves[i] = np.concatenate([reliable[: first[i]], out[j, first[i]: end[i]]])
    runs = _execute([p.training_only() for p in plans], curves, job, "scar", stop_at_target)
    return ck.settle(runs, starts)  # every draw's machines billed in one vectorised call


# ---- TierML: the controller per draw on the shared trajectory


class _Trajectory:
    """The reliable run's losses after each global step and the loss of the state at each
    step, computed once as far as any draw asks (a real :class:`Trainer`)."""

    def __init__(self, algorithm, train_key, init_state):
        self.algorithm, self.train_key, self.init_state = algorithm, train_key, init_state
        self.trainer = Trainer(algorithm, train_key, init_state=init_state)
        self.after = np.zeros(0)
        self.at = [self.trainer.loss()]  # loss of the state after k steps
        self._states: dict = {}  # states asked for by state(), by step

    def state(self, step):
        """The state after ``step`` steps, re-run from the start by a fresh :class:`Trainer` (bit
        for bit the per-draw Trainer's: the keys are the global step's)."""
        if step not in self._states:
            tr = Trainer(self.algorithm, self.train_key, init_state=self.init_state)
            tr.train(step)
            self._states[step] = tr.state
        return self._states[step]

    def losses(self, start, n):
        if start + n > self.after.size:
            self._advance(start + n)
        return self.after[start:start + n]

    def state_loss(self, step):
        if step >= len(self.at):
            self._advance(step)
        return self.at[step]

    def _advance(self, upto):
        # step by step (cut-independent: the Trainer's keys are the global step's), the state's loss at each
        while self.trainer.step < upto:
            self.after = np.concatenate([self.after, self.trainer.train(1)])
            self.at.append(self.trainer.loss())


class _Shared:
    """A Trainer stand-in for one draw serving :class:`_Trajectory` (snapshots are steps) until
    the draw's state leaves it: restored to a state of its own (TierML's rollback of the lost
    blocks), the draw trains on with its own real :class:`Trainer`, as the per-draw policy."""

    def __init__(self, trajectory):
        self.traj, self.step, self.own = trajectory, 0, None

    def train(self, n):
        if self.own is not None:
            out = self.own.train(n)
            self.step = self.own.step
            return out
        out = self.traj.losses(self.step, n)
        self.step += n
        return out

    def snapshot(self):
        return self.step if self.own is None else self.own.snapshot()

    def state_at(self, snapshot):
        """The state a snapshot stands for (a step of the shared trajectory, or a state)."""
        return self.traj.state(snapshot) if isinstance(snapshot, (int, np.integer)) else snapshot

    def restore(self, state, step=None):
        if isinstance(state, (int, np.integer)):
            self.own, self.step = None, int(state if step is None else step)
            return
        self.own = Trainer(self.traj.algorithm, self.traj.train_key, init_state=self.traj.init_state)
        self.own.restore(state, self.step if step is None else step)
        self.step = self.own.step

    def loss(self):
        return self.traj.state_loss(self.step) if self.own is None else self.own.loss()


#: Keys of TierML's market-draw chain drawn ahead per draw (later ones: split on the host). The
#: program's cost grows with it; on the benchmark's runs a draw makes at most 11 calls (its
#: start-ups and purchases), so 16 serve them all (64 cost 0.12 CPU s more per 1,000 draws).
TIER_CALLS = 16


@functools.partial(jax.jit, static_argnums=(2, 3))
def _tier_tables(startup, keys, calls, nodes):
    """For every draw the first ``calls`` keys of TierML's chain (``key, k = split(key)``, the
    controller's order), with what the market draws from each: a machine's start-up delay
    (``startup.sample(k, 1)``) and, on a replayed trace of ``nodes`` nodes, the priorities
    :meth:`~scarjax.cluster.market.Replay.pick` ranks them by (``uniform(split(k)[0], (K,))``).
    Returns ``(keys [n, calls], carry [n], up float32[n, calls], u float32[n, calls, K])``."""

    def one(key):
        def body(k, _):
            k2 = jax.random.split(k)
            k_pick = jax.random.split(k2[1])[0]
            up = jnp.zeros((), jnp.float32) if startup is None else startup.sample(k2[1], 1)[0]
            u = jax.random.uniform(k_pick, (nodes,)) if nodes else jnp.zeros((0,), jnp.float32)
            return k2[0], (k2[1], up, u)

        carry, (ks, up, u) = jax.lax.scan(body, key, None, length=calls)
        return ks, carry, up, u

    return jax.vmap(one)(keys)


def _replay_tabled(process) -> bool:
    """Whether a replayed trace's revocations are served from the tables: the warning's coin
    (``bernoulli(unwarned)``) is certain (0 or 1), so its draws do not depend on the count."""
    if not isinstance(process, mk.Replay):
        return False
    try:
        return float(process.unwarned) in (0.0, 1.0)
    except (TypeError, jax.errors.ConcretizationTypeError):  # a traced field: drawn per call
        return False


class _TierDraws:
    """TierML's market draws for one draw (``tierml(market_draws=...)``): call ``c`` of the
    chain (a start-up, a purchase's revocations or, on a replayed trace, its pick of free
    nodes, in the controller's order) served from the tables of :func:`_tier_tables` where they
    hold it, in float32 NumPy as the market's programs compute it (:meth:`Replay.pick`: the
    nodes present at the request time and not held, ranked by their priorities, ``remove - t``;
    the warning ``max(life - warning_s, 0)`` or none); other calls go to the market
    (:func:`~scarjax.cluster.tierml.pick_nodes` on a replayed trace) with the chain's key, as
    the controller would."""

    def __init__(self, markets, tab, row):
        self.markets, self.tab, self.row, self.c = markets, tab, row, 0
        self.carry = None  # the chain past the tables (a key), once needed

    def _key(self, c):
        if c < self.tab["calls"]:
            return self.tab["keys"][self.row, c]
        if self.carry is None:
            self.carry = self.tab["carry"][self.row]
        self.carry, k = jax.random.split(self.carry)
        return k

    def startup(self, cls):
        c, self.c = self.c, self.c + 1
        if cls == 0 and c < self.tab["calls"]:
            return float(np.float64(self.tab["up"][self.row, c])) if self.tab["startup"] else 0.0
        return float(self.markets[cls].startup_s(self._key(c), 1)[0])

    def revocations(self, cls, n, t):
        c, self.c = self.c, self.c + 1
        if cls != 0 or c >= self.tab["calls"] or not self.tab["nodes"]:
            return self.markets[cls].revocations(self._key(c), n, t)
        return self._host_pick(c, n, t, None)[1:]

    def pick(self, cls, n, t, held):
        """``(node, lifetime, warning)`` of ``n`` machines of replayed class ``cls`` at market
        time ``t``, none on the ``held`` nodes (:func:`~scarjax.cluster.tierml.pick_nodes` with
        the chain's next key), from the tables where they hold it."""
        c, self.c = self.c, self.c + 1
        if cls != 0 or c >= self.tab["calls"] or not self.tab["nodes"]:
            return tml.pick_nodes(self.markets[cls].process, self._key(c), n, t, held)
        return self._host_pick(c, n, t, held)

    def _host_pick(self, c, n, t, held):
        """:meth:`Replay.pick` of call ``c`` in float32 NumPy from the tables' priorities."""
        add, rem, K = self.tab["add"], self.tab["rem"], self.tab["nodes"]
        t0 = np.float32(t)
        free = (add <= t0) & (t0 < rem)
        if held is not None:
            free &= ~np.asarray(held, bool)
        prio = np.where(free, self.tab["u"][self.row, c], np.float32(-1.0))
        order = np.argsort(-prio, kind="stable")
        idx = np.arange(n)
        pick = order[idx % K]
        ok = free[pick] & (idx < K)
        life = np.where(ok, rem[pick] - t0, np.float32(0.0)).astype(np.float32)
        if self.tab["unwarned"]:
            warn = life
        else:
            warn = np.maximum(life - self.tab["warning_s"], np.float32(0.0)).astype(np.float32)
        node = np.where(ok, pick, -1).astype(np.int64)
        return node, life.astype(np.float64), warn.astype(np.float64)


def _tier_draws(market, markets_of, keys):
    """One :class:`_TierDraws` per draw (``markets_of[i]``: draw ``i``'s markets, the first the
    market at its start), or ``None`` each where the tables do not apply (a price-driven
    market: its lifetimes depend on the request time through the series)."""
    n = int(keys.shape[0])
    p = market.process
    if isinstance(p, mk.PriceDriven):
        return [None] * n
    replay = _replay_tabled(p)
    nodes = int(p.add_s.shape[0]) if replay else 0
    ks, carry, up, u = _tier_tables(market.startup, keys, TIER_CALLS, nodes)
    tab = {"calls": TIER_CALLS, "keys": ks, "carry": carry, "up": np.asarray(up),
           "startup": market.startup is not None, "nodes": nodes}
    if replay:
        tab.update(u=np.asarray(u), add=np.asarray(p.add_s, np.float32), rem=np.asarray(p.remove_s, np.float32),
                   warning_s=np.float32(p.warning_s), unwarned=float(p.unwarned) == 1.0)
    return [_TierDraws(ms, tab, i) for i, ms in enumerate(markets_of)]


class _TemplateDraws:
    """The market draws of a *template* run (:func:`_tierml_templates`): call ``c`` of the
    chain a start-up of draw ``row`` from the tables, every pick of nodes granted for ever
    (nodes ``0..n-1``, lifetimes and warnings ``inf``). :attr:`ok` turns ``False`` when the run
    makes a call the template does not stand for (another class, a call past the tables, a
    second pick, a parametric process's revocations)."""

    def __init__(self, tab, row):
        self.tab, self.row, self.c, self.ok = tab, row, 0, True
        self.pick_at = None  # (call, machines, market time) of the one pick

    def startup(self, cls):
        c, self.c = self.c, self.c + 1
        if cls != 0 or c >= self.tab["calls"]:
            self.ok = False
            return 0.0
        return float(np.float64(self.tab["up"][self.row, c])) if self.tab["startup"] else 0.0

    def revocations(self, cls, n, t):
        self.c += 1
        self.ok = False
        return np.full(n, np.inf), np.full(n, np.inf)

    def pick(self, cls, n, t, held):
        c, self.c = self.c, self.c + 1
        if cls != 0 or c >= self.tab["calls"] or self.pick_at is not None or n > self.tab["nodes"]:
            self.ok = False
        self.pick_at = (c, int(n), float(t))
        return np.arange(n, dtype=np.int64) % self.tab["nodes"], np.full(n, np.inf), np.full(n, np.inf)


def _tier_picks(tab, rows, c, n, T):
    """:meth:`_TierDraws._host_pick` of call ``c`` (``n`` machines, no node held) for draws
    ``rows`` at market times ``T`` (``float64[len(rows)]``) in one array pass, row by row the
    same float32 operations: ``(node int64, lifetime float64, warning float64)`` ``[len(rows), n]``."""
    add, rem, K = tab["add"], tab["rem"], tab["nodes"]
    T32 = T.astype(np.float32)[:, None]
    free = (add[None, :] <= T32) & (T32 < rem[None, :])
    prio = np.where(free, tab["u"][rows, c], np.float32(-1.0))
    order = np.argsort(-prio, axis=1, kind="stable")
    idx = np.arange(n)
    pick = order[:, idx % K]
    ok = np.take_along_axis(free, pick, axis=1) & (idx < K)[None, :]
    life = np.where(ok, rem[pick] - T32, np.float32(0.0)).astype(np.float32)
    if tab["unwarned"]:
        warn = life
    else:
        warn = np.maximum(life - tab["warning_s"], np.float32(0.0)).astype(np.float32)
    node = np.where(ok, pick, -1).astype(np.int64)
    return node, life.astype(np.float64), warn.astype(np.float64)


def _tierml_templates(job, market, tab, starts, horizon_s, traj, common, options):
    """The runs of the draws that TierML's controller takes through no warning, revocation or
    refused purchase before its end (module docstring, 2), from one *template* run per
    start-up sequence: ``{draw: ClusterRun}`` (unbilled, for :func:`~scarjax.cluster.clock.settle`).

    A template is :func:`~scarjax.cluster.tierml.tierml` on the market started at 0 (a replayed
    trace's prices and MTTF do not depend on the start) with the draws' start-ups and its one
    purchase of trace nodes granted for ever (:class:`_TemplateDraws`). A draw of the group is
    served by it when its own purchase (the same call of its chain, at its own market time
    ``start + ready``: :func:`_tier_picks`) grants every machine and the first warning comes
    later than the template's end plus the longest iteration (then no event of the draw's loop
    reaches it: the controller takes the same branches, chunks and times; its ledger is the
    template's, ``start +`` each elapsed time, as the controller adds them). Its run is the
    template's with its own ledger and trace nodes."""
    o = {**tml.tierml.__kwdefaults__, **options}
    try:
        speed = float(market.machine.speed)
        longest = max(tml.step_seconds(job.step_time, tr, int(o["reliable"]), o["thresholds"]) / speed
                      for tr in range(int(o["transient"]) + 1))
    except (TypeError, ValueError):  # bad options: the per-draw controller raises them
        return {}
    up = tab["up"] if tab["startup"] else np.zeros((starts.size, 1), np.float32)
    _, group, size = np.unique(up.reshape(starts.size, -1), axis=0, return_inverse=True, return_counts=True)
    group = group.reshape(-1)
    out, resumes = {}, {}
    for g in np.flatnonzero(size >= 2).tolist():
        rows = np.flatnonzero(group == g)
        stand_in = _TemplateDraws(tab, int(rows[0]))
        passes = []  # the template's loop state before each pass (_resume_at)

        def on_pass(ctl, t, frac, next_check, stand_in=stand_in, passes=passes):
            passes.append((t, frac, next_check, ctl.save(), stand_in.c, ctl.trainer.step, ctl.rec,
                           len(ctl.rec._t), len(ctl.rec.events),
                           [(e.machine_id, e.tier, e.price, e.billing, e.start, e.stop, e.revoked)
                            for e in ctl.ledger.entries]))

        tpl = tml._tierml(job, _market_at(market, 0.0), **{**o, **common, "key": 0, "market_draws": stand_in,
                                                            "trainer": _Shared(traj), "on_pass": on_pass})
        ents = tpl.ledger.entries
        if not stand_in.ok or any(e.billing != market.billing or not isinstance(e.price, float) for e in ents):
            continue
        end = float(tpl.end_s)
        ok = np.ones(rows.size, bool)
        nodes = None
        if stand_in.pick_at is not None:
            c, n, ready = stand_in.pick_at
            nodes, life, warn = _tier_picks(tab, rows, c, n, starts[rows] + ready)
            granted = np.all(nodes >= 0, axis=1)
            first = np.min(ready + warn, axis=1)  # the draw's first warning (elapsed)
            ok = granted & (first > end + longest + 1.0)
            tops = np.array([p[0] for p in passes], np.float64)
            k = _resume_pass(tops, first, longest)
            k = np.where(k < 0, _first_pass(tops, np.min(ready + life, axis=1)), k)
            for j in np.flatnonzero(granted & ~ok & (k >= 0)).tolist():
                resumes[int(rows[j])] = functools.partial(_resume_at, passes[int(k[j])], nodes[j], life[j], warn[j])
        rows, nodes = rows[ok], (nodes[ok] if nodes is not None else None)
        if not rows.size:
            continue
        m = len(ents)
        t0 = starts[rows][:, None]
        leds = stopped_ledgers(rows.size, np.repeat(np.arange(rows.size), m), [e.machine_id for e in ents] * rows.size,
                               [e.tier for e in ents] * rows.size, np.tile([e.price for e in ents], rows.size),
                               (t0 + np.array([e.start for e in ents])[None, :]).reshape(-1),
                               (t0 + np.array([e.stop for e in ents])[None, :]).reshape(-1),
                               np.tile([e.revoked for e in ents], rows.size), billing=market.billing)
        for j, (i, led) in enumerate(zip(rows.tolist(), leds)):
            meta = {k: (list(v) if isinstance(v, list) else v) for k, v in tpl.meta.items()}
            if "trace_nodes" in meta:
                meta["trace_nodes"] = tuple((bid, cls, int(nodes[j, nd])) for bid, cls, nd in tpl.meta["trace_nodes"])
            out[i] = ck.ClusterRun(tpl.policy, tpl.time_s.copy(), None, tpl.loss.copy(), tpl.steps.copy(),
                                   list(tpl.events), None, None, end, meta, led)
    return out, resumes


def _resume_pass(tops, first, longest):
    """For each draw, the template pass to resume it at (``-1``: none, the draw runs from the
    start): the last pass starting (``tops``: the template's elapsed times before its passes,
    non-decreasing) more than the longest iteration and a second before the draw's first
    warning ``first``. Every pass before it then ends that early, so the draw's own warning
    cuts none of its chunks (it only shortens a chunk that would end past it) and interrupts
    none: the draw's loop took the template's branches, chunks and times up to there."""
    return np.sum(tops[None, :] + longest + 1.0 < first[:, None], axis=1) - 1


def _first_pass(tops, life_end):
    """For each draw that :func:`_resume_pass` leaves to run from the start (a warning within
    the first pass), the pass to resume it at all the same: the first (``0``) when none of its
    machines ends (``life_end``: the earliest lifetime's end, elapsed) by the first pass's time
    ``tops[0]`` (then the run up to there, the purchases and the joins at the first pass's
    time, is the template's: no pass came before, and a warning is read only by the loop),
    else ``-1`` (from the start)."""
    if not tops.size:
        return np.full(life_end.shape, -1)
    return np.where(life_end > tops[0] + 1e-9, 0, -1)


def _resume_at(saved, node, life, warn, ctl):
    """Put a draw's controller ``ctl`` (its own market, clock, draws, recorder, ledger and
    trainer) into the state of a template run before one of its passes (``saved``, recorded
    by :func:`_tierml_templates`): the template's groups, counters and placement, its points,
    events and ledger entries so far (entries at the draw's ``t0 +`` each elapsed time, as the
    controller adds them), the shared trajectory's step and the draw's chain at the same call,
    with the draw's own purchase of trace nodes (``node``, ``life``, ``warn``: the template's
    machines ``0..n-1`` granted for ever stand for them). Returns ``(t, frac, next_check)``."""
    t, frac, next_check, state, c, step, rec, npts, nev, entries = saved
    ctl.adopt(state)
    for g in ctl.groups + ctl.retired:
        if g.node is not None:  # the one pick (template nodes: machine indices)
            g.node, g.life_t, g.warn_t = node.copy(), g.ready_t + life, g.ready_t + warn
    ctl.trace_nodes = [(bid, cls, int(node[nd])) for bid, cls, nd in ctl.trace_nodes]
    ctl._touch()  # the groups' times changed: what the controller derived from them is recomputed
    ctl.market_draws.c = c
    ctl.trainer.step = step
    ctl.rec._t, ctl.rec._loss, ctl.rec._steps = rec._t[:npts], rec._loss[:npts], rec._steps[:npts]
    ctl.rec.events = rec.events[:nev]
    for mid, tier, price, billing, start, stop, revoked in entries:  # the template's checked entries
        ctl.ledger.start_checked(mid, ctl.t0 + start, price=price, tier=tier, billing=billing)
        if stop is not None:
            ctl.ledger.stop(mid, ctl.t0 + stop, revoked=revoked)
    return t, frac, next_check


def _tierml(job, market, keys, starts, horizon_s, *, train_key=0, init_state=None, param_bytes=None,
            alternatives=(), **options):
    options.pop("deferred", None)  # every draw is recorded unbilled and billed by settle below
    unknown = sorted(set(options) - set(tml.tierml.__kwdefaults__))
    if unknown:  # named as the per-draw policy would, before any run
        raise TypeError(f"tierml() got unexpected keyword argument(s) {unknown}; its options are "
                        f"{sorted(tml.tierml.__kwdefaults__)}")
    trainer = Trainer(job.algorithm, train_key, init_state=init_state)
    if param_bytes is None:  # as tierml's default: the real state's bytes
        param_bytes = float(sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(trainer.state.params)))
    traj = _Trajectory(job.algorithm, train_key, init_state)
    at = [_market_at(market, s) for s in starts]
    draws = _tier_draws(market, [[m, *alternatives] for m in at], keys)
    common = {"horizon_s": horizon_s, "train_key": train_key, "param_bytes": param_bytes}
    done, resumes = {}, {}
    if (draws[0] is not None and draws[0].tab["nodes"] and not alternatives
            and not isinstance(market.spot, mk.PriceSeries) and not {"market_draws", "trainer", "key"} & set(options)):
        done, resumes = _tierml_templates(job, market, draws[0].tab, starts, horizon_s, traj, common, options)
    o = {**tml.tierml.__kwdefaults__, **common, **options}
    runs = [done[i] if i in done else
            tml._tierml(job, m, **{**o, "key": k, "trainer": _Shared(traj), "market_draws": d, "deferred": True,
                                   "resume": resumes[i]}) if i in resumes else
            tml.tierml(job, m, key=k, trainer=_Shared(traj), alternatives=alternatives, market_draws=d, deferred=True,
                       **common, **options)
            for i, (k, m, d) in enumerate(zip(keys, at, draws))]
    return ck.settle(runs, starts)  # every draw's machines billed in one vectorised call


# --------------------------------------------------------------------------------------
# Comparing


def summary(runs: Sequence[ck.ClusterRun], target_loss: float) -> dict[str, np.ndarray]:
    """Per-draw arrays: ``reached``, ``time_s``, ``dollars``, ``steps`` to ``target_loss``
    (:meth:`ClusterRun.to_target`), ``end_s``, ``bill`` (the run's total), ``revocations`` (the
    ``'revocation'`` events: every policy names every revocation so, warned or not; TierML's
    detail says how many of its machines were warned, :func:`~scarjax.cluster.tierml.warned_revocations`)
    and every ``meta`` count of :data:`COUNTS` the runs carry."""
    out = ck.outcomes(runs, target_loss)
    out["end_s"] = np.array([r.end_s for r in runs], np.float64)
    out["bill"] = np.array([sum(r.cost_by_tier.values()) for r in runs], np.float64)
    out["revocations"] = np.array([r.count("revocation") for r in runs], np.int64)
    for names in COUNTS.values():
        for nm in names:
            if runs and all(nm in r.meta for r in runs):
                out[nm] = np.array([r.meta[nm] for r in runs], np.int64)
    return out


def mismatches(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Where two :func:`summary` results differ: ``'field[draw]: x != y'`` for every draw and
    field whose values are not equal (``==``: float64 bit for bit but ``0.0 == -0.0``); a
    field in one only is a mismatch too. Empty: identical."""
    out = []
    for f in sorted(set(a) | set(b)):
        if f not in a or f not in b:
            out.append(f"{f}: only in {'the first' if f in a else 'the second'}")
            continue
        x, y = np.asarray(a[f]), np.asarray(b[f])
        if x.shape != y.shape:
            out.append(f"{f}: shapes {x.shape} != {y.shape}")
            continue
        for i in np.flatnonzero(x != y):
            out.append(f"{f}[{int(i)}]: {x[i]!r} != {y[i]!r}")
    return out
