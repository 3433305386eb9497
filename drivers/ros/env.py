"""Environment variables for a ROS 2 process (tests, ``robot-rl up``, child processes).

ROS 2 reads its middleware settings from the environment when ``rclpy.init()`` runs, so a
process that talks ROS must get them before that: a child process through
``subprocess.Popen(..., env=ros_env(domain_id))``, the current process through
:func:`apply_ros_env` before ``rclpy.init()``.

Settings (``drivers/CONTRACT.md``, "Environment for tests"):

- ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``: discovery stays on this machine.
- ``ROS_DOMAIN_ID``: separates concurrent test graphs (0..101).
- ``RMW_IMPLEMENTATION=rmw_fastrtps_cpp``.
- ``FASTDDS_DEFAULT_PROFILES_FILE``: :data:`FASTDDS_PROFILE` (large shared-memory segment for
  images). Fast DDS 3 reads only this name; the older ``FASTRTPS_DEFAULT_PROFILES_FILE`` is
  deprecated (rmw_fastrtps warns on it) and is removed from the returned environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

FASTDDS_PROFILE = Path(__file__).with_name("fastdds_profile.xml")
"""Absolute path of the Fast DDS profile shipped with drivers."""

RMW = "rmw_fastrtps_cpp"
"""The RMW implementation the contract is tested with."""

MAX_DOMAIN_ID = 101
"""Largest ROS_DOMAIN_ID that is safe on Linux with Fast DDS's default port mapping."""


def ros_env_vars(domain_id: int, localhost_only: bool = True) -> dict[str, str]:
    """Just the ROS variables (to merge into an environment yourself).

    Args:
        domain_id: ``ROS_DOMAIN_ID`` in [0, 101].
        localhost_only: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (else ``SUBNET``).

    Raises:
        ValueError: ``domain_id`` outside [0, 101].
    """
    if not 0 <= int(domain_id) <= MAX_DOMAIN_ID:
        raise ValueError(f"ROS_DOMAIN_ID {domain_id} must be in [0, {MAX_DOMAIN_ID}]")
    return {
        "ROS_DOMAIN_ID": str(int(domain_id)),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST" if localhost_only else "SUBNET",
        "RMW_IMPLEMENTATION": RMW,
        "FASTDDS_DEFAULT_PROFILES_FILE": str(FASTDDS_PROFILE),
    }


def ros_env(
    domain_id: int,
    base: Mapping[str, str] | None = None,
    localhost_only: bool = True,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A full environment for a child process: ``base`` (default ``os.environ``) plus the ROS
    variables plus ``extra``; ``PYTHONUNBUFFERED=1`` so child logs arrive line by line."""
    env = dict(os.environ if base is None else base)
    env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)
    env.pop("ROS_LOCALHOST_ONLY", None)  # deprecated; conflicts with the discovery range
    env.update(ros_env_vars(domain_id, localhost_only))
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def apply_ros_env(domain_id: int, localhost_only: bool = True) -> None:
    """Set the ROS variables in this process (call before ``rclpy.init()``)."""
    os.environ.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
    os.environ.update(ros_env_vars(domain_id, localhost_only))
