"""Run a function in fresh JAX processes: the launcher of measurements that need their own
JAX runtime (a forced host-device count, or several processes joined by
``jax.distributed``), kept apart from what they measure.

* :func:`call` — ``module:function(*args)`` in one subprocess whose CPU backend has
  ``force_devices`` host devices (``--xla_force_host_platform_device_count``);
* :func:`call_processes` — ``module:function(rank, world, port, *args)`` in ``world``
  processes with one CPU device each, rank ``r`` pinned to core ``r mod cpu_count`` while
  JAX starts (so XLA sizes its thread pools for one core); the function joins the others
  with :func:`init_distributed` and rank 0's return value comes back;
* :func:`init_distributed` / :func:`unpin_threads` — for use inside such a function.

Arguments and return values travel as JSON (the result is the last stdout line prefixed
``@@``); a failed process raises ``RuntimeError`` with the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import jax

__all__ = ["call", "call_processes", "env", "free_port", "init_distributed", "unpin_threads", "ROOT"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree (``experiments`` importable)
_MARK = "@@"


def env(force_devices: int = 1) -> dict:
    """The environment of a CPU JAX subprocess with ``force_devices`` host devices (the
    caller's ``XLA_FLAGS`` kept, any forced device count replaced)."""
    if int(force_devices) < 1:
        raise ValueError(f"force_devices must be >= 1, got {force_devices!r}")
    out = dict(os.environ)
    flags = [f for f in out.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    if force_devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={int(force_devices)}")
    out["XLA_FLAGS"] = " ".join(flags)
    out["JAX_PLATFORMS"] = "cpu"
    return out


def free_port() -> int:
    """A free TCP port on localhost (for the ``jax.distributed`` coordinator)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _split(target: str) -> tuple[str, str]:
    module, sep, func = target.partition(":")
    if not sep or not module or not func.isidentifier():
        raise ValueError(f"target must be 'package.module:function', got {target!r}")
    return module, func


def _result(stdout: str, target: str) -> Any:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(_MARK)]
    if not lines:
        raise RuntimeError(f"{target} printed no result")
    return json.loads(lines[-1][len(_MARK):])


def call(target: str, *args: Any, force_devices: int = 1, timeout: float | None = None) -> Any:
    """``module:function(*args)`` (JSON arguments and result) in a fresh Python process
    with ``force_devices`` CPU host devices; returns its result."""
    module, func = _split(target)
    code = (f"import sys, json; from {module} import {func}; "
            f"print({_MARK!r} + json.dumps({func}(*json.loads(sys.argv[1]))))")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(list(args))], env=env(force_devices), cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{target} failed in its subprocess:\n{proc.stderr[-3000:]}")
    return _result(proc.stdout, target)


def call_processes(target: str, world: int, *args: Any, timeout: float = 900.0) -> Any:
    """``module:function(rank, world, port, *args)`` in ``world`` processes of one CPU device
    each (rank ``r`` pinned to core ``r mod cpu_count`` while JAX starts; ``port``: a free
    coordinator port for :func:`init_distributed`); returns rank 0's result."""
    if int(world) < 1:
        raise ValueError(f"world must be >= 1, got {world!r}")
    module, func = _split(target)
    code = ("import os, sys, json; rank = int(sys.argv[1]); os.sched_setaffinity(0, {rank % os.cpu_count()}); "
            f"from {module} import {func}; "
            f"r = {func}(rank, int(sys.argv[2]), int(sys.argv[3]), *json.loads(sys.argv[4])); "
            f"print({_MARK!r} + json.dumps(r)) if rank == 0 else None")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(world), str(port), json.dumps(list(args))],
                              env=env(1), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    try:
        res = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    bad = [(r, e) for r, (p, (_, e)) in enumerate(zip(procs, res)) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"{target} failed in process {bad[0][0]} of {world}:\n{bad[0][1][-3000:]}")
    return _result(res[0][0], target)


def init_distributed(rank: int, world: int, port: int) -> None:
    """Join the ``world`` processes of :func:`call_processes` (gloo CPU collectives); a
    no-op for one process."""
    if world > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(f"localhost:{port}", num_processes=world, process_id=rank)


def unpin_threads() -> None:
    """Let every thread of this process run on every core again (after JAX has sized its
    thread pools under :func:`call_processes`' pin, so that gloo's I/O threads are not
    starved)."""
    allowed = set(range(os.cpu_count() or 1))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), allowed)
        except OSError:  # a thread that has exited meanwhile
            pass
