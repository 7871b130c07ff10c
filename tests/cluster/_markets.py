"""The markets the cluster tests of many draws share: the p3.2xlarge machine type (on-demand
$3.06/h, spot $0.92/h), the embedded AWS p3 node trace replayed with a 120 s start-up, and
random replayed traces drawn by hypothesis."""

from __future__ import annotations

import functools

import numpy as np
from hypothesis import strategies as st

from scarjax.cluster import market as mk
from scarjax.data import transient as td


def machine() -> mk.MachineType:
    return mk.MachineType("p3.2xlarge", 3.06, spot=0.92)


@functools.lru_cache(maxsize=None)
def p3() -> mk.Market:
    """The embedded trace, loaded once per test process."""
    return mk.Market(machine(), mk.replay(td.load_aws_p3_trace()), startup=mk.fixed_startup(120.0))


def random_trace(data, *, max_nodes: int, warnings=(0.0,)) -> mk.Market:
    """A replayed trace of 1 to ``max_nodes`` nodes drawn from hypothesis' ``data``: arrivals in
    [0, 6000] s, each node staying 1 to 9000 s or forever, a warning among ``warnings`` (drawn
    only when there is a choice), a 30 s start-up."""
    k = data.draw(st.integers(1, max_nodes), label="nodes")
    add = np.array(sorted(data.draw(st.lists(st.integers(0, 6000), min_size=k, max_size=k), label="add")), float)
    stay = np.array(data.draw(st.lists(st.integers(1, 9000), min_size=k, max_size=k), label="stay"), float)
    rem = np.where(np.array(data.draw(st.lists(st.booleans(), min_size=k, max_size=k), label="forever")),
                   np.inf, add + stay)
    warning = data.draw(st.sampled_from(list(warnings)), label="warning_s") if len(warnings) > 1 else warnings[0]
    return mk.Market(machine(), mk.replay((add, rem), warning_s=warning), startup=mk.fixed_startup(30.0))
