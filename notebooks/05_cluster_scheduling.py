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
# # 05 - Cluster scheduling with goodput: Pollux vs Tiresias vs Optimus
#
# Pollux (thesis Ch. 3, Sec 3.4.2 and 3.5) co-adapts each job's batch size with the
# cluster-wide GPU allocation. `scarjax.sched` replays the Pollux artifact's simulator
# inputs: jobs of six applications whose step times and gradient statistics were measured
# on a 16 x 4 GPU testbed, submitted as in a workload sampled from the Microsoft Philly
# trace. Here we
#
# 1. sample a workload from the Philly trace the way the artifact does
#    (`scarjax.sched.workload.sample_workload`; `key=1`, the int seed of the artifact's
#    `--seed 1`, at load 1.0 *is* the artifact's `workload-1`; every `scarjax.sched` entry
#    point takes a JAX PRNG key or such an int seed, and all times are in seconds);
# 2. simulate its first jobs under PolluxSched (genetic search over allocations, adaptive
#    batch sizes), Tiresias (two-queue least-attained-service, the users' tuned configurations)
#    and Optimus+Oracle (greedy marginal gain, oracle remaining iterations);
# 3. plot the GPUs each policy gives each application over time and the distribution of job
#    completion times (JCT).
#
# The cut-down setting keeps the notebook fast: the first 30 jobs without the one ImageNet
# job (a 14-hour job), on 8 nodes x 4 GPUs, and a short genetic search. `experiments/sched_main.py`
# runs the full workloads.

# %%
import matplotlib.pyplot as plt
import numpy as np

from scarjax.data.pollux_sim import load_workload
from scarjax.sched.apps import load_apps
from scarjax.sched.ga import GAConfig, PolluxPolicy
from scarjax.sched.simulator import Cluster, simulate
from scarjax.sched.optimus import OptimusPolicy
from scarjax.sched.tiresias import TiresiasPolicy
from scarjax.sched.workload import app_configurations, job_load, sample_workload, subset

w = sample_workload(1.0, key=1)
ref = load_workload("workload-1")
print("sampled == the artifact's workload-1:", bool((w.name == ref.name).all() and (w.batch_size == ref.batch_size).all()))
print(f"{len(w)} jobs in 8 h: job load {job_load(w):.2f}x")
print("tuned configurations of cifar10 (GPUs, batch size, JCT s):",
      [(k, b, round(t)) for k, b, t in app_configurations("cifar10")])

# %%
keep = w.application != "imagenet"
w_small = subset(type(w)(name=w.name[keep], time=w.time[keep], application=w.application[keep],
                         num_replicas=w.num_replicas[keep], batch_size=w.batch_size[keep], source=w.source), 30)
cluster = Cluster(nodes=8, gpus_per_node=4)
apps = load_apps()
policies = {
    "pollux": PolluxPolicy(GAConfig(pop_size=20, generations=10, p=-1.0)),
    "tiresias": TiresiasPolicy(),
    "optimus": OptimusPolicy(),
}
results = {name: simulate(w_small, pol, cluster=cluster, apps=apps, key=0) for name, pol in policies.items()}
for name, r in results.items():
    print(f"{name:9s} average JCT {r.avg_jct_s:7.0f} s   p99 {r.p99_jct_s:7.0f} s   makespan {r.makespan_s:7.0f} s")
order = sorted(results, key=lambda n: results[n].avg_jct_s)
print("policy ordering by average JCT:", " < ".join(order))

# %% [markdown]
# ## GPU allocation over time
#
# Each panel stacks the GPUs held by the jobs of each application after every scheduling
# decision. Pollux spreads the cluster over more jobs early (small batch sizes are
# statistically efficient at the start of training) and gives jobs more GPUs as their
# gradient noise grows; Tiresias runs each job at the user's fixed GPU count and queues the
# rest; Optimus grows the jobs with the largest marginal gain.

# %%
names = apps.names
fig, axes = plt.subplots(1, 3, figsize=(15, 3.6), sharey=True, layout="constrained")
for ax, (name, r) in zip(axes, results.items()):
    t = r.timeline["times"] / 3600
    g = r.timeline["gpus"]  # [T, J]
    job_app = np.array([names.index(j.app) for j in r.jobs])
    stacks = [g[:, job_app == a].sum(axis=1) for a in range(len(names))]
    ax.stackplot(t, *stacks, labels=names, step="post")
    ax.axhline(cluster.total_gpus, color="k", lw=0.8, ls=":")
    ax.set_title(f"{name}: avg JCT {r.avg_jct_s / 3600:.2f} h")
    ax.set_xlabel("time (hours)")
axes[0].set_ylabel("GPUs allocated")
axes[-1].legend(loc="upper right", fontsize=8)
plt.show()
for name, r in results.items():
    used = r.timeline["used_gpus"]
    print(f"{name:9s} mean GPUs in use {used.mean():5.1f} of {cluster.total_gpus}, "
          f"restarts per job {np.mean([j.restarts for j in r.jobs]):.1f}")

# %% [markdown]
# ## Job completion times
#
# The CDF of the JCTs: short CIFAR-10 and NCF jobs at the left, DeepSpeech2, BERT and YOLOv3
# at the right.

# %%
fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
for name, r in results.items():
    j = np.sort(r.jcts[np.isfinite(r.jcts)])
    ax.step(j / 3600, np.arange(1, j.size + 1) / j.size, where="post", label=name)
ax.set_xscale("log")
ax.set_xlabel("JCT (hours)")
ax.set_ylabel("fraction of jobs")
ax.legend()
plt.show()
for name, r in results.items():
    j = r.jcts[np.isfinite(r.jcts)]
    print(f"{name:9s} median JCT {np.median(j):6.0f} s, jobs done within 1 h: {np.mean(j < 3600):.0%}")
