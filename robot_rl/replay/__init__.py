"""Replay: the durable zarr episode log, the RAM ring buffer, the demo/online mixer and the
adapter from env observations to the learner layout.

Imports only :mod:`robot_rl.core` from the repo (plus numpy, torch, zarr, gymnasium).
"""

from robot_rl.replay.adapter import ObsAdapter
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.checks import NonFiniteDataError
from robot_rl.replay.demos import (
    SalvageReport,
    load_checked_demos,
    load_demos,
    rebuild_buffer,
    salvage,
)
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.mixer import Mixer
from robot_rl.replay.schema import CorruptLogError, EpisodeMeta, UnfinishedEpisodeError

__all__ = [
    "CorruptLogError",
    "EpisodeLog",
    "EpisodeMeta",
    "Mixer",
    "NonFiniteDataError",
    "ObsAdapter",
    "ReplayBuffer",
    "SalvageReport",
    "UnfinishedEpisodeError",
    "load_checked_demos",
    "load_demos",
    "rebuild_buffer",
    "salvage",
]
