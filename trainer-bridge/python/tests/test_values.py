"""Value and space conversion, and the generated stubs, without a server."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegym.v1 import env_pb2 as pb
from conftest import REPO_ROOT
from gymnasium import spaces

from codegym import _values as v


def test_stubs_match_the_checkout_proto():
    proto = (REPO_ROOT / "proto" / "codegym" / "v1" / "env.proto").read_text()
    rpcs = set(re.findall(r"^\s*rpc (\w+)\(", proto, flags=re.MULTILINE))
    service = pb.DESCRIPTOR.services_by_name["EnvService"]
    assert {m.name for m in service.methods} == rpcs
    messages = set(re.findall(r"^message (\w+)", proto, flags=re.MULTILINE))
    assert messages == set(pb.DESCRIPTOR.message_types_by_name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_])
def test_tensor_roundtrip(dtype):
    arr = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    value = v.encode_value(arr)
    assert value.WhichOneof("kind") == "tensor" and list(value.tensor.shape) == [2, 3]
    back = v.decode_value(value)
    assert back.dtype == np.dtype(dtype) and back.shape == (2, 3)
    np.testing.assert_array_equal(back, arr)
    back[0, 0] = 1  # decoded arrays are writable copies


def test_nested_values_roundtrip():
    obj = {"code": "print(1)", "n": 3, "xs": [1, "a"], "flag": True, "none": None}
    back = v.decode_value(v.encode_value(obj))
    assert back == {"code": "print(1)", "n": 3, "xs": (1, "a"), "flag": True, "none": None}


def test_box_space_bounds_and_action_encoding():
    inf = float("inf")
    space = pb.Space(box=pb.BoxSpace(dtype=pb.DTYPE_FLOAT32, shape=[2], low=[-1.0, -inf], high=[1.0, inf]))
    gym_space = v.to_gym_space(space)
    assert isinstance(gym_space, spaces.Box) and gym_space.dtype == np.float32
    assert gym_space.low[0] == -1.0 and np.isinf(gym_space.high[1])
    value = v.encode_value([0.5, 2.0], space)
    assert value.tensor.dtype == pb.DTYPE_FLOAT32
    np.testing.assert_array_equal(v.decode_value(value), np.array([0.5, 2.0], dtype=np.float32))


def test_discrete_text_dict_and_tuple_spaces():
    text = pb.Space(text=pb.TextSpace(min_length=0, max_length=100))
    discrete = pb.Space(discrete=pb.DiscreteSpace(n=3, start=1))
    space = pb.Space(dict=pb.DictSpace(keys=["code", "k"], spaces=[text, discrete]))
    gym_space = v.to_gym_space(space)
    assert gym_space["k"] == spaces.Discrete(3, start=1)
    # An empty charset means any text, beyond Gymnasium's default alphanumerics.
    assert gym_space["code"].contains("print('héllo')\n")
    assert not gym_space["code"].contains("x" * 101)
    value = v.encode_value({"k": np.int64(2), "code": "x"}, space)
    assert list(value.dict.keys) == ["code", "k"] and value.dict.values[1].discrete == 2
    tup = v.to_gym_space(pb.Space(tuple=pb.TupleSpace(spaces=[discrete, text])))
    assert isinstance(tup, spaces.Tuple) and len(tup) == 2


def test_unsupported_dtype_is_an_error():
    with pytest.raises(ValueError):
        v.numpy_dtype(0)
    with pytest.raises(ValueError):
        v.encode_value(np.zeros(2, dtype=np.complex64))


def test_typed_outputs_in_execution_dicts():
    # Issue 13: a data task's typed outputs, parsed JSON values or per-output errors.
    e = pb.ExecutionResult(exit_code=0)
    e.outputs["rows"].json = "2"
    e.outputs["report"].json = '{"size": 1, "text": "x"}'
    e.outputs["total"].error = "missing: the program did not write outputs/total"
    d = v.execution_to_dict(e)
    assert d["outputs"] == {
        "report": {"value": {"size": 1, "text": "x"}},
        "rows": {"value": 2},
        "total": {"error": "missing: the program did not write outputs/total"},
    }
    assert v.execution_to_dict(pb.ExecutionResult())["outputs"] == {}
