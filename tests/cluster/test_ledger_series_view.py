"""A ledger bills a machine on a price series through a padded view of the series (change
points padded to a power of two at +inf seconds, so that one compiled bill serves every
series of a size class): its charges and cost curves equal scarjax.cluster.market.bill on
the unpadded series bit for bit (hypothesis over series lengths around the padding sizes,
start and end times inside, between and past the changes, revoked or not, hourly and
per-second billing), with a planted violation (a view padded with the first price instead
of the last) that the property catches; series of one size class share one compiled bill."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from hypothesis import Phase, find, given, settings, strategies as st

from scarjax.cluster import ledger as lg
from scarjax.cluster import market as mk

_bill = jax.jit(mk.bill, static_argnames=("scheme",))  # the unpadded reference, compiled per length


def _series(n: int, seed: int) -> mk.PriceSeries:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.uniform(60.0, 3 * 3600.0, n)) - 3600.0
    return mk.price_series(np.round(rng.uniform(0.05, 2.0, n), 4), times, name=f"s{n}-{seed}")


def _reference(series, start, ends, revoked, scheme):
    return np.array([float(_bill(start, t, series, revoked, scheme=scheme)) for t in ends])


def _ledger_bills(series, start, ends, revoked, scheme):
    """The ledger's charge for each end (stopped there, ``revoked`` or not) and its cost curve
    over ``ends`` while the machine runs."""
    led = lg.Ledger()
    led.start("m", start, price=series, billing=scheme)
    (entry,) = led.entries
    charges = np.array([led.charge(entry, t, revoked) for t in ends])
    curve = led.cost_curve(np.asarray(ends)) if not revoked else None
    return charges, curve


_case = st.tuples(
    st.sampled_from([1, 2, 63, 64, 65, 130]),
    st.integers(0, 3),
    st.floats(0.0, 200_000.0, allow_nan=False),
    st.lists(st.floats(0.0, 300_000.0, allow_nan=False), min_size=1, max_size=5),
    st.booleans(),
    st.sampled_from(mk.BILLINGS),
)


def _holds(case) -> bool:
    n, seed, start, durations, revoked, scheme = case
    series = _series(n, seed)
    ends = [start + d for d in durations]
    charges, curve = _ledger_bills(series, start, ends, revoked, scheme)
    ref = _reference(series, start, ends, revoked, scheme)
    ok = np.array_equal(charges, ref)
    if curve is not None:
        ok = ok and np.array_equal(curve, np.where(np.asarray(ends) > start, _reference(series, start, ends, False,
                                                                                           scheme), 0.0))
    return bool(ok)


@settings(max_examples=40, deadline=None)
@given(_case)
def test_property_padded_series_bills_equal_the_unpadded_bill(case):
    assert _holds(case)


def test_planted_violation_padding_with_the_first_price_is_caught(monkeypatch):
    real = lg._billing_view

    def first_price_view(series):  # the planted bug: padded changes at the first price, at finite times
        v = real(series)
        n = len(series)
        t = np.asarray(v.times_s).copy()
        p = np.asarray(v.prices).copy()
        t[n:] = float(np.asarray(series.times_s)[-1]) + 3600.0 * np.arange(1, t.size - n + 1)
        p[n:] = p[0] + 1.0
        return dataclasses.replace(v, times_s=jax.numpy.asarray(t), prices=jax.numpy.asarray(p))

    monkeypatch.setattr(lg, "_billing_view", first_price_view)
    found = find(_case, lambda c: not _holds(c),
                 settings=settings(max_examples=200, deadline=None, phases=[Phase.generate]))
    assert found is not None


def test_series_of_one_size_class_share_one_compiled_bill():
    a, b = _series(100, 0), _series(120, 1)  # both padded to 128 change points
    va, vb = lg._billing_view(a), lg._billing_view(b)
    assert len(va) == len(vb) == 128 and lg._billing_view(a) is va
    assert jax.tree.structure(va) == jax.tree.structure(vb)
    assert all(x.shape == y.shape for x, y in zip(jax.tree.leaves(va), jax.tree.leaves(vb)))
    assert np.isinf(np.asarray(va.times_s)[100:]).all()
