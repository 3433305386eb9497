"""ROS 2 launch file for any robot_rl setup YAML (default: launch/sim.yaml).

For users with a full ROS 2 installation (the ``launch`` package); ``robot-rl up`` does the
same without it::

    ros2 launch launch/sim.launch.py
    ros2 launch launch/sim.launch.py setup:=launch/franka_realsense.yaml

Each node of the setup becomes an ``ExecuteProcess`` running ``python -m <module> <args>
--ros-args -p ...`` (the command line of :meth:`drivers.setup.NodeSpec.command`). Restart
policy ``on-failure`` maps to ``respawn`` with ``respawn_max_retries``; a required node with
policy ``never`` shuts the launch down when it exits. Logs go to ROS 2's log directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    OpaqueFunction,
    RegisterEventHandler,
    Shutdown,
)
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repo's packages when not pip-installed

from drivers.setup import load_setup  # noqa: E402


def _nodes(context, *args, **kwargs):
    setup = load_setup(LaunchConfiguration("setup").perform(context))
    actions = []
    for node in setup.nodes:
        restart = node.restart.policy == "on-failure"
        proc = ExecuteProcess(
            cmd=node.command(sys.executable),
            name=node.name,
            output="screen",
            additional_env=dict(node.env),
            respawn=restart,
            respawn_delay=node.restart.backoff_s,
            respawn_max_retries=node.restart.max_restarts if restart else 0,
            sigterm_timeout="5",
            sigkill_timeout="5",
        )
        actions.append(proc)
        if node.required and not restart:
            actions.append(
                RegisterEventHandler(
                    OnProcessExit(
                        target_action=proc,
                        on_exit=[Shutdown(reason=f"required node {node.name} exited")],
                    )
                )
            )
    return actions


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "setup",
                default_value=str(HERE / "sim.yaml"),
                description="robot_rl setup YAML (see launch/README.md)",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
