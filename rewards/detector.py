"""Success detector: turns a stream of classifier probabilities into ``terminated``.

Pieces, in the order they act on a step:

1. A frame *fires* when ``prob >= threshold`` and every state gate passes (e.g. the gripper is
   closed: ``StateGate("gripper_pos", ">=", 0.5)``). The threshold comes from held-out scores
   via :func:`rewards.calibration.threshold_for_precision` (the lowest threshold that reaches
   a target precision).
2. Success is *confirmed* when at least ``k`` of the last ``n`` frames fired, so one noisy
   spike never ends an episode.
3. Cascade (optional): a confirmed success is accepted only if a second, expensive judge (e.g. a
   VLM) agrees. The judge is called lazily, only on confirmation; a rejection clears the window.
4. A human ``"success"`` / ``"failure"`` overrides all of the above at once.

Every confirmation, cascade rejection and human override is appended, with the window's frames,
to an optional :class:`rewards.trigger_log.TriggerLog`, so false triggers can be audited and
turned into hard negatives.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, NamedTuple

import numpy as np

from rewards.calibration import (  # noqa: F401 - re-exported: the detector's threshold source
    ThresholdChoice,
    pr_auc,
    precision_recall_curve,
    threshold_for_precision,
)
from rewards.trigger_log import TriggerLog

GateOp = Literal[">=", "<="]
Reason = Literal[
    "below_threshold", "gate_blocked", "pending", "confirmed", "cascade_rejected", "human"
]
HumanLabel = Literal["success", "failure"]


# --- Detector ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateGate:
    """A condition on the robot state that must hold for a frame to fire.

    Attributes:
        name: State key, e.g. ``robot_rl.core.keys.GRIPPER_POS``.
        op: ``">="`` or ``"<="``.
        value: Bound, in the units of that state entry (gripper_pos: 0 open, 1 closed).
        index: Which number of a several-number entry the gate reads (``tcp_pose[2]``: the
            TCP's height); None for a one-number entry.
    """

    name: str
    op: GateOp
    value: float
    index: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("StateGate.name must name a state entry, e.g. 'gripper_pos'")
        if self.op not in (">=", "<="):
            raise ValueError(f"StateGate {self.name!r}: op must be '>=' or '<=', got {self.op!r}")
        if not math.isfinite(self.value):
            raise ValueError(f"StateGate {self.name!r}: value must be finite, got {self.value}")
        if self.index is not None and self.index < 0:
            raise ValueError(f"StateGate {self.name!r}: index must be >= 0, got {self.index}")

    @property
    def label(self) -> str:
        """``name`` or ``name[index]``: what the gate reads."""
        return self.name if self.index is None else f"{self.name}[{self.index}]"

    def pick(self, value: np.ndarray) -> np.ndarray:
        """The number(s) the gate reads from its entry's value(s) (last axis the entry's).

        Raises:
            ValueError: The entry has more than one number and the gate gives no index, or
                its index is past the entry's end.
        """
        v = np.asarray(value)
        n = v.shape[-1] if v.ndim else 1
        if self.index is None:
            if n != 1:
                raise ValueError(
                    f"gate {self}: {self.name!r} has {n} numbers; name one, e.g. "
                    f"{self.name}[0]{self.op}{self.value:g}"
                )
            return v.reshape(v.shape[:-1]) if v.ndim else v
        if self.index >= n:
            raise ValueError(f"gate {self}: {self.name!r} has {n} numbers (index 0..{n - 1})")
        return v[..., self.index]

    def passes(self, x: float) -> bool:
        """Whether state value ``x`` satisfies the gate."""
        return x >= self.value if self.op == ">=" else x <= self.value

    def __str__(self) -> str:
        return f"{self.label}{self.op}{self.value:g}"

    @classmethod
    def parse(cls, text: str) -> StateGate:
        """``"gripper_pos>=0.45"`` or ``"tcp_pose[2]>=0.04"`` -> a gate (the form ``--gates`` /
        ``--reward-gate`` take and the classifier card stores).

        Raises:
            ValueError: Not ``NAME>=VALUE``, ``NAME<=VALUE``, ``NAME[I]>=VALUE`` or
                ``NAME[I]<=VALUE`` with a finite number.
        """
        for op in (">=", "<="):
            name, sep, value = str(text).partition(op)
            if sep:
                try:
                    bound = float(value)
                except ValueError:
                    break
                name, index = name.strip(), None
                if name.endswith("]") and "[" in name:
                    name, _, idx = name[:-1].partition("[")
                    if not idx.strip().isdigit():
                        break
                    index = int(idx)
                return cls(name.strip(), op, bound, index)  # type: ignore[arg-type]
        raise ValueError(
            f"gate {text!r}: write NAME>=VALUE or NAME<=VALUE for a one-number state entry "
            "(gripper_pos>=0.45: 0 open, 1 closed), NAME[I]>=VALUE for one number of a longer "
            "one (tcp_pose[2]>=0.04: the TCP's height, m)"
        )


def parse_gates(texts: Sequence[str]) -> tuple[StateGate, ...]:
    """Gates from their text forms (:meth:`StateGate.parse`), checked as a
    :class:`DetectorConfig` checks them (a malformed or duplicate gate raises ValueError)."""
    gates = tuple(StateGate.parse(t) for t in texts)
    DetectorConfig(gates=gates)
    return gates


def gate_mask(
    gates: Sequence[StateGate], state: np.ndarray, slices: Mapping[str, Sequence[int]]
) -> np.ndarray:
    """(N,) bool: which rows of a flat state array ``state`` (N, S) pass every gate.

    ``slices``: state part name (``gripper_pos`` or ``state/gripper_pos``) -> ``[start, stop)``
    in the flat layout (the frames' ``state_slices``; see ``robot-rl label``).

    Raises:
        ValueError: A gate names a part the layout lacks or one of more than one number.
    """
    state = np.asarray(state)
    ok = np.ones(len(state), dtype=bool)
    for g in gates:
        x = gate_values(g, state, slices)
        ok &= x >= g.value if g.op == ">=" else x <= g.value
    return ok


def gate_values(
    gate: StateGate, state: np.ndarray, slices: Mapping[str, Sequence[int]]
) -> np.ndarray:
    """(N,) the state entry ``gate`` reads, from a flat state array ``state`` (N, S) laid out
    by ``slices`` (as :func:`gate_mask`).

    Raises:
        ValueError: The layout lacks the gate's part, or the part has more than one number.
    """
    names = {k.split("/")[-1]: v for k, v in slices.items()}
    if gate.name not in names:
        raise ValueError(f"gate {gate} reads {gate.name!r}, but the state has {sorted(names)}")
    start, stop = (int(i) for i in names[gate.name])
    return gate.pick(np.asarray(state)[:, start:stop])


@dataclass(frozen=True)
class DetectorConfig:
    """Success detector settings.

    Attributes:
        threshold: A frame can fire when ``prob >= threshold``; in (0, 1). Pick it with
            :func:`threshold_for_precision`.
        k: Confirm when at least ``k`` of the last ``n`` frames fired.
        n: Window length in control steps.
        gates: State conditions that must all hold for a frame to fire.
        judge_threshold: If set, enables the cascade: a confirmed success is accepted only when
            the judge returns ``prob >= judge_threshold``; in (0, 1). None: no judge.
    """

    threshold: float = 0.5
    k: int = 3
    n: int = 5
    gates: tuple[StateGate, ...] = ()
    judge_threshold: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if not 1 <= self.k <= self.n:
            raise ValueError(
                f"need 1 <= k <= n (k of the last n frames), got k={self.k} n={self.n}"
            )
        for g in self.gates:
            if not isinstance(g, StateGate):
                raise ValueError(f"gates must be StateGate instances, got {g!r}")
        keys = [(g.label, g.op) for g in self.gates]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate (entry, op) among gates: {keys}")
        jt = self.judge_threshold
        if jt is not None and not 0.0 < jt < 1.0:
            raise ValueError(f"judge_threshold must be in (0, 1) or None, got {jt}")


class Decision(NamedTuple):
    """What the detector decided at one step.

    Attributes:
        terminated: End the episode now.
        success: The episode ended in success (False unless ``terminated``).
        reason: ``"below_threshold"``, ``"gate_blocked"`` (prob high, a gate failed),
            ``"pending"`` (fired, not yet k of n), ``"confirmed"``, ``"cascade_rejected"`` or
            ``"human"``.
        fired: Whether this frame fired.
        blocked_gates: Names of the gates that failed on this frame.
        window_fired: Fired flags of the window this step was judged on, oldest first (at most
            ``n``; on ``"cascade_rejected"`` the window as rejected, which is then cleared).
        num_fired: ``sum(window_fired)``.
        judge_prob: The judge's probability if it was called at this step, else None.
        trigger_id: Id of the trigger-log entry written at this step, else None.
    """

    terminated: bool
    success: bool
    reason: Reason
    fired: bool
    blocked_gates: tuple[str, ...]
    window_fired: tuple[bool, ...]
    num_fired: int
    judge_prob: float | None = None
    trigger_id: str | None = None


class _WindowEntry(NamedTuple):
    step: int
    prob: float
    fired: bool
    frames: Mapping[str, np.ndarray] | None


def _check_prob(x: float, what: str) -> float:
    x = float(x)
    if not 0.0 <= x <= 1.0:  # also rejects NaN
        raise ValueError(f"{what} must be a probability in [0, 1], got {x}; check the model")
    return x


class SuccessDetector:
    """Per-step success detector for one episode at a time; call :meth:`reset` between episodes.

    Args:
        config: Detector settings.
        log: Where confirmations, cascade rejections and human overrides are logged with their
            frames; None logs nothing.
    """

    def __init__(self, config: DetectorConfig, *, log: TriggerLog | None = None) -> None:
        self.config = config
        self._log = log
        self._window: deque[_WindowEntry] = deque(maxlen=config.n)
        self._episode: int | None = None
        self._terminated = False

    def reset(self) -> None:
        """Forget the window and the episode; the next :meth:`update` starts a new episode."""
        self._window.clear()
        self._episode = None
        self._terminated = False

    def update(
        self,
        prob: float,
        *,
        step: int,
        episode: int,
        state: Mapping[str, float | np.ndarray] | None = None,
        frames: Mapping[str, np.ndarray] | None = None,
        judge: Callable[[], float] | None = None,
        human: HumanLabel | None = None,
    ) -> Decision:
        """Judge one control step.

        Args:
            prob: Classifier success probability for this frame, in [0, 1].
            step: Control step index; strictly increasing within an episode.
            episode: Episode index; constant until :meth:`reset`.
            state: State entries the gates read (scalars or size-1 arrays); required when gates
                are configured.
            frames: Camera name -> (H, W, 3) uint8 RGB for this step; copied and logged with
                triggers when a log is set.
            judge: With a cascade, returns the judge's success probability for the current
                scene; called only when the classifier confirms. Required with a cascade.
            human: ``"success"`` or ``"failure"`` from a person: ends the episode at once.

        Raises:
            ValueError: NaN or out-of-range ``prob`` or judge output, a missing gate state
                entry, a judge without a cascade (or none with one), or steps/episodes out of
                order.
            RuntimeError: If the episode already terminated and :meth:`reset` was not called.
        """
        cfg = self.config
        if self._terminated:
            raise RuntimeError(
                f"episode {self._episode} already terminated; call reset() before the next one"
            )
        if human not in (None, "success", "failure"):
            raise ValueError(f"human must be 'success', 'failure' or None, got {human!r}")
        prob = _check_prob(prob, f"prob at episode {episode} step {step}")
        if judge is not None and cfg.judge_threshold is None:
            raise ValueError("a judge was passed but judge_threshold is None; set it to cascade")
        if judge is None and cfg.judge_threshold is not None and human is None:
            raise ValueError("the cascade is on (judge_threshold set): pass judge= every step")
        if self._episode is not None and episode != self._episode:
            raise ValueError(f"episode changed {self._episode} -> {episode}: call reset() first")
        if self._window and step <= self._window[-1].step:
            raise ValueError(f"step {step} is not after step {self._window[-1].step}")
        self._episode = episode

        blocked = self._blocked_gates(state)
        above = prob >= cfg.threshold
        fired = above and not blocked
        if self._log is None:
            frames = None  # nothing will be logged: keep no references
        elif frames is not None:  # copy: camera drivers may reuse their buffers
            frames = {cam: np.array(img, copy=True) for cam, img in frames.items()}
        self._window.append(_WindowEntry(step, prob, fired, frames))
        window_fired = tuple(e.fired for e in self._window)

        def decide(
            reason: Reason, judge_prob: float | None = None, tid: str | None = None
        ) -> Decision:
            terminated = reason in ("confirmed", "human")
            success = reason == "confirmed" or human == "success"
            n_fired = sum(window_fired)
            return Decision(
                terminated, success, reason, fired, blocked, window_fired, n_fired, judge_prob, tid
            )

        if human is not None:
            self._terminated = True
            return decide("human", None, self._write("human", step, human == "success", None))
        if sum(window_fired) >= cfg.k:
            judge_prob = None
            if judge is not None and cfg.judge_threshold is not None:
                judge_prob = _check_prob(judge(), f"judge() at episode {episode} step {step}")
                if judge_prob < cfg.judge_threshold:
                    tid = self._write("cascade_rejected", step, False, judge_prob)
                    self._window.clear()
                    return decide("cascade_rejected", judge_prob, tid)
            self._terminated = True
            return decide("confirmed", judge_prob, self._write("confirmed", step, True, judge_prob))
        return decide("pending" if fired else ("gate_blocked" if above else "below_threshold"))

    def _blocked_gates(self, state: Mapping[str, float | np.ndarray] | None) -> tuple[str, ...]:
        if not self.config.gates:
            return ()
        if state is None:
            names = [g.name for g in self.config.gates]
            raise ValueError(f"gates {names} are configured: pass state= with those entries")
        blocked = []
        for g in self.config.gates:
            if g.name not in state:
                raise ValueError(f"gate needs state[{g.name!r}]; state has {sorted(state)}")
            x = float(g.pick(np.asarray(state[g.name], dtype=np.float64).reshape(-1)))
            if not math.isfinite(x):
                raise ValueError(f"state[{g.label!r}] must be one finite number, got {x}")
            if not g.passes(x):
                blocked.append(g.label)
        return tuple(blocked)

    def _write(
        self, reason: Reason, step: int, accepted: bool, judge_prob: float | None
    ) -> str | None:
        if self._log is None:
            return None
        assert self._episode is not None
        return self._log.append(
            episode=self._episode,
            step=step,
            reason=reason,
            accepted=accepted,
            steps=[e.step for e in self._window],
            probs=[e.prob for e in self._window],
            fired=[e.fired for e in self._window],
            judge_prob=judge_prob,
            frames=[e.frames for e in self._window],
            meta=asdict(self.config),
        )
