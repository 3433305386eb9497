"""LearnedReward: the env's reward and success come from a reward model, not from the task.

On a real robot there is no task reward; in the twin this wrapper replaces the ground truth so
that the learned-reward path is what gets tested. Each step:

1. the inner env steps (the twin must not end episodes on its own success:
   ``terminate_on_success=False``; a task failure still ends the episode);
2. the reward cameras' frames are taken from the observation when they are in it (after the
   image wrappers, as the classifier was trained) and otherwise read out of band from the
   given cameras (a state policy's reward cameras);
3. the frames go to the :class:`robot_rl.core.learned_reward.StepRewarder` (a model in process,
   or a reward server), and the wrapper waits at most ``deadline_s`` for the step's label;
4. reward = the model's reward; ``terminated`` = the success detector confirmed success (in this
   step's label or a late label of an earlier step of the episode) or the inner env terminated.

A step whose label is late returns reward NaN and is marked pending (:attr:`last_step`); its
label comes later through :meth:`poll`, and the training loop holds the transition until then
(:class:`robot_rl.core.learned_reward.LateRewardSource`). Termination waits for a confirmed
answer: an episode never ends on a label that has not arrived.

``info[INFO_SUCCESS]`` becomes the detector's verdict (what the robot believes); the inner env's
success, when it has one (the twin's truth), moves to ``info[keys.INFO_TRUE_SUCCESS]`` and feeds the
false-success counters of :meth:`stats`; the inner env's own reward moves to
``info[INFO_TASK_REWARD]`` (diagnostics, and the twin's simulated human, which judges progress
on what it sees, as a person would, not on the learned reward).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.learned_reward import HumanVerdicts, RewardStep, StepLabel, StepRewarder
from robot_rl.core.protocols import Camera
from robot_rl.wrappers.image_crop_resize import CropResize, crop_resize


class LearnedReward(gym.Wrapper):
    """Reward and success from a reward model (see the module docstring).

    Args:
        env: Env with a Dict observation (``images`` for cameras in the observation).
        rewarder: Labels steps (model + success detector).
        cameras: Connected cameras read out of band for reward cameras that are not in the
            observation (name -> camera).
        deadline_s: How long a step waits for its own label, seconds (0: never wait; labels
            of an in-process model are always ready).
        state_parts: Named state parts passed to the detector's gates (e.g. ``gripper_pos``).
        image_size: (H, W) the model reads: out-of-band frames of another size are resized
            (OpenCV ``INTER_AREA``, as :class:`ImageCropResize` does for the observation), e.g.
            a robot camera's 640 x 480 to a classifier's 64 x 64. None: as read.
        human: A person's success / failure presses (teleop buttons), read after every step:
            a press ends the episode at once with that verdict (and labels the step so).
    """

    def __init__(
        self,
        env: gym.Env,
        rewarder: StepRewarder,
        cameras: Mapping[str, Camera] | None = None,
        deadline_s: float = 0.05,
        state_parts: tuple[str, ...] = (keys.GRIPPER_POS,),
        image_size: tuple[int, int] | None = None,
        human: HumanVerdicts | None = None,
    ) -> None:
        super().__init__(env)
        if deadline_s < 0 or not math.isfinite(deadline_s):
            raise ValueError(f"deadline_s must be a finite time >= 0 s, got {deadline_s}")
        self.rewarder = rewarder
        self.deadline_s = float(deadline_s)
        self.state_parts = tuple(state_parts)
        self._cameras = dict(cameras or {})
        self.human = human
        self._resize = None if image_size is None else CropResize(size_hw=tuple(image_size))
        obs_images = _obs_cameras(env.observation_space)
        missing = [c for c in rewarder.cameras if c not in obs_images and c not in self._cameras]
        if missing:
            raise ValueError(
                f"reward model {rewarder.model_id} reads cameras {list(rewarder.cameras)}; "
                f"{missing} are neither in the observation ({sorted(obs_images)}) nor given "
                "as out-of-band cameras"
            )
        self._episode = -1
        self._step = 0
        self._ended = True
        self._last: RewardStep | None = None
        self._late: list[StepLabel] = []
        self._truth: dict[tuple[int, int], bool] = {}
        self._counts = dict.fromkeys(
            ("steps", "labels", "late_labels", "failed_labels", "confirmations",
             "false_confirmations", "true_success_episodes", "missed_episodes",
             "human_verdicts"), 0,
        )  # fmt: skip
        self._ep_truth = self._ep_confirmed = self._ep_has_truth = False
        self._end_next = False  # a late label read by poll/drain confirmed the episode

    @property
    def model_id(self) -> str:
        return self.rewarder.model_id

    @property
    def last_step(self) -> RewardStep | None:
        return self._last

    def reset(self, **kwargs: Any) -> tuple[dict, dict]:
        self._close_episode()
        obs, info = self.env.reset(**kwargs)
        self._episode += 1
        self._step = 0
        self._ended = False
        self._last = None
        self._ep_truth = self._ep_confirmed = self._ep_has_truth = False
        self._end_next = False
        self.rewarder.begin_episode(self._episode)
        if self.human is not None:
            self.human.reset()
        info = dict(info)
        if keys.INFO_SUCCESS in info:
            info[keys.INFO_TRUE_SUCCESS] = bool(info[keys.INFO_SUCCESS])
        info[keys.INFO_SUCCESS] = False
        return obs, info

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        if self._ended:
            raise RuntimeError("step() after the episode ended: call reset() first")
        obs, task_reward, terminated, truncated, info = self.env.step(action)
        ep, t = self._episode, self._step
        self._step += 1
        info = dict(info)
        info[keys.INFO_TASK_REWARD] = float(task_reward)
        if keys.INFO_SUCCESS in info:
            self._ep_has_truth = True
            truth = bool(info[keys.INFO_SUCCESS])
            info[keys.INFO_TRUE_SUCCESS] = truth
            self._truth[(ep, t)] = truth
            self._ep_truth |= truth
        verdict = self.human() if self.human is not None else None
        self.rewarder.submit(ep, t, self._frames(obs), self._state(obs), human=verdict)
        if verdict is not None:  # a person's press is a confirmed answer: end now
            terminated = True
            self._ep_confirmed = verdict == "success"
            self._counts["human_verdicts"] += 1
        own: StepLabel | None = None
        terminated |= self._end_next  # confirmed by a late label that poll/drain took
        for label in self.rewarder.collect((ep, t), self.deadline_s):
            mine = (label.episode, label.step) == (ep, t) and not label.failed
            own = label if mine else own
            terminated |= self._take(label, late=not mine)
        pending = own is None  # late, or failed (its failed label comes through poll)
        self._last = RewardStep(ep, t, pending)
        self._counts["steps"] += 1
        info[keys.INFO_SUCCESS] = self._ep_confirmed
        info[keys.INFO_REWARD] = {
            "success_prob": math.nan if own is None else own.success_prob,
            "pending": pending,
        }
        reward = math.nan if own is None else own.reward
        if terminated or truncated:
            self._ended = True
            self._close_episode()
        return obs, reward, bool(terminated), bool(truncated), info

    def poll(self) -> list[StepLabel]:
        for label in self.rewarder.collect(None, 0.0):
            self._end_next |= self._take(label, late=True)
        out, self._late = self._late, []
        return out

    def drain(self, timeout_s: float) -> list[StepLabel]:
        for label in self.rewarder.drain(timeout_s):
            self._end_next |= self._take(label, late=True)
        out, self._late = self._late, []
        return out

    def stats(self) -> Mapping[str, float]:
        """Cumulative: steps, labels, late_labels, failed_labels, confirmations,
        false_confirmations (confirmed where the truth said no), true_success_episodes (the
        truth succeeded at some step) and missed_episodes (the truth succeeded, the detector
        never confirmed); the last two count ended episodes of envs that report a truth."""
        return dict(self._counts)

    def close(self) -> None:
        self._close_episode()
        try:
            self.rewarder.close()
        finally:
            super().close()

    # -- internals -----------------------------------------------------------------------------

    def _take(self, label: StepLabel, late: bool) -> bool:
        """Count ``label``; queue it if its step was returned pending; True if it ends the
        current episode."""
        key = (label.episode, label.step)
        truth = self._truth.pop(key, None)
        c = self._counts
        c["labels"] += 1
        c["late_labels"] += int(late)
        c["failed_labels"] += int(label.failed)
        if late:
            self._late.append(label)
        if not label.terminated:
            return False
        if label.success:
            c["confirmations"] += 1
            c["false_confirmations"] += int(truth is False)
        current = label.episode == self._episode and not self._ended
        if current and label.success:
            self._ep_confirmed = True
        return current

    def _close_episode(self) -> None:
        if self._episode < 0 or not self._ep_has_truth:
            return
        self._counts["true_success_episodes"] += int(self._ep_truth)
        self._counts["missed_episodes"] += int(self._ep_truth and not self._ep_confirmed)
        self._ep_has_truth = False  # counted once (at its end, else at the next reset)

    def _frames(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        images = obs.get(keys.IMAGES, {}) if isinstance(obs, Mapping) else {}
        out = {}
        for cam in self.rewarder.cameras:
            if cam in images:
                out[cam] = images[cam]
                continue
            frame = self._cameras[cam].read().image
            out[cam] = frame if self._resize is None else crop_resize(frame, self._resize)
        return out

    def _state(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        state = obs.get(keys.STATE) if isinstance(obs, Mapping) else None
        if not isinstance(state, Mapping):
            return None
        return {k: np.asarray(state[k]) for k in self.state_parts if k in state}


def _obs_cameras(space: gym.Space) -> set[str]:
    if isinstance(space, gym.spaces.Dict) and keys.IMAGES in space.spaces:
        return set(space.spaces[keys.IMAGES].spaces)
    return set()
