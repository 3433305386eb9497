"""``robot-rl``: the one command line of robot_rl (tyro subcommands).

Subcommands:
    rollout  run episodes in the MuJoCo twin with a scripted / random / zero policy.
    envs     list tasks with their observation and action specs.
    collect  record demonstrations (zarr) for training.
    train    train SAC with demo mixing (embedded: one process); checkpoints, resume, plot.
    learner  the distributed learner: serves actors over gRPC, learns, publishes weights.
    actor    a distributed actor: acts, logs, streams to a learner, loads its weights.
    eval     evaluate a run's latest checkpoint (deterministic policy), optional video.
    up       start and supervise the ROS 2 nodes of a setup (launch/*.yaml).
    record   teleoperate over ROS 2 and record demonstrations (zarr).
    label    teleoperate over ROS 2 and label frames success / not (zarr) for reward models.
    dataset  summarise a dataset (info), export it to the LeRobot format (export), or copy the
             good episodes of a damaged one (salvage).
    reward   success classifiers: twin frames (frames), train, eval, serve (gRPC).

Rendering: MuJoCo picks its OpenGL backend from ``MUJOCO_GL`` when it is imported. Unless the
variable is already set, :func:`main` sets it to ``osmesa`` (software rendering, needs only
``libosmesa6``; 1-3 ms per 128x128 frame on 2 CPU cores) when no display is present, before
anything imports MuJoCo. EGL is faster on a GPU machine: export ``MUJOCO_GL=egl`` to use it.

Exit codes: 0 success, 2 bad input (unknown task, invalid option, missing / existing run,
corrupt dataset or checkpoint; the message says what to change), 3 a required node of the setup
died (``up``, and commands that started it with ``--launch``: the message names the node, its
exit status and log, see :mod:`robot_rl.app.supervision`), 1 anything else (a traceback).
``ROBOT_RL_DEBUG=1`` prints the traceback for bad input too (when the message is not enough).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence
from typing import Any

from robot_rl.cli.common import emit_json, error, user_errors


def configure_headless_gl(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Choose MuJoCo's OpenGL backend before MuJoCo is imported.

    Keeps an explicit ``MUJOCO_GL``; otherwise on Linux without ``DISPLAY`` /
    ``WAYLAND_DISPLAY`` sets ``osmesa``. Returns the value in force (None: MuJoCo's default).
    """
    env = os.environ if environ is None else environ
    if "MUJOCO_GL" not in env and sys.platform.startswith("linux"):
        if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
            env["MUJOCO_GL"] = "osmesa"
    return env.get("MUJOCO_GL")


def parse(argv: Sequence[str] | None = None) -> Any:
    """Parse ``argv`` (default: ``sys.argv[1:]``) into the subcommand's config, without running
    it (the docs' commands are checked this way: ``tests/test_docs_commands.py``).

    Raises:
        SystemExit: Unknown subcommand or option (tyro prints the usage).
        ValueError: A config's ``__post_init__`` rejected the options.
    """
    configure_headless_gl()
    import tyro  # imports below pull in MuJoCo: only after MUJOCO_GL is settled

    from robot_rl.app import collect, distributed, rollout, train
    from robot_rl.app import envs as envs_cmd
    from robot_rl.app import evaluate as eval_cmd
    from robot_rl.app import label as label_cmd
    from robot_rl.app import record as record_cmd
    from robot_rl.app.up import UpConfig
    from robot_rl.cli import commands

    return tyro.extras.subcommand_cli_from_dict(
        {
            "rollout": rollout.RolloutConfig,
            "envs": envs_cmd.EnvsConfig,
            "collect": collect.CollectConfig,
            "train": train.TrainCmdConfig,
            "learner": distributed.LearnerCmdConfig,
            "actor": distributed.ActorCmdConfig,
            "eval": eval_cmd.EvalCmdConfig,
            "up": UpConfig,
            "record": record_cmd.RecordConfig,
            "label": label_cmd.LabelConfig,
            "dataset": commands.dataset_command,
            "reward": commands.reward_command,
        },
        prog="robot-rl",
        description="robot_rl: RL on robot arms, with a MuJoCo twin behind the same interfaces.",
        args=argv,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return the exit code."""
    try:
        cfg = parse(argv)
    except ValueError as e:  # a config's __post_init__ rejected the options
        return error(str(e))
    from robot_rl.app.supervision import EXIT_NODE_DIED, NodeDiedError

    try:
        return _run(cfg)
    except NodeDiedError as e:  # a required node started with --launch died: the cause
        error(str(e))
        return EXIT_NODE_DIED


def _run(cfg: Any) -> int:
    """Run the parsed subcommand ``cfg``; return the exit code."""
    from robot_rl.app import collect, distributed, rollout, train
    from robot_rl.app import dataset as dataset_cmd
    from robot_rl.app import envs as envs_cmd
    from robot_rl.app import evaluate as eval_cmd
    from robot_rl.app import label as label_cmd
    from robot_rl.app import record as record_cmd
    from robot_rl.app import reward as reward_cmd
    from robot_rl.app.build import UnknownTaskError
    from robot_rl.app.up import UpConfig
    from robot_rl.cli import data_reports as dr
    from robot_rl.cli import reports, up

    if isinstance(cfg, reward_cmd.RewardServeConfig):
        try:
            return reward_cmd.run_reward_serve(cfg)
        except user_errors() as e:
            return error(f"{type(e).__name__}: {e}")

    if isinstance(cfg, UpConfig):
        try:
            return up.run(cfg)  # the live table is the command line's
        except ValueError as e:  # includes drivers.setup.SetupError
            return error(str(e))

    if isinstance(cfg, rollout.RolloutConfig):
        try:
            built = rollout.build(cfg)
        except (UnknownTaskError, ValueError, TimeoutError) as e:  # TimeoutError: ROS 2 nodes
            return error(str(e))
        result = rollout.run_rollout(cfg, progress=True, built=built)
        if cfg.json:
            emit_json(result)
        else:
            reports.print_rollout(result)
        return 0

    commands = (  # (config, app function, what it prints for a person)
        (record_cmd.RecordConfig, record_cmd.run_record, dr.print_record),
        (label_cmd.LabelConfig, label_cmd.run_label, dr.print_label),
        (collect.CollectConfig, collect.run_collect, reports.print_collect),
        (train.TrainCmdConfig, train.run_train, reports.print_train),
        (distributed.LearnerCmdConfig, distributed.run_learner, reports.print_learner),
        (distributed.ActorCmdConfig, distributed.run_actor, reports.print_actor),
        (eval_cmd.EvalCmdConfig, eval_cmd.run_eval, reports.print_eval),
        (dataset_cmd.DatasetInfoConfig, dataset_cmd.run_info, dr.print_dataset_info),
        (
            dataset_cmd.DatasetExportConfig,
            dataset_cmd.run_export,
            dr.print_dataset_export,
        ),
        (
            dataset_cmd.DatasetSalvageConfig,
            dataset_cmd.run_salvage,
            dr.print_dataset_salvage,
        ),
        (reward_cmd.RewardFramesConfig, reward_cmd.run_frames, dr.print_reward_frames),
        (
            reward_cmd.RewardTrainConfig,
            reward_cmd.run_reward_train,
            dr.print_reward_train,
        ),
        (reward_cmd.RewardEvalConfig, reward_cmd.run_reward_eval, dr.print_reward_eval),
    )
    for cls, run, report in commands:
        if isinstance(cfg, cls):
            try:
                result = run(cfg)
            except (*user_errors(), TimeoutError) as e:  # TimeoutError: no learner, ROS nodes
                return error(f"{type(e).__name__}: {e}")
            if cfg.json:
                emit_json(result)
            else:
                report(result)
            return 0

    try:
        result = envs_cmd.list_envs(cfg)
    except ValueError as e:
        return error(str(e))
    if cfg.json:
        emit_json(result)
    else:
        reports.print_envs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
