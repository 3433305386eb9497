"""Safety limits of the bridges as ROS 2 parameters (``drivers/arm_bridge/params.py``).

- plain: :func:`safety_from_values` builds the config and names the parameter in every error;
- real processes over DDS: the lockstep twin started with a narrowed box keeps the measured TCP
  inside it under a flood of targets outside it (and reports the box in ``status``); a run-time
  ``SetParameters`` on the box is refused; a bad value makes the twin and the generic
  ``arm_bridge`` node exit with code 2, naming the parameter.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from ros_graph import DomainIds  # noqa: E402
from std_msgs.msg import Float64, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from drivers.arm_bridge.params import (  # noqa: E402
    EXIT_BAD_PARAMETER,
    BridgeParamError,
    safety_from_values,
)
from drivers.ros import convert, qos  # noqa: E402
from robot_rl.core import frames  # noqa: E402
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig  # noqa: E402

H1_DOMAINS = DomainIds(90, 96)  # this file's ROS domain ids (helper H1)
NS = "/arm"
# Narrower than pick_cube's default box (0.3, -0.28, 0.015)..(0.7, 0.28, 0.35), still holding the
# task's start poses (0.40, -0.12, 0.14)..(0.58, 0.12, 0.24).
LOW_M = [0.38, -0.14, 0.12]
HIGH_M = [0.60, 0.14, 0.26]
TOL_M = 0.012  # impedance overshoot: the arm hits the box faces at max_step_m per period


# -- plain -----------------------------------------------------------------------------------


def test_values_override_defaults_and_integers_are_accepted() -> None:
    cfg = safety_from_values(
        {"workspace_high_m": [0.6, 0.2, 0.3], "max_step_m": 1, "watchdog_timeout_s": 0.25},
        SafetyConfig(),
    )
    assert cfg.workspace_high_m == (0.6, 0.2, 0.3) and cfg.max_step_m == 1.0
    assert cfg.watchdog_timeout_s == 0.25
    assert cfg.workspace_low_m == SafetyConfig().workspace_low_m  # missing: the default


@pytest.mark.parametrize(
    ("values", "named", "says"),
    [
        ({"workspace_low_m": [0.5, 0.0, 0.0], "workspace_high_m": [0.4, 0.3, 0.3]},
         "workspace_low_m", "not on x"),
        ({"workspace_high_m": [0.7, 0.3]}, "workspace_high_m", "must have 3 numbers"),
        ({"workspace_high_m": "0.7, 0.3, 0.3"}, "workspace_high_m", "list of 3 numbers"),
        ({"max_step_m": -0.01}, "max_step_m", "must be positive"),
        ({"max_step_rad": math.nan}, "max_step_rad", "finite"),
        ({"workspace_low_m": [0.3, math.inf, 0.0]}, "workspace_low_m", "NaN or inf"),
        ({"watchdog_timeout_s": True}, "watchdog_timeout_s", "must be a number"),
        ({"orientation_max_rad": 4.0}, "orientation_max_rad", "(0, pi]"),
        ({"orientation_center_quat": [0.0, 2.0, 0.0, 0.0]}, "orientation_center_quat", "unit"),
        ({"max_step": 0.1}, "max_step", "unknown safety parameter"),
    ],
)  # fmt: skip
def test_invalid_values_name_the_parameter(values: dict, named: str, says: str) -> None:
    with pytest.raises(BridgeParamError) as err:
        safety_from_values(values, SafetyConfig())
    assert named in str(err.value) and says in str(err.value), err.value


# -- real processes --------------------------------------------------------------------------


def _param_args(**params) -> list[str]:
    out = ["--ros-args"]
    for k, v in params.items():
        out += ["-p", f"{k}:={v}"]
    return out


def _twin_args(*ros_args: str) -> list[str]:
    return [
        sys.executable, "-m", "sim.ros_node", "--task", "pick_cube", "--ns", NS.strip("/"),
        "--mode", "lockstep", "--control-hz", "10", "--cameras", *ros_args,
    ]  # fmt: skip


def _json(response) -> dict:
    assert response.success, response.message
    return json.loads(response.message)


def test_narrowed_box_holds_under_a_flood_and_cannot_change_at_run_time(
    ros_processes, ros_client_factory
) -> None:
    domain = H1_DOMAINS.next()
    box = _param_args(workspace_low_m=LOW_M, workspace_high_m=HIGH_M, max_step_m=0.04)
    proc = ros_processes(_twin_args(*box), domain, "twin_box")
    c = ros_client_factory(domain)
    c.subscribe(PoseStamped, f"{NS}/ee_pose", qos.SENSOR)
    c.subscribe(String, f"{NS}/status", qos.STATUS)
    target_pub = c.publisher(PoseStamped, f"{NS}/target_pose", qos.COMMAND)
    gripper_pub = c.publisher(Float64, f"{NS}/gripper/command", qos.COMMAND)

    def status() -> dict:
        return json.loads(c.latest[f"{NS}/status"].data)

    def stamp() -> float:
        return convert.msg_to_time(c.latest[f"{NS}/ee_pose"].header.stamp)

    c.set_parameters(f"{NS}/twin", episode_seed=4)
    t = _json(c.call(Trigger, f"{NS}/task/reset", timeout_s=60.0))["stamp_s"]
    c.wait_for(lambda: f"{NS}/ee_pose" in c.latest and abs(stamp() - t) < 1e-6, 30.0, "reset")
    c.wait_for(lambda: target_pub.get_subscription_count() > 0, 30.0, "the twin's subscription")
    c.wait_for(lambda: f"{NS}/status" in c.latest, 30.0, "the status")
    assert status()["safety"]["workspace_low_m"] == LOW_M
    assert status()["safety"]["workspace_high_m"] == HIGH_M
    assert status()["safety"]["max_step_m"] == 0.04

    # Flood: per step, many targets outside the narrowed box (inside the task's default box
    # and far beyond it); the last one published before sim/step is the one executed.
    rng = np.random.default_rng(0)
    corners = np.array([[0.7, 0.28, 0.35], [0.3, -0.28, 0.015], [0.7, -0.28, 0.02], [2, 2, -1]])
    positions = []
    for i in range(40):
        goal = corners[(i // 10) % len(corners)]
        for _ in range(20):
            p = goal + rng.uniform(-0.02, 0.02, 3)
            target_pub.publish(convert.pose_stamped_to_msg(frames.pose(p, DOWN_QUAT), t))
        gripper_pub.publish(Float64(data=1.0))
        t = _json(c.call(Trigger, f"{NS}/sim/step"))["stamp_s"]
        c.wait_for(lambda t=t: abs(stamp() - t) < 1e-6, 30.0, f"ee_pose at {t}")
        pos = convert.msg_to_pose_stamped(c.latest[f"{NS}/ee_pose"])[0][:3]
        positions.append(pos)
    positions = np.array(positions)
    assert np.all(positions >= np.array(LOW_M) - TOL_M), positions.min(axis=0)
    assert np.all(positions <= np.array(HIGH_M) + TOL_M), positions.max(axis=0)
    # The box, not something else, stopped the arm: it reached the narrowed box's faces.
    np.testing.assert_allclose(positions.max(axis=0), HIGH_M, atol=0.01)
    np.testing.assert_allclose(positions.min(axis=0), LOW_M, atol=0.01)
    c.wait_for(lambda: status()["clipped"]["box"] >= 40, 30.0, "40 box clips in the status")
    assert status()["clipped"]["step"] > 0, status()

    # A running bridge's box cannot change.
    with pytest.raises(RuntimeError, match="read-only"):
        c.set_parameters(f"{NS}/twin", workspace_high_m=[0.7, 0.28, 0.35])
    with pytest.raises(RuntimeError, match="read-only"):
        c.set_parameters(f"{NS}/twin", max_step_m=0.2)
    _json(c.call(Trigger, f"{NS}/sim/step"))  # the status of this tick is stamped t
    c.wait_for(lambda: status()["stamp_s"] >= t - 1e-9, 30.0, "a new status")
    assert status()["safety"]["workspace_high_m"] == HIGH_M
    assert status()["safety"]["max_step_m"] == 0.04
    assert proc.alive


@pytest.mark.parametrize(
    ("node", "params", "named"),
    [
        ("twin", {"workspace_low_m": [0.5, -0.1, 0.1], "workspace_high_m": [0.4, 0.1, 0.3]},
         "workspace_low_m"),
        ("arm_bridge", {"workspace_high_m": [0.7, 0.3]}, "workspace_high_m"),
        ("arm_bridge", {"max_step_m": -0.05}, "max_step_m"),
    ],
)  # fmt: skip
def test_bad_parameter_exits_non_zero_naming_it(ros_processes, node, params, named) -> None:
    if node == "twin":
        args = _twin_args(*_param_args(**params))
    else:
        args = [sys.executable, "-m", "drivers.arm_bridge.node"]
        args += ["--backend", "sim.ros_node:static_twin_backend", *_param_args(**params)]
    proc = ros_processes(args, H1_DOMAINS.next(), f"bad_{node}")
    assert proc.proc.wait(timeout=120) == EXIT_BAD_PARAMETER, proc.log()
    log = proc.log()
    assert "invalid parameter, not starting" in log and named in log, log
    assert "Traceback" not in log, log
