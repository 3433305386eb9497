"""A bridge's safety limits as ROS 2 parameters: declared read-only, validated at start-up.

Every bridge node (``arm_bridge`` with any backend, e.g. ``drivers.franka.node``; the twin node
``twin``) declares one parameter per field of :class:`robot_rl.core.safety.SafetyConfig`, with the
field's name and the node's configured limits as default (``drivers/CONTRACT.md``,
"Bridge parameters")::

    python -m drivers.franka.node --ros-args -p workspace_high_m:=[0.7, 0.28, 0.35] \
        -p max_step_m:=0.03

Rules:

- read once, when the node starts; the node logs the limits it uses and publishes them in its
  ``status`` JSON (``"safety": {...}``);
- an invalid value (wrong type or length, NaN/inf, ``workspace_low_m >= workspace_high_m`` on an
  axis, a non-positive step or timeout, an unknown near-miss name such as ``max_step``) raises
  :class:`BridgeParamError` naming the parameter and what to change; the node's ``main()`` logs
  it and exits with :data:`EXIT_BAD_PARAMETER` (it never runs with a half-valid config);
- read-only: a run-time ``SetParameters`` on them is refused by rclpy ("Trying to set a read-only
  parameter"): a safety box must not change under a running policy. Restart the node to change
  them.

:func:`safety_from_values` is plain Python (unit-tested without ROS);
:func:`declare_safety_parameters` is the thin ROS part.
"""

from __future__ import annotations

import array
import difflib
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

from robot_rl.core.safety import SafetyConfig

EXIT_BAD_PARAMETER = 2
"""Exit code of a bridge node whose parameters are invalid."""

SAFETY_PARAMS: tuple[str, ...] = tuple(f.name for f in fields(SafetyConfig))
"""Parameter names = :class:`SafetyConfig` field names."""

VECTOR_PARAMS: dict[str, tuple[int, str]] = {
    "workspace_low_m": (3, "x, y, z of the lower box corner in the base frame, metres"),
    "workspace_high_m": (3, "x, y, z of the upper box corner in the base frame, metres"),
    "orientation_center_quat": (4, "w, x, y, z unit quaternion of the nominal TCP orientation"),
}
"""List parameters: (length, meaning)."""

SCALAR_PARAMS: dict[str, str] = {
    "orientation_max_rad": "largest rotation away from orientation_center_quat, rad, in (0, pi]",
    "max_step_m": "largest distance of a target from the measured TCP position, metres, > 0",
    "max_step_rad": "largest rotation of a target from the measured TCP orientation, rad, > 0",
    "watchdog_timeout_s": "hold when no command arrived for this long, seconds, > 0",
}
"""Number parameters: meaning (with unit and allowed range)."""

assert set(SAFETY_PARAMS) == set(VECTOR_PARAMS) | set(SCALAR_PARAMS), "SafetyConfig changed"


class BridgeParamError(ValueError):
    """A bridge parameter is invalid; the message names it and says what to change."""


def _numbers(name: str, value: Any) -> tuple[float, ...]:
    n, meaning = VECTOR_PARAMS[name]
    if isinstance(value, (str, bytes)) or not isinstance(
        value, (list, tuple, array.array, np.ndarray)
    ):
        raise BridgeParamError(
            f"parameter {name!r} must be a list of {n} numbers ({meaning}), got {value!r}; "
            f"e.g. -p {name}:=[{', '.join(['0.0'] * n)}]"
        )
    items = list(value)
    if len(items) != n:
        raise BridgeParamError(
            f"parameter {name!r} must have {n} numbers ({meaning}), got {len(items)}: {items}"
        )
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
        raise BridgeParamError(f"parameter {name!r} must hold numbers only, got {items}")
    out = tuple(float(v) for v in items)
    if not all(math.isfinite(v) for v in out):
        raise BridgeParamError(f"parameter {name!r} contains NaN or inf: {list(out)}")
    return out


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BridgeParamError(
            f"parameter {name!r} must be a number ({SCALAR_PARAMS[name]}), got {value!r}"
        )
    v = float(value)
    if not math.isfinite(v):
        raise BridgeParamError(f"parameter {name!r} is {v}; give a finite number")
    return v


def safety_from_values(values: Mapping[str, Any], defaults: SafetyConfig) -> SafetyConfig:
    """Build the :class:`SafetyConfig` from parameter values (missing names: ``defaults``).

    Args:
        values: Parameter name -> value (lists as list/tuple/array, numbers as int/float).
        defaults: Limits for names not in ``values``.

    Raises:
        BridgeParamError: A value is invalid (names the parameter and what to change).
    """
    unknown = sorted(set(values) - set(SAFETY_PARAMS))
    if unknown:
        raise BridgeParamError(f"unknown safety parameter(s) {unknown}; known: {SAFETY_PARAMS}")
    kw: dict[str, Any] = {}
    for name in SAFETY_PARAMS:
        raw = values.get(name, getattr(defaults, name))
        kw[name] = _numbers(name, raw) if name in VECTOR_PARAMS else _number(name, raw)
    lo, hi = kw["workspace_low_m"], kw["workspace_high_m"]
    bad = [axis for axis, a, b in zip("xyz", lo, hi, strict=True) if a >= b]
    if bad:
        raise BridgeParamError(
            f"workspace_low_m {list(lo)} must be below workspace_high_m {list(hi)} on every axis; "
            f"it is not on {', '.join(bad)}: lower workspace_low_m or raise workspace_high_m there"
        )
    for name in ("max_step_m", "max_step_rad", "watchdog_timeout_s"):
        if kw[name] <= 0:
            raise BridgeParamError(f"parameter {name!r} is {kw[name]}; it must be positive")
    if not 0 < kw["orientation_max_rad"] <= math.pi:
        raise BridgeParamError(
            f"parameter 'orientation_max_rad' is {kw['orientation_max_rad']}; it must be in "
            f"(0, pi] (0.8 allows about 46 degrees of tilt)"
        )
    q_norm = float(np.linalg.norm(kw["orientation_center_quat"]))
    if abs(q_norm - 1.0) > 1e-3:
        raise BridgeParamError(
            f"parameter 'orientation_center_quat' {list(kw['orientation_center_quat'])} has norm "
            f"{q_norm:.4f}; give a unit quaternion (w, x, y, z), e.g. [0.0, 1.0, 0.0, 0.0] "
            "(TCP pointing down)"
        )
    try:
        return SafetyConfig(**kw)
    except ValueError as e:  # a rule added to SafetyConfig later
        raise BridgeParamError(f"safety parameters: {e}") from e


def safety_to_dict(config: SafetyConfig) -> dict[str, Any]:
    """The limits as JSON-ready values (lists for vectors), keyed by parameter name."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}


def describe_safety(config: SafetyConfig) -> str:
    """One log line: ``name=value`` for every limit."""
    return " ".join(f"{k}={v}" for k, v in safety_to_dict(config).items())


def _near_miss_overrides(node: Node) -> list[str]:
    """Parameter overrides given to the node that look like a misspelt safety parameter and
    were not declared (rclpy would silently ignore them, leaving the default box in force)."""
    # rclpy has no public accessor for the command-line overrides of a node.
    given = getattr(node, "_parameter_overrides", {}) or {}
    out = []
    for name in given:
        if node.has_parameter(name):
            continue
        close = difflib.get_close_matches(name, SAFETY_PARAMS, n=1, cutoff=0.75)
        if close:
            out.append(f"{name!r} (did you mean {close[0]!r}?)")
    return out


def declare_safety_parameters(node: Node, defaults: SafetyConfig) -> SafetyConfig:
    """Declare the safety parameters on ``node`` (read-only) and build the config from them.

    Args:
        node: The bridge node (before it accepts any command).
        defaults: The node's configured limits (parameter defaults).

    Raises:
        BridgeParamError: A parameter is invalid or a near-miss name was given.
    """
    values: dict[str, Any] = {}
    for name in SAFETY_PARAMS:
        default = getattr(defaults, name)
        default = [float(v) for v in default] if isinstance(default, tuple) else float(default)
        meaning = VECTOR_PARAMS[name][1] if name in VECTOR_PARAMS else SCALAR_PARAMS[name]
        descriptor = ParameterDescriptor(
            description=f"safety limit: {meaning} (read-only: restart the node to change it)",
            read_only=True,
            dynamic_typing=True,  # -p max_step_m:=1 (an integer) is fine; checked below
        )
        values[name] = node.declare_parameter(name, default, descriptor).value
    misses = _near_miss_overrides(node)
    if misses:
        raise BridgeParamError(
            f"unknown parameter(s) {', '.join(misses)}; safety parameters are {SAFETY_PARAMS}"
        )
    return safety_from_values(values, defaults)
