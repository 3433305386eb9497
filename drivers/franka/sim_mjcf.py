"""Our own FR3 MJCF for franka-sim (the FCI simulator), from robot_rl's DH table.

franka-sim loads the arm model named by ``$FR3_MJCF`` (otherwise it downloads one, which fails
offline and which we do not want: the model must be ours). It finds everything by name, with a
common prefix inferred from the first joint ending in ``joint1``:

- joints ``fr3_joint1`` .. ``fr3_joint7`` (hinges, read and driven through ``qfrc_applied``;
  franka-sim disables actuators and turns on gravity compensation for every body itself);
- bodies ``fr3_link0`` .. ``fr3_link7``; the pose of ``fr3_link7`` composed with ``F_T_EE`` is
  what the simulator reports as ``O_T_EE``;
- geoms ``fr3_link0_collision`` .. ``fr3_link7_collision`` (optional): its self-collision
  reflex watches link pairs three or more apart with a 5 cm margin.

Frames: ``fr3_link7``'s body frame is the TCP of :mod:`robot_rl.core.kinematics` (flange, hand
yaw, TCP offset), with joint 7's axis placed below it. A real FR3 with the Franka Hand
configured in Desk reports the hand TCP as ``O_T_EE``; placing the body frame there makes the
simulator report the same frame, so ``fk_tcp(q)`` must equal the reported ``O_T_EE`` (checked by
:func:`drivers.franka.control.ee_frame_error`, on hardware too).

Geometry is primitive (capsules), masses are the published FR3 link masses with the hand's
mass lumped into link 7. No file of any other project is copied.

Run ``python -m drivers.franka.sim_mjcf OUT.xml`` to write the file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from robot_rl.core import kinematics as kin

PREFIX = "fr3_"
LINK_MASSES_KG = (4.97, 0.646, 3.228, 3.587, 1.226, 1.666, 0.735 + 0.93)
"""Published FR3 link masses; link 7 carries the Franka Hand (0.73 kg + fingers) too, kg."""
LINK_RADII_M = (0.055, 0.055, 0.05, 0.05, 0.045, 0.04, 0.035)
"""Capsule radii of the link collision volumes, metres (thin enough that no monitored pair is
within franka-sim's 5 cm self-collision margin in ordinary poses)."""
JOINT_ARMATURE = (0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05)
"""Reflected rotor inertia per joint, kg m^2."""
JOINT_DAMPING = (1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5)
"""Viscous joint damping, N m s / rad."""
JOINT_FRICTION_NM = (0.02, 0.02, 0.02, 0.02, 0.01, 0.01, 0.01)
"""Coulomb friction per joint, N m. Small: the FR3's joint torque controller compensates most
of its friction, and MuJoCo's frictionloss (a soft constraint) makes an impedance creep."""


def _v(x: Sequence[float] | np.ndarray) -> str:
    return " ".join(f"{float(c):.9g}" for c in x)


def _joint_frame(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Position and quaternion ``(w, x, y, z)`` of DH joint frame ``i`` (0-based) in frame i-1."""
    a, d, alpha = kin.FR3_DH[i]
    pos = np.array([a, -np.sin(alpha) * d, np.cos(alpha) * d])
    quat = np.array([np.cos(alpha / 2), np.sin(alpha / 2), 0.0, 0.0])
    return pos, quat


def _link_segment(i: int) -> np.ndarray:
    """End of link ``i``'s capsule (from its joint frame origin), in the joint frame, metres."""
    if i == 0:
        return np.array([0.0, 0.0, -0.19])  # the shoulder column below joint 2
    if i == 3:
        return np.array([kin.FR3_DH[4][0], 0.08, 0.0])  # the elbow, up to the forearm
    if i == 6:
        return np.array([0.0, 0.0, kin.FLANGE_D_M + kin.TCP_OFFSET_M - 0.04])  # wrist + hand
    return _joint_frame(i + 1)[0]


def _volume(seg_from: np.ndarray, seg_to: np.ndarray, radius_m: float) -> str:
    """MJCF attributes of a link volume: a capsule along the segment, a sphere if it is short."""
    if np.linalg.norm(seg_to - seg_from) < 0.01:
        return f'type="sphere" pos="{_v(seg_from)}" size="{radius_m}"'
    return f'type="capsule" fromto="{_v(seg_from)} {_v(seg_to)}" size="{radius_m}"'


def build_fr3_mjcf() -> str:
    """The MJCF text of the FR3 arm for franka-sim (see the module docstring)."""
    tcp_from_7 = kin.FLANGE_D_M + kin.TCP_OFFSET_M
    hy = kin.HAND_YAW_RAD
    opens, closes = [], []
    for i in range(7):
        pos, quat = _joint_frame(i)
        joint_pos = np.zeros(3)
        seg_from = np.zeros(3)
        seg_to = _link_segment(i)
        if i == 4:
            # The forearm runs along joint 5's axis, from the elbow to the wrist (frame 5).
            seg_from, seg_to = (
                np.array([0.0, 0.0, -(kin.FR3_DH[4][1] - 0.1)]),
                np.array([0.0, 0.0, -0.06]),
            )
        if i == 6:
            # Body frame = TCP: the DH frame 7 is TransZ(-tcp_from_7) RotZ(-hand yaw) from it.
            pos = pos + np.array([0.0, -np.sin(kin.FR3_DH[6][2]), np.cos(kin.FR3_DH[6][2])]) * (
                tcp_from_7
            )
            yaw_q = np.array([np.cos(hy / 2), 0.0, 0.0, np.sin(hy / 2)])
            quat = _qmul(quat, yaw_q)
            joint_pos = np.array([0.0, 0.0, -tcp_from_7])
            seg_from, seg_to = joint_pos, joint_pos + seg_to
        lo, hi = kin.FR3_JOINT_LOW_RAD[i], kin.FR3_JOINT_HIGH_RAD[i]
        r = LINK_RADII_M[i]
        opens.append(
            f'<body name="{PREFIX}link{i + 1}" pos="{_v(pos)}" quat="{_v(quat)}">\n'
            f'  <joint name="{PREFIX}joint{i + 1}" pos="{_v(joint_pos)}" axis="0 0 1" '
            f'range="{lo} {hi}" armature="{JOINT_ARMATURE[i]}" damping="{JOINT_DAMPING[i]}" '
            f'frictionloss="{JOINT_FRICTION_NM[i]}"/>\n'
            f'  <geom name="{PREFIX}link{i + 1}_collision" {_volume(seg_from, seg_to, r)} '
            f'mass="{LINK_MASSES_KG[i]}"/>'
        )
        closes.append("</body>")
    # Links one or two apart never collide on the real arm (its joint limits keep them apart);
    # franka-sim's self-collision reflex watches pairs three or more apart.
    excludes = "\n    ".join(
        f'<exclude body1="{PREFIX}link{i}" body2="{PREFIX}link{j}"/>'
        for i in range(8)
        for j in range(i + 1, min(i + 3, 8))
    )
    return f"""<mujoco model="robot_rl_fr3_for_franka_sim">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.001" integrator="implicitfast"/>
  <default>
    <geom rgba="0.92 0.92 0.95 1" contype="1" conaffinity="1"/>
  </default>
  <worldbody>
    <body name="{PREFIX}link0">
      <geom name="{PREFIX}link0_collision" type="capsule" fromto="0 0 0.03 0 0 0.12" size="0.07"
            mass="2.9"/>
{chr(10).join(opens)}
{chr(10).join(closes)}
    </body>
  </worldbody>
  <contact>
    {excludes}
  </contact>
</mujoco>
"""


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of two ``(w, x, y, z)`` quaternions."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def write_fr3_mjcf(path: str | Path) -> Path:
    """Write :func:`build_fr3_mjcf` to ``path`` (parents created) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_fr3_mjcf())
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``python -m drivers.franka.sim_mjcf OUT.xml``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="MJCF file to write")
    args = parser.parse_args(argv)
    print(write_fr3_mjcf(args.out))


if __name__ == "__main__":
    main()
