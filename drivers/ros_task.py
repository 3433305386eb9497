"""RosTwinTask: :class:`robot_rl.core.protocols.Task` of the MuJoCo twin behind ROS 2.

- :meth:`RosTwinTask.reset` draws an episode seed from the env's Generator, sets it as
  parameter ``episode_seed`` of the twin node and calls ``task/reset``, whose answer carries the
  arm start pose (``drivers/CONTRACT.md``). The same env seed gives the same episode; the
  scene differs from the twin driven directly with that seed (the twin seeds its own Generator
  with ``episode_seed``).
- :meth:`RosTwinTask.evaluate` returns the newest ``task/status`` (JSON: reward, success,
  failure, privileged sim truth). The twin publishes it with every state update under the same
  stamp; in lockstep the clock waits for it, in real time it must be no older than
  ``max_age_s``.

On a real robot there is no ``task/status``; reward models take this role (stage 5).
:class:`RosTwinSceneTask` plays one on the twin (a setup with ``privileged: false``): it resets
the scene the same way and reads no status at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from std_msgs.msg import String

from drivers.ros import qos
from drivers.ros_session import IDEMPOTENT_RESEND_S, Latest, RosSession, RosTimeoutError
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import StaleSensorError, TaskStatus


@dataclass(frozen=True)
class RosTwinTaskConfig:
    """The twin's task over ROS 2.

    Attributes:
        name: Task name (as the twin node was started with).
        namespace: Arm namespace.
        twin_node: Node owning the ``episode_seed`` parameter.
        max_age_s: A status older than this at ``evaluate()`` is stale.
        reset_timeout_s: Timeout of ``task/reset`` and of the parameter update, seconds.
        spec_timeout_s: How long ``privileged_spec`` may wait for a first status (when no spec
            was given).
    """

    name: str
    namespace: str = "arm"
    twin_node: str = "twin"
    max_age_s: float = 0.2
    reset_timeout_s: float = 30.0
    spec_timeout_s: float = 10.0


def decode_status(msg: String) -> tuple[TaskStatus, float]:
    """``task/status`` JSON -> (TaskStatus, stamp_s).

    Raises:
        ValueError: Not JSON, missing/mistyped fields, or non-finite numbers.
    """
    try:
        d = json.loads(msg.data)
    except json.JSONDecodeError as e:
        raise ValueError(f"task/status is not JSON: {e}") from e
    if not isinstance(d, dict):
        raise ValueError("task/status must be a JSON object")
    missing = [k for k in ("stamp_s", "reward", "success") if k not in d]
    if missing:
        raise ValueError(f"task/status lacks {missing}")
    stamp, reward = d["stamp_s"], d["reward"]
    for key, v in (("stamp_s", stamp), ("reward", reward)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise ValueError(f"task/status {key} must be a finite number, got {v!r}")
    privileged = {}
    raw_priv = d.get("privileged") or {}
    if not isinstance(raw_priv, dict):
        raise ValueError("task/status privileged must be an object of name: [floats]")
    for name, values in raw_priv.items():
        arr = np.asarray(values, dtype=np.float32).reshape(-1)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"task/status privileged {name!r} contains NaN or inf")
        privileged[str(name)] = arr
    status = TaskStatus(
        reward=float(reward),
        success=bool(d["success"]),
        failure=bool(d.get("failure", False)),
        privileged=privileged,
    )
    return status, float(stamp)


class RosTwinTask:
    """The twin's task from ``task/status`` and ``task/reset``. See the module docstring.

    Args:
        config: Task name, namespace, limits.
        now_s: The env clock's ``now_s``.
        session: Shared session (usually the robot's).
        privileged_spec: Spec of the privileged entries (None: derived from the first status,
            float32 vectors without bounds).
    """

    def __init__(
        self,
        config: RosTwinTaskConfig,
        now_s: Callable[[], float],
        session: RosSession,
        privileged_spec: Mapping[str, ArraySpec] | None = None,
    ) -> None:
        self.config = config
        self._now = now_s
        self.session = session
        self._spec = dict(privileged_spec) if privileged_spec is not None else None
        self._slot: Latest | None = None
        self._sub = None

    @property
    def name(self) -> str:
        return self.config.name

    def connect(self) -> None:
        """Subscribe to ``task/status`` (done lazily by every other method too)."""
        if self._slot is None:
            self._slot, self._sub = self.session.subscribe(
                "task/status", String, qos.STATUS, decode_status
            )
            self.session.synced.append(self._slot)

    def disconnect(self) -> None:
        if self._slot is not None and self._slot in self.session.synced:
            self.session.synced.remove(self._slot)
        if self.session.started:
            self.session.unsubscribe(self._sub)
        self._slot = self._sub = None

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        if self._spec is None:
            self.connect()
            assert self._slot is not None
            slot = self._slot
            if not self.session.wait_until(
                lambda: slot.value is not None, self.config.spec_timeout_s
            ):
                raise RosTimeoutError(
                    f"privileged_spec: {slot.describe_missing()} (waited "
                    f"{self.config.spec_timeout_s:g} s)"
                )
            with self.session.cond:
                status: TaskStatus = slot.value
            self._spec = {k: ArraySpec(v.shape, "float32") for k, v in status.privileged.items()}
        return dict(self._spec)

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        """Seed and reset the twin's scene; return the arm start pose (7,).

        Raises:
            RuntimeError: The twin refused (its message says why).
            ValueError: The answer has no valid ``start_pose``.
            RosTimeoutError: The twin did not answer.
        """
        self.connect()
        return reset_twin_scene(self.session, self.config, rng)

    def evaluate(self) -> TaskStatus:
        """The newest task status.

        Raises:
            StaleSensorError: No status yet, or older than ``max_age_s``.
        """
        self.connect()
        assert self._slot is not None
        now = self._now()
        with self.session.cond:
            slot = self._slot
            if slot.value is None or slot.stamp_s is None:
                raise StaleSensorError(f"task status: {slot.describe_missing()}")
            status, stamp = slot.value, slot.stamp_s
        age = now - stamp
        if age > self.config.max_age_s:
            raise StaleSensorError(
                f"{slot.topic} is {age:.3f} s old at clock time {now:.3f} s (limit "
                f"{self.config.max_age_s} s); is the twin running?"
            )
        return TaskStatus(
            reward=status.reward,
            success=status.success,
            failure=status.failure,
            privileged={k: v.copy() for k, v in status.privileged.items()},
        )


def reset_twin_scene(
    session: RosSession, config: RosTwinTaskConfig, rng: np.random.Generator
) -> np.ndarray:
    """Draw an episode seed from ``rng``, set it on the twin node and call ``task/reset``;
    return the arm start pose (7,) from its answer.

    Raises:
        RuntimeError: The twin refused (its message says why).
        ValueError: The answer has no valid ``start_pose``.
        RosTimeoutError: The twin did not answer.
    """
    seed = int(rng.integers(0, 2**31 - 1))
    session.set_parameters(config.twin_node, {"episode_seed": seed}, config.reset_timeout_s)
    # idempotent (the seed is set): sent again if its answer is lost (RosSession.call)
    data = session.timed_trigger("task/reset", config.reset_timeout_s, IDEMPOTENT_RESEND_S)
    pose = np.asarray(data.get("start_pose", []), dtype=np.float64)
    if pose.shape != (7,) or not np.all(np.isfinite(pose)):
        raise ValueError(
            f"{session.topic('task/reset')} answered start_pose "
            f"{data.get('start_pose')!r}; expected 7 finite numbers"
        )
    return pose


class RosTwinSceneTask:
    """The twin played as a real robot (a setup with ``privileged: false``): resets the scene
    through ``task/reset`` (what a person does between episodes on a real arm) and knows nothing
    else. It never subscribes to ``task/status``: reward 0.0, success None (unknown), no failure,
    no privileged state, as :class:`drivers.ros_hw_task.HardwareTask`; success comes from a
    learned reward or a person's buttons, and the twin's truth reaches only the simulated human
    and the twin's own episode scoring.

    Args:
        config: Task name, namespace, reset timeout (``max_age_s`` and ``spec_timeout_s`` are
            unused: nothing is read).
        session: Shared session (usually the robot's).
    """

    def __init__(self, config: RosTwinTaskConfig, session: RosSession) -> None:
        self.config = config
        self.session = session

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        """Empty: this run is kept from the twin's truth."""
        return {}

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        """Seed and reset the twin's scene; the arm start pose (7,) (see
        :func:`reset_twin_scene`)."""
        return reset_twin_scene(self.session, self.config, rng)

    def evaluate(self) -> TaskStatus:
        """Nothing known: reward 0.0, success None, failure False, no privileged state."""
        return TaskStatus(reward=0.0, success=None, failure=False, privileged={})
