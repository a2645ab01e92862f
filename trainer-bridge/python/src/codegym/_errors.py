"""Exceptions: every failed call raises `CodegymError` carrying the gRPC status code."""

from __future__ import annotations

from typing import Any

import grpc

_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


class CodegymError(Exception):
    """A failed codegym call. `code` is a `grpc.StatusCode`, `details` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str, method: str = "") -> None:
        self.code = code
        self.details = details
        self.method = method
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{code.name}: {details}")


def from_rpc_error(err: grpc.RpcError, method: str) -> CodegymError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return CodegymError(code or grpc.StatusCode.UNKNOWN, details or "", method)


def from_in_band(error: Any, method: str) -> CodegymError:
    """An in-band `codegym.v1.Error` (stream or Evaluate item) as an exception."""
    return CodegymError(_BY_VALUE.get(error.code, grpc.StatusCode.UNKNOWN), error.message, method)
