# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · The sharded parameter server: a server-shard failure and SCAR recovery on 8 devices
#
# The same MLR training as `scarjax.run`, now on a `('server', 'worker')` mesh of 8
# devices (4 parameter-server shards × 2, every device a worker): the weight rows are
# blocks assigned at random to the server shards, workers push their gradients with a
# reduce-scatter and pull the parameters with an all-gather (thesis Sec 5.4.3).
# At iteration 20 one server shard fails: its blocks and their Adam moments are lost;
# the recovery coordinator re-assigns them to the survivors and reloads them from the
# running (priority) checkpoint — partial recovery (Sec 5.4.1) — or rolls everything back.

# %%
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"  # before jax
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import optax

import scarjax
from scarjax.scar import checkpoint as ck, faults, partition as pt
from scarjax import ps as sps
from scarjax.models import mlr
from scarjax.ps import failures

print(len(jax.devices()), "devices")

# %%
alg = mlr.digits(batch_size=128, optimizer=optax.adam(0.02))
state0 = alg.init(jax.random.key(0), alg.data)
part = pt.by_row(state0, num_servers=4, key=0)
ps = sps.ParameterServer(alg, part, sps.make_mesh(4, 2), workers=8,
                         checkpoint=ck.Checkpoint("priority", 0.25, period=16))
print(f"{part.num_blocks} blocks on 4 server shards; rows per device:",
      ps.layout.cap, "; bytes per device:", ps.bytes_per_device())

# %%
STEPS, T, key = 60, 20, jax.random.key(1)
base, base_tr = ps.run(ps.init(key), STEPS, key)
ref, ref_tr = scarjax.run(alg, None, STEPS, key, workers=8)
gap = np.abs(np.asarray(ps.logical(base).params["w"]) - np.asarray(ref.params["w"])).max()
print(f"parameter server vs single-device scarjax.run: max |Δw| = {gap:.2e}")

# %%
results = {}
for recovery in ("partial", "full"):
    st, loss, lost = failures.run_with_failure(ps, STEPS, key, fail_at=T, servers=[2], recovery=recovery)
    results[recovery] = np.asarray(loss)
    alive = np.asarray(st.placement.alive)
    print(f"{recovery:>7}: server 2 failed at step {T}, lost {int(lost.sum())} blocks; "
          f"servers in service {alive.astype(int).tolist()}; loss just before {loss[T]:.4f} "
          f"-> final {loss[-1]:.4f} (no failure: {base_tr.loss[-1]:.4f})")

# %%
# The single-device SCAR hook draws the failed server from its key; failing the same
# server on the parameter server gives the same numbers.
k_lost = jax.random.split(jax.random.split(jax.random.split(key, 3)[1], 1)[0])[1]
drawn = np.flatnonzero(np.asarray(pt.random_servers(k_lost, 4, 1))).tolist()
hook = faults.scar(part, checkpoint=ps.checkpoint, failure=faults.Failure(servers=1, when=T), recovery="partial")
_, hook_tr = scarjax.run(alg, hook, STEPS, key, workers=8)
_, ps_loss, _ = failures.run_with_failure(ps, STEPS, key, fail_at=T, servers=drawn, recovery="partial")
print(f"SCAR hook (server {drawn[0]} lost) vs parameter server: max |Δloss| = "
      f"{np.abs(np.asarray(hook_tr.loss) - np.asarray(ps_loss)).max():.2e}")

# %%
eps = float(base_tr.loss[-1]) * 1.02
first = lambda l: int(np.argmax(l <= eps)) if (l <= eps).any() else None  # noqa: E731
print(f"iterations to loss <= {eps:.4f}: no failure {first(np.asarray(base_tr.loss))}, "
      f"partial {first(results['partial'])}, full {first(results['full'])}")
print("recovered: partial recovery rework",
      (first(results['partial']) or STEPS) - first(np.asarray(base_tr.loss)),
      "iterations; full recovery rework", (first(results['full']) or STEPS) - first(np.asarray(base_tr.loss)))
