"""The episode loop of ``robot-rl record`` (see :mod:`robot_rl.app.teleop.record` for the rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from robot_rl.app.envs.collect_teleop import END_BUTTONS
from robot_rl.app.teleop.human_answers import HumanAnswers
from robot_rl.app.teleop.teleop_env import (
    ButtonEdges,
    Pacer,
    SensorFaults,
    StopFlag,
)
from robot_rl.core import keys
from robot_rl.core.clock import obs_stamp
from robot_rl.core.teleop_action import gripper_hold_after_reset, teleop_to_action
from robot_rl.core.types import StaleSensorError
from robot_rl.wrappers.intervention import base_to_policy_action

SuccessFrom = Literal["buttons", "task", "both"]


def success_label(end: str, success_from: SuccessFrom) -> bool | None:
    """The stored ``success`` for an episode kept for reason ``end``."""
    if end in ("success", "task_success"):
        return True
    if end in ("failure", "task_failure"):
        return False
    return None if success_from == "buttons" else False  # reset / time limit


KEPT_ENDS = ("success", "failure", "reset", "time_limit", "task_success", "task_failure")
PROGRESS_EVERY = 20  # steps between progress lines without a terminal


class Recorder:
    """Runs episodes of one ``record`` session into an open :class:`EpisodeLog`.

    Args:
        cfg: The ``RecordConfig``.
        sess: The env, teleop and nodes (:class:`robot_rl.app.teleop.teleop_env.TeleopSession`).
        log: The dataset, open for appending.
        adapter: Env observation -> learner layout.
        amap: Env action space <-> policy space.
        success_from: ``buttons``, ``task`` or ``both``.
        view: Live view / event lines.
    """

    def __init__(self, cfg, sess, log, adapter, amap, success_from: str, view) -> None:
        self.cfg, self.sess, self.log = cfg, sess, log
        self.adapter, self.amap = adapter, amap
        self.base_dim = sess.backend.env_cfg.action_dim  # teleop readings act in the robot's
        self.to_env_space = base_to_policy_action(sess.env)  # ... then the env's wrappers'
        self.success_from = success_from
        self.view = view
        env_cfg = sess.backend.env_cfg
        factor = cfg.io.realtime_factor
        paced = sess.lockstep and factor > 0
        self.pacer = Pacer(env_cfg.control_dt_s / factor if paced else None)
        self.edges = ButtonEdges()
        self.kept = self.successes = self.failures = self.discarded = self.dropped = 0
        self.per_episode: list[dict[str, Any]] = []
        self.last_button = "-"
        self.stopped_by: str | None = None
        self._base = log.num_episodes
        self._attempts = 0
        self._video = _Video(cfg, sess) if cfg.video_dir is not None else None
        self.answers = HumanAnswers.of_session(sess, cfg.io, view)
        self.faults = SensorFaults(view)

    def run(self) -> dict:
        """Episodes until enough are kept, a stop signal, or the teleop node ends."""
        with StopFlag() as stop:
            try:
                while self.kept < self.cfg.episodes:
                    if stop.requested or self.sess.teleop_ended():
                        break
                    self._episode(stop)
            finally:
                self.stopped_by = stop.requested or (
                    "teleop ended" if self.sess.teleop_ended() else None
                )
                if self._video is not None:
                    self._video.close()
        return {
            "kept": self.kept,
            "successes": self.successes,
            "failures": self.failures,
            "discarded": self.discarded,
            "dropped_unfinished": self.dropped,
            "dataset_episodes": self.log.num_episodes,
            "dataset_steps": self.log.num_steps,
            "late_teleop_answers": self.answers.late,
            "sensor_faults": self.faults.count,
            "stopped_by": self.stopped_by,
            "per_episode": self.per_episode,
        }

    # -- one episode ---------------------------------------------------------------------------

    def _show(self, steps: int, seed: int) -> None:
        self.view.update(
            setup=self.cfg.setup,
            dataset=f"{self.cfg.out} ({self.log.num_episodes} episodes)",
            episodes_kept=f"{self.kept} / {self.cfg.episodes}",
            successes=self.successes,
            current_episode=f"{steps} steps (seed {seed})",
            last_button=self.last_button,
            teleop=self.sess.teleop.status().describe(),
        )

    def _episode(self, stop: StopFlag) -> None:
        env, teleop, log = self.sess.env, self.sess.teleop, self.log
        seed = self.cfg.seed + self._base + self._attempts
        self._attempts += 1
        try:
            obs, info = env.reset(seed=seed)
        except StaleSensorError as e:
            self.faults.fault(e)
            return
        self.edges.reset(teleop.read().buttons)  # presses during the reset do not count
        gripper_hold = gripper_hold_after_reset(env)  # keeps the hand as the reset left it
        self.pacer.reset()
        if self._video is not None:
            self._video.begin(f"ep {log.num_episodes}")
        self.view.event(f"episode {log.num_episodes} started (seed {seed})")
        attempt = self._attempts - 1  # announced: rises with every reset, kept or not
        teleop.announce(attempt, "running", seed=seed)
        steps, pending, begun, end = 0, None, False, None
        while end is None:
            self._show(steps, seed)
            if stop.requested:
                end = "stopped"
                break
            # A teleop node that has ended (a replayed file played out) sent its last presses
            # before it exited: read them, and stop only if none ends the episode.
            ended = self.sess.teleop_ended()
            if not ended:
                self.answers.wait(obs_stamp(obs, default=0.0))
            state = teleop.read()
            end = self._end_button(self.edges.update(state.buttons), steps) or (
                "stopped" if ended else None
            )
            if end is not None:
                break
            a = teleop_to_action(state, self.base_dim, gripper_hold)
            gripper_hold = float(a[-1])
            a_pol = self.amap.to_policy(self.to_env_space(a))  # e.g. a held gripper dropped
            o = self.adapter.to_learner(obs)
            self.pacer.wait()
            try:
                obs, reward, terminated, truncated, info = env.step(self.amap.to_env(a_pol))
            except StaleSensorError as e:
                self.faults.fault(e)
                end = "stale_sensor"
                break
            self.faults.ok()
            if pending is not None:
                if not begun:
                    log.begin_episode("demo", policy_version=0, seed=seed)
                    begun = True
                log.append(**pending)
            pending = dict(
                obs_learner=o,
                action=a_pol,
                policy_action=a_pol,
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                intervened=True,
                policy_version=0,
                stamp_s=obs_stamp(obs, default=0.0),
                next_obs_learner=self.adapter.to_learner(obs),
            )
            steps += 1
            if self._video is not None:
                self._video.add(steps)
            if not self.view.is_live and steps % PROGRESS_EVERY == 0:
                self.view.event(f"episode {log.num_episodes} at {steps} steps")
            if terminated:
                end = "task_failure" if info.get(keys.INFO_FAILURE) else "task_success"
            elif truncated:
                end = "time_limit"
        teleop.announce(attempt, "ended", end=end)
        self._finish(end, steps, pending, begun, seed)

    def _end_button(self, new: frozenset[str], steps: int) -> str | None:
        for b in END_BUTTONS:
            if b not in new:
                continue
            self.last_button = b
            if b == "success" and self.success_from == "task":
                self.view.event("success button ignored (--success-from task)")
                continue
            if b in ("success", "failure") and steps == 0:
                self.view.event(f"{b} button ignored: the episode has no steps yet")
                continue
            return b
        return None

    def _finish(self, end: str, steps: int, pending, begun: bool, seed: int) -> None:
        log = self.log
        index = log.num_episodes
        if end in KEPT_ENDS and pending is not None:
            if end in ("success", "failure"):
                pending.update(terminated=True, truncated=False)
            elif end == "reset" and not pending["terminated"]:
                pending["truncated"] = True
            if not begun:
                log.begin_episode("demo", policy_version=0, seed=seed)
            log.append(**pending)
            success = success_label(end, self.success_from)
            em = log.end_episode(success=success, policy="teleop", end_reason=end)
            self.kept += 1
            self.successes += success is True
            self.failures += success is False
            self.per_episode.append(
                {"index": em.index, "length": em.length, "success": success, "end": end}
            )
            self.view.event(f"episode {index} kept: {end} ({steps} steps, success={success})")
            if self._video is not None:
                self._video.keep(index)
            return
        if begun:
            log.abort_episode()
        if self._video is not None:
            self._video.drop()
        if end == "discard":
            self.discarded += 1
        elif end in ("stopped", "stale_sensor") and steps:
            self.dropped += 1
        if steps or end == "discard":
            self.view.event(f"episode {index} dropped: {end} ({steps} steps)")


class _Video:
    """One mp4 per kept episode from one camera (written while recording, renamed when kept)."""

    def __init__(self, cfg, sess) -> None:
        from drivers.ros_camera import RosCamera, RosCameraConfig
        from robot_rl.app.nodes.ros_env import cropped

        setup = sess.setup
        if not setup.cameras:
            raise ValueError(f"--video-dir needs a camera; {setup.source} has none")
        name = cfg.video_camera or setup.cameras[0].name
        spec = next((c for c in setup.cameras if c.name == name), None)
        if spec is None:
            raise ValueError(f"--video-camera {name!r} is not in {setup.source}")
        self.dir = Path(cfg.video_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fps = setup.control_hz
        self.task = setup.task
        own = [c for c in sess.backend.cameras if c.name == name]
        self.cam = (
            own[0]
            if own
            else cropped(
                RosCamera(
                    RosCameraConfig(
                        name, spec.height, spec.width, setup.namespace, setup.max_image_age_s
                    ),
                    sess.backend.clock.now_s,
                    sess.backend.session,
                ),
                spec.crop,
            )
        )
        self._own = not own
        if self._own:
            self.cam.connect()
        self.writer = None
        self.tmp = self.dir / "episode_recording.mp4"
        self.label = ""

    def begin(self, label: str) -> None:
        from robot_rl.app.envs.video import VideoWriter

        self.drop()
        self.label = label
        self.writer = VideoWriter(self.tmp, fps=self.fps)
        self.add(0)

    def add(self, step: int) -> None:
        if self.writer is not None:
            self.writer.add([self.cam.read().image], f"{self.task} {self.label} step {step}")

    def keep(self, index: int) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.tmp.replace(self.dir / f"episode_{index:04d}.mp4")

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.tmp.unlink(missing_ok=True)

    def close(self) -> None:
        self.drop()
        if self._own:
            self.cam.disconnect()
