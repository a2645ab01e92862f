"""Property tests of the plain-value codec (`codegym._values`, the mirror of the Rust
`proto::convert`) and of the client options, with Hypothesis.

- Every value of every kind (text, integers, booleans, None, floats, lists, tuples, dicts with text
  keys, NumPy arrays of every wire dtype, nested) survives encode -> bytes -> decode, as the package
  documents: lists come back as tuples, NumPy scalars as Python ones, arrays bit for bit.
- What the codec cannot carry is a `ValueError` at encode time, never a message the server refuses
  later (a non-finite float has no JSON form) or a value that comes back changed (a dict with
  non-text keys).
- The client's retry delay grows with the attempt, never past `max_backoff`, and never fails.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from codegym.v1 import env_pb2 as pb
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from codegym import _values as v
from codegym.options import ClientOptions

_INT64 = st.integers(-(2**63), 2**63 - 1)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]
_ARRAYS = st.sampled_from(_DTYPES).flatmap(
    lambda dt: hnp.arrays(dtype=dt, shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
)
_LEAVES = st.one_of(st.text(), _INT64, st.booleans(), st.none(), _FLOATS)
_VALUES = st.recursive(
    st.one_of(_LEAVES, _ARRAYS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)


def _expected(obj: Any) -> Any:
    """What the codec gives back for `obj`: sequences as tuples, dicts in kind."""
    if isinstance(obj, (list, tuple)):
        return tuple(_expected(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _expected(o) for k, o in obj.items()}
    return obj


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, np.ndarray):
        return (
            isinstance(got, np.ndarray)
            and got.dtype == want.dtype.newbyteorder("=")
            and got.shape == want.shape
            and got.tobytes() == want.astype(want.dtype.newbyteorder("=")).tobytes()
        )
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and list(got) == list(want) and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, float):
        # JSON floats come back exactly (shortest repr both ways); -0.0 keeps its sign.
        return isinstance(got, float) and got == want and math.copysign(1, got) == math.copysign(1, want)
    return type(got) is type(want) and got == want


@settings(max_examples=300, deadline=None)
@given(_VALUES)
@example({"code": "print(1)", "n": 3, "xs": [1, "a"], "flag": True, "none": None})
@example([-0.0, 5e-324, 1.7976931348623157e308, 2**63 - 1, -(2**63)])
def test_every_value_round_trips_through_the_wire(obj: Any) -> None:
    message = v.encode_value(obj)
    wire = pb.Value.FromString(message.SerializeToString())
    assert wire == message
    got = v.decode_value(wire)
    assert _same(got, _expected(obj)), (obj, got)


@given(
    st.one_of(
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.integers(min_value=2**63),
        st.integers(max_value=-(2**63) - 1),
    )
)
def test_what_the_wire_cannot_carry_is_refused_at_encode(obj: Any) -> None:
    # A non-finite float has no JSON form (the server's parser refuses `NaN`); an integer beyond
    # 64 bits does not fit a discrete value.
    try:
        message = v.encode_value([obj])
    except ValueError:
        return
    raise AssertionError(f"{obj!r} encoded as {message}")


@given(st.dictionaries(st.one_of(st.integers(), st.booleans(), st.none()), st.text(), min_size=1, max_size=3))
def test_a_dict_with_keys_that_are_not_text_is_refused(obj: dict[Any, Any]) -> None:
    # JSON would turn the keys into text and the value would come back changed.
    try:
        message = v.encode_value(obj)
    except ValueError:
        return
    got = v.decode_value(message)
    assert got == obj, f"{obj!r} came back as {got!r}"


@given(st.one_of(_INT64, _FLOATS, st.text(), st.booleans()))
def test_json_values_are_what_strict_parsers_read(obj: Any) -> None:
    message = v.encode_value(obj)
    if message.WhichOneof("kind") == "json":
        # The Rust side (serde_json) reads standard JSON only.
        json.loads(message.json, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


@given(
    backoff=st.floats(0, 60, allow_nan=False),
    max_backoff=st.floats(0, 600, allow_nan=False),
    attempts=st.lists(st.integers(0, 100_000), min_size=2, max_size=5),
)
@example(backoff=0.5, max_backoff=8.0, attempts=[0, 5000])
def test_retry_delays_grow_to_the_cap(backoff: float, max_backoff: float, attempts: list[int]) -> None:
    options = ClientOptions(backoff=backoff, max_backoff=max_backoff)
    delays = [options.delay(a) for a in sorted(attempts)]
    assert all(0 <= d <= max_backoff for d in delays), delays
    assert delays == sorted(delays)
    assert options.delay(0) == min(max_backoff, backoff)
