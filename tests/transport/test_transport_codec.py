"""Transport wire layer: transition and weights codecs, the proto, and its generated code.

Payloads are real safetensors/zlib bytes; every malformed case is built the way a buggy or
hostile sender would build it and must be refused with a PayloadError naming the field.
"""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save as st_save
from torch import nn

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.replay.schema import obs_fields, step_fields
from robot_rl.transport.codec import (
    CODEC_RAW,
    CODEC_ZLIB,
    FEATURES_PREFIX,
    PayloadError,
    accepted_features,
    decode_transitions,
    encode_transitions,
    layout_fingerprint,
    parse_fingerprint,
    sha256_hex,
    transition_fields,
)
from robot_rl.transport.weights import (
    decode_weights,
    encode_weights,
    load_trainable_state,
    trainable_state,
    weights_spec,
)

REPO = Path(__file__).resolve().parents[2]
A = 3
N = 6
MAX = 1 << 20
IMAGES = ObsLayout(
    state_dim=5,
    images={"front": ArraySpec((8, 10, 3), "uint8"), "wrist": ArraySpec((6, 6, 3), "uint8")},
)
STATE_ONLY = ObsLayout(state_dim=4, images={})
LAYOUTS = {"images": IMAGES, "state_only": STATE_ONLY}


def make_steps(layout: ObsLayout, n: int = N, seed: int = 0) -> dict[str, np.ndarray]:
    """Random transitions for ``layout``, with -0.0, subnormals and extremes in the floats."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in transition_fields(layout, A).items():
        if dtype == "uint8":
            out[name] = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        elif dtype == "bool":
            out[name] = rng.random((n, *shape)) < 0.5
        elif dtype == "int64":
            out[name] = rng.integers(0, 1 << 40, (n, *shape), dtype=np.int64)
        else:
            a = rng.standard_normal((n, *shape)).astype(dtype)
            a.flat[0], a.flat[-1] = -0.0, np.finfo(dtype).smallest_subnormal
            out[name] = a
    return out


def raw(arrays: dict[str, np.ndarray]) -> tuple[bytes, str, str]:
    """Uncompressed payload of any arrays (no checks: what a buggy sender could send)."""
    payload = st_save({k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return payload, CODEC_RAW, sha256_hex(payload)


def decode(payload: bytes, codec: str, sha: str, layout: ObsLayout = IMAGES, **kw):
    return decode_transitions(
        payload, codec, sha, layout=layout, action_dim=A, max_bytes=kw.pop("max_bytes", MAX), **kw
    )


# -- transitions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "zlib"])
@pytest.mark.parametrize("layout_name", sorted(LAYOUTS))
def test_transitions_round_trip_bit_identical(layout_name: str, compress: bool) -> None:
    layout = LAYOUTS[layout_name]
    steps = make_steps(layout)
    payload, codec, sha = encode_transitions(steps, compress)
    assert codec == (CODEC_ZLIB if compress else CODEC_RAW)
    assert sha == sha256_hex(payload)
    out = decode(payload, codec, sha, layout, count=N)
    assert sorted(out) == sorted(steps)
    for k, v in steps.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape, k
        assert out[k].tobytes() == v.tobytes(), k  # bit for bit (-0.0 and subnormals too)


def test_backbone_features_go_only_to_a_learner_that_asked_for_them() -> None:
    """``next_obs/features/<cam>``: decoded bit for bit when the learner accepts those shapes;
    refused with the field named when it did not ask, for one camera only, or a wrong shape
    or dtype; the ask itself (policy settings) is checked against the layout."""
    shapes = {"front": (2, 2, 8), "wrist": (1, 1, 8)}
    rng = np.random.default_rng(3)
    feats = {
        FEATURES_PREFIX + c: rng.integers(0, 256, (N, *s), dtype=np.uint8)
        for c, s in shapes.items()
    }
    steps = {**make_steps(IMAGES), **feats}
    out = decode(*encode_transitions(steps, True), count=N, features=shapes)
    for k, v in feats.items():
        assert out[k].tobytes() == v.tobytes() and out[k].shape == v.shape, k
    assert sorted(decode(*encode_transitions(make_steps(IMAGES), False), features=shapes)) == (
        sorted(make_steps(IMAGES))
    )  # features are optional
    with pytest.raises(PayloadError, match="unexpected.*next_obs/features/front"):
        decode(*encode_transitions(steps, False))  # the learner did not ask
    one = {k: v for k, v in steps.items() if k != FEATURES_PREFIX + "wrist"}
    with pytest.raises(PayloadError, match="some cameras only") as e:
        decode(*encode_transitions(one, False), features=shapes)
    assert e.value.field == "next_obs/features"
    wrong = {
        **steps,
        FEATURES_PREFIX + "wrist": feats[FEATURES_PREFIX + "wrist"].astype(np.float32),
    }
    with pytest.raises(PayloadError, match="expected uint8") as e:
        decode(*encode_transitions(wrong, False), features=shapes)
    assert e.value.field == FEATURES_PREFIX + "wrist"
    with pytest.raises(PayloadError, match="expected uint8 \\(N, 1, 1, 9\\)"):
        decode(*encode_transitions(steps, False), features={**shapes, "wrist": (1, 1, 9)})
    assert (
        accepted_features({"features": {"front": [2, 2, 8], "wrist": [1, 1, 8]}}, IMAGES) == shapes
    )
    assert (
        accepted_features({}, IMAGES) == {} and accepted_features({"features": None}, IMAGES) == {}
    )
    for bad in (
        {"front": [2, 2, 8]},
        {"front": [2, 2], "wrist": [1, 1, 8]},
        [1, 2],
        {"front": "x"},
    ):
        with pytest.raises(PayloadError, match="features"):
            accepted_features({"features": bad}, IMAGES)


def test_names_are_the_episode_log_names() -> None:
    fields = transition_fields(IMAGES, A)
    for k, spec in {**obs_fields(IMAGES), **step_fields(A)}.items():
        assert fields[k] == spec
    assert fields["next_obs/images/front"] == ((8, 10, 3), "uint8")
    assert fields["next_obs/state"] == ((5,), "float32")
    assert fields["episode"] == fields["step"] == ((), "int64")
    assert not any(k.startswith("obs/images") for k in transition_fields(STATE_ONLY, A))


def test_compression_shrinks_compressible_frames() -> None:
    steps = make_steps(IMAGES)
    for k in steps:
        if "images" in k:
            steps[k][:] = 128  # a flat wall
    small, _, _ = encode_transitions(steps, True)
    big, _, _ = encode_transitions(steps, False)
    assert len(small) < len(big) / 2


def test_fingerprint_round_trip_and_sensitivity() -> None:
    fp = layout_fingerprint(IMAGES, A)
    assert parse_fingerprint(fp) == (IMAGES, A)
    assert layout_fingerprint(IMAGES, A) == fp  # canonical: stable across calls
    assert layout_fingerprint(IMAGES, A + 1) != fp
    assert layout_fingerprint(STATE_ONLY, A) != fp
    with pytest.raises(PayloadError, match="layout_json"):
        parse_fingerprint('{"layout": 3}')
    with pytest.raises(PayloadError, match="action_dim=0"):
        parse_fingerprint(layout_fingerprint(IMAGES, 0))


def test_encode_refuses_inconsistent_batches() -> None:
    steps = make_steps(IMAGES)
    with pytest.raises(ValueError, match="at least one array"):
        encode_transitions({}, False)
    with pytest.raises(ValueError, match="reward"):
        encode_transitions({**steps, "reward": steps["reward"][:-1]}, False)
    with pytest.raises(ValueError, match="N = 0"):
        encode_transitions({k: v[:0] for k, v in steps.items()}, False)
    with pytest.raises(ValueError, match="level"):
        encode_transitions(steps, True, level=11)


def _modified(**changes: np.ndarray | None) -> Callable[[], tuple[bytes, str, str]]:
    def build() -> tuple[bytes, str, str]:
        steps = make_steps(IMAGES)
        for k, v in changes.items():
            if v is None:
                del steps[k]
            else:
                steps[k] = v
        return raw(steps)

    return build


def _nonfinite(name: str, value: float) -> Callable[[], tuple[bytes, str, str]]:
    def build() -> tuple[bytes, str, str]:
        steps = make_steps(IMAGES)
        steps[name].reshape(N, -1)[2, 0] = value
        return raw(steps)

    return build


def _bad_bool() -> tuple[bytes, str, str]:
    steps = make_steps(IMAGES)
    steps["terminated"].view(np.uint8)[1] = 2
    return raw(steps)


_img = np.zeros((N, 8, 10, 3), np.uint8)
MALFORMED = {
    # name: (payload builder, field the error names, message fragment)
    "missing_key": (_modified(**{"next_obs/images/front": None}), "payload", "missing"),
    "extra_key": (_modified(**{"obs/images/side": _img}), "payload", "unexpected"),
    "wrong_dtype": (
        _modified(reward=np.zeros(N, np.float64)),
        "reward",
        r"expected float32 \(N,\)",
    ),
    "wrong_image_shape": (
        _modified(**{"obs/images/front": np.zeros((N, 8, 9, 3), np.uint8)}),
        "obs/images/front",
        "expected uint8",
    ),
    "wrong_action_dim": (_modified(action=np.zeros((N, A + 1), np.float32)), "action", r"\(N, 3\)"),
    "n_mismatch": (_modified(truncated=np.zeros(N - 1, bool)), "truncated", "rows"),
    "empty_batch": (lambda: raw({k: v[:0] for k, v in make_steps(IMAGES).items()}), "", "N = 0"),
    "nan_reward": (_nonfinite("reward", np.nan), "reward", "NaN or inf in transition"),
    "inf_state": (_nonfinite("obs/state", np.inf), "obs/state", r"transition\(s\) \[2\]"),
    "inf_next_state": (_nonfinite("next_obs/state", -np.inf), "next_obs/state", "NaN or inf"),
    "nan_action": (_nonfinite("action", np.nan), "action", "NaN or inf"),
    "bool_byte_2": (_bad_bool, "terminated", "other than 0 and 1"),
    "negative_step": (_modified(step=-np.ones(N, np.int64)), "step", "negative"),
    "not_safetensors": (lambda: (b"\x00" * 64, CODEC_RAW, sha256_hex(b"\x00" * 64)), "", "not a"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_payload_is_rejected_with_the_field(case: str) -> None:
    build, field, fragment = MALFORMED[case]
    with pytest.raises(PayloadError, match=fragment) as err:
        decode(*build())
    assert err.value.field == (field or "payload")
    assert isinstance(err.value, ValueError)


def test_integrity_codec_and_size_checks() -> None:
    steps = make_steps(IMAGES)
    for k in steps:
        if "images" in k:
            steps[k][:] = 7  # compressible, so the decompressed size is well above the payload's
    payload, codec, sha = encode_transitions(steps, True)
    flipped = bytes([payload[0] ^ 1]) + payload[1:]
    with pytest.raises(PayloadError, match="sha256: mismatch"):
        decode(flipped, codec, sha)
    with pytest.raises(PayloadError, match="not a SHA-256 hex digest"):
        decode(payload, codec, "abc")
    assert decode(payload, codec, sha.upper())  # hex case does not matter
    with pytest.raises(PayloadError, match="unknown codec 'gzip'"):
        decode(payload, "gzip", sha)
    with pytest.raises(PayloadError, match="bytes > max_bytes"):
        decode(payload, codec, sha, max_bytes=len(payload) - 1)
    with pytest.raises(PayloadError, match="count is N = 7"):
        decode(payload, codec, sha, count=N + 1)
    # The same bytes under the other codec: plain safetensors is not a zlib stream.
    plain, _, plain_sha = encode_transitions(make_steps(IMAGES), False)
    with pytest.raises(PayloadError, match="not a zlib stream"):
        decode(plain, CODEC_ZLIB, plain_sha)
    cut = payload[:-8]
    with pytest.raises(PayloadError, match="truncated zlib stream"):
        decode(cut, codec, sha256_hex(cut))
    padded = payload + b"junk"
    with pytest.raises(PayloadError, match="stray bytes"):
        decode(padded, codec, sha256_hex(padded))
    # Small enough compressed, too large decompressed.
    with pytest.raises(PayloadError, match="decompresses to more than"):
        decode(payload, codec, sha, max_bytes=2 * len(payload))


def test_zip_bomb_is_refused_without_inflating_it() -> None:
    comp = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    bomb = b"".join(comp.compress(chunk) for _ in range(256)) + comp.flush()  # 256 MiB of zeros
    assert len(bomb) < MAX
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError, match="decompresses to more than max_bytes"):
            decode(bomb, CODEC_ZLIB, sha256_hex(bomb))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX  # bounded by max_bytes, not by the bomb's 256 MiB


def test_state_only_learner_refuses_image_payload() -> None:
    payload, codec, sha = encode_transitions(make_steps(IMAGES), False)
    with pytest.raises(PayloadError, match=r"unexpected \['next_obs/images/front'"):
        decode(payload, codec, sha, STATE_ONLY)


# -- weights -------------------------------------------------------------------------------------


class FrozenEncoder(nn.Module):
    """Stands in for a pretrained trunk: conv + BatchNorm, frozen, with constant buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.register_buffer("mean", torch.tensor(0.5), persistent=False)
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x - self.mean)).mean(dim=(2, 3))  # (B, 4)


class Policy(nn.Module):
    def __init__(self, encoder_seed: int, head_seed: int) -> None:
        super().__init__()
        torch.manual_seed(encoder_seed)
        self.encoder = FrozenEncoder()
        torch.manual_seed(head_seed)
        self.head = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        self.log_std = nn.Parameter(torch.randn(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)) + self.log_std


def trained_policy() -> Policy:
    """A learner-side policy whose head weights and BatchNorm statistics moved."""
    learner = Policy(encoder_seed=0, head_seed=1)
    learner.train()
    opt = torch.optim.SGD([p for p in learner.parameters() if p.requires_grad], lr=0.1)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        opt.zero_grad()
        learner(torch.rand(5, 3, 6, 6, generator=g)).square().sum().backward()
        opt.step()
    return learner.eval()


def test_trainable_state_excludes_frozen_parts() -> None:
    names = set(trainable_state(Policy(0, 1)))
    head_bn = {f"head.1.{b}" for b in ("running_mean", "running_var", "num_batches_tracked")}
    params = {"head.0.weight", "head.0.bias", "head.1.weight", "head.1.bias"}
    assert names == params | head_bn | {"head.3.weight", "head.3.bias", "log_std"}
    assert not any(n.startswith("encoder") for n in names)  # frozen trunk + its BN stats


def test_weights_round_trip_into_fresh_module_gives_identical_outputs() -> None:
    learner = trained_policy()
    actor = Policy(encoder_seed=0, head_seed=99).eval()  # same frozen trunk, other head
    x = torch.rand(4, 3, 6, 6, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert not torch.equal(actor(x), learner(x))
    payload, sha = encode_weights(trainable_state(learner))
    state = decode_weights(payload, sha, expected=weights_spec(trainable_state(actor)))
    load_trainable_state(actor, state)
    with torch.no_grad():
        assert torch.equal(actor(x), learner(x))
    assert torch.equal(actor.head[1].running_var, learner.head[1].running_var)


def test_encoded_weights_are_copies() -> None:
    learner = Policy(0, 1)
    payload, sha = encode_weights(trainable_state(learner))
    with torch.no_grad():
        learner.log_std.add_(1.0)  # the next optimiser step
    state = decode_weights(payload, sha, expected=None)
    assert not torch.equal(state["log_std"], learner.log_std)


def test_malformed_weights_are_rejected() -> None:
    actor = Policy(0, 5)
    spec = weights_spec(trainable_state(actor))
    good = dict(trainable_state(trained_policy()))

    def enc(state: dict[str, torch.Tensor]) -> tuple[bytes, str]:
        return encode_weights(state)

    payload, sha = enc(good)
    with pytest.raises(PayloadError, match="sha256: mismatch"):
        decode_weights(payload[:-1] + b"x", sha, expected=spec)
    with pytest.raises(PayloadError, match="not a safetensors blob"):
        decode_weights(b"\x01" * 32, sha256_hex(b"\x01" * 32), expected=spec)
    with pytest.raises(PayloadError, match=r"missing \['log_std'\]"):
        decode_weights(*enc({k: v for k, v in good.items() if k != "log_std"}), expected=spec)
    frozen = {**good, "encoder.conv.weight": actor.encoder.conv.weight}
    with pytest.raises(PayloadError, match=r"unexpected \['encoder.conv.weight'\]"):
        decode_weights(*enc(frozen), expected=spec)
    with pytest.raises(PayloadError, match="head.0.weight: .* this policy has"):
        decode_weights(*enc({**good, "head.0.weight": torch.zeros(8, 5)}), expected=spec)
    with pytest.raises(PayloadError, match="log_std: torch.float64"):
        decode_weights(*enc({**good, "log_std": good["log_std"].double()}), expected=spec)
    # NaN: the learner refuses to publish; a blob made elsewhere is refused on receipt.
    nan = {**good, "log_std": torch.full((2,), float("nan"))}
    with pytest.raises(ValueError, match="diverged"):
        encode_weights(nan)
    from safetensors.torch import save

    blob = save({k: v.contiguous() for k, v in nan.items()})
    with pytest.raises(PayloadError, match="log_std: NaN or inf"):
        decode_weights(blob, sha256_hex(blob), expected=spec)
    with pytest.raises(ValueError, match="empty"):
        encode_weights({})


def test_load_refuses_mismatch_and_copies_nothing() -> None:
    actor = Policy(0, 5)
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    state = {k: v.clone() + 1 for k, v in trainable_state(trained_policy()).items()}
    del state["head.3.bias"]
    with pytest.raises(PayloadError, match=r"missing \['head.3.bias'\]"):
        load_trainable_state(actor, state)
    for k, v in actor.state_dict().items():
        assert torch.equal(v, before[k]), k


# -- proto and generated code --------------------------------------------------------------------


def test_proto_messages_round_trip() -> None:
    pb = pytest.importorskip("robot_rl.transport.transport_pb2")
    payload, codec, sha = encode_transitions(make_steps(STATE_ONLY), True)
    batch = pb.TransitionBatch(
        actor_id="a", first_seq=10, count=N, payload=payload, codec=codec, sha256=sha
    )
    got = pb.TransitionBatch.FromString(batch.SerializeToString())
    out = decode_transitions(
        got.payload, got.codec, got.sha256, layout=STATE_ONLY, action_dim=A, max_bytes=MAX,
        count=got.count,
    )  # fmt: skip
    assert out["reward"].shape == (N,)
    event = pb.LearnerEvent(control=pb.RunControl(command=pb.RunControl.PAUSE, reason="test"))
    event = pb.LearnerEvent.FromString(event.SerializeToString())
    assert event.WhichOneof("event") == "control" and event.control.command == pb.RunControl.PAUSE
    assert pb.HelloReply().acked_through_seq == 0  # proto3 default: the learner sets -1 itself
    methods = {m.name: m for m in pb.DESCRIPTOR.services_by_name["Learner"].methods}
    assert set(methods) == {"Hello", "PushTransitions", "Subscribe"}
    assert (
        methods["PushTransitions"].client_streaming and methods["PushTransitions"].server_streaming
    )
    assert methods["Subscribe"].server_streaming and not methods["Subscribe"].client_streaming
