"""Conversion between codegym.v1 `Value`/`Space` messages and Python/NumPy/Gymnasium objects."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from gymnasium import spaces

from codegym.v1 import env_pb2 as pb

_DTYPES: dict[int, np.dtype[Any]] = {
    pb.DTYPE_FLOAT32: np.dtype("<f4"),
    pb.DTYPE_FLOAT64: np.dtype("<f8"),
    pb.DTYPE_INT32: np.dtype("<i4"),
    pb.DTYPE_INT64: np.dtype("<i8"),
    pb.DTYPE_UINT8: np.dtype("u1"),
    pb.DTYPE_BOOL: np.dtype("?"),
}


def numpy_dtype(code: int) -> np.dtype[Any]:
    """The NumPy dtype of a proto `Dtype`."""
    try:
        return _DTYPES[code]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype {code}") from None


def dtype_code(dtype: Any) -> int:
    """The proto `Dtype` of a NumPy dtype."""
    dt = np.dtype(dtype)
    for code, known in _DTYPES.items():
        if known == dt or known.newbyteorder("=") == dt.newbyteorder("="):
            return int(code)
    raise ValueError(f"unsupported tensor dtype {dt}")


def tensor_to_numpy(t: pb.Tensor) -> np.ndarray[Any, Any]:
    dtype = numpy_dtype(t.dtype)
    shape = tuple(int(s) for s in t.shape)
    arr = np.frombuffer(t.data, dtype=dtype)
    # Native byte order and a writable copy, as Gymnasium spaces expect.
    return arr.astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def numpy_to_tensor(arr: Any, dtype: Any = None) -> pb.Tensor:
    a = np.asarray(arr, dtype=dtype)
    if a.dtype == np.int8:
        a = a.astype(np.uint8)
    code = dtype_code(a.dtype)
    wire = _DTYPES[code]
    return pb.Tensor(dtype=code, shape=list(a.shape), data=np.ascontiguousarray(a, dtype=wire).tobytes())


def execution_to_dict(e: pb.ExecutionResult) -> dict[str, Any]:
    """The package's one Python view of an execution result: a dict keyed by the proto's field names.

    `stdout`/`stderr` are `str`: the server captured bytes and decoded them once as lossy UTF-8
    (U+FFFD for invalid bytes), so compare them as text. `exit_code`/`signal` are None when unset.

    Results as agents use them: `success`; `has_return_value` and `return_value` (the
    last expression's value as JSON; None when absent) or `return_value_unrepresentable` (`type_name`,
    `repr`, `reason`) when it has no JSON form; `variables` (a dict, None unless requested) and
    `dropped_variables` (`name`, `reason`); `error` (`type_name`, `message`) or None.
    """
    unrep = e.return_value_unrepresentable if e.HasField("return_value_unrepresentable") else None
    return {
        "exit_code": e.exit_code if e.HasField("exit_code") else None,
        "signal": e.signal if e.HasField("signal") else None,
        "timed_out": e.timed_out,
        "memory_exceeded": e.memory_exceeded,
        "stdout": e.stdout,
        "stderr": e.stderr,
        "stdout_truncated": e.stdout_truncated,
        "stderr_truncated": e.stderr_truncated,
        "wall_ms": e.wall_ms,
        "cpu_ms": e.cpu_ms,
        "peak_rss_bytes": e.peak_rss_bytes,
        # Data tasks: typed outputs, name -> {"value": ...} or {"error": ...}.
        "outputs": {name: _output(o) for name, o in sorted(e.outputs.items())},
        # The compile step of a compiled language (None for Python and interpreters).
        "compile": execution_to_dict(e.compile) if e.HasField("compile") else None,
        # Results as agents use them.
        "success": e.success,
        "has_return_value": e.HasField("return_value_json"),
        "return_value": json.loads(e.return_value_json) if e.HasField("return_value_json") else None,
        "return_value_unrepresentable": (
            {"type_name": unrep.type_name, "repr": unrep.repr, "reason": unrep.reason} if unrep is not None else None
        ),
        "variables": json.loads(e.variables_json) if e.HasField("variables_json") else None,
        "dropped_variables": [{"name": d.name, "reason": d.reason} for d in e.dropped_variables],
        "error": {"type_name": e.error.type_name, "message": e.error.message} if e.HasField("error") else None,
    }


def _output(o: pb.OutputValue) -> dict[str, Any]:
    if o.WhichOneof("kind") == "json":
        return {"value": json.loads(o.json)}
    return {"error": o.error or "empty output value"}


def decode_value(v: pb.Value) -> Any:
    """A `Value` as a Python object: str, numpy array, int, dict, tuple/list or parsed JSON."""
    kind = v.WhichOneof("kind")
    if kind == "text":
        return v.text
    if kind == "tensor":
        return tensor_to_numpy(v.tensor)
    if kind == "json":
        return json.loads(v.json) if v.json else None
    if kind == "execution":
        return execution_to_dict(v.execution)
    if kind == "discrete":
        return int(v.discrete)
    if kind == "list":
        return tuple(decode_value(item) for item in v.list.items)
    if kind == "dict":
        return {k: decode_value(item) for k, item in zip(v.dict.keys, v.dict.values)}
    return None


def encode_value(obj: Any, space: pb.Space | None = None) -> pb.Value:
    """A Python object as a `Value`, shaped by `space` when given (else inferred from the type)."""
    if isinstance(obj, pb.Value):
        return obj
    if space is None:
        return _encode_untyped(obj)
    kind = space.WhichOneof("kind")
    if kind == "discrete":
        return pb.Value(discrete=int(obj))
    if kind == "box":
        return pb.Value(tensor=numpy_to_tensor(obj, numpy_dtype(space.box.dtype)))
    if kind == "multi_discrete":
        return pb.Value(tensor=numpy_to_tensor(obj, np.int64))
    if kind == "multi_binary":
        return pb.Value(tensor=numpy_to_tensor(obj, np.uint8))
    if kind == "text":
        return pb.Value(text=str(obj))
    if kind == "dict":
        subs = dict(zip(space.dict.keys, space.dict.spaces))
        keys = list(space.dict.keys)
        return pb.Value(dict=pb.ValueDict(keys=keys, values=[encode_value(obj[k], subs[k]) for k in keys]))
    if kind == "tuple":
        items = [encode_value(o, s) for o, s in zip(obj, space.tuple.spaces)]
        return pb.Value(list=pb.ValueList(items=items))
    return _encode_untyped(obj)


def _encode_untyped(obj: Any) -> pb.Value:
    if isinstance(obj, str):
        return pb.Value(text=obj)
    if isinstance(obj, (bool, np.bool_)):
        return pb.Value(json=json.dumps(bool(obj)))
    if isinstance(obj, (int, np.integer)):
        return pb.Value(discrete=int(obj))
    if isinstance(obj, np.ndarray):
        return pb.Value(tensor=numpy_to_tensor(obj))
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            # JSON would turn the keys into text: the value would come back changed.
            raise ValueError(f"dict keys must be str to be sent, got {sorted({type(k).__name__ for k in obj})}")
        return pb.Value(dict=pb.ValueDict(keys=list(obj), values=[_encode_untyped(v) for v in obj.values()]))
    if isinstance(obj, (list, tuple)):
        return pb.Value(list=pb.ValueList(items=[_encode_untyped(v) for v in obj]))
    # Standard JSON only (no NaN or Infinity): the server's parser reads nothing else, so a value it
    # would refuse is refused here, where the caller sees which.
    return pb.Value(json=json.dumps(obj, allow_nan=False))


def parse_json_object(text: str) -> dict[str, Any]:
    """An `*_json` field as a dict (empty string: `{}`)."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


def to_gym_space(space: pb.Space) -> spaces.Space[Any]:
    """The Gymnasium space of a proto `Space`."""
    kind = space.WhichOneof("kind")
    if kind == "discrete":
        return spaces.Discrete(int(space.discrete.n), start=int(space.discrete.start))
    if kind == "box":
        b = space.box
        shape = tuple(int(s) for s in b.shape)
        dtype = numpy_dtype(b.dtype).newbyteorder("=")
        low = np.array(b.low, dtype=np.float64).reshape(shape)
        high = np.array(b.high, dtype=np.float64).reshape(shape)
        return spaces.Box(low=low.astype(dtype), high=high.astype(dtype), shape=shape, dtype=dtype)
    if kind == "multi_discrete":
        return spaces.MultiDiscrete(np.array(space.multi_discrete.nvec, dtype=np.int64))
    if kind == "multi_binary":
        return spaces.MultiBinary([int(s) for s in space.multi_binary.shape])
    if kind == "text":
        t = space.text
        if t.charset:
            return spaces.Text(max_length=int(t.max_length), min_length=int(t.min_length), charset=t.charset)
        return AnyText(max_length=int(t.max_length), min_length=int(t.min_length))
    if kind == "dict":
        return spaces.Dict({k: to_gym_space(s) for k, s in zip(space.dict.keys, space.dict.spaces)})
    if kind == "tuple":
        return spaces.Tuple([to_gym_space(s) for s in space.tuple.spaces])
    raise ValueError(f"unsupported space {kind!r}")


class AnyText(spaces.Text):
    """A `Text` space over any Unicode string (codegym's empty charset); samples alphanumerics.

    Samples are at most `SAMPLE_MAX_LENGTH` characters long (a sample of a 1 MiB text space would
    otherwise average half a megabyte); `contains` accepts every length up to `max_length`.
    """

    SAMPLE_MAX_LENGTH = 64

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            high = min(self.max_length, self.min_length + self.SAMPLE_MAX_LENGTH)
            length = int(self.np_random.integers(self.min_length, high + 1))
            return str(super().sample(mask=(length, None)))
        return str(super().sample(mask=mask, probability=probability))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"
