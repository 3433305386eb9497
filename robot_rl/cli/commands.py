"""The subcommand groups ``robot-rl dataset``, ``robot-rl reward`` and ``robot-rl arm``: tyro
reads their subcommand names off these Unions; the configs and what they run live in
:mod:`robot_rl.app`."""

from __future__ import annotations

from typing import Annotated, Union

import tyro

from robot_rl.app.arms.arm_calibrate import ArmCalibrateConfig
from robot_rl.app.arms.arm_check import ArmCheckConfig
from robot_rl.app.datasets.dataset import (
    DatasetExportConfig,
    DatasetImportConfig,
    DatasetInfoConfig,
    DatasetSalvageConfig,
)
from robot_rl.app.rewards.reward import (
    RewardEvalConfig,
    RewardFramesConfig,
    RewardServeConfig,
    RewardTrainConfig,
)

DatasetCmd = Union[  # noqa: UP007 - tyro reads the subcommand names off this Union
    Annotated[DatasetInfoConfig, tyro.conf.subcommand("info")],
    Annotated[DatasetExportConfig, tyro.conf.subcommand("export")],
    Annotated[DatasetImportConfig, tyro.conf.subcommand("import")],
    Annotated[DatasetSalvageConfig, tyro.conf.subcommand("salvage")],
]


def dataset_command(
    cmd: Annotated[DatasetCmd, tyro.conf.OmitSubcommandPrefixes, tyro.conf.OmitArgPrefixes],
) -> DatasetInfoConfig | DatasetExportConfig | DatasetImportConfig:
    """Summarise a dataset (info), export it to the LeRobot format (export), import a LeRobot
    dataset (import), or salvage a damaged one (salvage)."""
    # tyro shows a subcommand's docstring as its summary; a bare Union has only typing.Union's,
    # so `robot-rl dataset` goes through this function, which returns the parsed config as is.
    return cmd


RewardCmd = Union[  # noqa: UP007 - tyro reads the subcommand names off this Union
    Annotated[RewardFramesConfig, tyro.conf.subcommand("frames")],
    Annotated[RewardTrainConfig, tyro.conf.subcommand("train")],
    Annotated[RewardEvalConfig, tyro.conf.subcommand("eval")],
    Annotated[RewardServeConfig, tyro.conf.subcommand("serve")],
]


def reward_command(
    cmd: Annotated[RewardCmd, tyro.conf.OmitSubcommandPrefixes, tyro.conf.OmitArgPrefixes],
) -> RewardFramesConfig | RewardTrainConfig | RewardEvalConfig | RewardServeConfig:
    """Success classifiers: twin frames (frames), train, eval, serve (gRPC)."""
    # tyro shows a subcommand's docstring as its summary; a bare Union has only typing.Union's,
    # so `robot-rl reward` goes through this function, which returns the parsed config as is.
    return cmd


ArmCmd = Union[  # noqa: UP007 - tyro reads the subcommand names off this Union
    Annotated[ArmCheckConfig, tyro.conf.subcommand("check")],
    Annotated[ArmCalibrateConfig, tyro.conf.subcommand("calibrate")],
]


def arm_command(
    cmd: Annotated[ArmCmd, tyro.conf.OmitSubcommandPrefixes, tyro.conf.OmitArgPrefixes],
) -> ArmCheckConfig | ArmCalibrateConfig:
    """Bring up an arm: check it through its setup (check: state rate, joints, small moves and
    back), or record an SO-101's joint ranges into a calibration file (calibrate)."""
    return cmd
