"""SCAR: self-correcting fault tolerance (thesis Ch. 5, Sec 5.4).

* :mod:`~scarjax.scar.partition` – blocks of the state and their servers (data, so it jits);
* :mod:`~scarjax.scar.checkpoint` – the running checkpoint and its strategies (Sec 5.4.2);
* :mod:`~scarjax.scar.faults` – failures, partial/full recovery, the SCAR hook (Sec 5.4.1);
* :mod:`~scarjax.scar.persistent` – running checkpoints on disk with orbax (Sec 5.4.3), and
  its driver (training with that checkpoint and a failure);
* :mod:`~scarjax.scar.simulate` – the Monte-Carlo failure experiment (Secs 5.5.3–5.5.4).
"""

from scarjax.scar import checkpoint, faults, partition, persistent, simulate

__all__ = ["partition", "checkpoint", "faults", "persistent", "simulate"]
