"""``robot-rl label``: HIL-SERL-style frame labelling for success classifiers, over ROS 2.

    robot-rl label --setup launch/sim.yaml --launch --out frames.zarr --episodes 10

The person drives the arm with the teleop device (as in ``robot-rl record``) and holds the
``success`` button while the scene is in the success state. Every observation (the one after
the reset and the one after each step) is stored as a frame labelled 1 if the success button
was down at any moment of the control period that ended with that frame, else 0 (with
``--teleop sim-expert`` on a lockstep twin: the simulated human's answer to that frame, matched
by stamp, :class:`robot_rl.app.teleop.human_answers.HumanAnswers`). Format:
:mod:`robot_rl.replay.frames` (images per camera at ``--image-size``, the robot state in the
learner layout of ``--obs pixels``, label, episode index, step, stamp, and the twin task's own
success as a reference, -1 on hardware and on a twin setup with ``privileged: false``).

Episodes end with the ``reset`` or ``failure`` button, the time limit or the task's failure
(all kept), or ``discard`` (dropped); the task's success does not end an episode here. A kept
episode is committed when it ends; an episode open at Ctrl-C, SIGTERM or a crash is not in
the store (``--resume`` appends to it). Live counts of positive and negative frames are shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.app.teleop.human_answers import HumanAnswers
from robot_rl.app.teleop.record import env_wrappers
from robot_rl.app.teleop.teleop_env import (
    ButtonEdges,
    Pacer,
    SensorFaults,
    StopFlag,
    TeleopRunConfig,
    check_out,
)
from robot_rl.core import keys
from robot_rl.core.clock import obs_stamp
from robot_rl.core.types import StaleSensorError
from robot_rl.wrappers.intervention import base_to_policy_action

LABEL_BUTTON = "success"
END_BUTTONS = ("discard", "failure", "reset")
"""Buttons that end a labelling episode, in priority order."""


@dataclass(frozen=True)
class LabelConfig(TeleopRunConfig):
    """Teleoperate over ROS 2 and label frames (success button held = 1) for reward models."""

    out: Path = Path("frames.zarr")
    """The zarr frame store to write."""
    episodes: int = 10
    """Stop after this many kept episodes (this run)."""
    seed: int = 4_000_000
    """Store episode k resets with seed + k."""


def run_label(cfg: LabelConfig, view=None) -> dict:
    """Label frames until ``cfg.episodes`` episodes are kept, a stop signal, or the teleop ends.

    Raises:
        FileExistsError / FileNotFoundError: ``--out`` exists without ``--resume`` / missing.
        ValueError: Bad options, no camera, or a store with other cameras / sizes.
        TimeoutError: The ROS 2 nodes or the teleop are not reachable.
    """
    from robot_rl.app.teleop.teleop_env import LiveView, load_setup_for_task, open_teleop_env
    from robot_rl.replay import ObsAdapter
    from robot_rl.wrappers.flatten_state import named_state_slices

    check_out(cfg.out, cfg.resume, "frames")  # before starting any node
    setup = load_setup_for_task(cfg.setup, cfg.task, cfg.io.launch)
    cams = tuple(cfg.cameras) if cfg.cameras is not None else tuple(c.name for c in setup.cameras)
    if not cams:
        raise ValueError(f"{cfg.setup} has no camera; labelling frames needs at least one")
    lenv = LearnerEnvConfig(
        task=setup.task,
        obs="pixels",
        cameras=cams,
        image_size=cfg.image_size,
        control_rotation=cfg.control_rotation,
        max_episode_steps=cfg.max_episode_steps,
    )
    obs_cams, wrappers = env_wrappers(lenv, setup)
    view = view or LiveView("label")
    sess = open_teleop_env(
        setup,
        cfg.io,
        obs_cameras=obs_cams,
        wrappers=wrappers,
        control_rotation=cfg.control_rotation,
        max_episode_steps=cfg.max_episode_steps,
        terminate_on_success=False,
    )
    store = None
    try:
        adapter = ObsAdapter(sess.env.observation_space)
        meta = {
            "kind": "frame_labels",
            "setup": str(cfg.setup),
            "task": setup.task,
            "cameras": list(cams),
            "image_size": cfg.image_size,
            "control_hz": setup.control_hz,
            "label": "1: success button held during the control period ending at the frame",
            # what `reward train --gates` reads (e.g. gripper_pos) in the flat state
            "state_slices": named_state_slices(sess.env),
            "camera_crops": setup.camera_crops(cams),
        }
        store = _open_store(cfg, adapter.layout, meta, setup)
        result = _Labeler(cfg, sess, store, adapter, view).run()
    finally:
        if store is not None:
            store.close()
        view.close()
        sess.close()
    result.update(out=str(cfg.out), setup=str(cfg.setup), task=setup.task, cameras=list(cams))
    return result


def _open_store(cfg: LabelConfig, layout, meta: dict, setup):
    from robot_rl.replay.frames import FrameLog

    out = Path(cfg.out)
    check_out(out, cfg.resume, "frames")
    if not cfg.resume:
        return FrameLog.create(out, layout, meta)
    store = FrameLog.open(out, mode="a")
    if store.layout != layout:
        store.close()
        raise ValueError(
            f"{out} holds frames of layout {store.layout}, this env gives {layout}; label with "
            "the same --cameras / --image-size or into another --out"
        )
    if crops := setup.crop_mismatch(store.meta.get("camera_crops")):
        store.close()
        raise ValueError(
            f"{out} holds frames labelled with other camera crops ({crops}); a classifier "
            "would mix two views of the scene: label with the same crops or into another --out"
        )
    return store


class _Labeler:
    def __init__(self, cfg: LabelConfig, sess, store, adapter, view) -> None:
        self.cfg, self.sess, self.store, self.adapter, self.view = cfg, sess, store, adapter, view
        factor = cfg.io.realtime_factor
        paced = sess.lockstep and factor > 0
        self.pacer = Pacer(sess.backend.env_cfg.control_dt_s / factor if paced else None)
        self.edges = ButtonEdges()
        self.twin = sess.setup.robot == "twin"
        self.action_dim = sess.backend.env_cfg.action_dim  # the robot's, as teleop acts
        self.to_env_space = base_to_policy_action(sess.env)  # through the env's wrappers
        self.kept = self.discarded = 0
        self.run_pos = self.run_neg = 0
        self.stopped_by: str | None = None
        self._base, self._attempts = store.num_episodes, 0
        self.faults = SensorFaults(view)
        self.answers = HumanAnswers.of_session(sess, cfg.io, view)

    def run(self) -> dict:
        with StopFlag() as stop:
            while self.kept < self.cfg.episodes:
                if stop.requested or self.sess.teleop_ended():
                    break
                self._episode(stop)
            self.stopped_by = stop.requested or (
                "teleop ended" if self.sess.teleop_ended() else None
            )
        return {
            "kept": self.kept,
            "discarded": self.discarded,
            "positives": self.run_pos,
            "negatives": self.run_neg,
            "store_frames": self.store.num_frames,
            "store_positives": self.store.positives,
            "store_negatives": self.store.negatives,
            "store_episodes": self.store.num_episodes,
            "sensor_faults": self.faults.count,
            "late_teleop_answers": self.answers.late,
            "stopped_by": self.stopped_by,
        }

    def _show(self, pos: int, neg: int, held: bool) -> None:
        self.view.update(
            setup=self.cfg.setup,
            store=f"{self.cfg.out} ({self.store.num_episodes} episodes)",
            episodes_kept=f"{self.kept} / {self.cfg.episodes}",
            positives=f"{self.run_pos + pos} (this episode {pos})",
            negatives=f"{self.run_neg + neg} (this episode {neg})",
            success_button="HELD" if held else "-",
            teleop=self.sess.teleop.status().describe(),
        )

    def _episode(self, stop: StopFlag) -> None:
        from robot_rl.core.teleop_action import gripper_hold_after_reset, teleop_to_action

        env, teleop, store = self.sess.env, self.sess.teleop, self.store
        seed = self.cfg.seed + self._base + self._attempts
        self._attempts += 1
        try:
            obs, info = env.reset(seed=seed)
        except StaleSensorError as e:
            self.faults.fault(e)
            return
        self.edges.reset(teleop.read().buttons)  # presses during the reset do not count
        self.pacer.reset()
        index = store.begin_episode(seed=seed)
        self.view.event(f"episode {index} started (seed {seed})")
        attempt = self._attempts - 1  # announced: rises with every reset, kept or not
        teleop.announce(attempt, "running", seed=seed)
        pos = neg = 0
        gripper_hold, done, end = gripper_hold_after_reset(env), None, None
        while True:
            if stop.requested:
                end = "stopped"
                break
            # A teleop node that has ended (a replayed file played out) sent its last presses
            # before it exited: read them, and stop only if none ends the episode.
            ended = self.sess.teleop_ended()
            if not ended:
                self.answers.wait(obs_stamp(obs, default=0.0))  # the human's, in lockstep
            state = teleop.read()  # buttons down during the period that ended with `obs`
            held = LABEL_BUTTON in state.buttons
            truth = info.get(keys.INFO_SUCCESS)  # absent on hardware and privileged: false
            success = bool(truth) if self.twin and truth is not None else None
            store.append(self.adapter.to_learner(obs), held, obs_stamp(obs, default=0.0), success)
            pos, neg = pos + held, neg + (not held)
            self._show(pos, neg, held)
            if done is not None:
                end = done
                break
            new = self.edges.update(state.buttons)
            end = next((b for b in END_BUTTONS if b in new), "stopped" if ended else None)
            if end is not None:
                break
            a = teleop_to_action(state, self.action_dim, gripper_hold)
            gripper_hold = float(a[-1])
            self.pacer.wait()
            try:
                obs, _, terminated, truncated, info = env.step(self.to_env_space(a))
            except StaleSensorError as e:
                self.faults.fault(e)
                end = "stale_sensor"
                break
            self.faults.ok()
            if terminated or truncated:
                done = "task_failure" if terminated else "time_limit"
        teleop.announce(attempt, "ended", end=end)
        if end in ("discard", "stopped", "stale_sensor"):
            store.abort_episode()
            self.discarded += end == "discard"
            self.view.event(f"episode {index} dropped: {end} ({pos + neg} frames)")
            return
        store.end_episode(end_reason=end)
        self.kept += 1
        self.run_pos, self.run_neg = self.run_pos + pos, self.run_neg + neg
        self.view.event(f"episode {index} kept: {end} ({pos} positive, {neg} negative frames)")


def read_frames(path: str | Path) -> dict[str, Any]:
    """Every committed frame of a store (see :meth:`robot_rl.replay.frames.FrameLog.read`)."""
    from robot_rl.replay.frames import FrameLog

    with FrameLog.open(path) as store:
        return store.read()
