"""Reward models and success detection (stage 5). Imports robot_rl.core only.

- :mod:`rewards.classifier`: :class:`ClassifierReward`, a frozen pretrained encoder + a small
  trained head per camera (trained by :mod:`rewards.train`);
- :mod:`rewards.vlm_contrastive`: :class:`ContrastiveVLMReward` (CLIP / SigLIP goal-baseline
  projection);
- :mod:`rewards.vlm_judge` / :mod:`rewards.vlm_judge_openai`: :class:`JudgeVLMReward`, the
  probability of "yes" from a generative VLM, in process or from an OpenAI-compatible server;
- :mod:`rewards.sim_reward` / :mod:`rewards.human_reward`: :class:`SimReward` (the twin's truth)
  and :class:`HumanReward` (a teleop button);
- :mod:`rewards.hf_encoder`: DINOv2 / SigLIP / CLIP backbones from a local directory for the
  classifier;
- :mod:`rewards.online`: :class:`OnlineRewarder`, a model + the detector labelling env steps
  (in process or through the reward server) for :class:`robot_rl.wrappers.LearnedReward`;
- :mod:`rewards.detector`: :class:`SuccessDetector` (threshold, k-of-n, gates, cascade, human
  override) with its :class:`TriggerLog`; :mod:`rewards.calibration` chooses thresholds.

Transformers-based models import ``transformers`` only when they load (the ``vlm`` extra).
"""

from rewards.calibration import (
    ThresholdChoice,
    pr_auc,
    precision_recall_curve,
    threshold_for_precision,
)
from rewards.classifier import (
    ClassifierCard,
    ClassifierHead,
    ClassifierReward,
    FrozenImageEncoder,
    load_classifier,
    read_card,
    save_classifier,
)
from rewards.detector import Decision, DetectorConfig, StateGate, SuccessDetector
from rewards.hf_encoder import HFEncoderSpec, HFVisionBackbone, describe_hf_encoder, load_hf_encoder
from rewards.human_reward import HumanReward
from rewards.online import OnlineRewarder
from rewards.sim_reward import SimReward
from rewards.trigger_log import (
    HardNegative,
    TriggerLog,
    TriggerRecord,
    hard_negatives,
    load_frames,
    read_triggers,
)
from rewards.vlm_contrastive import (
    ContrastiveVLMConfig,
    ContrastiveVLMReward,
    fit_calibration,
    goal_baseline_reward,
)
from rewards.vlm_judge import (
    JudgeConfig,
    JudgeVLMReward,
    TransformersJudge,
    TransformersJudgeConfig,
    yes_probability,
)
from rewards.vlm_judge_openai import OpenAIJudgeClient, OpenAIJudgeConfig

__all__ = [
    "ClassifierCard",
    "ClassifierHead",
    "ClassifierReward",
    "ContrastiveVLMConfig",
    "ContrastiveVLMReward",
    "Decision",
    "DetectorConfig",
    "FrozenImageEncoder",
    "HFEncoderSpec",
    "HFVisionBackbone",
    "HumanReward",
    "OnlineRewarder",
    "SimReward",
    "HardNegative",
    "JudgeConfig",
    "JudgeVLMReward",
    "OpenAIJudgeClient",
    "OpenAIJudgeConfig",
    "StateGate",
    "SuccessDetector",
    "ThresholdChoice",
    "TransformersJudge",
    "TransformersJudgeConfig",
    "TriggerLog",
    "TriggerRecord",
    "describe_hf_encoder",
    "fit_calibration",
    "goal_baseline_reward",
    "hard_negatives",
    "load_classifier",
    "load_frames",
    "load_hf_encoder",
    "pr_auc",
    "precision_recall_curve",
    "read_card",
    "read_triggers",
    "save_classifier",
    "threshold_for_precision",
    "yes_probability",
]
