"""What the planner knows of a job: :class:`JobProfile` (fault-free iterations to the target
``K0``, the linear rate ``c`` of thesis Eq 5.3, step, checkpoint and restore times, the measured
drift of the unperturbed run and, optionally, a Pollux goodput profile).

:func:`scarjax.cluster.planner.predict` reads it (the planner's assumptions A3 and A5, thesis
Thm 5.3.1 and Thm 5.4.2 for SCAR's rework); :meth:`JobProfile.from_job` measures it from one real,
unperturbed run of a :class:`scarjax.cluster.clock.Job`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
from jax.flatten_util import ravel_pytree

from scarjax import bounds, pollux
from scarjax import validate as va
from scarjax.cluster import clock as ck
from scarjax.cluster.steptime import StepTime, step_time_pollux
from scarjax.cluster.trainer import Trainer

__all__ = ["JobProfile"]


@dataclasses.dataclass(frozen=True)
class JobProfile:
    """What the planner needs to know of a job (:mod:`scarjax.cluster.planner`, assumptions A3 and A5).

    Attributes:
      name: a label.
      iterations: ``K0``, fault-free iterations to the target (at ``batch_sizes[0]`` if given).
      c: the linear rate of Eq 5.3 (thesis Thm 5.3.1), in (0, 1).
      step_time: a :class:`~scarjax.cluster.steptime.StepTime` (seconds per iteration on ``M``
        machines of speed 1).
      checkpoint_s: seconds of a full checkpoint (a fraction ``r`` costs ``r * checkpoint_s``).
      restore_s: seconds to read a full checkpoint back.
      max_workers: machines the job can use at most.
      initial_distance: ``d₀ = ‖w⁽⁰⁾ − w*‖`` (informational: the bound uses ``Δ_T / d₀``).
      eps: the distance at the target (informational).
      drift_ages, drift: the measured drift ``D(a)`` (A3) at ages ``drift_ages`` (increasing
        ints), the largest over the run (the worst case: Thm 5.3.1's bound); empty: the
        triangle bound ``1 + c^a``.
      drift_mean: the same ratio averaged over the run at each of ``drift_ages`` (the
        expected rework of a revocation anywhere in it: what the planner predicts with);
        empty: ``drift`` (the bound).
      batch_sizes, iteration_scale, batch_step_times: a Pollux goodput profile (A5): the batch
        sizes, ``K(b) / K0`` and the step time at each (empty: one batch size, the job's).
      param_bytes: the parameter state's bytes (TierML's flush), default 4 MB.
      job: the :class:`~scarjax.cluster.clock.Job` it was measured on (for
        :func:`to_simulation`), or ``None``.
      sync_problem: a :class:`scarjax.cluster.syncfly.Problem` wrapping ``job.algorithm``
        (Sync-on-the-fly candidates are simulated with it); ``None`` with a ``job``:
        Sync-on-the-fly is not a candidate.
    """

    name: str
    iterations: float
    c: float
    step_time: StepTime
    checkpoint_s: float = 0.0
    restore_s: float = 0.0
    max_workers: int = 64
    initial_distance: float = 1.0
    eps: float | None = None
    drift_ages: tuple = ()
    drift: tuple = ()
    batch_sizes: tuple = ()
    iteration_scale: tuple = ()
    batch_step_times: tuple = ()
    param_bytes: float = 4e6
    job: Any = dataclasses.field(default=None, compare=False, repr=False)
    sync_problem: Any = dataclasses.field(default=None, compare=False, repr=False)
    drift_mean: tuple = ()

    def __post_init__(self):
        va.check_str("name", self.name)
        va.check_real("iterations", self.iterations, lo=0.0, lo_open=True, scalar=True)
        va.check_real("c", self.c, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
        if not isinstance(self.step_time, StepTime):
            raise TypeError(f"step_time must be a scarjax.cluster.steptime.StepTime, got {type(self.step_time).__name__}")
        va.check_real("checkpoint_s", self.checkpoint_s, lo=0.0, scalar=True)
        va.check_real("restore_s", self.restore_s, lo=0.0, scalar=True)
        va.check_int("max_workers", self.max_workers, lo=1)
        va.check_real("initial_distance", self.initial_distance, lo=0.0, lo_open=True, scalar=True)
        va.check_real("param_bytes", self.param_bytes, lo=0.0, scalar=True)
        if len(self.drift_ages) != len(self.drift):
            raise ValueError(f"drift_ages and drift must have one length, got {len(self.drift_ages)} and {len(self.drift)}")
        if self.drift:
            a = np.asarray(self.drift_ages, np.float64)
            d = np.asarray(self.drift, np.float64)
            if np.any(np.diff(a) <= 0) or a[0] < 0:
                raise ValueError(f"drift_ages must be increasing and >= 0, got {self.drift_ages!r}")
            if not np.all(np.isfinite(d)) or np.any(d < 0):
                raise ValueError(f"drift must be finite and >= 0, got {self.drift!r}")
        if self.drift_mean:
            dm = np.asarray(self.drift_mean, np.float64)
            if dm.shape != (len(self.drift_ages),):
                raise ValueError(f"drift_mean must have one value per drift_ages ({len(self.drift_ages)}), "
                                 f"got {len(self.drift_mean)}")
            if not np.all(np.isfinite(dm)) or np.any(dm < 0):
                raise ValueError(f"drift_mean must be finite and >= 0, got {self.drift_mean!r}")
        nb = len(self.batch_sizes)
        if nb:
            if len(self.iteration_scale) != nb or len(self.batch_step_times) != nb:
                raise ValueError("batch_sizes, iteration_scale and batch_step_times must have one length")
            s = np.asarray(self.iteration_scale, np.float64)
            if not np.all(np.isfinite(s)) or np.any(s <= 0):
                raise ValueError(f"iteration_scale must be finite and > 0, got {self.iteration_scale!r}")
            for t in self.batch_step_times:
                if not isinstance(t, StepTime):
                    raise TypeError(f"batch_step_times must be scarjax.cluster.steptime.StepTime objects, got {type(t).__name__}")
        elif self.iteration_scale or self.batch_step_times:
            raise ValueError("iteration_scale / batch_step_times given without batch_sizes")

    @classmethod
    def from_job(cls, job: ck.Job, key: Any = 0, *, name: str | None = None, c: float | None = None,
                 max_workers: int = 64, snapshots: int = 128, sync_problem: Any = None,
                 param_bytes: float | None = None) -> "JobProfile":
        """Measure the job once, unperturbed (real training, :class:`~scarjax.cluster.trainer.Trainer`
        keyed like the policies' ``train_key``): ``K0`` = the first step whose loss is
        ``<= job.target_loss`` (``ValueError`` if none within ``job.max_steps``), the distances
        ``d_k = ‖w_k − w*‖`` (``w*``: ``algorithm.optimum``, else the last iterate, stated) at
        ``snapshots`` evenly spaced steps, ``c`` by :func:`scarjax.bounds.estimate_c`
        (``'max_ratio'``, per snapshot stride ``s``: ``c = c_s^{1/s}``) unless given, and the
        drift ``D(a) = max_ℓ ‖w_ℓ − w_{ℓ−a}‖ / d_{ℓ−a}`` at the snapshot ages (A3) and its mean
        over ``ℓ`` up to ``K0`` (``drift_mean``)."""
        if not isinstance(job, ck.Job):
            raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
        snapshots = va.check_int("snapshots", snapshots, lo=8)
        trainer = Trainer(job.algorithm, key)
        losses = trainer.train(job.max_steps)
        hit = np.nonzero(losses <= job.target_loss)[0]
        if hit.size == 0:
            raise ValueError(f"job: the loss never reaches target_loss={job.target_loss:g} within max_steps="
                             f"{job.max_steps} (lowest {losses.min():.4g}); raise max_steps or the target")
        K0 = int(hit[0]) + 1
        # snapshots: every `stride` steps up to past K0 (a second pass, from the start)
        horizon = min(job.max_steps, max(K0 + K0 // 4, K0 + 2))
        stride = max(1, horizon // snapshots)
        tr = Trainer(job.algorithm, key)
        flat = [np.asarray(ravel_pytree(tr.state.params)[0], np.float64)]
        steps = [0]
        while tr.step + stride <= horizon:
            tr.train(stride)
            flat.append(np.asarray(ravel_pytree(tr.state.params)[0], np.float64))
            steps.append(tr.step)
        W = np.stack(flat)
        opt = getattr(job.algorithm, "optimum", None)
        w_star = np.asarray(ravel_pytree(opt)[0], np.float64) if opt is not None else \
            np.asarray(ravel_pytree(trainer.state.params)[0], np.float64)
        d = np.linalg.norm(W - w_star, axis=1)
        d0 = float(d[0])
        if not d0 > 0:
            raise ValueError("job: the initial iterate is the optimum (d₀ = 0): nothing to plan")
        upto = int(np.searchsorted(steps, K0, side="right"))
        if c is None:
            try:
                cs = bounds.estimate_c(d[: max(upto, 4)], method="max_ratio")
            except bounds.NotLinearlyConvergentError:
                # the settle check failed (the rate still slowing at the target): the largest
                # one-step ratio over the whole measured window, past the target (conservative)
                ratios = d[1:] / np.maximum(d[:-1], 1e-300)
                ratios = ratios[d[:-1] > 1e3 * np.finfo(np.float32).eps * d0]
                cs = float(np.max(ratios)) if ratios.size else 1.0
                if not 0 < cs < 1:
                    raise ValueError(f"job: the run does not converge linearly (largest ratio {cs:.4g} per "
                                     f"{stride} steps); pass c= (thesis Eq 5.3)") from None
            c = float(cs ** (1.0 / stride))
        ages, drift, drift_mean = [], [], []
        for j in range(1, min(len(steps), upto + 1)):
            a = j * stride
            num = np.linalg.norm(W[j:upto + 1] - W[:upto + 1 - j], axis=1) if upto + 1 - j > 0 else np.zeros(0)
            den = d[: upto + 1 - j]
            ok = den > 1e-12 * d0
            if num.size and ok.any():
                ages.append(a)
                ratio = num[ok[: num.size]] / den[: num.size][ok[: num.size]]
                drift.append(float(np.max(ratio)))
                drift_mean.append(float(np.mean(ratio)))
        if param_bytes is None:
            param_bytes = float(W.shape[1] * 4)
        eps = float(d[min(upto, len(d) - 1)])
        return cls(name or getattr(job.algorithm, "name", "job"), float(K0), float(c), job.step_time,
                   job.checkpoint_s, job.restore_s, max_workers, d0, eps if eps > 0 else None,
                   tuple(int(a) for a in [0] + ages), tuple([0.0] + drift), param_bytes=float(param_bytes),
                   job=job, sync_problem=sync_problem, drift_mean=tuple([0.0] + drift_mean))

    @classmethod
    def from_pollux(cls, name: str, params: Any, phi: float, base_batch_size: int, iterations: float, c: float,
                    batch_sizes: Sequence[int], *, gpus_per_node: int = 1, **kwargs: Any) -> "JobProfile":
        """A profile with a Pollux goodput profile (A5): ``iterations`` at ``base_batch_size``
        ``b0``; at each of ``batch_sizes`` the step time is :func:`~scarjax.cluster.steptime.step_time_pollux`
        (thesis Eq 3.5-3.8 with ``params``) and the iterations ``b0 / (b ·
        EFFICIENCY(b))`` times ``iterations`` (Eq 3.3, PGNS ``phi``)."""
        bs = tuple(va.check_int("batch_sizes", b, lo=1) for b in batch_sizes)
        if not bs:
            raise ValueError("batch_sizes must not be empty")
        b0 = va.check_int("base_batch_size", base_batch_size, lo=1)
        if min(bs) < b0:
            raise ValueError(f"batch_sizes must be >= base_batch_size={b0}, got {min(bs)}")
        eff = np.asarray(pollux.efficiency(np.asarray(bs, np.float32), float(phi), b0), np.float64)
        scale = tuple(float(b0 / (b * e)) for b, e in zip(bs, eff))
        times = tuple(step_time_pollux(params, b, gpus_per_node) for b in bs)
        return cls(name, float(iterations), float(c), times[0], batch_sizes=bs, iteration_scale=scale,
                   batch_step_times=times, **kwargs)

    # derived -------------------------------------------------------------------------------
    def batches(self) -> tuple[tuple, tuple, tuple]:
        if self.batch_sizes:
            return self.batch_sizes, self.iteration_scale, self.batch_step_times
        bs = self.job.batch_size if self.job is not None and self.job.batch_size is not None else 0
        return (bs,), (1.0,), (self.step_time,)

    def drift_table(self, bound: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(ages, log D)`` on 129 uniform points from 0 to ``max(iterations) `` (A3): the
        measured drift (interpolated, held beyond its last age): ``drift_mean`` where measured
        and ``bound`` is false (the expected rework), else ``drift`` (the worst case over the
        run: Thm 5.3.1's bound); unmeasured, the triangle bound ``1 + c^a``."""
        top = max(2.0, self.iterations * max(self.iteration_scale or (1.0,)))
        ages = np.linspace(0.0, top, 129)
        if self.drift:
            d = self.drift_mean if self.drift_mean and not bound else self.drift
            D = np.interp(ages, np.asarray(self.drift_ages, np.float64), np.asarray(d, np.float64))
            D = np.maximum(D, 1e-12)
        else:
            D = 1.0 + self.c ** ages
        return ages, np.log(D)

