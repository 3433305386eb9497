"""The distributed actor's link to the learner: its log as the outbox, streamed over gRPC.

:class:`RemoteLink` is the :class:`robot_rl.actor.loop.ActorLink` of ``robot-rl actor``: after
every step it pushes the log's durable rows from the learner's ``next_seq`` on without waiting
(:class:`robot_rl.transport.client.LearnerClient` sends them on its own thread; a full queue
only defers the push to the next step), and at the end it waits, bounded, for the learner to
acknowledge the rest. The embedded trainer's link is in-process
(:class:`robot_rl.learner.loop.Trainer`): everything else of the actor loop is shared.

Features: with pixels and the frozen backbone, the policy has encoded every frame it acted on,
and the backbone's memo still holds them when their rows are pushed (a few steps later). A
learner that asks for them (its policy settings name the feature shapes,
:func:`robot_rl.transport.codec.accepted_features`) gets each batch's next_obs features with
its rows, so that it does not run the backbone again on every frame (that was 64% of a pixel
learner's main thread, docs/real_robot.md). A batch whose frames the memo mostly lacks (random
steps, a resend after a reconnect) goes without them: the link encodes at most one frame per
camera and episode of a batch (an episode's last next_obs, which no policy acted on), never a
backlog, so the actor's tick stays what it was; the learner encodes the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from robot_rl.replay import EpisodeLog
from robot_rl.transport.codec import EPISODE, FEATURES_PREFIX, NEXT_OBS_PREFIX
from robot_rl.transport.outbox import LogOutbox

log = logging.getLogger(__name__)


class LearnerConnection(Protocol):
    """What the link needs of its connection (``robot_rl.transport.client.LearnerClient``)."""

    @property
    def next_seq(self) -> int | None: ...

    @property
    def acked_through(self) -> int: ...

    @property
    def run_state(self) -> str: ...

    @property
    def fatal_error(self) -> Exception | None: ...

    def push(self, first_seq: int, steps: Mapping[str, np.ndarray]) -> bool: ...

    def latest_weights(self) -> tuple[int, dict[str, Any]] | None: ...

    @property
    def connected(self) -> bool: ...

    def learner_stats(self) -> Any: ...

    def wait_acked(self, seq: int, timeout_s: float | None = None) -> bool: ...


class RemoteLink:
    """The actor's log streamed to a remote learner (see the module docstring).

    Args:
        client: The connection (``LearnerClient``).
        push_batch_steps: Most transitions per pushed batch.
        drain_timeout_s: At the end, wait this long for the learner to acknowledge the rest of
            the log, seconds.
        features: The frozen backbone the policy acts with (its memo holds the frames it
            encoded: ``policies.features.EfficientNetFeatures``), or None.
        feature_shapes: Feature shape (h, w, C) per camera the learner accepts
            (``accepted_features`` of its policy settings); empty: send none.
    """

    def __init__(
        self,
        client: LearnerConnection,
        push_batch_steps: int = 64,
        drain_timeout_s: float = 30.0,
        features: Any = None,
        feature_shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        if push_batch_steps < 1:
            raise ValueError(f"push_batch_steps must be >= 1, got {push_batch_steps}")
        if drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {drain_timeout_s}")
        self.client = client
        self.push_batch_steps = int(push_batch_steps)
        self.drain_timeout_s = float(drain_timeout_s)
        self._log: EpisodeLog | None = None
        self._outbox: LogOutbox | None = None
        self._stats: Any = None
        self.features = features
        self.feature_shapes = dict(feature_shapes or {})
        self._cams: tuple[str, ...] = ()  # cameras whose features go with the rows

    def attach(self, log: EpisodeLog, stats: Any) -> None:
        """The actor's log becomes the outbox; the learner routes on its side (no router)."""
        self._log, self._outbox, self._stats = log, LogOutbox(log), stats
        self._cams = self._feature_cams(log)
        return None

    def _feature_cams(self, elog: EpisodeLog) -> tuple[str, ...]:
        """The cameras to send features of: all of the layout's, if the learner accepts them and
        this backbone gives the shapes it expects (and can say what its memo holds)."""
        feats, want = self.features, self.feature_shapes
        if feats is None or not want or not hasattr(feats, "memo_frames"):
            return ()
        images = elog.layout.images
        mine = {c: tuple(feats.feature_shape(tuple(s.shape[:2]))) for c, s in images.items()}
        if mine != {c: tuple(s) for c, s in want.items()}:
            log.warning(
                "the learner accepts features %s, this actor's backbone gives %s: sending "
                "frames only (the learner encodes them)", want, mine,
            )  # fmt: skip
            return ()
        return tuple(images)

    @property
    def run_state(self) -> str:
        return self.client.run_state

    @property
    def fatal_error(self) -> Exception | None:
        return self.client.fatal_error

    def latest_weights(self) -> tuple[int, dict[str, Any]] | None:
        return self.client.latest_weights()

    @property
    def learner_backlog(self) -> int:
        """Updates the learner owes to the data it received, per its last stats (0 while the
        learner is away: the actor then acts on with its last weights)."""
        stats = self.client.learner_stats()
        if stats is None or not self.client.connected:
            return 0
        return int(stats.update_backlog)

    def after_step(self, done: bool) -> None:
        self._pump()

    def idle(self) -> None:
        self._pump()

    def _pump(self) -> None:
        """Push the log's durable rows from the learner's next_seq on, without waiting."""
        st, outbox = self._stats, self._outbox
        assert outbox is not None, "attach() first"
        end = outbox.end_seq
        st.logged_transitions = end
        while (s := self.client.next_seq) is not None and s < end:
            stop = min(s + self.push_batch_steps, end)
            rows = outbox.read(s, stop)
            if self._cams:
                self._add_features(rows)
            if not self.client.push(s, rows):
                st.push_refused += 1
                break
            st.pushed_batches += 1
        st.acked_through = self.client.acked_through

    def _add_features(self, rows: dict[str, np.ndarray]) -> None:
        """Add ``next_obs/features/<cam>`` when the memo holds all but at most one frame per
        camera and episode of the batch (module docstring); else leave the rows as they are."""
        feats, st = self.features, self._stats
        n = len(rows[EPISODE])
        allowed = len(np.unique(rows[EPISODE]))  # per camera: each episode's last next_obs
        out = {}
        for c in self._cams:
            f = feats.encode(rows[f"{NEXT_OBS_PREFIX}images/{c}"], max_misses=allowed)
            if f is None:  # a backlog the memo lacks: frames only (the learner encodes them)
                st.featureless_rows += n
                return
            out[FEATURES_PREFIX + c] = f
        rows.update(out)
        st.feature_rows += n

    def finish(self, ok: bool) -> None:
        """Push what is left and wait (bounded) for the learner to acknowledge it (after an
        error too: what is logged should reach the learner)."""
        assert self._log is not None and self._outbox is not None, "attach() first"
        self._log.flush()
        deadline = time.monotonic() + self.drain_timeout_s
        end = self._outbox.end_seq
        while time.monotonic() < deadline and self.client.acked_through < end - 1:
            if self.client.fatal_error is not None:
                break
            self._pump()
            self.client.wait_acked(end - 1, timeout_s=0.2)
        self._stats.acked_through = self.client.acked_through
        self._stats.logged_transitions = end
