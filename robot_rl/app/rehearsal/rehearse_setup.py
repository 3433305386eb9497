"""The setup file ``robot-rl rehearse`` writes (``<out>/setup.yaml``): the real-time twin played
as a real robot, scoring its own episodes, kept from its truth (``privileged: false``).

Two ways to drive the twin's arm (``--driver``):

- ``twin`` (default): the twin node (``sim.ros_node``) is its own arm bridge: the bridge's safety
  core and, for a joint-controlled arm, the IK run inside it; every stamp is sim time.
- ``ros2_control``: the twin stands in for the arm's vendor driver and our bridge for that
  driver kind runs in front of it, as on the robot: ``sim.ros2_control_node`` with the generic
  ROS 2 bridge (``drivers.ros2_arm.node``) in joint mode on the ``ur5e`` (JointTrajectory to a
  ros2_control joint_trajectory_controller) and in Cartesian mode on the ``fr3`` (a compliant
  Cartesian controller's ``PoseStamped`` target), and the SO-101 bridge (``drivers.so101.node``)
  on the ``so101``'s simulated servo bus. The bridge is node ``arm_bridge`` with the task's
  safety limits as its parameters; the robot-side stamps are the host's monotonic clock
  (``time_base: monotonic``), the twin's ``task/status`` (the simulated human's and the
  scoring's) sim time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DRIVERS = ("twin", "ros2_control")
"""``--driver`` choices (module docstring)."""
UR_GRIPPER = [
    "--gripper-command-topic", "/gripper/command", "--gripper-state-topic", "/joint_states",
    "--gripper-joint", "robotiq_85_left_knuckle_joint", "--gripper-scale", "0.8",
]  # fmt: skip
"""The generic bridge's gripper on the ros2_control twin (a Robotiq 2F-85's knuckle joint)."""
DRIVER_STATE_AGE_S = 0.3
"""The env's and the generic bridge's state age limit with a driver in between (a vendor
driver's joint states arrive with more jitter than our own bridge's)."""


def write_setup(cfg: Any) -> Path:
    """``<out>/setup.yaml`` for ``cfg``, a :class:`robot_rl.app.rehearsal.rehearse.RehearseConfig`
    (module docstring); returns its path."""
    cams = [{"name": c, "height": cfg.image_size, "width": cfg.image_size} for c in cfg.cameras]
    score_log = str((cfg.out / "scores.jsonl").resolve())
    raw: dict[str, Any] = {
        "name": "rehearsal",
        "namespace": "arm",
        "robot": "twin",
        "arm": cfg.arm,
        "task": cfg.task,
        "clock": "realtime",
        "control_hz": cfg.control_hz,
        "privileged": False,
        "cameras": cams,
    }
    if cfg.driver == "twin":
        twin_args = ["--task", "${task}", "--ns", "${namespace}", "--arm", cfg.arm,
                     "--cameras", *cfg.cameras,
                     "--image-size", str(cfg.image_size), "--mode", "${clock}",
                     "--control-hz", "${control_hz}", "--state-hz", f"{cfg.state_hz:g}",
                     "--score-log", score_log]  # fmt: skip
        raw["nodes"] = [_node("twin", "sim.ros_node", twin_args)]
    else:
        raw.update(
            bridge_node="arm_bridge", time_base="monotonic", max_state_age_s=DRIVER_STATE_AGE_S
        )
        raw["nodes"] = _driver_nodes(cfg, score_log)
    path = cfg.out / "setup.yaml"
    path.write_text(
        f"# written by `robot-rl rehearse`: the twin played as a real robot ({cfg.driver})\n"
        + yaml.safe_dump(raw, sort_keys=False)
    )
    return path


def _node(name: str, module: str, args: list[str], **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "module": module,
        "args": args,
        "restart": {"policy": "never"},
        "required": True,
        **more,
    }


def _driver_nodes(cfg: Any, score_log: str) -> list[dict[str, Any]]:
    """The ros2_control twin and the arm's bridge in front of it."""
    from drivers.arm_bridge.params import safety_to_dict
    from sim.backend import task_info
    from sim.twin_arms import twin_arm

    interface = twin_arm(cfg.arm).vendor_interface
    twin = ["--arm", cfg.arm, "--task", "${task}", "--ns", "${namespace}",
            "--interface", interface, "--cameras", *cfg.cameras,
            "--image-size", str(cfg.image_size), "--state-hz", f"{cfg.state_hz:g}",
            "--score-log", score_log, "--status-stamps", "sim"]  # fmt: skip
    safety = safety_to_dict(task_info(cfg.task, cfg.arm).default_safety)
    if interface == "servo_bus":
        port = str((cfg.out / "so101_bus").resolve())
        twin += ["--port", port, "--calibration-out", f"{port}.json"]
        bridge_module = "drivers.so101.node"
        # --auto-recover: a missed answer of the simulated bus is its process not scheduled in
        # time on a loaded machine, not a loose cable (drivers/so101/node.py)
        bridge = ["--port", port, "--calibration", f"{port}.json", "--ns", "${namespace}",
                  "--wait-for-port-s", "120", "--auto-recover"]  # fmt: skip
    else:
        bridge_module = "drivers.ros2_arm.node"
        bridge = ["--mode", interface, "--arm", cfg.arm, "--ns", "${namespace}",
                  "--connect-timeout-s", "60", "--max-state-age-s", f"{DRIVER_STATE_AGE_S:g}",
                  *UR_GRIPPER]  # fmt: skip
        if interface == "cartesian":
            bridge += ["--tcp-pose-topic", "/tcp_pose_broadcaster/pose"]
            bridge += ["--wrench-topic", "/force_torque_sensor_broadcaster/wrench"]
    return [
        _node("twin", "sim.ros2_control_node", twin),
        # The bridge may start before the twin's bus or driver topics exist: it waits for them
        # (--wait-for-port-s, --connect-timeout-s), and a few restarts on top.
        _node(
            "arm_bridge",
            bridge_module,
            bridge,
            parameters=safety,
            restart={"policy": "on-failure", "max_restarts": 5, "backoff_s": 2.0},
        ),
    ]
