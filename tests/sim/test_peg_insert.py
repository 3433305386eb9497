"""peg_insert: scene, contact physics (no tunnelling, no jitter), success/failure, reward, and the
scripted expert's success rate with and without rotation control."""

import numpy as np
import pytest

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.specs import check_tree
from robot_rl.envs import RobotEnv
from sim import model as mdl
from sim.backend import make_sim_backend
from sim.config import RandomizationConfig, SimConfig
from sim.experts.base import Expert
from sim.experts.peg_insert import PegInsertExpert
from sim.tasks.base import FAILURE_REWARD
from sim.tasks.peg_insert import (
    DEFAULT_SAFETY,
    HOLE_DEPTH_M,
    HOLE_SIDE_M,
    HOLE_XY_HIGH_M,
    HOLE_XY_LOW_M,
    HOLE_YAW_MAX_RAD,
    PEG_LENGTH_M,
    PEG_SIDE_M,
    PEG_TIP_BELOW_TCP_M,
    SUCCESS_DEPTH_M,
)

TOP_Z = mdl.TABLE_TOP_Z_M + HOLE_DEPTH_M


def _env(control_rotation=True, randomization=None, **env_kwargs):
    env_cfg = EnvConfig(control_rotation=control_rotation, **env_kwargs)
    sim_cfg = SimConfig(cameras=(), randomization=randomization or RandomizationConfig())
    b = make_sim_backend("peg_insert", sim_cfg, env_cfg)
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg), b


def _run(env, expert, seed):
    """One expert episode; returns (final info, phases visited, rewards)."""
    obs, info = env.reset(seed=seed)
    expert.reset(np.random.default_rng(seed))
    phases, rewards = set(), []
    while True:
        a = expert.act(obs, info)
        assert env.action_space.contains(a)
        obs, r, term, trunc, info = env.step(a)
        phases.add(expert.phase)
        rewards.append(r)
        if term or trunc:
            return info, phases, np.array(rewards)


def _success_rate(control_rotation: bool, episodes: int, seed0: int = 0) -> float:
    env, b = _env(control_rotation)
    expert = b.make_expert()
    assert isinstance(expert, Expert)
    wins = sum(bool(_run(env, expert, seed0 + ep)[0][keys.INFO_SUCCESS]) for ep in range(episodes))
    env.close()
    return wins / episodes


def _step_tip_towards(env, info, goal_tip, n_dim, gripper=1.0):
    """One env step moving the peg tip towards ``goal_tip`` (saturated), gripper target given."""
    p = info[keys.INFO_PRIVILEGED]
    a = np.zeros(n_dim, dtype=np.float32)
    a[:3] = np.clip((goal_tip - p["peg_tip_pos"]) / env.config.action_scale_m, -1, 1)
    a[-1] = 2 * gripper - 1
    return env.step(a)


# -- the scripted expert ------------------------------------------------------------------------


@pytest.mark.parametrize("control_rotation", [True, False])
def test_expert_succeeds_short(control_rotation):
    assert _success_rate(control_rotation, 12) >= 0.9


@pytest.mark.parametrize("control_rotation", [True, False])
def test_expert_succeeds_50_episodes(control_rotation):
    assert _success_rate(control_rotation, 50, seed0=1000) >= 0.95


def test_expert_searches_and_finds_hole_when_its_estimate_is_off():
    # A 5 mm belief error (clearance is 1.5 mm per side): the peg lands on the fixture top and
    # only the spiral search can find the opening.
    env, b = _env(control_rotation=False)
    expert = PegInsertExpert(env.config, b.task.layout, hole_xy_error_m=0.005)
    results = [_run(env, expert, seed) for seed in range(6)]
    assert sum(info[keys.INFO_SUCCESS] for info, _, _ in results) >= 5
    assert sum("search" in phases for _, phases, _ in results) >= 3


def test_expert_validates_its_config():
    with pytest.raises(ValueError, match="hole_xy_error_m"):
        PegInsertExpert(EnvConfig(), hole_xy_error_m=-0.001)


# -- scene and reset ----------------------------------------------------------------------------


def test_reset_starts_with_peg_held_above_a_randomized_hole():
    env, b = _env()
    holes, starts, yaws = [], [], []
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        p = info[keys.INFO_PRIVILEGED]
        check_tree(p, b.task.privileged_spec, "privileged")
        tcp = obs[keys.STATE][keys.TCP_POSE].astype(np.float64)
        R_tcp = frames.quat_to_mat(tcp[3:7])
        np.testing.assert_allclose(R_tcp[:, 2], [0, 0, -1], atol=1e-3)  # pointing down
        # Peg grasped: held by both pads, axis along the TCP z, tip where the task says.
        assert p["held"][0] == 1.0
        np.testing.assert_allclose(
            p["peg_tip_pos"], tcp[:3] + R_tcp[:, 2] * PEG_TIP_BELOW_TCP_M, atol=1e-3
        )
        assert obs[keys.STATE][keys.GRIPPER_POS][0] > 0.5  # fingers closed on the peg
        # Hole on the table within its ranges; tip above the fixture top; start near the hole.
        hole = p["hole_pos"]
        assert np.all(hole[:2] >= np.array(HOLE_XY_LOW_M) - 1e-6)
        assert np.all(hole[:2] <= np.array(HOLE_XY_HIGH_M) + 1e-6)
        assert hole[2] == pytest.approx(TOP_Z)
        assert abs(frames.quat_to_rotvec(p["hole_quat"].astype(np.float64))[2]) <= HOLE_YAW_MAX_RAD
        assert p["peg_tip_pos"][2] > TOP_Z + 0.02
        assert np.linalg.norm(tcp[:2] - hole[:2]) < 0.09
        assert b.robot.safety.in_workspace(tcp[:3])
        assert not info[keys.INFO_SUCCESS] and not info[keys.INFO_FAILURE]
        holes.append(hole)
        starts.append(tcp[:3])
        yaws.append(frames.quat_to_rotvec(p["hole_quat"].astype(np.float64))[2])
    assert np.std(np.array(holes)[:, :2], axis=0).min() > 0.01
    assert np.std(np.array(starts), axis=0).min() > 0.01
    assert np.std(yaws) > 0.02
    # Same seed, same scene.
    _, i1 = env.reset(seed=3)
    _, i2 = env.reset(seed=3)
    np.testing.assert_allclose(i1["privileged"]["hole_pos"], i2["privileged"]["hole_pos"])
    np.testing.assert_allclose(i1["privileged"]["peg_pos"], i2["privileged"]["peg_pos"])


def test_nominal_scene_without_object_randomization():
    env, _ = _env(randomization=RandomizationConfig(object_pose=False))
    _, i1 = env.reset(seed=1)
    _, i2 = env.reset(seed=2)
    for k in ("hole_pos", "hole_quat", "peg_pos", "tcp_pose"):
        np.testing.assert_allclose(i1["privileged"][k], i2["privileged"][k], atol=1e-6)


def test_default_safety_allows_full_insertion():
    # The TCP at full insertion (tip on the hole bottom) must be inside the workspace, with room
    # below it for a bounded press.
    tcp_z_full = mdl.TABLE_TOP_Z_M + PEG_TIP_BELOW_TCP_M
    assert DEFAULT_SAFETY.workspace_low_m[2] < tcp_z_full - 0.01
    for xy in (HOLE_XY_LOW_M, HOLE_XY_HIGH_M):
        assert DEFAULT_SAFETY.workspace_low_m[0] < xy[0] < DEFAULT_SAFETY.workspace_high_m[0]
        assert DEFAULT_SAFETY.workspace_low_m[1] < xy[1] < DEFAULT_SAFETY.workspace_high_m[1]


# -- contact physics ----------------------------------------------------------------------------


@pytest.mark.parametrize("control_rotation", [True, False])
def test_peg_cannot_pass_through_the_fixture(control_rotation):
    env, b = _env(control_rotation)
    obs, info = env.reset(seed=5)
    hole = b.task.hole_pose
    R = frames.quat_to_mat(hole[3:7])
    # Over a wall, 3 cm from the hole axis, 1 cm above the top; then press down at full action.
    over_wall = hole[:3] + R @ np.array([0.03, 0.0, 0.01])
    n_dim = env.action_spec.shape[0]
    for _ in range(10):
        obs, r, term, trunc, info = _step_tip_towards(env, info, over_wall, n_dim)
    tips, forces = [], []
    for _ in range(30):
        p = info[keys.INFO_PRIVILEGED]
        obs, r, term, trunc, info = _step_tip_towards(
            env, info, p["peg_tip_pos"] - [0, 0, 0.1], n_dim
        )
        tips.append(info[keys.INFO_PRIVILEGED]["peg_tip_pos"][2])
        forces.append(obs[keys.STATE][keys.TCP_WRENCH][2])
        assert not term
    tips, forces = np.array(tips), np.array(forces)
    assert tips.min() > TOP_Z - 0.001  # resting on the top, not sinking in or tunnelling
    # Really pressing (the fixture pushes up), with the controller's bounded force.
    cap = 2000.0 * 0.02
    assert forces[-10:].min() > 0.5 * cap
    assert forces.max() < 1.5 * cap
    p = info[keys.INFO_PRIVILEGED]
    assert p["held"][0] == 1.0 and p["insertion_depth_m"][0] == 0.0
    np.testing.assert_allclose(b.task.hole_pose, hole)  # the fixture did not move


def test_inserted_peg_rests_without_jitter():
    env, b = _env(terminate_on_success=False, max_episode_steps=60)
    expert = b.make_expert()
    obs, info = env.reset(seed=2)
    expert.reset(np.random.default_rng(2))
    depths, speeds = [], []
    for _ in range(60):
        obs, r, term, trunc, info = env.step(expert.act(obs, info))
        depths.append(info[keys.INFO_PRIVILEGED]["insertion_depth_m"][0])
        speeds.append(np.linalg.norm(b.world.body_velocity("peg")))
        if trunc:
            break
    assert info[keys.INFO_SUCCESS] and r == 0.0
    last = slice(-20, None)
    assert np.ptp(depths[last]) < 2e-4  # no bouncing in the hole
    assert max(speeds[last]) < 1e-3  # m/s and rad/s: at rest
    assert depths[-1] == pytest.approx(HOLE_DEPTH_M, abs=1e-3)  # pressed to the bottom


# -- success, failure, reward -------------------------------------------------------------------


def test_release_over_the_table_is_a_failure():
    env, b = _env(control_rotation=False)
    obs, info = env.reset(seed=7)
    hole = b.task.hole_pose
    # 15 cm beside the hole (clear of the fixture), peg tip 5 cm above the table; then open.
    goal = hole[:3] + np.array([0.0, 0.15 * -np.sign(hole[1] or 1.0), 0.05 - HOLE_DEPTH_M])
    for _ in range(12):
        obs, r, term, trunc, info = _step_tip_towards(env, info, goal, 4)
        assert not term
    for _ in range(10):
        obs, r, term, trunc, info = _step_tip_towards(env, info, goal, 4, gripper=0.0)
        if term:
            break
    assert term and info[keys.INFO_FAILURE] and not info[keys.INFO_SUCCESS]
    assert info[keys.INFO_PRIVILEGED]["held"][0] == 0.0
    assert r == FAILURE_REWARD


def test_success_and_failure_from_peg_placement():
    env, b = _env()
    env.reset(seed=0)
    w, task = b.world, b.task
    hole = task.hole_pose
    R = frames.quat_to_mat(hole[3:7])
    axis_down = frames.quat_mul(hole[3:7], np.array([0.0, 1.0, 0.0, 0.0]))  # peg z down
    w.set_gripper_closure(0.0)
    w.set_gripper_target(0.0)

    def place(tip_local):
        tip = hole[:3] + R @ np.asarray(tip_local)
        w.set_free_body_pose("peg", frames.pose(tip + [0, 0, PEG_LENGTH_M / 2], axis_down))
        w.forward()
        return task.evaluate()

    # Dropped into the hole, at the bottom: success (inserted), not a failure.
    s = place([0.0, 0.0, -HOLE_DEPTH_M + 1e-4])
    assert s.success and not s.failure and s.reward == 0.0
    # Just short of the success depth: neither (it is in the hole, not dropped).
    s = place([0.0, 0.0, -SUCCESS_DEPTH_M + 0.003])
    assert not s.success and not s.failure
    # Lying on the fixture top beside the opening, not held: dropped.
    s = place([(HOLE_SIDE_M + PEG_SIDE_M) / 2 + 0.01, 0.0, 1e-4])
    assert s.failure and not s.success and s.reward == FAILURE_REWARD


def test_reward_is_bounded_and_grows_with_insertion():
    env, b = _env()
    info, _, rewards = _run(env, b.make_expert(), seed=4)
    assert info[keys.INFO_SUCCESS]
    assert np.all((rewards >= -1) & (rewards <= 0))
    assert rewards[-1] == 0.0
    assert rewards[0] < rewards[len(rewards) // 2] < rewards[-1]


def test_shaping_pays_height_only_over_the_opening():
    from sim.tasks.peg_insert import shaping

    above_aligned = shaping(np.array([0.0, 0.0, 0.01]), 0.0)  # 1 cm over the opening
    on_top_off = shaping(np.array([0.006, 0.0, 0.0]), 0.0)  # resting on the top, 6 mm off
    beside_low = shaping(np.array([0.03, 0.0, -0.02]), 0.0)  # beside the fixture, low
    # Coming down off the opening earns nothing over staying high there: the old shaping paid
    # a quarter of its range for being low anywhere (policies rested on the fixture top).
    assert above_aligned > on_top_off > beside_low
    assert shaping(np.array([0.006, 0.0, 0.0]), 0.0) == pytest.approx(
        shaping(np.array([0.006, 0.0, 0.03]), 0.0), abs=0.01
    )
    # The fine term separates a fitting offset (1 mm) from one that lands on the edge (3 mm).
    assert (
        shaping(np.array([0.001, 0, 0.005]), 0.0) - shaping(np.array([0.003, 0, 0.005]), 0.0) > 0.1
    )
    assert shaping(np.zeros(3), SUCCESS_DEPTH_M) == pytest.approx(1.0)


def test_hitting_the_fixture_top_off_the_opening_is_not_a_drop():
    # A fast descent onto the fixture top 2 cm off the opening: the pads' contact may flicker
    # for a step on impact, but the peg stays in its grasped place, so it is no failure.
    env, b = _env(control_rotation=False)
    obs, info = env.reset(seed=7)
    hole = b.task.hole_pose
    goal = hole[:3] + frames.quat_to_mat(hole[3:7]) @ np.array([0.02, 0.0, 0.02])
    for _ in range(8):
        obs, r, term, trunc, info = _step_tip_towards(env, info, goal, 4)
    for _ in range(8):  # slam down: the target is 3 cm below the top
        obs, r, term, trunc, info = _step_tip_towards(env, info, goal - [0, 0, 0.05], 4)
        assert not term and r > FAILURE_REWARD
    assert b.task.in_grasp()
    p = info[keys.INFO_PRIVILEGED]
    assert p["peg_to_hole"][2] == pytest.approx(0.0, abs=1e-3)  # resting on the top
