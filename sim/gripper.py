"""The twin's grippers: the parallel two-finger hand (FR3, UR5e twins) and the SO-101's jaw.

Each kind is two things: MJCF (:class:`GripperMjcf`: what goes into the scene's ``<tendon>``,
``<equality>``, ``<contact>`` and ``<actuator>``; the bodies are in the arm's hand XML) and a
small class the world drives (:class:`ParallelGripper`, :class:`JawGripper`) with one interface:

- ``closure()``: measured closure in [0, 1] (0 fully open, 1 closed on nothing);
- ``set_target(c)`` / ``target()``: the closure command in [0, 1] (the actuator's setpoint; the
  actuator's force bound decides how hard it squeezes an object);
- ``set_closure(c)``: teleport the jaws to closure ``c`` (resets);
- ``set_width(w)``: teleport the jaws to hold an object ``w`` metres wide (a task that starts
  with an object in the hand).

Both have the geoms ``left_pad`` and ``right_pad`` that tasks use to decide "grasped", and both
close along the TCP's y axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

FINGER_MAX_M = 0.04
"""Parallel hand: travel of each finger, metres (0 closed .. 0.04 open: an 8 cm opening)."""
GRIP_FORCE_N = 70.0
"""Parallel hand: largest squeeze of the finger-opening servo, N."""


@dataclass(frozen=True)
class GripperMjcf:
    """The gripper's scene-level MJCF (each field inserted verbatim in its element)."""

    tendon: str = ""
    equality: str = ""
    contact: str = ""
    actuator: str = ""


def parallel_mjcf() -> GripperMjcf:
    """The two-finger hand's coupling (fingers mirror each other), finger-finger contact
    exclusion, and the position servo ``gripper`` on the finger-opening tendon."""
    opening = 2 * FINGER_MAX_M
    kp = 2.0 * GRIP_FORCE_N / FINGER_MAX_M  # saturates before a 4 cm object stops the fingers
    return GripperMjcf(
        tendon="""
    <fixed name="finger_opening">
      <joint joint="finger_joint1" coef="1"/>
      <joint joint="finger_joint2" coef="1"/>
    </fixed>""",
        equality='<joint joint1="finger_joint1" joint2="finger_joint2" solref="0.005 1"/>',
        contact='<exclude body1="left_finger" body2="right_finger"/>',
        actuator=f"""
    <position name="gripper" tendon="finger_opening" ctrlrange="0 {opening}" kp="{kp}" kv="60"
              forcerange="{-GRIP_FORCE_N} {GRIP_FORCE_N}"/>""",
    )


class ParallelGripper:
    """Two fingers sliding symmetrically (joints ``finger_joint1`` / ``finger_joint2``)."""

    kind = "parallel"

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        self.model, self.data = model, data
        self._qpos = np.array([int(model.joint(f"finger_joint{i}").qposadr[0]) for i in (1, 2)])
        self._dof = np.array([int(model.joint(f"finger_joint{i}").dofadr[0]) for i in (1, 2)])
        self._act = model.actuator("gripper").id

    def closure(self) -> float:
        opening = float(np.sum(self.data.qpos[self._qpos]))
        return float(np.clip(1.0 - opening / (2 * FINGER_MAX_M), 0.0, 1.0))

    def set_target(self, closure: float) -> None:
        c = float(np.clip(closure, 0.0, 1.0))
        self.data.ctrl[self._act] = 2 * FINGER_MAX_M * (1.0 - c)

    def target(self) -> float:
        return 1.0 - float(self.data.ctrl[self._act]) / (2 * FINGER_MAX_M)

    def set_closure(self, closure: float) -> None:
        self._teleport((1.0 - float(np.clip(closure, 0.0, 1.0))) * FINGER_MAX_M)

    def set_width(self, width_m: float) -> None:
        self._teleport(0.5 * width_m)

    def _teleport(self, per_finger_m: float) -> None:
        self.data.qpos[self._qpos] = np.clip(per_finger_m, 0.0, FINGER_MAX_M)
        self.data.qvel[self._dof] = 0.0


@dataclass(frozen=True)
class JawSpec:
    """A jaw gripper: one finger turning on a hinge against a fixed one (SO-101).

    The hinge (joint ``jaw``) turns about an axis parallel to the TCP x axis; at ``q = 0`` the
    moving pad's inner face lies on the fixed pad's (closed on nothing); opening is positive.

    Attributes:
        open_rad: The jaw angle of closure 0 (fully open as commanded), rad.
        squeeze_rad: The setpoint of closure 1, past the contact at 0 (an object stops the jaw
            before; the actuator's force bound sets the squeeze), rad.
        face_lever_m: ``(y, z)`` of the moving pad's face centre relative to the hinge at
            ``q = 0``, in the hand frame, metres (y: the closing axis, the hinge on the +y side
            of the fixed pad, so y < 0; z: along the approach axis, towards the tcp): the
            opening between the pads at ``q`` is ``y cos q + z sin q - y``.
        torque_nm: The jaw servo's largest torque, N m.
    """

    open_rad: float
    squeeze_rad: float
    face_lever_m: tuple[float, float]
    torque_nm: float

    def opening_m(self, q_rad: float | np.ndarray) -> float | np.ndarray:
        """Distance between the pad faces at jaw angle ``q_rad``, metres."""
        y, z = self.face_lever_m
        return y * np.cos(q_rad) + z * np.sin(q_rad) - y

    def angle_for(self, width_m: float) -> float:
        """The jaw angle that leaves ``width_m`` between the pads (clipped to 0 .. open), rad."""
        qs = np.linspace(0.0, self.open_rad, 2001)
        return float(np.interp(width_m, self.opening_m(qs), qs))


def jaw_mjcf(spec: JawSpec) -> GripperMjcf:
    """The jaw's position servo ``gripper`` (setpoint in rad, bounded torque)."""
    kp = 4.0 * spec.torque_nm / max(spec.open_rad, 1e-3)
    return GripperMjcf(
        actuator=f"""
    <position name="gripper" joint="jaw" ctrlrange="{spec.squeeze_rad} {spec.open_rad}"
              kp="{kp:.6g}" kv="{0.05 * kp:.6g}"
              forcerange="{-spec.torque_nm} {spec.torque_nm}"/>"""
    )


class JawGripper:
    """One jaw on a hinge (joint ``jaw``) against a fixed pad (see :class:`JawSpec`)."""

    kind = "jaw"

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, spec: JawSpec) -> None:
        self.model, self.data, self.spec = model, data, spec
        jaw = model.joint("jaw")
        self._qpos = int(jaw.qposadr[0])
        self._dof = int(jaw.dofadr[0])
        self._act = model.actuator("gripper").id

    def closure(self) -> float:
        q = float(self.data.qpos[self._qpos])
        return float(np.clip(1.0 - q / self.spec.open_rad, 0.0, 1.0))

    def set_target(self, closure: float) -> None:
        c = float(np.clip(closure, 0.0, 1.0))
        s = self.spec
        self.data.ctrl[self._act] = (1.0 - c) * s.open_rad + c * s.squeeze_rad

    def target(self) -> float:
        s = self.spec
        q = float(self.data.ctrl[self._act])
        return (s.open_rad - q) / (s.open_rad - s.squeeze_rad)

    def set_closure(self, closure: float) -> None:
        self._teleport((1.0 - float(np.clip(closure, 0.0, 1.0))) * self.spec.open_rad)

    def set_width(self, width_m: float) -> None:
        self._teleport(self.spec.angle_for(width_m))

    def _teleport(self, q_rad: float) -> None:
        self.data.qpos[self._qpos] = q_rad
        self.data.qvel[self._dof] = 0.0
