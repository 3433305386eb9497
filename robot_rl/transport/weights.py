"""Weights on the wire: the policy's trainable state as one safetensors blob.

The learner publishes :func:`trainable_state` of its policy (parameter name, as in
``module.state_dict()`` -> tensor) with :func:`encode_weights`; the actor checks it against its
own policy with :func:`decode_weights` and copies it in with :func:`load_trainable_state`.
Frozen encoders are never sent. Never pickle: safetensors parses to named tensors only.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from safetensors.torch import load as st_load_torch
from safetensors.torch import save as st_save_torch
from torch import nn

from robot_rl.transport.codec import PayloadError, check_digest, sha256_hex

WeightsSpec = Mapping[str, tuple[tuple[int, ...], torch.dtype]]
"""Tensor name -> (shape, dtype) a receiver expects (see :func:`weights_spec`)."""


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The part of ``module``'s state that training changes, i.e. what the learner sends.

    Rule: every parameter with ``requires_grad``, plus the persistent buffers of each submodule
    that owns such a parameter itself (e.g. a trainable BatchNorm's running statistics).
    Buffers of submodules without trainable parameters of their own are left out: a frozen
    encoder (parameters and BatchNorm statistics) and normalisation constants are built by the
    actor from the same config and local weights file and never sent. A parameter-free module
    with running statistics (BatchNorm with ``affine=False``) inside the trainable part would be
    left out too; the policies here have none.

    Returns:
        Name (as in ``module.state_dict()``) -> detached tensor sharing the module's memory:
        encode it (:func:`encode_weights` copies) before the next optimiser step.
    """
    out: dict[str, torch.Tensor] = {}
    for prefix, sub in module.named_modules():
        dot = f"{prefix}." if prefix else ""
        params = [(n, p) for n, p in sub.named_parameters(recurse=False) if p.requires_grad]
        if not params:
            continue
        for n, p in params:
            out.setdefault(dot + n, p.detach())
        for n, b in sub.named_buffers(recurse=False):
            if b is not None and n not in sub._non_persistent_buffers_set:
                out.setdefault(dot + n, b.detach())
    return out


def weights_spec(
    state: Mapping[str, torch.Tensor],
) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Name -> (shape, dtype) of a state dict, e.g. ``weights_spec(trainable_state(policy))``."""
    return {k: (tuple(v.shape), v.dtype) for k, v in state.items()}


def encode_weights(state_dict: Mapping[str, torch.Tensor]) -> tuple[bytes, str]:
    """Serialise weights (CPU copies, any device in) as safetensors bytes.

    Returns:
        (payload, SHA-256 hex of the payload).

    Raises:
        ValueError: Empty, a non-tensor value, or NaN/inf in a floating tensor (a diverged
            learner must not reach the robot).
    """
    if not state_dict:
        raise ValueError("state_dict is empty: nothing trainable to send")
    tensors: dict[str, torch.Tensor] = {}
    for name, t in state_dict.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name!r}: expected a torch.Tensor, got {type(t).__name__}")
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise ValueError(f"{name!r}: NaN or inf; refusing to publish diverged weights")
        # clone: own, contiguous CPU memory (safetensors refuses tensors sharing storage)
        tensors[name] = t.detach().to("cpu", copy=True).contiguous()
    payload = st_save_torch(tensors)
    return payload, sha256_hex(payload)


def decode_weights(
    payload: bytes, sha256: str, *, expected: WeightsSpec | None
) -> dict[str, torch.Tensor]:
    """Check and parse weights from the learner.

    Args:
        payload: safetensors bytes as received.
        sha256: Hex SHA-256 of ``payload``.
        expected: Name -> (shape, dtype) the receiving module needs (:func:`weights_spec` of
            its :func:`trainable_state`), or None to accept any names.

    Returns:
        Name -> CPU tensor.

    Raises:
        PayloadError: Bad digest, not safetensors, empty, missing or unexpected names, a shape
            or dtype mismatch, or NaN/inf in a floating tensor.
    """
    check_digest(payload, sha256)
    try:
        state = st_load_torch(payload)
    except Exception as e:  # untrusted bytes: any parser failure is the sender's payload
        raise PayloadError("weights", f"not a safetensors blob ({len(payload)} bytes): {e}") from e
    if not state:
        raise PayloadError("weights", "no tensors")
    if expected is not None:
        missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or extra:
            raise PayloadError(
                "weights",
                f"names do not fit this policy: missing {missing}, unexpected {extra}; "
                "actor and learner must build the same policy config",
            )
        for name, (shape, dtype) in expected.items():
            t = state[name]
            if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
                raise PayloadError(
                    name, f"{t.dtype} {tuple(t.shape)}, this policy has {dtype} {tuple(shape)}"
                )
    for name, t in state.items():
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise PayloadError(name, "NaN or inf; keeping the previous weights is the safe choice")
    return state


def load_trainable_state(module: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy decoded weights into ``module``'s trainable state, in place (no grad).

    Raises:
        PayloadError: The names, shapes or dtypes differ from ``trainable_state(module)``
            (nothing is copied then).
    """
    own = trainable_state(module)
    if set(own) != set(state):
        raise PayloadError(
            "weights",
            f"names do not fit this policy: missing {sorted(set(own) - set(state))}, "
            f"unexpected {sorted(set(state) - set(own))}",
        )
    for name, t in own.items():
        if t.shape != state[name].shape or t.dtype != state[name].dtype:
            raise PayloadError(
                name,
                f"{state[name].dtype} {tuple(state[name].shape)}, policy has {t.dtype} "
                f"{tuple(t.shape)}",
            )
    with torch.no_grad():
        for name, t in own.items():
            t.copy_(state[name])
