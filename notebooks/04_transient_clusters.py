# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 - Transient clusters on a simulated clock
#
# `scarjax.cluster` puts a training job on machines that the provider can take away
# (transient clusters). A **market** says which machines we buy, what they cost, how long they
# live and how they are billed; a **policy** decides what to do when one goes; the
# **clock** advances simulated time interval by interval while the job trains *for
# real* (`scarjax.cluster.trainer.Trainer`), so the loss-vs-hours and loss-vs-dollars
# curves below come from actual iterations, not from an assumed progress rate.
#
# 1. load a real trace: GCE preemptible K80 lifetimes in us-central1 measured by CM-DARE;
# 2. build a market from it (GCE's fixed 70%-off price, per-second billing, measured
#    start-up times);
# 3. run one job under checkpoint-restart and under SCAR's partial recovery on the same
#    market draw, and plot loss vs hours and vs dollars.

# %%
import jax
import numpy as np

from scarjax import data
from scarjax.cluster import clock as ck
from scarjax.cluster.steptime import step_time_linear
from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.models import mlr

life = data.load_gce_lifetimes()  # the embedded copy of CM-DARE's lifetime.csv
k80 = life.select(gpu="K80", region="us-central1", campaign="2019-02")
hours = np.asarray(k80.capped_lifetime_s) / 3600.0
print(f"{len(k80)} K80 preemptible VMs in us-central1: median lifetime {np.median(hours):.1f} h, "
      f"{np.mean(hours < 2):.0%} preempted within 2 h, {np.mean(hours >= 24):.0%} reached the 24 h cap")

# %% [markdown]
# ## A market from the trace
#
# `gce_preemptible` resamples those lifetimes (per machine, 30 s warning, 24 h cap);
# `cmdare_startup` resamples the measured request-to-running times.

# %%
market = mk.Market(
    mk.MachineType("n1-standard-4+K80", on_demand_price=0.64),  # stated; preemptible: GCE's fixed 70% off
    mk.gce_preemptible("K80", "us-central1"),
    billing="per_second",
    startup=mk.cmdare_startup("preemptible"),
)
print(f"MTTF per machine {market.mttf_s() / 3600:.1f} h, preemptible price ${market.spot:.3f}/h, "
      f"mean start-up {float(market.startup.mean_s):.0f} s")

# %% [markdown]
# ## One job, two policies
#
# Full-batch MLR on digits on 8 machines; one iteration takes `600 / 8 + 2 log2(8)` = 81 s.
# The target is the loss of the failure-free run after 80 iterations. Checkpoint-restart
# writes a full checkpoint (120 s) at the Young/Daly interval and, after a revocation, waits
# for a replacement, reads the checkpoint back and redoes the lost iterations; SCAR writes
# 1/8 of the blocks (those that changed most) 8x as often and, after a revocation, reloads
# only the lost machine's blocks and goes on with the others.

# %%
alg = mlr.digits(lr=1.0, l2=1e-2)
target = float(Trainer(alg, 0).train(80)[-1])
job = ck.Job(alg, target, step_time_linear(600.0, 2.0), workers=8, checkpoint_s=120.0, restore_s=120.0,
             max_steps=240)
print(f"target loss {target:.4f}; Young/Daly interval {po.checkpoint_interval_steps(job, market):g} iterations")

key = jax.random.key(6)  # one market draw (three machines preempted within 30 min), the same for all
runs = {
    "on-demand": po.on_demand(job, market, key=key, horizon_s=48 * 3600.0),
    "checkpoint-restart": po.checkpoint_restart(job, market, key=key, horizon_s=48 * 3600.0),
    "SCAR": po.scar(job, market, key=key, horizon_s=48 * 3600.0, fraction=0.125),
}
for name, run in runs.items():
    o = run.to_target(target)
    print(f"{name:>18}: {'reached' if o.reached else 'censored at'} the target in {o.time_s / 3600:.2f} h "
          f"for ${o.dollars:.2f} ({run.count('revocation')} revocations, {o.steps} iterations)")

# %% [markdown]
# ## Loss vs hours and vs dollars

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
for name, run in runs.items():
    axes[0].plot(run.time_s / 3600.0, run.loss, label=name)
    axes[1].plot(run.dollars, run.loss, label=name)
for ax, xl in zip(axes, ("hours", "dollars")):
    ax.axhline(target, color="gray", ls=":", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel(xl)
    ax.set_ylabel("training loss")
axes[0].legend()
plt.show()

# %% [markdown]
# The events of a run tell what happened on the clock (checkpoints left out):

# %%
for name in ("checkpoint-restart", "SCAR"):
    print(name)
    for t, kind, detail in [e for e in runs[name].events if e[1] != "checkpoint"][:8]:
        print(f"  {t / 3600:6.2f} h  {kind:<10} {detail}")

# %% [markdown]
# ## Many market draws
#
# `simulate_trials` runs a policy over independent draws (checkpoint-restart shares one
# real run among them, SCAR runs all draws as one `run_trials` program); `outcomes` gives
# the time and dollars to the target, censored where a draw missed it.

# %%
stats = {}
for name, pol, opts in (("checkpoint-restart", po.checkpoint_restart, {}), ("SCAR", po.scar, {"fraction": 0.125})):
    trials = ck.simulate_trials(pol, job, market, 8, jax.random.key(7), horizon_s=48 * 3600.0, **opts)
    out = ck.outcomes(trials, target)
    stats[name] = out
    print(f"{name:>18}: {out['reached'].sum()}/8 reached; mean {out['time_s'].mean() / 3600:.2f} h, "
          f"${out['dollars'].mean():.2f}")

# %% [markdown]
# ## Your own trace, from NumPy arrays
#
# A trace you logged yourself - here 8 hours of 5-minute ticks with the number of spot
# machines you could obtain at each tick (0 to 4), including two hours in which none could be
# had - gets in with **one call**, `mk.Market.from_availability`. The notice and the billing
# are never defaulted: state them (`warning_s=`, `billing=`) or name a provider preset
# (`mk.PROVIDERS`: `"aws"` 2-minute notice and 2015 hourly billing, `"aws_per_second"`,
# `"gce"` 30 s and per-second). A fall in the count takes machines away (with the notice);
# while nothing is offered, the policies fall back to on-demand machines
# (`unavailable="on_demand"`, the default; `"wait"` waits).

# %%
tick_s = 300.0
times_s = np.arange(0.0, 8 * 3600.0, tick_s)  # 96 ticks
counts = np.full(times_s.size, 4)
counts[(times_s >= 1800.0) & (times_s < 3600.0)] = 2  # two machines gone after 30 min
counts[(times_s >= 3600.0) & (times_s < 4500.0)] = 1
counts[(times_s >= 4500.0) & (times_s < 4500.0 + 2 * 3600.0)] = 0  # a gap: no spot machine at all
counts[times_s >= 4500.0 + 2 * 3600.0] = 3

own = mk.Market.from_availability(times_s, counts, provider="aws_per_second",
                                  machine=mk.MachineType("p3.2xlarge", 3.06, spot=0.92))
print(f"{own.billing} billing, {float(own.process.warning_s):g} s notice; MTTF {own.mttf_s() / 3600:.2f} h; "
      f"offered at 1 h: {own.available(3600.0):g}, at 2 h: {own.available(7200.0):g}, "
      f"next offered after 2 h: {own.next_available(7200.0) / 3600:.2f} h")

# %% [markdown]
# A small job on it (4 workers, 60 s per iteration, the failure-free run's loss after 120
# iterations as the target):

# %%
small = ck.Job(alg, float(Trainer(alg, 0).train(120)[-1]), step_time_linear(200.0, 5.0), workers=4,
               checkpoint_s=30.0, restore_s=30.0, max_steps=400)
key = jax.random.key(0)
own_runs = {
    "on-demand": po.on_demand(small, own, key=key, horizon_s=8 * 3600.0),
    "checkpoint-restart": po.checkpoint_restart(small, own, key=key, horizon_s=8 * 3600.0),
    "SCAR": po.scar(small, own, key=key, horizon_s=8 * 3600.0, fraction=0.25),
}
for name, run in own_runs.items():
    o = run.to_target(small.target_loss)
    print(f"{name:>18}: {'reached' if o.reached else 'censored at'} the target in {o.time_s / 3600:.2f} h "
          f"for ${o.dollars:.2f} ({run.count('revocation')} revocations)")
