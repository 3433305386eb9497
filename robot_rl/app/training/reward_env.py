"""``robot-rl train --reward rm/``: the training env's reward from a trained classifier.

Composition of the learned-reward path (:class:`robot_rl.wrappers.LearnedReward` over a
:class:`rewards.online.OnlineRewarder`):

- the classifier directory (``robot-rl reward train``) gives the cameras, the image size and the
  threshold; its frames are rendered at that size. A state policy's reward cameras are built in
  the twin beside the observation and read out of band (they never enter the observation);
- the model runs in process, or behind ``--reward-server HOST:PORT`` (``robot-rl reward serve``
  with the same model: its id is checked), each step waiting at most ``--reward-deadline-s``
  for its answer; a late answer labels its transition when it arrives;
- the success detector (threshold, ``--reward-k`` of ``--reward-n`` frames, the card's state
  gates or ``--reward-gate``) decides ``terminated``; every confirmation is logged with its
  frames under ``run/reward_triggers/`` for audit and hard negatives;
- the twin no longer ends episodes on its own success; its truth stays in ``info`` for the
  false-success counters (tensorboard ``reward/*``). Evaluation still uses the twin's truth:
  it measures what the policy really does.

Demos recorded with the twin's dense cost are relabelled to the classifier's binary cost: a
step whose stored reward is 0 (the twin's success) keeps 0, every other step gets -1 (the
reward a perfect classifier would have given; the demos of a state policy hold no frames to
run the classifier on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core.protocols import Camera, Task

SIM_TRUTH = "sim"
"""``--reward sim``: the twin's ground truth (:class:`rewards.sim_reward.SimReward`) through the
same wrapper and detector as a classifier: the binary-cost reference of ``bench/reward_rl.py``."""


@dataclass(frozen=True)
class LearnedRewardSettings:
    """Where the reward comes from and how success is confirmed (``robot-rl train --reward``)."""

    model: Path
    server: str | None = None
    token: str | None = None
    deadline_s: float = 0.05
    late_timeout_s: float = 30.0
    k: int = 2
    n: int = 3
    threshold: float | None = None
    encoder_weights: Path | None = None
    gates: tuple[str, ...] | None = None
    """State gates (``gripper_pos>=0.45``); None: the classifier card's."""

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.n:
            raise ValueError(f"--reward-k {self.k} of --reward-n {self.n}: need 1 <= k <= n")
        if self.deadline_s < 0 or self.late_timeout_s <= 0:
            raise ValueError(
                f"--reward-deadline-s must be >= 0 and the late timeout > 0, got "
                f"{self.deadline_s} and {self.late_timeout_s}"
            )
        if str(self.model) == SIM_TRUTH and self.server is not None:
            raise ValueError("--reward sim is the twin's own truth: it has no --reward-server")
        if self.threshold is not None and not 0.0 < self.threshold < 1.0:
            raise ValueError(f"--reward-threshold {self.threshold} must be in (0, 1)")
        if self.gates is not None:
            from rewards.detector import parse_gates

            try:
                parse_gates(self.gates)
            except ValueError as e:
                raise ValueError(f"--reward-gate: {e}") from e


def is_sim_truth(settings: LearnedRewardSettings) -> bool:
    return str(settings.model) == SIM_TRUTH


def effective_gates(settings: LearnedRewardSettings, card: Any) -> tuple[Any, ...]:
    """The run's state gates (:class:`rewards.detector.StateGate`): ``--reward-gate``'s, else
    the classifier card's (``card`` None: ``--reward sim``, no card)."""
    from rewards.detector import parse_gates

    if settings.gates is not None:
        return parse_gates(settings.gates)
    return parse_gates(card.gates if card is not None else ())


def reward_cameras(settings: LearnedRewardSettings, card: Any = None) -> tuple[str, ...]:
    """Cameras the reward reads (none for the twin's truth); ``card``: the classifier's card if
    already read (else it is read here)."""
    if is_sim_truth(settings):
        return ()
    return tuple((card if card is not None else read_reward_card(settings)).cameras)


def read_reward_card(settings: LearnedRewardSettings) -> Any:
    """The classifier's card (cameras, image size, threshold), with a clear error if absent."""
    from rewards.classifier import read_card

    if is_sim_truth(settings):
        raise ValueError("--reward sim has no classifier card")
    if not Path(settings.model).is_dir():
        raise FileNotFoundError(
            f"--reward {settings.model} is not a directory; train one with `robot-rl reward "
            "frames` and `robot-rl reward train`"
        )
    return read_card(settings.model)


def make_rewarder(
    settings: LearnedRewardSettings,
    run_dir: Path,
    task: Task,
    features: Any = None,
    card: Any = None,
) -> Any:
    """The OnlineRewarder for ``settings`` (in process, or a client of the reward server);
    ``features``: a frozen backbone an in-process classifier may share (see reward_hook);
    ``card``: the classifier's card if already read."""
    from rewards.classifier import classifier_model_id, load_classifier
    from rewards.detector import DetectorConfig
    from rewards.online import OnlineRewarder
    from rewards.trigger_log import TriggerLog
    from robot_rl.app.rewards.reward import make_encoder

    log = TriggerLog(Path(run_dir) / "reward_triggers", lazy=True)
    if is_sim_truth(settings):
        from rewards.sim_reward import SimReward

        detector = DetectorConfig(threshold=settings.threshold or 0.5, k=settings.k, n=settings.n)
        return OnlineRewarder(SimReward(task), detector, (), trigger_log=log)
    card = card if card is not None else read_reward_card(settings)
    detector = DetectorConfig(
        threshold=settings.threshold or card.threshold,
        k=settings.k,
        n=settings.n,
        gates=effective_gates(settings, card),
    )
    if settings.server is None:
        model = load_classifier(
            settings.model, lambda name: make_encoder(name, settings.encoder_weights, features)
        )
        return OnlineRewarder(model, detector, card.cameras, trigger_log=log)
    from rewards.serve.client import AsyncRewardLabeller, RewardClient

    client = RewardClient(settings.server, settings.token, timeout_s=settings.late_timeout_s)
    try:
        info = client.info(timeout_s=10.0)
    except Exception as e:
        client.close()
        raise ConnectionError(
            f"reward server {settings.server} did not answer ({e}); start it with `robot-rl "
            f"reward serve --model {settings.model}` or check --reward-server/--reward-token"
        ) from e
    want = classifier_model_id(card)
    if info.model_id != want:
        client.close()
        raise ValueError(
            f"reward server {settings.server} serves {info.model_id}, but --reward "
            f"{settings.model} is {want}: serve the same model"
        )
    labeller = AsyncRewardLabeller(client, late_timeout_s=settings.late_timeout_s)
    return OnlineRewarder.remote(
        labeller, detector, card.cameras, info.model_id, info.model_version, trigger_log=log
    )


class TeleopVerdicts:
    """A person's ``success`` / ``failure`` teleop buttons as verdicts for the learned reward
    (:class:`robot_rl.core.learned_reward.HumanVerdicts`): a press (a button newly down since
    the last step) ends the episode with that verdict. The teleop is attached once the session
    that reads it exists (``attach``); until then nothing is pressed."""

    BUTTONS = ("success", "failure")

    def __init__(self) -> None:
        from robot_rl.app.teleop.teleop_env import ButtonEdges

        self._teleop: Any = None
        self._edges = ButtonEdges()

    def attach(self, teleop: Any) -> None:
        self._teleop = teleop

    def reset(self) -> None:
        if self._teleop is not None:
            self._edges.reset(self._teleop.read().buttons)  # held through the reset: ignored

    def __call__(self) -> str | None:
        if self._teleop is None:
            return None
        new = self._edges.update(self._teleop.read().buttons)
        return next((b for b in self.BUTTONS if b in new), None)


def reward_hook(
    settings: LearnedRewardSettings,
    run_dir: Path,
    human: TeleopVerdicts | None = None,
    features: Any = None,
    card: Any = None,
):
    """``(env, out-of-band cameras, task) -> LearnedReward(env)`` for
    :func:`robot_rl.app.envs.build.make_env`;
    ``human``: the teleop's success / failure buttons end episodes (``--human teleop``);
    ``features``: the policy's frozen backbone, shared by an in-process EfficientNet-Lite0
    classifier (one backbone pass per frame for both); ``card``: the classifier's card if
    already read (else it is read here, once)."""
    from robot_rl.core import keys
    from robot_rl.wrappers import LearnedReward

    if not is_sim_truth(settings) and card is None:
        card = read_reward_card(settings)
    size = None if card is None else tuple(card.image_size)
    gates = effective_gates(settings, card)
    parts = tuple(dict.fromkeys(g.name for g in gates)) or (keys.GRIPPER_POS,)

    def wrap(env: gym.Env, cameras: Mapping[str, Camera], task: Task) -> gym.Env:
        rewarder = make_rewarder(settings, run_dir, task, features, card)
        deadline = settings.deadline_s if settings.server is not None else 0.0
        try:
            return LearnedReward(
                env,
                rewarder,
                cameras,
                deadline_s=deadline,
                image_size=size,
                human=human,
                state_parts=parts,
            )
        except BaseException:
            rewarder.close()
            raise

    return wrap


def binary_cost(reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
    """The twin's dense cost -> the classifier's binary cost (0 on success, else -1)."""
    del terminated
    return np.where(reward >= 0.0, 0.0, -1.0).astype(np.float32)
