"""The setup's ``arm:`` key (see :mod:`drivers.setup`): a built-in arm kind, a built-in with
some fields changed (``kind:`` + fields), or a whole :class:`robot_rl.core.arm.ArmDescription`;
every failure names the file and key (:class:`drivers.setup_schema.Where`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drivers.setup_schema import Where
from robot_rl.core.arm import ArmDescription, builtin_arm, builtin_arm_kinds

_ARM_TUPLES = ("joint_low_rad", "joint_high_rad", "joint_vel_max_rad_s", "home_q_rad")
_ARM_STRINGS = ("name", "tool_frame", "base_frame", "kinematics", "gripper", "backend")


def parse_arm(where: Where, top: Mapping, source: str) -> ArmDescription:
    """``arm:``: a built-in kind, or a mapping (``kind:`` + overrides, or a whole description)."""
    if "arm" not in top:
        return builtin_arm("fr3")
    value = where.get(top, "arm", (str, dict), "")
    if isinstance(value, str):
        try:
            return builtin_arm(value)
        except ValueError as e:
            where.fail("arm", str(e))
    allowed = ("kind", "joint_names", *_ARM_TUPLES, *_ARM_STRINGS)
    where.no_unknown(value, allowed, "arm")
    fields_: dict[str, Any] = {}
    for key in _ARM_STRINGS:
        if key in value:
            fields_[key] = where.get(value, key, str, "arm")
    if "joint_names" in value:
        names = where.get(value, "joint_names", list, "arm")
        for i, n in enumerate(names):
            if not isinstance(n, str) or not n:
                where.expected(f"arm.joint_names[{i}]", "a joint name", n)
        fields_["joint_names"] = tuple(names)
    for key in _ARM_TUPLES:
        if key in value:
            raw = where.get(value, key, list, "arm")
            fields_[key] = where.numbers(raw, f"arm.{key}", len(raw), "(one per joint, rad)")
    if fields_.get("kinematics"):
        path = Path(fields_["kinematics"])
        if not path.is_absolute() and source != "<setup>":
            path = Path(source).parent / path
        if not path.is_file():
            where.fail("arm.kinematics", f"file {path} does not exist (relative to the setup file)")
        fields_["kinematics"] = str(path)
    kind = where.get(value, "kind", str, "arm", default=None)
    missing = [k for k in ("name", "joint_names", *_ARM_TUPLES) if k not in fields_]
    if kind is None and missing:
        where.fail(
            "arm",
            f"a new arm needs {missing} (or `kind: <built-in>` to start from one of "
            f"{list(builtin_arm_kinds())})",
        )
    try:
        if kind is not None:
            return builtin_arm(kind).with_overrides(**fields_)
        return ArmDescription(**fields_)
    except ValueError as e:
        named = [k for k in allowed if k != "name" and k in str(e)]
        where.fail(f"arm.{named[0]}" if named else "arm", str(e))
