"""The job-level PolluxAgent (thesis Sec 3.4.1): measure, fit, re-tune, report progress.

:class:`PolluxAgent` is the host-side controller: it records ``(N, K, m, s,
T_iter)`` tuples, re-fits the throughput model (:func:`fit_throughput`, with the
priors of Sec 3.4.1) and solves Eq 3.10 (:func:`optimize_batch_size`) with the
current PGNS.  :func:`train_adaptive` is the training loop around it: each step
draws ``K (s + 1)`` micro-batches of ``m`` examples (data-parallel replicas and
accumulation steps, simulated on the local device), takes their gradients with
``vmap``, reduces them to their mean and moments
(:func:`~scarjax.pollux.reduce_microbatches`) and feeds both to an optimizer built with
:func:`~scarjax.pollux.with_pgns` / :func:`~scarjax.pollux.track_pgns`
(optionally chained with :func:`~scarjax.pollux.scale_by_lr_rule`, which
receives ``batch_size=``, ``phi=`` and ``progress=``).

The clock is either *measured* (wall time of each jitted step; only meaningful
for one replica, ``K = 1``) or *simulated* from given throughput parameters
(Eq 3.8, optionally with log-normal noise), which is how an allocation of ``K``
devices on ``N`` nodes is emulated on one machine.  Progress is reported in
statistical epochs (Fig 3.3): ``sum_t M_t EFFICIENCY_t(M_t) / |X|``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax import validate as va
from scarjax.pollux._efficiency import _stat_efficiency
from scarjax.pollux._estimators import _check_axis, reduce_microbatches
from scarjax.pollux._transforms import find_pgns_state, pgns_from_state
from scarjax.pollux._throughput import FitResult, ThroughputParams, _t_iter, check_params, fit_throughput
from scarjax.pollux._tuning import BatchConfig, optimize_batch_size


@dataclasses.dataclass
class AgentConfig:
    """Settings of the job-level agent.

    Attributes:
      base_batch_size: ``M0``, the user's initial total batch size.
      max_batch_size: upper limit on the total batch (Sec 3.3.1).
      max_local_bsz: memory cap on the per-device batch ``m``.
      nodes, replicas: the allocation ``(N, K)``.
      retune_every: steps between re-fits / re-tunes (0 disables adaptation: a
        fixed-batch baseline at ``M0``).
      local_bsz_step: granularity of ``m`` (fewer distinct shapes to compile).
      min_records: distinct configurations needed before the fit replaces ``clock``'s
        prior (measured mode); until then the priors of Sec 3.4.1 apply.
      require_two_gradients: keep ``K (s + 1) >= 2`` above ``M0`` so the PGNS
        estimate stays unbiased (see :func:`optimize_batch_size`).
    """

    base_batch_size: int
    max_batch_size: int
    max_local_bsz: int
    nodes: int = 1
    replicas: int = 1
    retune_every: int = 50
    local_bsz_step: int = 1
    require_two_gradients: bool = True

    def validate(self) -> "AgentConfig":
        va.check_int("base_batch_size", self.base_batch_size, lo=1)
        va.check_int("max_batch_size", self.max_batch_size, lo=self.base_batch_size)
        va.check_int("max_local_bsz", self.max_local_bsz, lo=1)
        va.check_int("nodes", self.nodes, lo=1)
        va.check_int("replicas", self.replicas, lo=self.nodes)
        va.check_int("retune_every", self.retune_every, lo=0)
        va.check_int("local_bsz_step", self.local_bsz_step, lo=1)
        return self


class PolluxAgent:
    """Host-side job-level agent: throughput records, model fit and Eq 3.10 tuning."""

    def __init__(self, config: AgentConfig, prior_params: ThroughputParams | None = None):
        self.config = config.validate()
        self.records: list[tuple[int, int, int, int, float]] = []
        self.params = check_params(prior_params) if prior_params is not None else None
        self.fit: FitResult | None = None

    def observe(self, local_bsz: int, accum_steps: int, t_iter: float) -> None:
        """Record one measured iteration time for the current allocation."""
        va.check_real("t_iter", t_iter, lo=0.0, lo_open=True)
        c = self.config
        self.records.append((c.nodes, c.replicas, int(local_bsz), int(accum_steps), float(t_iter)))

    def refit(self) -> FitResult | None:
        """Fit Eq 3.8 to the per-configuration median of the records (Sec 3.4.1)."""
        if not self.records:
            return None
        arr = np.asarray(self.records, dtype=np.float64)
        keys, inv = np.unique(arr[:, :4], axis=0, return_inverse=True)
        med = np.array([np.median(arr[inv.reshape(-1) == i, 4]) for i in range(len(keys))])
        self.fit = fit_throughput(keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3], med)
        self.params = self.fit.params
        return self.fit

    def tune(self, phi: float) -> BatchConfig:
        """Eq 3.10 for the current allocation with the current model and PGNS."""
        if self.params is None:
            raise ValueError(
                "no throughput model yet: observe() step times and refit(), or pass prior_params"
            )
        c = self.config
        return optimize_batch_size(
            self.params,
            float(phi),
            c.base_batch_size,
            c.nodes,
            c.replicas,
            max_batch_size=c.max_batch_size,
            max_local_bsz=c.max_local_bsz,
            local_bsz_step=c.local_bsz_step,
            require_two_gradients=c.require_two_gradients,
        )


def _initial_config(c: AgentConfig) -> tuple[int, int]:
    m = math.ceil(c.base_batch_size / c.replicas)
    if m <= c.max_local_bsz:
        return m, 0
    s = math.ceil(m / c.max_local_bsz) - 1
    return math.ceil(m / (s + 1)), s


def _build_programs(loss_fn, optimizer, microbatch_axis, n_data, compiler_options):
    """The jitted training step (one program per ``(K (s + 1), m)`` shape) and full-data
    loss of :func:`train_adaptive`, the data passed as an argument (not a closure constant)
    so that runs with the same loss, optimizer and data share the compiled programs."""

    @functools.partial(jax.jit, static_argnames="shape", compiler_options=compiler_options)
    def step(params, opt_state, key, m_tot, phi, progress, data, shape):
        idx = jax.random.randint(key, shape, 0, n_data)
        batch = tuple(a[idx] for a in data)
        losses, grads = jax.vmap(
            jax.value_and_grad(loss_fn), in_axes=(None,) + (0,) * len(data), out_axes=(0, microbatch_axis)
        )(params, *batch)
        mean, moments = reduce_microbatches(grads, microbatch_axis=microbatch_axis)
        updates, opt_state = optimizer.update(
            mean,
            opt_state,
            params,
            microbatch_moments=moments,
            microbatch_size=jnp.asarray(idx.shape[1], jnp.float32),
            batch_size=m_tot,
            phi=phi,
            progress=progress,
        )
        return optax.apply_updates(params, updates), opt_state, jnp.mean(losses)

    loss = jax.jit(lambda p, data: loss_fn(p, *data), compiler_options=compiler_options)
    return step, loss


#: Programs of recent :func:`train_adaptive` calls, by (loss_fn, optimizer, microbatch_axis,
#: example count, compiler options); the functions are compared by identity, so a run that
#: passes the same ``loss_fn`` and ``optimizer`` objects as an earlier one reuses its
#: compilations (e.g. a fixed-batch baseline and the adaptive run).
_PROGRAMS: dict = {}
_PROGRAMS_KEPT = 8


def _programs(loss_fn, optimizer, microbatch_axis, n_data, compiler_options):
    try:
        leaves, treedef = jax.tree.flatten(microbatch_axis)
        key = (loss_fn, optimizer, tuple(leaves), treedef, n_data,
               tuple(sorted((compiler_options or {}).items())))
        hash(key)
    except TypeError:  # an unhashable optimizer or option: no sharing
        return _build_programs(loss_fn, optimizer, microbatch_axis, n_data, compiler_options)
    if key not in _PROGRAMS:
        while len(_PROGRAMS) >= _PROGRAMS_KEPT:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = _build_programs(loss_fn, optimizer, microbatch_axis, n_data, compiler_options)
    return _PROGRAMS[key]


def train_adaptive(
    loss_fn: Callable[..., jax.Array],
    params: Any,
    optimizer: optax.GradientTransformation,
    data: tuple[jax.Array, ...],
    config: AgentConfig,
    key: jax.Array,
    *,
    max_steps: int | None = None,
    time_budget: float | None = None,
    clock: str | ThroughputParams = "measured",
    clock_noise: float = 0.0,
    eval_every: int = 25,
    eval_fn: Callable[[Any], Any] | None = None,
    prior_params: ThroughputParams | None = None,
    microbatch_axis: Any = 0,
    compiler_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the job-level agent loop (Sec 3.4.1) and return its history.

    Args:
      loss_fn: ``loss_fn(params, *batch) -> scalar`` (mean over the batch).
      params: initial parameters.
      optimizer: an optax optimizer whose state holds PGNS statistics (built with
        ``with_pgns``/``track_pgns``); its ``update`` receives the mean of the micro-batch
        gradients and the extra arguments ``microbatch_moments``
        (:func:`~scarjax.pollux.reduce_microbatches`), ``microbatch_size``, ``batch_size``,
        ``phi`` and ``progress`` (examples of statistical progress).
      data: tuple of arrays with a leading example axis (sampled with replacement).
      config: :class:`AgentConfig`; ``retune_every = 0`` gives the fixed-``M0`` baseline.
      key: PRNG key.
      max_steps, time_budget: stop after this many steps / seconds of (simulated or
        measured) time; at least one must be given.
      clock: ``'measured'`` (wall time, requires ``replicas == 1``) or
        :class:`ThroughputParams` for a simulated clock (Eq 3.8).
      clock_noise: log-normal noise (sigma) on simulated step times.
      eval_every: steps between evaluations of ``eval_fn(params)`` (default: full-data loss).
      prior_params: throughput model used before any fit (default: the simulated
        clock's parameters, or a perfectly scaling guess in measured mode).
      microbatch_axis: the axis the micro-batch gradients are stacked on (``vmap``'s
        ``out_axes``): ``0``, ``-1`` or a pytree of them per leaf
        (:func:`~scarjax.pollux.microbatch_axes`, faster on XLA:CPU); the statistics are the
        same for every choice.
      compiler_options: XLA options of the jitted training step (one program per
        ``(K (s + 1), m)`` shape) and of the default ``eval_fn``, as ``jax.jit``'s
        ``compiler_options``; e.g. ``{"xla_backend_optimization_level": 0}`` compiles several
        times faster for short runs (float results may differ in the last bits).

    Returns:
      dict of NumPy arrays per step: ``time`` (cumulative s), ``t_iter``, ``local_bsz``,
      ``accum_steps``, ``batch_size``, ``phi``, ``efficiency``, ``stat_epochs``,
      ``train_loss``; per evaluation: ``eval_step``, ``eval_time``, ``eval_stat_epochs``,
      ``eval``; and ``fits`` (list of FitResult dicts) and ``tunes`` (list of configs).
    """
    config.validate()
    microbatch_axis = _check_axis(microbatch_axis)
    if max_steps is None and time_budget is None:
        raise ValueError("give max_steps or time_budget")
    if max_steps is not None:
        va.check_int("max_steps", max_steps, lo=1)
    if time_budget is not None:
        va.check_real("time_budget", time_budget, lo=0.0, lo_open=True)
    va.check_real("clock_noise", clock_noise, lo=0.0)
    if compiler_options is not None and not isinstance(compiler_options, dict):
        raise TypeError(f"compiler_options must be a dict or None, got {type(compiler_options).__name__}")
    measured = isinstance(clock, str)
    if measured and clock != "measured":
        raise ValueError(f"clock must be 'measured' or ThroughputParams, got {clock!r}")
    if measured and config.replicas != 1:
        raise ValueError(
            f"a measured clock needs replicas == 1 (one real device), got replicas="
            f"{config.replicas}; pass clock=ThroughputParams(...) to simulate"
        )
    sim = None if measured else check_params(clock)
    if prior_params is None:
        prior_params = sim if sim is not None else ThroughputParams(0.0, 1e-4, 0, 0, 0, 0, 1.0)
    n_data = int(jax.tree.leaves(data)[0].shape[0])
    agent = PolluxAgent(config, prior_params)
    opt_state = optimizer.init(params)
    find_pgns_state(opt_state)  # raises if the optimizer does not estimate the PGNS
    jitted_step, jitted_loss = _programs(loss_fn, optimizer, microbatch_axis, n_data, compiler_options)
    data = tuple(jnp.asarray(a) for a in data)  # arguments of the programs, on the device once
    if eval_fn is None:
        eval_fn = functools.partial(jitted_loss, data=data)

    def step(params, opt_state, key, m_tot, phi, progress, shape):
        return jitted_step(params, opt_state, key, m_tot, phi, progress, data, shape=shape)

    m, s = _initial_config(config)
    k_rep = config.replicas
    hist: dict[str, list] = {
        k: []
        for k in (
            "time",
            "t_iter",
            "local_bsz",
            "accum_steps",
            "batch_size",
            "phi",
            "efficiency",
            "stat_epochs",
            "train_loss",
            "eval_step",
            "eval_time",
            "eval_stat_epochs",
            "eval",
        )
    }
    fits, tunes = [], []
    clock_t, progress, phi = 0.0, 0.0, float("inf")
    seen_shapes: set = set()
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**31 - 1)))
    t_step = 0
    m0 = config.base_batch_size

    def evaluate():
        hist["eval_step"].append(t_step)
        hist["eval_time"].append(clock_t)
        hist["eval_stat_epochs"].append(progress)
        hist["eval"].append(np.asarray(eval_fn(params)).tolist())

    evaluate()
    while True:
        if max_steps is not None and t_step >= max_steps:
            break
        if time_budget is not None and clock_t >= time_budget:
            break
        shape = (k_rep * (s + 1), m)
        m_tot = k_rep * m * (s + 1)
        key, sk = jax.random.split(key)
        phi_in = jnp.asarray(min(phi, 3e38), jnp.float32)
        t0 = time.perf_counter()
        params, opt_state, loss = step(
            params,
            opt_state,
            sk,
            jnp.asarray(m_tot, jnp.float32),
            phi_in,
            jnp.asarray(progress * n_data, jnp.float32),
            shape=shape,
        )
        loss = float(loss)  # blocks
        wall = time.perf_counter() - t0
        if measured:
            t_it = wall
            if shape in seen_shapes:  # the first call of a shape includes compilation
                agent.observe(m, s, wall)
            else:
                t_it = None
            seen_shapes.add(shape)
        else:
            t_it = float(_t_iter(sim, config.nodes, k_rep, m, s)) * float(
                np.exp(clock_noise * rng.standard_normal())
            )
            agent.observe(m, s, t_it)
        if t_it is not None:
            clock_t += t_it
        phi = float(pgns_from_state(opt_state))
        eff = float(_stat_efficiency(m_tot, phi, m0)) if m_tot >= m0 else 1.0
        progress += m_tot * eff / n_data
        t_step += 1
        for k_, v in (
            ("time", clock_t),
            ("t_iter", np.nan if t_it is None else t_it),
            ("local_bsz", m),
            ("accum_steps", s),
            ("batch_size", m_tot),
            ("phi", phi),
            ("efficiency", eff),
            ("stat_epochs", progress),
            ("train_loss", loss),
        ):
            hist[k_].append(v)
        if eval_every and t_step % eval_every == 0:
            evaluate()
        if config.retune_every and t_step % config.retune_every == 0:
            if measured and len({r[2:4] for r in agent.records}) >= 1:
                fit = agent.refit()
                fits.append({"step": t_step, **fit._asdict(), "params": fit.params._asdict()})
            cfg = agent.tune(phi)
            if int(cfg.local_bsz) > 0:
                m, s = int(cfg.local_bsz), int(cfg.accum_steps)
            tunes.append(
                {
                    "step": t_step,
                    "phi": phi,
                    "local_bsz": m,
                    "accum_steps": s,
                    "batch_size": k_rep * m * (s + 1),
                    "goodput": float(cfg.goodput),
                }
            )
    if not hist["eval_step"] or hist["eval_step"][-1] != t_step:
        evaluate()
    out = {k: np.asarray(v) for k, v in hist.items()}
    out["fits"] = fits
    out["tunes"] = tunes
    out["params"] = params
    return out
