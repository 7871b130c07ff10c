"""The named choices that string hook arguments index (Sec 5.4): checkpoint strategies and
recovery modes.

A hook argument varied across vmapped trials must be an array, so a string such as
``recovery="partial"`` is passed to the compiled loop as its index in one of these tuples
(:func:`scarjax.core.run` converts ``hook_args`` strings; the SCAR hooks convert back).
They live in this low-level module because both :mod:`scarjax.core` (which converts) and
:mod:`scarjax.scar` (which defines what they mean) need them, and ``scar`` builds on
``core``. :data:`scarjax.scar.checkpoint.STRATEGIES` and
:data:`scarjax.scar.faults.RECOVERIES` are these same tuples.
"""

from __future__ import annotations

__all__ = ["RECOVERIES", "STRATEGIES"]

#: How the running checkpoint picks the blocks it saves (Sec 5.4.2):
#: :class:`scarjax.scar.checkpoint.Checkpoint` ``strategy``.
STRATEGIES = ("full", "priority", "round_robin", "random")

#: How lost blocks are recovered (Sec 5.4.1): from the running checkpoint alone
#: (``"partial"``) or the whole state rolled back to it (``"full"``).
RECOVERIES = ("partial", "full")
