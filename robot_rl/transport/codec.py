"""Wire format of the actor <-> learner transport: transitions and weights as safetensors bytes.

Never pickle: a safetensors blob parses to named arrays and nothing else. Decoding checks
everything a sender can get wrong (integrity, size, names, dtypes, shapes, values) and raises
:class:`PayloadError` naming the offending field, so the learner can reject one batch with a
message that says what to fix and stay up.

A transition batch of N steps is one safetensors blob of these arrays (names as in the episode
log, :mod:`robot_rl.replay.schema`, plus ``next_obs/...`` and the actor's step identity)::

    obs/state                (N, S) float32        present when the layout has a state
    obs/images/<cam>         (N, H, W, 3) uint8    one per camera of the layout
    next_obs/state, next_obs/images/<cam>          likewise, the observation after the step
    action, policy_action    (N, A) float32        as executed / as proposed by the policy
    reward                   (N,) float32
    terminated, truncated, intervened  (N,) bool
    policy_version           (N,) int64
    stamp_s                  (N,) float64          monotonic time of next_obs, seconds
    episode, step            (N,) int64            the actor's episode index and step within it
    next_obs/features/<cam>  (N, h, w, C) uint8    optional: the frozen backbone's features of
                                                   next_obs/images/<cam>, every camera or none

The features are sent only to a learner that asks for them: its Hello's policy settings name
the feature shape per camera (``"features"``, see :func:`accepted_features`), and it has
checked that the actor's backbone weights are its own (``backbone_sha256``). They spare the
learner a second pass of the backbone over frames the actor already encoded to act; the log
on both sides keeps the frames.

With the actor id and the batch's sequence numbers, ``(episode, step)`` identifies a transition,
so the learner can drop duplicates after a resend.

Weights travel the same way; their codec is :mod:`robot_rl.transport.weights`.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from robot_rl.core.batch import ObsLayout
from robot_rl.replay.schema import layout_from_json, layout_to_json, obs_fields, step_fields

PROTOCOL_VERSION = 3
"""Wire protocol version (HelloRequest/HelloReply.protocol_version); bump on any change of the
proto or of the payload layout."""

CODEC_RAW = "safetensors"
CODEC_ZLIB = "safetensors+zlib"
CODECS = (CODEC_RAW, CODEC_ZLIB)
"""Payload codecs: plain safetensors bytes, or the same bytes zlib-compressed."""

ZLIB_LEVEL = 1
"""Default zlib level: the fastest. Camera frames gain little from higher levels, and the actor's
sender thread should keep up with the control loop on a robot PC."""

OBS_PREFIX = "obs/"
NEXT_OBS_PREFIX = "next_obs/"
EPISODE = "episode"
STEP = "step"
IDENTITY_FIELDS = {EPISODE: ((), "int64"), STEP: ((), "int64")}
"""The actor's episode index and step within the episode, per transition."""
FEATURES_PREFIX = NEXT_OBS_PREFIX + "features/"
"""Optional arrays ``next_obs/features/<cam>``: the backbone's features of next_obs's frames."""
FEATURES_KEY = "features"
"""Key of the policy settings (Hello's ``policy_json``) naming the feature shape per camera the
learner accepts: ``{"<cam>": [h, w, C]}``."""

FINITE_FIELDS = ("reward", "action", "policy_action", "stamp_s", "obs/state", "next_obs/state")
"""Float arrays that must hold no NaN or inf (present ones only)."""


class PayloadError(ValueError):
    """A payload that cannot be decoded or does not fit the learner's layout.

    Attributes:
        field: Which part, e.g. ``"payload"``, ``"sha256"`` or ``"obs/images/front"``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def layout_fingerprint(layout: ObsLayout, action_dim: int) -> str:
    """Canonical JSON of the learner layout and action size (HelloRequest.layout_json).

    Two sides fit each other exactly when their fingerprints are equal strings.
    """
    doc = {"action_dim": int(action_dim), "layout": layout_to_json(layout)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def parse_fingerprint(text: str) -> tuple[ObsLayout, int]:
    """Inverse of :func:`layout_fingerprint`.

    Raises:
        PayloadError: Not JSON, or not a layout and action size.
    """
    try:
        doc = json.loads(text)
        layout, action_dim = layout_from_json(doc["layout"]), int(doc["action_dim"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PayloadError(
            "layout_json", f"not a layout fingerprint ({e!r}); send codec.layout_fingerprint()"
        ) from e
    if action_dim < 1:
        raise PayloadError("layout_json", f"action_dim={action_dim}, expected >= 1")
    return layout, action_dim


def transition_fields(layout: ObsLayout, action_dim: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """Array name -> (per-transition shape, dtype) of a transition batch for this layout."""
    obs = obs_fields(layout)  # "obs/state", "obs/images/<cam>"
    nxt = {NEXT_OBS_PREFIX + k[len(OBS_PREFIX) :]: v for k, v in obs.items()}
    return {**obs, **nxt, **step_fields(action_dim), **IDENTITY_FIELDS}


def feature_fields(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Array name -> (per-transition shape, dtype) of the optional features, camera by camera."""
    return {FEATURES_PREFIX + c: (tuple(int(x) for x in s), "uint8") for c, s in shapes.items()}


def shipped_features(
    arrays: Mapping[str, np.ndarray], cams: Iterable[str]
) -> dict[str, np.ndarray] | None:
    """Camera -> ``next_obs/features/<cam>`` array a batch carries, or None if it carries none.

    A batch carries the features of every camera in ``cams`` or of none; some cameras only is a
    :class:`PayloadError` (the one rule the codec, the learner's sink and its route share).
    """
    names = {c: FEATURES_PREFIX + c for c in cams}
    sent = sorted(n for n in names.values() if n in arrays)
    if not sent:
        return None
    if len(sent) < len(names):
        raise PayloadError(
            FEATURES_PREFIX.rstrip("/"),
            f"features of some cameras only (sent {sent}); send {sorted(names.values())} or none",
        )
    return {c: arrays[n] for c, n in names.items()}


def accepted_features(policy: Mapping[str, object], layout: ObsLayout) -> dict[str, tuple]:
    """The feature shape per camera a learner accepts, from its policy settings ({}: none).

    Raises:
        PayloadError: The settings name other cameras than the layout's, or not a shape.
    """
    got = policy.get(FEATURES_KEY)
    if not got:
        return {}
    try:
        if not isinstance(got, Mapping):
            raise TypeError(type(got).__name__)
        shapes = {str(c): tuple(int(x) for x in s) for c, s in got.items()}
    except (TypeError, ValueError) as e:
        raise PayloadError(FEATURES_KEY, f"{got!r} is not {{camera: [h, w, C]}}") from e
    if set(shapes) != set(layout.images) or any(len(s) != 3 or min(s) < 1 for s in shapes.values()):
        raise PayloadError(
            FEATURES_KEY, f"{got!r}: expected [h, w, C] for each camera of {sorted(layout.images)}"
        )
    return shapes


def encode_transitions(
    steps: Mapping[str, np.ndarray], compress: bool, *, level: int = ZLIB_LEVEL
) -> tuple[bytes, str, str]:
    """Serialise N transitions (arrays named as in the module docstring).

    Only the batch size is checked here; :func:`decode_transitions` checks the rest against the
    learner's layout (run it on the actor too, in tests, to catch mistakes before sending).

    Args:
        steps: Array name -> (N, ...) array, the same N >= 1 for every array.
        compress: zlib-compress the safetensors bytes.
        level: zlib level, 0..9 (only with ``compress``).

    Returns:
        (payload bytes, codec name, SHA-256 hex of the payload as sent).

    Raises:
        ValueError: No arrays, a 0-d array, differing or zero N, or a bad ``level``.
    """
    if not steps:
        raise ValueError("steps: give at least one array")
    if not 0 <= level <= 9:
        raise ValueError(f"level={level}: use a zlib level in 0..9")
    arrays: dict[str, np.ndarray] = {}
    n = None
    for name, value in steps.items():
        a = np.asarray(value)
        if a.ndim == 0 or (n is not None and a.shape[0] != n):
            raise ValueError(f"steps[{name!r}]: shape {a.shape}, expected ({n or 'N'}, ...)")
        n = a.shape[0]
        arrays[name] = np.ascontiguousarray(a)
    if n == 0:
        raise ValueError("steps: N = 0 transitions; send batches of at least one")
    payload = st_save(arrays)
    codec = CODEC_RAW
    if compress:
        payload, codec = zlib.compress(payload, level), CODEC_ZLIB
    return payload, codec, sha256_hex(payload)


def check_digest(payload: bytes, sha256: str) -> None:
    """Raise :class:`PayloadError` unless ``sha256`` is the hex SHA-256 of ``payload``."""
    want = sha256.strip().lower()
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise PayloadError("sha256", f"{sha256!r} is not a SHA-256 hex digest (64 hex digits)")
    got = sha256_hex(payload)
    if got != want:
        raise PayloadError(
            "sha256",
            f"mismatch: the payload ({len(payload)} bytes) hashes to {got}, the message says "
            f"{want}; the payload was corrupted or the hash taken before compression",
        )


def _inflate(payload: bytes, max_bytes: int) -> bytes:
    """zlib-decompress at most ``max_bytes`` (a zip bomb stops there, never expanded whole)."""
    d = zlib.decompressobj()
    try:
        raw = d.decompress(payload, max_bytes + 1)
    except zlib.error as e:
        raise PayloadError("payload", f"codec {CODEC_ZLIB!r} but not a zlib stream: {e}") from e
    if len(raw) > max_bytes:
        raise PayloadError(
            "payload",
            f"decompresses to more than max_bytes={max_bytes} (from {len(payload)} bytes); "
            "send smaller batches",
        )
    if not d.eof:
        raise PayloadError("payload", "truncated zlib stream (no end marker)")
    if d.unused_data:
        raise PayloadError("payload", f"{len(d.unused_data)} stray bytes after the zlib stream")
    return raw


def decode_transitions(
    payload: bytes,
    codec: str,
    sha256: str,
    *,
    layout: ObsLayout,
    action_dim: int,
    max_bytes: int,
    count: int | None = None,
    features: Mapping[str, tuple[int, ...]] | None = None,
) -> dict[str, np.ndarray]:
    """Check and parse a transition batch from an untrusted sender.

    Args:
        payload: Bytes as received.
        codec: One of :data:`CODECS`.
        sha256: Hex SHA-256 of ``payload`` as sent.
        layout: The learner's observation layout.
        action_dim: The learner's action size A.
        max_bytes: Largest payload accepted, both as received and after decompression.
        count: N the message announces (TransitionBatch.count), or None not to check.
        features: Feature shape (h, w, C) per camera the learner accepts (the optional
            ``next_obs/features/<cam>`` arrays, all cameras or none), or None for none.

    Returns:
        Array name -> (N, ...) array, exactly :func:`transition_fields` with their dtypes, and
        the features when sent.

    Raises:
        PayloadError: Oversized, unknown codec, bad digest, not zlib/safetensors, missing or
            extra arrays, wrong dtype or shape for the layout, differing N or N != count,
            bool bytes other than 0/1, NaN/inf in a float array of :data:`FINITE_FIELDS`, or a
            negative episode/step.
    """
    if len(payload) > max_bytes:
        raise PayloadError(
            "payload", f"{len(payload)} bytes > max_bytes={max_bytes}; send smaller batches"
        )
    if codec not in CODECS:
        raise PayloadError("codec", f"unknown codec {codec!r}; use one of {list(CODECS)}")
    check_digest(payload, sha256)
    raw = _inflate(payload, max_bytes) if codec == CODEC_ZLIB else payload
    try:
        arrays = st_load(raw)
    except Exception as e:  # untrusted bytes: any parser failure is the sender's payload
        raise PayloadError("payload", f"not a safetensors blob ({len(raw)} bytes): {e}") from e
    fields = transition_fields(layout, action_dim)
    if shipped_features(arrays, features or {}) is not None:
        fields = {**fields, **feature_fields(features or {})}
    missing, extra = sorted(set(fields) - set(arrays)), sorted(set(arrays) - set(fields))
    if missing or extra:
        raise PayloadError(
            "payload",
            f"arrays do not fit the learner layout: missing {missing}, unexpected {extra}; "
            f"expected {sorted(fields)}",
        )
    n = count
    for name, (shape, dtype) in fields.items():
        a = arrays[name]
        if a.dtype != np.dtype(dtype) or a.ndim != len(shape) + 1 or a.shape[1:] != shape:
            want = "(N,)" if not shape else f"(N, {', '.join(map(str, shape))})"
            raise PayloadError(name, f"{a.dtype} {a.shape}, expected {dtype} {want}")
        if n is None:
            n = a.shape[0]
        if a.shape[0] != n:
            what = "the message's count is" if count is not None else "the other arrays have"
            raise PayloadError(name, f"{a.shape[0]} rows, but {what} N = {n}")
    if n == 0:
        raise PayloadError("payload", "N = 0 transitions; send batches of at least one")
    _check_values(arrays)
    return arrays


def _check_values(arrays: Mapping[str, np.ndarray]) -> None:
    for name, a in arrays.items():
        if a.dtype == np.bool_ and (a.view(np.uint8) > 1).any():
            raise PayloadError(name, "bool array holds bytes other than 0 and 1")
    for name in FINITE_FIELDS:
        if name in arrays and not np.isfinite(arrays[name]).all():
            bad = ~np.isfinite(arrays[name]).reshape(len(arrays[name]), -1).all(axis=1)
            rows = np.flatnonzero(bad)[:10].tolist()
            raise PayloadError(name, f"NaN or inf in transition(s) {rows} (first 10 shown)")
    for name in IDENTITY_FIELDS:
        if (arrays[name] < 0).any():
            raise PayloadError(name, "negative values; episode and step count from 0")
