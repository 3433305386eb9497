"""``robot-rl collect --env ID --teleop DEVICE``: a person drives an env we did not write from
a teleop device, and the episodes go into our zarr demos.

Each step reads the device once (:mod:`robot_rl.app.envs.devices`), maps the reading onto the
env's actions (:class:`robot_rl.core.teleop_axes.TeleopAxes`, ``--teleop-axes``) and steps the
env. The dataset has the schema of every ``collect`` (learner layout, policy-space actions,
the env settings in its metadata), with source ``demo`` and ``intervened`` on every step (a
person chose every action, "do nothing" included), as ``robot-rl record`` writes on the twin.

How an episode ends (an end button is read at the start of a step, before its action; it acts
once per press):

| cause | kept? | success |
|---|---|---|
| ``success`` button | kept | True |
| ``failure`` button | kept | False |
| ``reset`` button, the env's time limit | kept | the env's success |
| the env's termination | kept | the env's success |
| ``discard`` button | dropped | |
| Ctrl-C, or a replayed file played to its end with nothing held | dropped (the open one only) | |

With ``--only-success`` (the default) episodes kept without success are not written. A
``success`` or ``failure`` press before the episode's first step is ignored. Episode ``k`` (every
attempt, kept or not) resets with ``seed + k``. A replayed file with await lines
(:mod:`drivers.teleop.events`) holds at each until the next episode starts.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from robot_rl.core import keys

END_BUTTONS = ("discard", "failure", "success", "reset")
"""Buttons that end an episode, in priority order when several are pressed at once (``collect
--teleop`` and ``record`` alike)."""


def step_record(
    obs_learner, action, reward, terminated, truncated, intervened: bool, stamp_s: float,
    next_obs_learner,
) -> dict[str, Any]:  # fmt: skip
    """One step of a demo as ``EpisodeLog.append``'s keywords (the action is the policy's
    [-1, 1] action, stored as both the executed and the proposed one; policy version 0)."""
    return dict(
        obs_learner=obs_learner,
        action=action,
        policy_action=action,
        reward=float(reward),
        terminated=bool(terminated),
        truncated=bool(truncated),
        intervened=intervened,
        policy_version=0,
        stamp_s=float(stamp_s),
        next_obs_learner=next_obs_learner,
    )


def record_by_teleop(cfg, env, device, axes, adapter, amap, log, progress: bool = True) -> dict:
    """Record up to ``cfg.episodes`` episodes (``cfg`` a
    :class:`robot_rl.app.envs.collect.CollectConfig`) of ``env`` driven from ``device``
    (:class:`robot_rl.app.envs.devices.DeviceSession`) through ``axes`` into ``log``; return the
    counts (written, attempts, discarded, dropped, kept without success, how each ended)."""
    return _Recorder(cfg, env, device, axes, adapter, amap, log, progress).run()


def _counts(button: str, steps: list) -> bool:
    """A success / failure press before the episode's first step is ignored."""
    return bool(steps) or button not in ("success", "failure")


class _Recorder:
    def __init__(self, cfg, env, device, axes, adapter, amap, log, progress: bool) -> None:
        self.cfg, self.env, self.device, self.axes = cfg, env, device, axes
        self.adapter, self.amap, self.log, self.progress = adapter, amap, log, progress
        self.written = self.attempts = self.discarded = self.dropped = 0
        self.not_successful = 0
        self.ends: list[str] = []

    def run(self) -> dict:
        try:
            while self.written < self.cfg.episodes and not self.device.finished:
                self._episode()
        except KeyboardInterrupt:  # Ctrl-C: the open episode is not written, the rest is
            self.dropped += 1
            self._say("stopped (Ctrl-C): the open episode is dropped")
        return {
            "episodes_written": self.written,
            "attempts": self.attempts,
            "discarded": self.discarded,
            "dropped": self.dropped,
            "kept_without_success": self.not_successful,
            "ends": self.ends,
        }

    def _say(self, text: str) -> None:
        if self.progress:
            print(f"collect: {text}", file=sys.stderr)

    def _episode(self) -> None:
        cfg, env, device = self.cfg, self.env, self.device
        seed = cfg.seed + self.attempts
        index = self.attempts
        self.attempts += 1
        obs, info = env.reset(seed=seed)
        device.episode_started(index)
        prev_down = device.teleop.read().buttons  # presses during the reset do not count
        hold = self.axes.gripper_open
        g = self.axes.gripper_index
        steps: list[dict[str, Any]] = []
        success, end = False, None
        o = self.adapter.to_learner(obs)
        while end is None:
            reading = device.read()
            new = reading.buttons - prev_down
            prev_down = reading.buttons
            end = next((b for b in END_BUTTONS if b in new and _counts(b, steps)), None)
            if end is not None:
                break
            if device.finished and not reading.buttons and not np.any(reading.twist):
                end = "stopped"  # the file has played and nothing drives this episode
                break
            a = self.axes.to_action(reading, hold)
            if g is not None:
                hold = float(a[g])
            obs, reward, terminated, truncated, info = env.step(self.amap.to_env(a))
            success = success or bool(info.get(keys.INFO_SUCCESS, False))
            o_next = self.adapter.to_learner(obs)
            steps.append(
                step_record(o, a, reward, terminated, truncated, True, device.now(), o_next)
            )
            o = o_next  # the next step's observation: mapped once
            if terminated:
                end = "env_terminated"
            elif truncated:
                end = "time_limit"
        self._finish(end, steps, success, seed)

    def _finish(self, end: str, steps: list[dict], success: bool, seed: int) -> None:
        if end in ("discard", "stopped") or not steps:
            self.discarded += end == "discard"
            self.dropped += end == "stopped" and bool(steps)
            if steps or end == "discard":
                self._say(f"attempt {self.attempts - 1} dropped: {end} ({len(steps)} steps)")
            return
        if end in ("success", "failure"):
            success = end == "success"
            steps[-1].update(terminated=True, truncated=False)
        elif end == "reset" and not steps[-1]["terminated"]:
            steps[-1]["truncated"] = True
        self.ends.append(end)
        if self.cfg.only_success and not success:
            self.not_successful += 1
            self._say(f"attempt {self.attempts - 1} not written: {end} without success")
            return
        log = self.log
        log.begin_episode("demo", policy_version=0, seed=seed)
        for s in steps:
            log.append(**s)
        log.end_episode(success=success, policy="teleop", end_reason=end)
        self.written += 1
        self._say(
            f"episode {self.written}/{self.cfg.episodes} kept: {end} ({len(steps)} steps, "
            f"success={success})"
        )
