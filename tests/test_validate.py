"""scarjax.validate: the plain-number fast path of ``check_real`` accepts exactly what the
full NumPy checks accept (the same numbers pass, the same raise with the same message)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax import validate

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6),
                    st.sampled_from([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]))
BOUND = st.one_of(st.none(), st.floats(-10.0, 10.0), st.sampled_from([0.0, 1.0]))


def outcome(check, value, kw):
    try:
        check("x", value, **kw)
    except (TypeError, ValueError) as e:
        return type(e), str(e).replace(repr(np.asarray(value)), repr(value))
    return None


@settings(max_examples=300, deadline=None)
@given(v=NUMBERS, lo=BOUND, hi=BOUND, lo_open=st.booleans(), hi_open=st.booleans(), allow_inf=st.booleans())
def test_fast_path_agrees_with_the_full_checks(v, lo, hi, lo_open, hi_open, allow_inf):
    kw = dict(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, allow_inf=allow_inf)
    fast = outcome(validate.check_real, v, kw)
    full = outcome(validate.check_real, np.asarray(v, float if isinstance(v, float) else int), kw)
    assert (fast is None) == (full is None), (v, kw, fast, full)
    if fast is not None:
        assert fast[0] is full[0] and "x must" in fast[1]


@pytest.mark.parametrize("v, kw", [(0.0, dict(lo=0.0, lo_open=True)), (math.nan, {}), (math.inf, {}),
                                   (2.0, dict(hi=1.0)), (1.0, dict(hi=1.0, hi_open=True))])
def test_fast_path_refuses_with_the_argument_named(v, kw):
    with pytest.raises(ValueError, match="^x must"):
        validate.check_real("x", v, **kw)


def test_bool_is_not_a_plain_number():
    with pytest.raises(TypeError, match="x must be a number"):
        validate.check_real("x", True)


def test_planted_fast_path_that_ignores_an_open_bound_is_caught(monkeypatch):
    """The agreement test can fail: a fast path that treats an open bound as closed lets 0.0
    through where the full checks refuse it."""
    def closed(v, lo, hi, lo_open, hi_open, allow_inf):
        return v == v and (lo is None or v >= lo) and (hi is None or v <= hi)
    monkeypatch.setattr(validate, "_plainly_valid", closed)
    kw = dict(lo=0.0, lo_open=True)
    assert outcome(validate.check_real, 0.0, kw) is None
    assert outcome(validate.check_real, np.asarray(0.0), kw) is not None
