"""cable_route (stage 14's deformable task): the clip's slot is 0.8 mm narrower than the cable
and its rails give on springs (a snap fit); a cable steered onto the slot's line and drawn taut
is pressed in, spreading the rails, which then hold it; one steered 2 cm beside it does not
count; a tab that leaves the hand fails the episode; hovering, going straight down and flailing
at random do not succeed; the scripted expert routes the cable from random scenes."""

import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.envs import RobotEnv
from sim.backend import TASKS, make_sim_backend
from sim.config import SimConfig
from sim.experts.cable_route import TAUT_REACH_M
from sim.tasks.base import FAILURE_REWARD
from sim.tasks.cable_route import CABLE_RADIUS_M, CLIP_GAP_M, arc_directions, bearing

INFO = TASKS["cable_route"]


def _env():
    env_cfg = EnvConfig(
        action_scale_m=INFO.action_scale_m, max_episode_steps=INFO.max_episode_steps
    )
    b = make_sim_backend("cable_route", SimConfig(cameras=()), env_cfg)
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg), b


def _run(env, expert, seed: int, until_phase: str | None = None):
    """The expert from a reset, until it enters ``until_phase`` (or the episode ends)."""
    obs, info = env.reset(seed=seed)
    expert.reset(np.random.default_rng(seed))
    for _ in range(INFO.max_episode_steps):
        a = expert.act(obs, info)
        if until_phase is not None and expert.phase == until_phase:
            return obs, info
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    return obs, info


def test_the_slot_at_rest_is_narrower_than_the_cable_and_its_rails_give() -> None:
    env, b = _env()
    m = b.task.world.model
    px, nx = m.geom("clip_px_wall"), m.geom("clip_nx_wall")
    gap = (px.pos[0] - px.size[0]) - (nx.pos[0] + nx.size[0])
    assert gap == pytest.approx(CLIP_GAP_M) and 2 * CABLE_RADIUS_M - gap == pytest.approx(0.0008)
    for name in ("clip_px_give", "clip_nx_give"):
        assert m.joint(name).stiffness[0] > 0 and m.jnt_range[m.joint(name).id][1] > 0.0008
    env.close()


@pytest.mark.parametrize("beside_m, seated", [(0.0, True), (0.02, False)])
def test_only_a_cable_lowered_on_the_channels_line_is_pressed_in(beside_m, seated) -> None:
    """From where the expert starts lowering (the cable's end swung over the channel's line),
    the tab comes down on an arc about the anchor with the cable nearly taut, its bearing
    steered so that the cable crosses the clip ``beside_m`` off the channel's centre line
    (the cable bends at the anchor: the line at the clip is not the line to the hand)."""
    env, b = _env()
    expert = b.make_expert()
    obs, info = _run(env, expert, seed=3, until_phase="lower")
    p = info[keys.INFO_PRIVILEGED]
    anchor = np.asarray(p["anchor_pos"], dtype=np.float64)
    u = np.asarray(p["clip_pos"])[:2] - anchor[:2]
    dist = float(np.linalg.norm(u))
    line = float(np.arctan2(u[0], u[1]))
    tcp = np.asarray(p["tcp_pose"], dtype=np.float64)
    grip = tcp[:3] - np.asarray(p["tab_pos"], dtype=np.float64)
    z, draw, success = float(p["tab_pos"][2]), 0.0, False
    for _ in range(60):
        off = float(info[keys.INFO_PRIVILEGED]["line_offset_m"][0])
        if abs(off - beside_m) < 0.03:
            line -= np.clip(0.7 * (off - beside_m) / dist, -0.03, 0.03)
        if z <= 0.014:  # down: draw the cable taut over the clip
            draw = min(0.03, draw + 0.004)
        z = max(0.014, z - 0.01)
        reach = np.sqrt((TAUT_REACH_M + draw) ** 2 - (z - anchor[2]) ** 2)
        goal = np.r_[anchor[:2] + reach * bearing(line), z] + grip
        a = np.zeros(7, np.float32)
        a[:3] = np.clip((goal - tcp[:3]) / INFO.action_scale_m, -1, 1)
        a[6] = 1.0
        obs, _, term, trunc, info = env.step(a)
        tcp = np.asarray(info[keys.INFO_PRIVILEGED]["tcp_pose"], dtype=np.float64)
        success = success or bool(info[keys.INFO_SUCCESS])
        if term or trunc:
            break
    assert success == seated, info[keys.INFO_PRIVILEGED]["line_offset_m"]
    if seated:  # the cable holds the rails apart: it is clipped in
        d, m = b.task.world.data, b.task.world.model
        spread = [d.qpos[m.jnt_qposadr[m.joint(n).id]] for n in ("clip_px_give", "clip_nx_give")]
        assert sum(spread) > 0.0004, spread
    env.close()


def test_a_tab_that_leaves_the_hand_fails_the_episode() -> None:
    env, b = _env()
    obs, info = env.reset(seed=1)
    for _ in range(30):  # open the hand: the tab falls
        obs, r, term, trunc, info = env.step(np.array([0, 0, 0, 0, 0, 0, -1], np.float32))
        if term or trunc:
            break
    assert term and r == FAILURE_REWARD and not info[keys.INFO_SUCCESS]
    env.close()


def test_the_expert_routes_the_cable_from_random_scenes() -> None:
    env, b = _env()
    expert = b.make_expert()
    wins = sum(bool(_run(env, expert, seed)[1][keys.INFO_SUCCESS]) for seed in range(6))
    assert wins >= 6
    env.close()


def test_degenerate_policies_do_not_succeed() -> None:
    """Hovering, going straight down where the cable starts, and flailing at random."""
    env, b = _env()
    rng = np.random.default_rng(0)
    for seed, policy in ((0, "hover"), (1, "down"), (2, "random"), (3, "random")):
        obs, info = env.reset(seed=seed)
        for _ in range(INFO.max_episode_steps):
            a = {"hover": np.zeros(7), "down": np.r_[0, 0, -1.0, 0, 0, 0, 0]}.get(
                policy, rng.uniform(-1, 1, 7)
            )
            a = np.asarray(a, np.float32)
            a[6] = 1.0  # the task's fixed gripper: closed on the tab
            obs, _, term, trunc, info = env.step(a)
            assert not info[keys.INFO_SUCCESS], policy
            if term or trunc:
                break
    env.close()


def test_the_starting_shape_spans_anchor_to_tab_with_the_cables_length() -> None:
    start, end = np.zeros(3), np.array([0.1, 0.15, 0.08])
    dirs = arc_directions(start, end, 14, 0.28)
    np.testing.assert_allclose(np.linalg.norm(dirs, axis=1), 1.0)
    np.testing.assert_allclose(start + dirs.sum(axis=0) * 0.02, end, atol=1e-6)
    assert (dirs[:, 2].cumsum() >= 0).all()  # bowed up, never under the anchor's height
    np.testing.assert_allclose(bearing(0.0), [0.0, 1.0], atol=1e-12)
