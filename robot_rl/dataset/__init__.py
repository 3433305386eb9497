"""Dataset tools over the zarr episode log: a summary (``robot-rl dataset info``) and the export
to the LeRobot dataset format, codebase v3.0 (``robot-rl dataset export --format lerobot``).

Reads logs only through :mod:`robot_rl.replay` (``EpisodeLog`` and its schema); imports no env,
learner, hardware or sim code. The export needs the ``export`` extra (pyarrow, pandas) and
``imageio-ffmpeg`` for camera streams; they are imported when an export runs.

Modules: :mod:`~robot_rl.dataset.info` (summary), :mod:`~robot_rl.dataset.lerobot_export`
(the export), :mod:`~robot_rl.dataset.lerobot_files` (chunked parquet and mp4 writers),
:mod:`~robot_rl.dataset.lerobot_stats` (feature statistics).
"""

from robot_rl.dataset.info import dataset_info
from robot_rl.dataset.lerobot_export import LeRobotExportOptions, export_lerobot

__all__ = ["LeRobotExportOptions", "dataset_info", "export_lerobot"]
