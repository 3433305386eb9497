"""``robot-rl``: the entry point (:func:`main`) and the parser (:func:`parse`) over the
subcommands, their exit codes and the OpenGL choice described in :mod:`robot_rl.cli`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from robot_rl.cli.common import configure_headless_gl, emit_json, error, user_errors

EXIT_CHECK_FAILED = 4
"""``robot-rl arm check`` ran and a check failed (the report says which)."""


def parse(argv: Sequence[str] | None = None) -> Any:
    """Parse ``argv`` (default: ``sys.argv[1:]``) into the subcommand's config, without running
    it (the docs' commands are checked this way: ``tests/test_docs_commands.py``).

    Raises:
        SystemExit: Unknown subcommand or option (tyro prints the usage).
        ValueError: A config's ``__post_init__`` rejected the options.
    """
    configure_headless_gl()
    import tyro  # imports below pull in MuJoCo: only after MUJOCO_GL is settled

    from robot_rl.app.envs import collect
    from robot_rl.app.envs import listing as envs_cmd
    from robot_rl.app.nodes.up import UpConfig
    from robot_rl.app.rehearsal.rehearse import RehearseConfig
    from robot_rl.app.teleop import label as label_cmd
    from robot_rl.app.teleop import record as record_cmd
    from robot_rl.app.training import actor_cmd, distributed, rollout, train
    from robot_rl.app.training import evaluate as eval_cmd
    from robot_rl.cli import commands

    subcommands = {
        "rollout": rollout.RolloutConfig,
        "envs": envs_cmd.EnvsConfig,
        "collect": collect.CollectConfig,
        "train": train.TrainCmdConfig,
        "learner": distributed.LearnerCmdConfig,
        "actor": actor_cmd.ActorCmdConfig,
        "eval": eval_cmd.EvalCmdConfig,
        "up": UpConfig,
        "record": record_cmd.RecordConfig,
        "label": label_cmd.LabelConfig,
        "dataset": commands.dataset_command,
        "reward": commands.reward_command,
        "rehearse": RehearseConfig,
        "arm": commands.arm_command,
    }
    args = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args if not a.startswith("-")), None)
    if first is not None and first not in subcommands:  # `NOSUCH --help` too: not top help
        print(
            f"robot-rl: error: unknown subcommand {first!r}; choose one of: "
            f"{', '.join(subcommands)} (`robot-rl --help` says what each does)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return tyro.extras.subcommand_cli_from_dict(
        subcommands,
        prog="robot-rl",
        description="robot_rl: RL on robot arms, with a MuJoCo twin behind the same interfaces.",
        args=args,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return the exit code."""
    try:
        cfg = parse(argv)
    except ValueError as e:  # a config's __post_init__ rejected the options
        return error(str(e))
    from robot_rl.app.nodes.supervision import EXIT_NODE_DIED, NodeDiedError

    try:
        return _run(cfg)
    except NodeDiedError as e:  # a required node started with --launch died: the cause
        error(str(e))
        return EXIT_NODE_DIED


def _run(cfg: Any) -> int:
    """Run the parsed subcommand ``cfg``; return the exit code."""
    from robot_rl.app.arms import arm_calibrate
    from robot_rl.app.datasets import dataset as dataset_cmd
    from robot_rl.app.envs import collect
    from robot_rl.app.envs import listing as envs_cmd
    from robot_rl.app.envs.build import UnknownTaskError
    from robot_rl.app.nodes.up import UpConfig
    from robot_rl.app.rewards import reward as reward_cmd
    from robot_rl.app.teleop import label as label_cmd
    from robot_rl.app.teleop import record as record_cmd
    from robot_rl.app.training import actor_cmd, distributed, rollout, train
    from robot_rl.app.training import evaluate as eval_cmd
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

    from robot_rl.app.arms import arm_check

    if isinstance(cfg, arm_check.ArmCheckConfig):
        try:
            result = arm_check.run_arm_check(cfg)
        except (*user_errors(), TimeoutError) as e:  # TimeoutError: no bridge
            return error(f"{type(e).__name__}: {e}")
        if cfg.json:
            emit_json(result)
        else:
            reports.print_arm_check(result)
        return 0 if result["ok"] else EXIT_CHECK_FAILED

    from robot_rl.app.rehearsal import rehearse

    if isinstance(cfg, rehearse.RehearseConfig):
        try:
            result = rehearse.run_rehearse(cfg)
        except (*user_errors(), rehearse.RehearsalError, TimeoutError) as e:
            return error(f"{type(e).__name__}: {e}")
        if cfg.json:
            emit_json(result)
        else:
            print((cfg.out / "summary.md").read_text())
        return 0

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
        (actor_cmd.ActorCmdConfig, actor_cmd.run_actor, reports.print_actor),
        (eval_cmd.EvalCmdConfig, eval_cmd.run_eval, reports.print_eval),
        (dataset_cmd.DatasetInfoConfig, dataset_cmd.run_info, dr.print_dataset_info),
        (
            dataset_cmd.DatasetExportConfig,
            dataset_cmd.run_export,
            dr.print_dataset_export,
        ),
        (dataset_cmd.DatasetImportConfig, dataset_cmd.run_import, dr.print_dataset_import),
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
        (
            arm_calibrate.ArmCalibrateConfig,
            arm_calibrate.run_arm_calibrate,
            reports.print_arm_calibrate,
        ),
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
