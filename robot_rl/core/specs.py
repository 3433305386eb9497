"""Array specs and a checker.

An :class:`ArraySpec` declares shape, dtype and (optional) bounds of one array; a spec tree is a
(nested) mapping of names to specs. :func:`check_array` / :func:`check_tree` raise
:class:`SpecError` with a message that names the offending key, what was expected and what
arrived. Specs convert to gymnasium spaces with :func:`to_space`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


class SpecError(ValueError):
    """An array does not match its declared spec."""


@dataclass(frozen=True)
class ArraySpec:
    """Declared shape, dtype and bounds of one array.

    Attributes:
        shape: Exact shape.
        dtype: numpy dtype name, e.g. ``"float32"``, ``"uint8"``.
        low: Inclusive lower bound (scalar) or ``None`` for unbounded.
        high: Inclusive upper bound (scalar) or ``None`` for unbounded.
        names: Optional per-element names for 1-D arrays (``len(names) == shape[0]``).
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float | None = None
    high: float | None = None
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        np.dtype(self.dtype)  # raises on an unknown dtype name
        if self.names is not None and (len(self.shape) != 1 or len(self.names) != self.shape[0]):
            raise ValueError(f"names {self.names} do not match 1-D shape {self.shape}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"low {self.low} > high {self.high}")

    def zeros(self) -> np.ndarray:
        """An array of zeros clipped into the bounds."""
        z = np.zeros(self.shape, dtype=self.dtype)
        if self.low is not None or self.high is not None:
            z = np.clip(z, self.low, self.high).astype(self.dtype)
        return z


def check_array(value: Any, spec: ArraySpec, name: str = "array", atol: float = 1e-5) -> None:
    """Raise :class:`SpecError` unless ``value`` matches ``spec``.

    Checks type (numpy array), shape, dtype, finiteness (floats) and bounds (with ``atol``).
    """
    if not isinstance(value, np.ndarray):
        raise SpecError(f"{name}: expected a numpy array, got {type(value).__name__}")
    if value.shape != spec.shape:
        raise SpecError(f"{name}: expected shape {spec.shape}, got {value.shape}")
    if value.dtype != np.dtype(spec.dtype):
        raise SpecError(f"{name}: expected dtype {spec.dtype}, got {value.dtype}")
    if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
        raise SpecError(f"{name}: contains NaN or inf: {value}")
    if spec.low is not None and value.size and float(value.min()) < spec.low - atol:
        raise SpecError(f"{name}: value {float(value.min())} below low bound {spec.low}")
    if spec.high is not None and value.size and float(value.max()) > spec.high + atol:
        raise SpecError(f"{name}: value {float(value.max())} above high bound {spec.high}")


SpecTree = Mapping[str, "ArraySpec | SpecTree"]


def check_tree(value: Any, spec: SpecTree, name: str = "obs") -> None:
    """Check a nested mapping against a nested spec; keys must match exactly."""
    if not isinstance(value, Mapping):
        raise SpecError(f"{name}: expected a mapping, got {type(value).__name__}")
    missing = set(spec) - set(value)
    extra = set(value) - set(spec)
    if missing or extra:
        raise SpecError(
            f"{name}: keys differ from spec; missing {sorted(missing)}, unexpected {sorted(extra)}"
        )
    for key, sub in spec.items():
        if isinstance(sub, ArraySpec):
            check_array(value[key], sub, f"{name}[{key!r}]")
        else:
            check_tree(value[key], sub, f"{name}[{key!r}]")


def to_space(spec: ArraySpec | SpecTree) -> gym.Space:
    """gymnasium space of a spec or spec tree (Box / Dict)."""
    if isinstance(spec, ArraySpec):
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            low = info.min if spec.low is None else spec.low
            high = info.max if spec.high is None else spec.high
        else:
            low = -np.inf if spec.low is None else spec.low
            high = np.inf if spec.high is None else spec.high
        return gym.spaces.Box(low=low, high=high, shape=spec.shape, dtype=dtype)
    return gym.spaces.Dict({k: to_space(v) for k, v in spec.items()})


def from_space(space: gym.Space) -> ArraySpec | dict:
    """Spec tree of a gymnasium Box / Dict space (bounds kept only when uniform)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: from_space(v) for k, v in space.spaces.items()}
    if isinstance(space, gym.spaces.Box):
        low = float(space.low.min()) if np.all(space.low == space.low.flat[0]) else None
        high = float(space.high.min()) if np.all(space.high == space.high.flat[0]) else None
        low = None if low is not None and not np.isfinite(low) else low
        high = None if high is not None and not np.isfinite(high) else high
        return ArraySpec(tuple(space.shape), space.dtype.name, low, high)
    raise TypeError(f"unsupported space {space!r}; robot_rl uses Box and Dict spaces")


def describe(spec: ArraySpec | SpecTree, indent: int = 0) -> str:
    """Human-readable multi-line description of a spec tree."""
    pad = "  " * indent
    if isinstance(spec, ArraySpec):
        bounds = "" if spec.low is None and spec.high is None else f" [{spec.low}, {spec.high}]"
        return f"{spec.dtype}{list(spec.shape)}{bounds}"
    lines = []
    for k, v in spec.items():
        if isinstance(v, ArraySpec):
            lines.append(f"{pad}{k}: {describe(v)}")
        else:
            lines.append(f"{pad}{k}:")
            lines.append(describe(v, indent + 1))
    return "\n".join(lines)
