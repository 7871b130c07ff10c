"""The market the cluster tests of many draws share: the p3.2xlarge machine type (on-demand
$3.06/h, spot $0.92/h) and the embedded AWS p3 node trace replayed with a 120 s start-up."""

from __future__ import annotations

import functools

from scarjax.cluster import market as mk
from scarjax.data import transient as td


def machine() -> mk.MachineType:
    return mk.MachineType("p3.2xlarge", 3.06, spot=0.92)


@functools.lru_cache(maxsize=None)
def p3() -> mk.Market:
    """The embedded trace, loaded once per test process."""
    return mk.Market(machine(), mk.replay(td.load_aws_p3_trace()), startup=mk.fixed_startup(120.0))
