"""Run a function in fresh JAX processes: the launcher of measurements that need their own
JAX runtime (a forced host-device count, or several processes joined by
``jax.distributed``), kept apart from what they measure.

* :func:`call` — ``module:function(*args)`` in one subprocess whose CPU backend has
  ``force_devices`` host devices (``--xla_force_host_platform_device_count``);
* :func:`call_processes` — ``module:function(rank, world, port, *args)`` in ``world``
  processes with one CPU device each, rank ``r`` pinned to core ``r mod cpu_count`` while
  JAX starts (so XLA sizes its thread pools for one core); the function joins the others
  with :func:`init_distributed` and rank 0's return value comes back;
* :func:`init_distributed` / :func:`unpin_threads` — for use inside such a function;
* :func:`start` / :func:`start_processes` — the same, started without waiting (a
  :class:`Launched`): with ``gated=True`` the function's :func:`gate` says that its set-up
  is done and waits there until the caller's :meth:`Launched.go`, so that several launches
  can set up (import JAX, compile) at the same time and then be timed one at a time.

Arguments and return values travel as JSON (the result is the last stdout line prefixed
``@@``); a failed process raises ``RuntimeError`` with the tail of its stderr. A process that is
not one of a ``jax.distributed`` group ends at once after printing its result (``os._exit``:
no interpreter or JAX teardown for the caller to wait for).
"""

from __future__ import annotations

import json
import os
import socket
import selectors
import subprocess
import sys
import tempfile
import time
from typing import Any

import jax

__all__ = ["Launched", "call", "call_processes", "env", "free_port", "gate", "init_distributed", "start",
           "start_processes", "unpin_threads", "ROOT"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree (``experiments`` importable)
_MARK = "@@"
_READY = b"@@ready"
_GATE_ENV = "SCARJAX_LAUNCH_GATE"  # set to "1" in the processes of a gated launch
# How a process not joined to others ends once its result is printed: at once, without Python's
# and JAX's teardown (a CPU second or so under load, which :meth:`Launched.result`, and so the
# measurement launched next, would wait for). Processes of a jax.distributed group end normally
# (their shutdown is coordinated).
_END = "sys.stdout.flush(); sys.stderr.flush(); os._exit(0)"


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
    lines = [ln for ln in stdout.splitlines() if ln.startswith(_MARK) and ln != _READY.decode()]
    if not lines:
        raise RuntimeError(f"{target} printed no result")
    return json.loads(lines[-1][len(_MARK):])


class Launched:
    """Processes started by :func:`start` or :func:`start_processes`.

    :meth:`ready` waits until each has passed :func:`gate` (gated launches only),
    :meth:`go` lets them on, :meth:`result` waits for them to end and returns rank 0's
    result (a failed process raises ``RuntimeError`` with the tail of its stderr), and
    :meth:`kill` ends any still running.
    """

    def __init__(self, target: str, procs: list[subprocess.Popen], errs: list, gated: bool):
        self.target, self._procs, self._errs, self._gated = target, procs, errs, gated
        self._out = [b"" for _ in procs]  # stdout read while waiting for the gate

    def _failure(self, rank: int) -> RuntimeError:
        self._errs[rank].seek(0)
        tail = self._errs[rank].read().decode(errors="replace")[-3000:]
        where = "its subprocess" if len(self._procs) == 1 else f"process {rank} of {len(self._procs)}"
        return RuntimeError(f"{self.target} failed in {where}:\n{tail}")

    def ready(self, timeout: float | None = None) -> None:
        """Block until every process has reached :func:`gate` (a no-op for an ungated launch)."""
        if not self._gated:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for r, p in enumerate(self._procs):
                if _READY not in self._out[r].splitlines():
                    sel.register(p.stdout, selectors.EVENT_READ, r)
            while sel.get_map():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                events = sel.select(left)
                if not events:
                    raise subprocess.TimeoutExpired(self.target, timeout)
                for key, _ in events:
                    r = key.data
                    chunk = os.read(key.fd, 65536)
                    if not chunk:  # ended before its gate
                        self._procs[r].wait()
                        raise self._failure(r)
                    self._out[r] += chunk
                    if _READY in self._out[r].splitlines():
                        sel.unregister(key.fileobj)

    def go(self) -> None:
        """Let every process on from :func:`gate` (a no-op for an ungated launch)."""
        if self._gated:
            for p in self._procs:
                p.stdin.write(b"go\n")
                p.stdin.flush()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for every process to end; rank 0's result."""
        for r, p in enumerate(self._procs):
            out, _ = p.communicate(timeout=timeout)
            self._out[r] += out or b""
        bad = [r for r, p in enumerate(self._procs) if p.returncode != 0]
        if bad:
            raise self._failure(bad[0])
        return _result(self._out[0].decode(), self.target)

    def kill(self) -> None:
        """End every process still running (and close the stderr files)."""
        for p in self._procs:
            p.kill()
            p.wait()
        for e in self._errs:
            e.close()


def _popen(code: str, argv: list[str], environ: dict, gated: bool) -> tuple[subprocess.Popen, Any]:
    err = tempfile.TemporaryFile()  # a file, not a pipe: a chatty stderr cannot block the process
    environ = dict(environ, **{_GATE_ENV: "1" if gated else "0"})
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=environ, cwd=ROOT,
                            stdin=subprocess.PIPE if gated else subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=err)
    return proc, err


def start(target: str, *args: Any, force_devices: int = 1, gated: bool = False) -> Launched:
    """Start ``module:function(*args)`` (JSON arguments and result) in a fresh Python process
    with ``force_devices`` CPU host devices (see :func:`call`)."""
    module, func = _split(target)
    code = (f"import os, sys, json; from {module} import {func}; "
            f"print({_MARK!r} + json.dumps({func}(*json.loads(sys.argv[1])))); {_END}")
    proc, err = _popen(code, [json.dumps(list(args))], env(force_devices), gated)
    return Launched(target, [proc], [err], gated)


def start_processes(target: str, world: int, *args: Any, gated: bool = False) -> Launched:
    """Start ``module:function(rank, world, port, *args)`` in ``world`` processes (see
    :func:`call_processes`)."""
    if int(world) < 1:
        raise ValueError(f"world must be >= 1, got {world!r}")
    module, func = _split(target)
    code = ("import os, sys, json; rank = int(sys.argv[1]); os.sched_setaffinity(0, {rank % os.cpu_count()}); "
            f"from {module} import {func}; "
            f"r = {func}(rank, int(sys.argv[2]), int(sys.argv[3]), *json.loads(sys.argv[4])); "
            f"print({_MARK!r} + json.dumps(r)) if rank == 0 else None\n"
            f"if int(sys.argv[2]) == 1:\n    {_END}")
    port = free_port()
    started = [_popen(code, [str(r), str(world), str(port), json.dumps(list(args))], env(1), gated)
               for r in range(world)]
    return Launched(target, [p for p, _ in started], [e for _, e in started], gated)


def gate() -> None:
    """Inside a function started with ``gated=True``: report that its set-up is done and wait
    until the caller's :meth:`Launched.go` (blocked on stdin, using no CPU).  A no-op in a
    function started otherwise."""
    if os.environ.get(_GATE_ENV) != "1":
        return
    sys.stdout.write(_READY.decode() + "\n")
    sys.stdout.flush()
    if not sys.stdin.readline():
        raise RuntimeError("the launcher closed stdin before letting this process go")


def call(target: str, *args: Any, force_devices: int = 1, timeout: float | None = None) -> Any:
    """``module:function(*args)`` (JSON arguments and result) in a fresh Python process
    with ``force_devices`` CPU host devices; returns its result."""
    launched = start(target, *args, force_devices=force_devices)
    try:
        return launched.result(timeout)
    finally:
        launched.kill()


def call_processes(target: str, world: int, *args: Any, timeout: float = 900.0) -> Any:
    """``module:function(rank, world, port, *args)`` in ``world`` processes of one CPU device
    each (rank ``r`` pinned to core ``r mod cpu_count`` while JAX starts; ``port``: a free
    coordinator port for :func:`init_distributed`); returns rank 0's result."""
    launched = start_processes(target, world, *args)
    try:
        return launched.result(timeout)
    finally:
        launched.kill()


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
