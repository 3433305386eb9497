"""``robot-rl record``: teleoperate the arm over ROS 2 and record demonstrations (zarr).

    robot-rl record --setup launch/sim.yaml --launch --out demos.zarr --episodes 20

Each step: read the teleop (:class:`drivers.ros_teleop.RosTeleop`) -> the base env action
(:func:`robot_rl.core.teleop_action.teleop_to_action`, the gripper keeps its last command when
no gripper button is pressed) -> ``env.step`` -> the episode log. The dataset has the schema of
``robot-rl collect`` (same metadata, learner layout of ``--obs``, policy-space actions), so
``robot-rl train --demos demos.zarr`` reads it with the same ``--obs / --cameras / --image-size
/ --control-rotation``. Every step is stored with source ``demo`` and ``intervened=True`` (a
person chose every action, including "do nothing"; ``policy_action`` = ``action``).

How an episode ends (buttons act once per press; buttons pressed while the scene resets are
ignored):

| cause | kept? | success | last step |
|---|---|---|---|
| ``success`` button | kept | True | terminated |
| ``failure`` button | kept | False | terminated |
| ``reset`` button | kept | None (buttons only) / False (task decides too) | truncated |
| time limit | kept | as for reset | truncated |
| task success (``--success-from task|both``) | kept | True | terminated |
| task failure (the twin's, e.g. object dropped) | kept | False | terminated |
| ``discard`` button | dropped | | |
| Ctrl-C / SIGTERM / the event file is played | dropped (the open one only) | | |

``--success-from``: ``buttons`` (the default on hardware setups): only the person's buttons
mark success, the task's success does not end the episode; ``task``: only the task's success
(the success button is ignored); ``both`` (default on twin setups): whichever comes first.

Durability: a kept episode is flushed and committed when it ends; steps are flushed every 10
steps or 1 s while it runs, and an episode open at a crash is recognisable in the store
(dropped by ``--resume`` and by the demo loader). ``--resume`` appends to an existing dataset
recorded with the same settings; without it an existing ``--out`` is refused.

Episode ``k`` of the dataset resets the env with ``seed + k`` (attempts that were discarded
consume a seed too). ``--video-dir`` writes ``episode_<index>.mp4`` per kept episode from one
camera.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.app.envs.collect import LearnerEnvConfig, ObsMode, same_data_settings
from robot_rl.app.teleop.record_loop import SuccessFrom
from robot_rl.app.teleop.teleop_env import TeleopOptions, TeleopRunConfig, check_out


@dataclass(frozen=True)
class RecordConfig(TeleopRunConfig):
    """Teleoperate over ROS 2 and record demonstrations into a zarr dataset."""

    out: Path = Path("demos.zarr")
    """The zarr dataset to write."""
    episodes: int = 20
    """Stop after this many kept episodes (this run)."""
    seed: int = 3_000_000
    """Dataset episode k resets with seed + k."""
    success_from: SuccessFrom | None = None
    """Who marks success: buttons, task or both (default: both on a twin, buttons on hardware)."""
    obs: ObsMode = "state"
    """Stored observation, as `robot-rl train --obs`: state (robot + the task's object state,
    twin only) or pixels (camera images + robot state)."""
    previous_action: bool = False
    """Store the previous step's action in the state, as `robot-rl train --previous-action`
    (a data setting: train with the same)."""
    video_dir: Path | None = None
    """Write episode_<index>.mp4 per kept episode here."""
    video_camera: str | None = None
    """Camera of the videos (default: the setup's first)."""


def _state_objects(task: str) -> tuple[str, ...]:
    """The object state ``--obs state`` adds for twin task ``task`` (sim truth)."""
    from sim.backend import TASKS

    info = TASKS.get(task)
    return () if info is None else tuple(info.state_objects)


def learner_env(cfg: RecordConfig, setup) -> LearnerEnvConfig:
    """The learner env these demos are for (stored as metadata; train compares it). On a twin
    setup whose arm is one of the twin's kinds, its ``arm`` is the setup's (demos recorded on
    the UR5e twin train a learner with ``--arm ur5e``); otherwise the learner's default."""
    from sim.twin_arms import TWIN_ARMS

    cams = tuple(cfg.cameras) if cfg.cameras is not None else tuple(c.name for c in setup.cameras)
    kw: dict[str, Any] = {}
    if cfg.obs == "pixels":
        kw["cameras"] = cams
    if setup.robot == "twin" and setup.arm.name in TWIN_ARMS:
        kw["arm"] = setup.arm.name
    return LearnerEnvConfig(
        task=setup.task,
        obs=cfg.obs,
        image_size=cfg.image_size,
        control_rotation=cfg.control_rotation,
        max_episode_steps=cfg.max_episode_steps,
        previous_action=cfg.previous_action,
        **kw,
    )


def env_wrappers(lenv: LearnerEnvConfig, setup):
    """``(obs cameras, WrapperConfig)`` that give the ROS env ``lenv``'s learner layout.

    With ``--obs pixels`` the task need not be a twin task (free text on hardware).
    """
    if lenv.obs == "pixels":
        # No success reward from the robot's status: on a real arm there is none, and the
        # rewards of pixel data come from `label` and the classifier.
        wr = lenv.wrapper_config(success_reward=False)
    else:
        wr = lenv.env_setup().wrappers
    cams = tuple(lenv.cameras) if lenv.obs == "pixels" else ()
    sizes = {c.frame_hw for c in setup.cameras if c.name in cams}
    if sizes and sizes != {(lenv.image_size, lenv.image_size)}:
        from dataclasses import replace

        wr = replace(wr, resize=(lenv.image_size, lenv.image_size))
    return cams, wr


def _open_log(
    cfg: RecordConfig, lenv: LearnerEnvConfig, meta: dict, layout, action_dim: int, view, setup
):
    from robot_rl.replay import EpisodeLog, UnfinishedEpisodeError

    out = Path(cfg.out)
    check_out(out, cfg.resume, "episodes")
    if not cfg.resume:
        return EpisodeLog.create(out, layout, action_dim, meta)
    try:
        EpisodeLog.open(out, unfinished="error", mode="r").close()
    except UnfinishedEpisodeError:
        view.event("the dataset holds an episode left open by a crash: dropping it")
    log = EpisodeLog.open(out, unfinished="drop", mode="a")
    stored = (log.meta or {}).get("env")
    problem = None
    if not same_data_settings(stored, lenv):
        problem = f"was recorded with env settings {stored}, not {meta['env']}"
    elif log.layout != layout or log.action_dim != action_dim:
        problem = f"has layout {log.layout} / {log.action_dim}, the env {layout} / {action_dim}"
    elif crops := setup.crop_mismatch((log.meta or {}).get("camera_crops")):
        problem = f"was recorded with other camera crops ({crops})"
    if problem:
        log.close()
        raise ValueError(f"{out} {problem}; record with the same settings or into another --out")
    return log


def run_record(cfg: RecordConfig, view=None) -> dict:
    """Record until ``cfg.episodes`` episodes are kept, a stop signal, or the teleop ends.

    Raises:
        FileExistsError / FileNotFoundError: ``--out`` exists without ``--resume`` / missing.
        ValueError: Bad options or a dataset with other settings.
        TimeoutError: The ROS 2 nodes or the teleop are not reachable.
    """
    from robot_rl.app.teleop.record_loop import Recorder
    from robot_rl.app.teleop.teleop_env import LiveView, load_setup_for_task, open_teleop_env
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    check_out(cfg.out, cfg.resume, "episodes")  # before starting any node
    setup = load_setup_for_task(cfg.setup, cfg.task, cfg.io.launch)
    knows = setup.robot == "twin" and setup.privileged  # a task whose success may be read
    success_from = cfg.success_from or ("both" if knows else "buttons")
    if success_from != "buttons" and not knows:
        where = "robot: hardware" if setup.robot != "twin" else "privileged: false"
        raise ValueError(
            f"--success-from {success_from} needs a twin setup whose truth may be read (a task "
            f"that knows); on {cfg.setup} ({where}) only the person's buttons mark success: "
            "drop it"
        )
    if cfg.obs == "state" and setup.robot != "twin":
        raise ValueError(
            f"--obs state stores the twin task's object state (sim truth), which a real robot "
            f"does not measure; record on {cfg.setup} (robot: hardware) with --obs pixels"
        )
    if cfg.obs == "state" and not setup.privileged and _state_objects(setup.task):
        raise ValueError(
            f"--obs state stores task {setup.task!r}'s object state {_state_objects(setup.task)} "
            f"(sim truth), which {cfg.setup} (privileged: false) may not read; record with "
            "--obs pixels"
        )
    lenv = learner_env(cfg, setup)
    cams, wrappers = env_wrappers(lenv, setup)
    view = view or LiveView("record")
    sess = open_teleop_env(
        setup,
        cfg.io,
        obs_cameras=cams,
        wrappers=wrappers,
        control_rotation=cfg.control_rotation,
        max_episode_steps=cfg.max_episode_steps,
        terminate_on_success=success_from != "buttons",
    )
    log = None
    try:
        adapter = ObsAdapter(sess.env.observation_space)
        amap = ActionMap(sess.env.action_space)
        meta = {
            "kind": "demos",
            "env": lenv.to_json(),
            "policy": "teleop",
            "setup": str(cfg.setup),
            "teleop": _teleop_name(cfg.io),
            "success_from": success_from,
            "camera_crops": setup.camera_crops(lenv.cameras),
        }
        log = _open_log(cfg, lenv, meta, adapter.layout, amap.dim, view, setup)
        rec = Recorder(cfg, sess, log, adapter, amap, success_from, view)
        result = rec.run()
    finally:
        if log is not None:
            log.close()
        view.close()
        sess.close()
    result.update(
        out=str(cfg.out), setup=str(cfg.setup), task=setup.task, obs=cfg.obs, arm=setup.arm.name
    )
    return result


def _teleop_name(io: TeleopOptions) -> str:
    if io.teleop_events is not None:
        return f"events:{Path(io.teleop_events).name}"
    return io.teleop
