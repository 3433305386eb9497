"""The impedance controller tracks free-space targets and bounds its force in contact."""

import numpy as np
import pytest

from robot_rl.core import frames
from sim.config import SimConfig
from sim.controller import ControllerConfig
from sim.world import SimWorld


@pytest.fixture(scope="module")
def world():
    w = SimWorld(SimConfig(cameras=()))
    yield w
    w.close()


def test_tracks_free_space_target(world):
    world.reset_physics()
    start = world.tcp_pose()
    target = frames.apply_delta(start, np.array([0.15, 0.1, -0.2]), np.array([0.1, -0.1, 0.4]))
    world.set_target(target)
    world.step(int(1.5 / world.dt_s))
    pose = world.tcp_pose()
    assert np.linalg.norm(pose[:3] - target[:3]) < 0.005
    assert np.linalg.norm(frames.quat_error(target[3:7], pose[3:7])) < 0.05
    # Settled: barely moving.
    assert np.linalg.norm(world.tcp_twist()[:3]) < 0.01


def test_holds_still_at_home_without_drift(world):
    world.reset_physics()
    start = world.tcp_pose()
    world.step(500)
    assert np.linalg.norm(world.tcp_pose()[:3] - start[:3]) < 1e-4


def test_reference_limiting_bounds_force_into_the_table(world):
    cfg = world.controller.config
    world.reset_physics()
    pose = world.tcp_pose()
    # Above a free spot of the table, then a target 10 cm below the table top.
    above = frames.pose(np.array([0.5, 0.0, 0.05]), pose[3:7])
    world.set_target(above)
    world.step(1000)
    world.set_target(frames.pose(np.array([0.5, 0.0, -0.10]), pose[3:7]))
    table = [world.table_geom_id]
    hand_geoms = [
        g for b in ("hand", "left_finger", "right_finger") for g in world.geom_ids_of_body(b)
    ]
    commanded, contact = [], []
    for _ in range(1500):
        world.step(1)
        commanded.append(world.controller.last_wrench[:3].copy())
        contact.append(world.contact_force(hand_geoms, table))
    commanded = np.array(commanded[500:])  # after the impact transient
    contact = np.array(contact[500:])
    assert contact.min() > 1.0  # really in contact
    bound = cfg.kp_trans_n_per_m * cfg.max_error_m
    assert np.abs(commanded).max() <= bound + 2.0
    # The table carries the commanded push (plus little else): bounded by the same cap.
    assert contact.max() <= bound * 1.3
    # The measured external wrench sees the table pushing up.
    assert world.tcp_wrench()[2] > 0.5 * bound


def test_config_validation_says_what_to_change():
    with pytest.raises(ValueError, match="max_error_m"):
        ControllerConfig(max_error_m=0.0)
    assert ControllerConfig().max_force_n == pytest.approx(40.0)
