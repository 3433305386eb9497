"""peg_insert: insert a grasped square peg into a hole in a fixture (contact-rich).

Scene: a square peg (``PEG_SIDE_M`` section, ``PEG_LENGTH_M`` long) starts grasped in the closed
gripper, its axis along the TCP z axis, its bottom ``PEG_TIP_BELOW_TCP_M`` below the TCP. A fixed
fixture (a mocap body, so nothing can push it) stands on the table at a random xy in
``HOLE_XY_LOW_M .. HOLE_XY_HIGH_M`` and a random yaw in ``+-HOLE_YAW_MAX_RAD``: four boxes around
a square opening of ``HOLE_SIDE_M`` (total clearance ``HOLE_SIDE_M - PEG_SIDE_M``), ``HOLE_DEPTH_M``
deep; the hole bottom is the table top (``z = 0``). The TCP starts pointing down, yawed like the
fixture (plus up to ``START_YAW_NOISE_RAD``, small enough for the peg to fit without turning),
at a random point of a box above the hole region.

Success: the peg is inserted, i.e. its bottom is at least ``SUCCESS_DEPTH_M`` below the fixture
top and its axis is inside the opening. Failure: the peg was dropped: not both finger pads touch
it, it is out of its grasped place (``DROP_DISTANCE_M``; a one-step contact flicker on impact is
not a drop), and its bottom is not inside the hole.

Reward (dense cost, in [-1, 0); exactly 0 on success, ``FAILURE_REWARD`` (-100) on failure);
``xy`` is the tip's xy distance from the hole axis (fixture frame), see :func:`shaping`::

    reach  = 1 - tanh(xy / REACH_SCALE_M)                   # 3 cm: pulls from the start box
    align  = 1 - tanh(xy / ALIGN_SCALE_M)                   # 2 mm: the 1.5 mm clearance
    height = align * (1 - tanh(max(tip_z - top_z, 0) / HEIGHT_SCALE_M))  # down over the opening
    depth  = clip(insertion_depth / SUCCESS_DEPTH_M, 0, 1)  # only while the tip is in the hole
    r      = held * (0.2 reach + 0.15 align + 0.15 height + 0.5 depth) - 1

A cost so that inserting (which ends the episode) beats hovering at the opening; see
``sim.tasks.base.FAILURE_REWARD`` for why dropping the peg costs -100. Why the height term is
gated by the alignment: see :func:`shaping`.

Privileged truth (float32; positions in the robot base (= world) frame, metres): ``tcp_pose``
(7,), ``peg_pos`` (3,) peg centre, ``peg_quat`` (4,), ``peg_tip_pos`` (3,) centre of the peg's
bottom face, ``hole_pos`` (3,) centre of the opening at the fixture top, ``hole_quat`` (4,)
fixture yaw, ``peg_to_hole`` (3,) ``hole_pos - peg_tip_pos``, ``insertion_depth_m`` (1,) how far
the tip is below the fixture top while inside the opening (else 0), ``held`` (1,) 1 when both
finger pads touch the peg.

Contacts of the peg and the fixture are stiffer than MuJoCo's defaults (``CONTACT_SOLREF``): see
the note there. The hole has no chamfer; the scripted expert (:mod:`sim.experts.peg_insert`)
centres the peg first and searches with a spiral when it lands on the edge.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import frames
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import TaskStatus
from sim import model as mdl
from sim.model import MjcfFragment
from sim.tasks.base import FAILURE_REWARD, SimTask

PEG_SIDE_M = 0.022
"""Side of the peg's square section, metres."""
PEG_LENGTH_M = 0.08
PEG_MASS_KG = 0.05
PEG_TIP_BELOW_TCP_M = 0.055
"""Peg bottom below the TCP along the TCP z axis when grasped, metres (the peg top is then
2.5 cm above the TCP, inside the finger pads, clear of the hand)."""
HOLE_SIDE_M = 0.025
"""Side of the square opening, metres: 3 mm total clearance around the peg."""
HOLE_DEPTH_M = 0.035
"""Fixture height = hole depth, metres (the hole bottom is the table top)."""
FIXTURE_SIDE_M = 0.10
"""Outer side of the square fixture, metres."""
FRICTION = 0.5
"""Sliding friction of peg and fixture (the finger pads keep their own, higher, friction)."""
SUCCESS_DEPTH_M = 0.025
"""Success needs the peg bottom this far below the fixture top, metres."""
HOLE_XY_LOW_M = (0.45, -0.12)
HOLE_XY_HIGH_M = (0.60, 0.12)
HOLE_NOMINAL_XY_M = (0.52, 0.0)
HOLE_YAW_MAX_RAD = 0.25
START_OFFSET_LOW_M = (-0.06, -0.06, 0.03)
"""Start TCP box relative to (hole xy, the TCP height where the peg bottom touches the top)."""
START_OFFSET_HIGH_M = (0.06, 0.06, 0.10)
START_NOMINAL_OFFSET_M = (0.0, 0.0, 0.06)
START_YAW_NOISE_RAD = 0.05
"""Start yaw error of the TCP against the fixture; a square peg with this clearance fits up to
about 0.13 rad, so a policy that does not rotate can still insert."""
CONTACT_SOLREF = "0.004 1"
CONTACT_SOLIMP = "0.99 0.999 0.001"
CONTACT_SOLMIX = 1000.0
"""Stiff contacts for the peg and the fixture (their parameters dominate every contact they
take part in through ``solmix``): MuJoCo's default soft contacts scale with the effective mass
of the contact, so a 50 g peg pressed by a 40 N arm would sink millimetres into the fixture and
creep through the fingers. A time constant of twice the 500 Hz timestep keeps penetration and
grasp creep well under a millimetre (MuJoCo raises it to ``2 * timestep`` at lower rates)."""
DROP_DISTANCE_M = 0.01
"""The peg counts as dropped once no longer held by both pads AND its centre is this far from
where the grasp holds it, metres (see :meth:`PegInsertTask.in_grasp`)."""
GRASP_SQUEEZE_M = 0.0004
"""The fingers are placed this much closer than the peg width at reset (a firm initial grip)."""

DESCRIPTION = (
    "Insert a 2.2 cm square peg, held in the closed gripper from the start, 2.5 cm deep into a "
    "2.5 cm square, 3.5 cm deep hole of a fixture at a random position and yaw on the table. "
    "The TCP starts pointing down at a random point above the hole region. Success: the peg "
    "bottom is at least 2.5 cm below the fixture top and inside the opening. Failure: the peg "
    "has left the fingers (not held by both pads and out of its grasped place) and is not in "
    "the hole. Dense cost in [-1, 0): held * (xy reach + fine alignment + height over the "
    "opening + insertion depth) - 1, 0 on success, "
    "-100 on failure. "
    "Contact-rich: forces are bounded by the impedance controller's reference limiting."
)
DEFAULT_SAFETY = SafetyConfig(
    workspace_low_m=(0.33, -0.25, 0.03),
    workspace_high_m=(0.72, 0.25, 0.30),
    orientation_center_quat=DOWN_QUAT,
    orientation_max_rad=0.5,
    max_step_m=0.04,
    max_step_rad=0.2,
    watchdog_timeout_s=0.5,
)
"""Workspace box: the TCP may go down to 3 cm (full insertion puts it at 5.5 cm, so a target
below that presses with the controller's bounded force); x/y cover every hole and start pose."""
MAX_EPISODE_STEPS = 100
"""At 10 Hz; the scripted expert needs about 20-40 steps."""
ACTION_SCALE_M = 0.01
"""Default TCP translation per step for an action of 1.0, metres: half the other tasks'.
Why: SAC's exploration noise is a fraction of the action scale, and at 2 cm per step it
was 3-4 mm per step, more than twice the 1.5 mm clearance a side, so exploring policies
almost never entered the hole (the scripted expert itself drops to about 5 % success with
that much noise). HIL-SERL likewise scales insertion actions down. 1 cm per step still
crosses the +-6 cm start box in well under the episode's 100 steps."""
REACH_SCALE_M = 0.03
"""xy distance scale of the coarse ``reach`` reward term, metres (the start box is +-6 cm)."""
ALIGN_SCALE_M = 0.002
"""xy distance scale of the fine ``align`` term, metres (the clearance is 1.5 mm a side)."""
HEIGHT_SCALE_M = 0.02
"""Height scale of the ``height`` term (tip above the fixture top), metres."""


def shaping(tip_in_fixture: np.ndarray, depth_m: float) -> float:
    """Dense shaping in [0, 1] of the peg tip's position (the reward is ``held * this - 1``).

    Args:
        tip_in_fixture: (3,) peg tip relative to the centre of the opening at the fixture
            top, in the fixture frame, metres.
        depth_m: Insertion depth below the fixture top, metres (0 unless inside the opening).

    Why this shape (from diagnosing state SAC runs of ``robot-rl train --task peg_insert``):
    the earlier ``0.25 align(1 cm) + 0.25 height + 0.5 depth`` paid the height term wherever
    the tip was low, so resting the peg on the fixture top (or beside it) 1-3 cm off the
    hole earned half of the shaping; there friction holds the pressed peg, and centring means
    lifting first, which loses reward, so policies (even with a simulated human driving 40% of
    the steps) settled 1.5-6 cm off the hole at top height and never inserted. Now the height
    term only pays over the opening (gated by the fine alignment), a coarse ``reach`` term has
    slope over the whole start box, and the fine ``align`` term separates 1 mm (fits) from
    3 mm (lands on the edge) by about 0.1 per step. Necessary, not sufficient: state SAC
    still reached no success in 5-6k steps with it, because the critic rated a peg resting
    6 mm off the opening like an aligned one (Q -2.2 vs -2.3 after 5k steps with --human sim).
    """
    xy = float(np.linalg.norm(tip_in_fixture[:2]))
    reach = 1.0 - float(np.tanh(xy / REACH_SCALE_M))
    align = 1.0 - float(np.tanh(xy / ALIGN_SCALE_M))
    height = align * (1.0 - float(np.tanh(max(float(tip_in_fixture[2]), 0.0) / HEIGHT_SCALE_M)))
    depth_frac = float(np.clip(depth_m / SUCCESS_DEPTH_M, 0.0, 1.0))
    return 0.2 * reach + 0.15 * align + 0.15 * height + 0.5 * depth_frac


def yaw_of(quat: np.ndarray) -> float:
    """Yaw (rad) of the x axis of a frame with orientation ``quat`` (w, x, y, z)."""
    R = frames.quat_to_mat(np.asarray(quat, dtype=np.float64))
    return float(np.arctan2(R[1, 0], R[0, 0]))


def _fixture_geoms() -> str:
    """Four walls around the opening, in the fixture frame (origin at the hole bottom centre),
    and a visual-only dark floor in the opening."""
    h = HOLE_SIDE_M / 2
    wall = (FIXTURE_SIDE_M - HOLE_SIDE_M) / 4  # half thickness
    c = h + wall
    hz = HOLE_DEPTH_M / 2
    big = FIXTURE_SIDE_M / 2
    walls = (
        ("px", (c, 0.0), (wall, big)),
        ("nx", (-c, 0.0), (wall, big)),
        ("py", (0.0, c), (h, wall)),
        ("ny", (0.0, -c), (h, wall)),
    )
    # A dark, visual-only floor in the opening, so that cameras see the hole.
    floor = (
        f'<geom name="fixture_hole_floor" type="box" pos="0 0 0.0005" size="{h} {h} 0.0005" '
        'contype="0" conaffinity="0" group="2" rgba="0.08 0.08 0.08 1"/>'
    )
    return floor + "\n".join(
        f'<geom name="fixture_{n}" class="object" type="box" pos="{x} {y} {hz}" '
        f'size="{sx} {sy} {hz}" friction="{FRICTION} 0.01 0.0001" solref="{CONTACT_SOLREF}" '
        f'solimp="{CONTACT_SOLIMP}" solmix="{CONTACT_SOLMIX}" rgba="0.55 0.4 0.25 1"/>'
        for n, (x, y), (sx, sy) in walls
    )


class PegInsertTask(SimTask):
    """Insert a grasped peg into a hole (see the module docstring)."""

    name = "peg_insert"

    def __init__(self) -> None:
        super().__init__()
        top_z = mdl.TABLE_TOP_Z_M + HOLE_DEPTH_M
        self._hole_pose = frames.pose(
            np.array([*HOLE_NOMINAL_XY_M, top_z]), np.array([1.0, 0, 0, 0])
        )

    def mjcf_fragment(self) -> MjcfFragment:
        s, half_len = PEG_SIDE_M / 2, PEG_LENGTH_M / 2
        x, y = HOLE_NOMINAL_XY_M
        return MjcfFragment(
            worldbody=f"""
    <body name="fixture" mocap="true" pos="{x} {y} {mdl.TABLE_TOP_Z_M}">
      {_fixture_geoms()}
    </body>
    <body name="peg" pos="{x} {y} 0.3">
      <freejoint name="peg_free"/>
      <geom name="peg_geom" class="object" type="box" size="{s} {s} {half_len}"
            mass="{PEG_MASS_KG}" friction="{FRICTION} 0.01 0.0001" solref="{CONTACT_SOLREF}"
            solimp="{CONTACT_SOLIMP}" solmix="{CONTACT_SOLMIX}" rgba="0.15 0.45 0.85 1"/>
    </body>"""
        )

    def on_bind(self) -> None:
        w = self.world
        m = w.model
        self._peg_body = m.body("peg").id
        self._peg_geoms = w.geom_ids_of_body("peg")
        self._fixture_mocap = int(m.body("fixture").mocapid[0])

    def randomized_bodies(self) -> tuple[str, ...]:
        return ("peg", "fixture")

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        return {
            "tcp_pose": ArraySpec((7,), "float32"),
            "peg_pos": ArraySpec((3,), "float32"),
            "peg_quat": ArraySpec((4,), "float32", -1.0, 1.0),
            "peg_tip_pos": ArraySpec((3,), "float32"),
            "hole_pos": ArraySpec((3,), "float32"),
            "hole_quat": ArraySpec((4,), "float32", -1.0, 1.0),
            "peg_to_hole": ArraySpec((3,), "float32"),
            "insertion_depth_m": ArraySpec((1,), "float32", 0.0, HOLE_DEPTH_M),
            "held": ArraySpec((1,), "float32", 0.0, 1.0),
        }

    # -- scene ------------------------------------------------------------------------------

    @property
    def hole_pose(self) -> np.ndarray:
        """(7,) pose of the hole: centre of the opening at the fixture top, fixture yaw."""
        return self._hole_pose.copy()

    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        if self.randomize_objects:
            xy = rng.uniform(HOLE_XY_LOW_M, HOLE_XY_HIGH_M)
            yaw = float(rng.uniform(-HOLE_YAW_MAX_RAD, HOLE_YAW_MAX_RAD))
            offset = rng.uniform(START_OFFSET_LOW_M, START_OFFSET_HIGH_M)
            yaw_noise = float(rng.uniform(-START_YAW_NOISE_RAD, START_YAW_NOISE_RAD))
        else:
            xy, yaw = np.array(HOLE_NOMINAL_XY_M), 0.0
            offset, yaw_noise = np.array(START_NOMINAL_OFFSET_M), 0.0
        q_fixture = frames.quat_from_rotvec(np.array([0.0, 0.0, yaw]))
        d = self.world.data
        d.mocap_pos[self._fixture_mocap] = [xy[0], xy[1], mdl.TABLE_TOP_Z_M]
        d.mocap_quat[self._fixture_mocap] = q_fixture
        top_z = mdl.TABLE_TOP_Z_M + HOLE_DEPTH_M
        self._hole_pose = frames.pose(np.array([xy[0], xy[1], top_z]), q_fixture)
        start = np.array([xy[0], xy[1], top_z + PEG_TIP_BELOW_TCP_M]) + offset
        q_start = frames.quat_mul(
            frames.quat_from_rotvec(np.array([0.0, 0.0, yaw + yaw_noise])),
            np.asarray(DOWN_QUAT, dtype=np.float64),
        )
        # Park the peg out of the way until the arm is placed (after_arm_reset grasps it).
        self.world.set_free_body_pose("peg", frames.pose(start + [0.0, 0.0, 0.3], q_start))
        return frames.pose(start, q_start)

    def after_arm_reset(self) -> None:
        """Put the peg between the fingers (axis along the TCP z, faces along the TCP x/y)."""
        center_below_tcp = PEG_TIP_BELOW_TCP_M - PEG_LENGTH_M / 2
        T_tcp_peg = frames.pose(np.array([0.0, 0.0, center_below_tcp]), np.array([1.0, 0, 0, 0]))
        self.world.place_in_gripper("peg", T_tcp_peg, PEG_SIDE_M - GRASP_SQUEEZE_M)

    # -- reading ----------------------------------------------------------------------------

    def held(self) -> bool:
        """Both finger pads touch the peg."""
        return self.world.held_by_pads(self._peg_geoms)

    def in_grasp(self) -> bool:
        """The peg's centre is within ``DROP_DISTANCE_M`` of where the grasp holds it.

        Why (with :meth:`held`) for the failure test: the pads' contact flickers for a control
        step when the peg hits the fixture top or the table (measured: held 0 for one step, the
        next step held again with the tip exactly 5.4 cm below the TCP, as grasped). Failing on
        ``not held`` alone ended about a third of the training episodes of a state SAC policy
        with -100 the moment the peg touched the fixture off the opening, so the critic learnt
        to keep the peg away from the fixture; a peg that really left the fingers falls or
        stays behind, and is centimetres away within a step or two.
        """
        center_below_tcp = PEG_TIP_BELOW_TCP_M - PEG_LENGTH_M / 2
        T_base_tcp = self.world.tcp_pose()
        R = frames.quat_to_mat(T_base_tcp[3:7])
        expected = T_base_tcp[:3] + R @ np.array([0.0, 0.0, center_below_tcp])
        peg = self.world.data.xpos[self._peg_body]
        return bool(np.linalg.norm(peg - expected) <= DROP_DISTANCE_M)

    def peg_tip(self) -> np.ndarray:
        """(3,) centre of the peg's bottom face (along its axis, the -z of the TCP when held)."""
        d = self.world.data
        R = d.xmat[self._peg_body].reshape(3, 3)
        # The peg's frame is the TCP's when held: local +z points down, out of the fingers.
        return d.xpos[self._peg_body] + R[:, 2] * (PEG_LENGTH_M / 2)

    def hole_offset(self) -> np.ndarray:
        """(3,) peg tip relative to the hole centre (top of the opening), in the fixture frame."""
        q = self._hole_pose[3:7]
        return frames.quat_to_mat(q).T @ (self.peg_tip() - self._hole_pose[:3])

    def evaluate(self) -> TaskStatus:
        w = self.world
        d = w.data
        peg_pos = d.xpos[self._peg_body].copy()
        peg_quat = frames.quat_normalize(d.xquat[self._peg_body])
        tip = self.peg_tip()
        hole = self._hole_pose
        local = self.hole_offset()  # (3,) tip in the fixture frame
        in_opening = bool(np.all(np.abs(local[:2]) <= HOLE_SIDE_M / 2))
        depth = float(np.clip(-local[2], 0.0, HOLE_DEPTH_M)) if in_opening else 0.0
        held = self.held()
        success = in_opening and depth >= SUCCESS_DEPTH_M
        failure = not held and not self.in_grasp() and not (in_opening and depth > 0.0)
        reward = FAILURE_REWARD if failure else 0.0
        if not success and not failure:
            reward = float(held) * shaping(local, depth) - 1.0
        f32 = np.float32
        privileged = {
            "tcp_pose": w.tcp_pose().astype(f32),
            "peg_pos": peg_pos.astype(f32),
            "peg_quat": peg_quat.astype(f32),
            "peg_tip_pos": tip.astype(f32),
            "hole_pos": hole[:3].astype(f32),
            "hole_quat": hole[3:7].astype(f32),
            "peg_to_hole": (hole[:3] - tip).astype(f32),
            "insertion_depth_m": np.array([depth], dtype=f32),
            "held": np.array([float(held)], dtype=f32),
        }
        return TaskStatus(
            reward=float(reward),
            success=bool(success),
            failure=bool(failure),
            privileged=privileged,
        )
