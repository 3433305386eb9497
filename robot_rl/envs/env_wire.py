"""The wire format between robot_rl and an env running in another interpreter
(:mod:`robot_rl.envs.env_worker`, :class:`robot_rl.envs.remote_env.RemoteEnv`).

This module imports only the standard library and numpy, so that the worker can load it by
file path in an interpreter where robot_rl is not installed (an env whose pins conflict with
ours: another MuJoCo, an older numpy).

A message is one frame::

    u32 big-endian  header length H
    H bytes         header: UTF-8 JSON
    u64 big-endian  payload length P
    P bytes         payload: the arrays' raw bytes, one after another

Arrays inside the JSON are ``{"__nd__": i}``, the ``i``-th entry of the header's ``"__arrays__"``
list ``{"dtype": "<f4", "shape": [...], "nbytes": n}``: numeric dtypes only (bool, integers,
floats, complex), never objects, so nothing is unpickled and a malformed frame is refused with
what was wrong. Tuples become lists; numpy scalars become numbers; anything else that JSON
cannot carry becomes its ``repr`` string (an info value of an exotic type arrives as text).
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

import numpy as np

MAX_HEADER = 64 << 20
MAX_PAYLOAD = 1 << 34
NUMERIC_KINDS = "biufc"


class WireError(ValueError):
    """A malformed frame, or a peer that went away mid-frame."""


def _encode(value: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in NUMERIC_KINDS:
            return repr(value)
        arrays.append(np.ascontiguousarray(value))
        return {"__nd__": len(arrays) - 1}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _encode(v, arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def encode(message: dict[str, Any]) -> bytes:
    """One frame of ``message`` (a dict; arrays anywhere inside it)."""
    arrays: list[np.ndarray] = []
    body = _encode(message, arrays)
    body["__arrays__"] = [
        {"dtype": a.dtype.str, "shape": list(a.shape), "nbytes": int(a.nbytes)} for a in arrays
    ]
    header = json.dumps(body, allow_nan=True).encode()
    payload = b"".join(a.tobytes() for a in arrays)
    return struct.pack(">I", len(header)) + header + struct.pack(">Q", len(payload)) + payload


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            raise WireError(f"the peer closed the stream inside the {what} ({got} of {n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _decode(value: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__nd__"}:
            i = value["__nd__"]
            if not isinstance(i, int) or not 0 <= i < len(arrays):
                raise WireError(f"array reference {i!r} is not one of the {len(arrays)} arrays")
            return arrays[i]
        return {k: _decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def _arrays(specs: Any, payload: bytes) -> list[np.ndarray]:
    if not isinstance(specs, list):
        raise WireError("the header's __arrays__ is not a list")
    out, offset = [], 0
    for spec in specs:
        try:
            dtype = np.dtype(spec["dtype"])
            shape = tuple(int(n) for n in spec["shape"])
            nbytes = int(spec["nbytes"])
        except (KeyError, TypeError, ValueError) as e:
            raise WireError(f"array spec {spec!r} is malformed ({e})") from e
        if dtype.kind not in NUMERIC_KINDS or dtype.hasobject:
            raise WireError(f"array dtype {dtype} is not numeric")
        if any(n < 0 for n in shape) or nbytes != dtype.itemsize * int(np.prod(shape)):
            raise WireError(f"array spec {spec!r}: nbytes does not match dtype x shape")
        if offset + nbytes > len(payload):
            raise WireError("the payload is shorter than its arrays")
        out.append(np.frombuffer(payload, dtype, count=nbytes // max(dtype.itemsize, 1),
                                 offset=offset).reshape(shape).copy())  # fmt: skip
        offset += nbytes
    if offset != len(payload):
        raise WireError(f"the payload has {len(payload) - offset} bytes beyond its arrays")
    return out


def read(stream: BinaryIO) -> dict[str, Any] | None:
    """The next frame's message (None: the stream ended cleanly before a frame).

    Raises:
        WireError: A malformed or truncated frame (says what was wrong).
    """
    first = stream.read(4)
    if not first:
        return None
    if len(first) < 4:
        first += _read_exact(stream, 4 - len(first), "header length")
    (n,) = struct.unpack(">I", first)
    if n > MAX_HEADER:
        raise WireError(f"header of {n} bytes is over the {MAX_HEADER}-byte limit")
    try:
        body = json.loads(_read_exact(stream, n, "header").decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"the header is not UTF-8 JSON ({e})") from e
    (p,) = struct.unpack(">Q", _read_exact(stream, 8, "payload length"))
    if p > MAX_PAYLOAD:
        raise WireError(f"payload of {p} bytes is over the limit")
    payload = _read_exact(stream, p, "payload")
    if not isinstance(body, dict):
        raise WireError("the header is not a JSON object")
    arrays = _arrays(body.pop("__arrays__", []), payload)
    return _decode(body, arrays)


def write(stream: BinaryIO, message: dict[str, Any]) -> None:
    stream.write(encode(message))
    stream.flush()
