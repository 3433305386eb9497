"""Micro-batcher: groups concurrent reward requests into one ``model.predict`` call.

One worker thread owns the model. It takes the oldest queued request, then for up to
``max_wait_s`` gathers queued requests that can share its batch (same cameras and image sizes,
same state width, same task text) until ``max_batch`` frames, runs ``predict`` once on the
concatenation and hands each request its slice. A request whose deadline passed while it was
queued, or whose caller gave up, is dropped without being computed. A request larger than
``max_batch`` frames runs alone in one call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from robot_rl.core.protocols import RewardModel, RewardQuery, RewardResult

log = logging.getLogger(__name__)


class DeadlineExpired(Exception):
    """The request's deadline passed while it was queued; it was not computed."""


class BatcherStopped(Exception):
    """The server is shutting down; the request was not computed."""


class ModelError(Exception):
    """``model.predict`` raised or returned malformed output."""


@dataclass
class _Item:
    query: RewardQuery
    batch: int
    key: Hashable
    deadline_s: float | None  # time.monotonic() seconds; None: no deadline
    future: Future[RewardResult] = field(default_factory=Future)


def query_batch(query: RewardQuery) -> int:
    """B of a decoded query (its cameras agree; the codec checked)."""
    return int(next(iter(query.images.values())).shape[0])


def _compat_key(query: RewardQuery) -> Hashable:
    cams = tuple(sorted((cam, frames.shape[1:]) for cam, frames in query.images.items()))
    width = None if query.state is None else int(query.state.shape[1])
    return cams, width, query.task_text


def _concat(items: list[_Item]) -> RewardQuery:
    if len(items) == 1:
        return items[0].query
    first = items[0].query
    images = {cam: np.concatenate([it.query.images[cam] for it in items]) for cam in first.images}
    state = None
    if first.state is not None:
        state = np.concatenate([it.query.state for it in items])  # type: ignore[misc]
    return RewardQuery(images=images, state=state, task_text=first.task_text)


class MicroBatcher:
    """Runs a :class:`RewardModel` on a worker thread, batching concurrent requests.

    Args:
        model: The model; only the worker thread calls ``predict``.
        max_batch: Most frames per ``predict`` call (a larger single request runs alone).
        max_wait_s: Longest a batch waits for more requests after its first one, seconds.
    """

    def __init__(self, model: RewardModel, max_batch: int, max_wait_s: float) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch}: use >= 1")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s={max_wait_s}: use >= 0")
        self._model = model
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._stopping = False
        self._counts = {
            "requests": 0,
            "predict_calls": 0,
            "frames_computed": 0,
            "dropped_expired": 0,
            "dropped_cancelled": 0,
            "abandoned": 0,
            "failed": 0,
        }
        self._thread = threading.Thread(target=self._run, name="reward-batcher", daemon=True)
        self._thread.start()

    def submit(self, query: RewardQuery, deadline_s: float | None) -> Future[RewardResult]:
        """Queue a decoded query; ``deadline_s`` is a ``time.monotonic()`` time or None.

        The future resolves to the query's RewardResult, or fails with DeadlineExpired,
        BatcherStopped or ModelError. Cancel it to drop the request if still queued.
        """
        item = _Item(query, query_batch(query), _compat_key(query), deadline_s)
        with self._cond:
            if self._stopping:
                item.future.set_exception(BatcherStopped("the reward server is shutting down"))
                return item.future
            self._queue.append(item)
            self._counts["requests"] += 1
            self._cond.notify_all()
        return item.future

    def abandon(self, future: Future[RewardResult]) -> None:
        """The caller gave up (deadline passed or call cancelled): drop the request if it is
        still queued. Idempotent; counted once as ``abandoned`` if it was still queued."""
        with self._cond:
            if not future.cancelled() and future.cancel():
                self._counts["abandoned"] += 1

    def stats(self) -> dict[str, int]:
        """Counters since start, plus ``queued``: requests waiting now."""
        with self._cond:
            return {**self._counts, "queued": len(self._queue)}

    def stop(self, timeout_s: float = 5.0) -> None:
        """Fail queued requests with BatcherStopped; finish the running batch; join."""
        with self._cond:
            self._stopping = True
            dropped, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        for item in dropped:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(BatcherStopped("the reward server is shutting down"))
        self._thread.join(timeout_s)

    # -- worker thread --------------------------------------------------------------------

    def _live(self, item: _Item) -> bool:
        """Claim an item for computing; drop (and count) it if cancelled or expired."""
        if not item.future.set_running_or_notify_cancel():
            self._counts["dropped_cancelled"] += 1
            return False
        if item.deadline_s is not None and time.monotonic() >= item.deadline_s:
            self._counts["dropped_expired"] += 1
            item.future.set_exception(
                DeadlineExpired("the request's deadline passed while it was queued")
            )
            return False
        return True

    def _collect(self) -> list[_Item] | None:
        with self._cond:
            first = None
            while first is None:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return None
                item = self._queue.popleft()
                first = item if self._live(item) else None
            group, frames = [first], first.batch
            until_s = time.monotonic() + self._max_wait_s
            while frames < self._max_batch and not self._stopping:
                keep: deque[_Item] = deque()
                for item in self._queue:
                    fits = item.key == first.key and frames + item.batch <= self._max_batch
                    if not fits:
                        keep.append(item)
                    elif self._live(item):
                        group.append(item)
                        frames += item.batch
                self._queue = keep
                remaining_s = until_s - time.monotonic()
                if frames >= self._max_batch or remaining_s <= 0:
                    break
                self._cond.wait(remaining_s)
            return group

    def _run(self) -> None:
        while (group := self._collect()) is not None:
            self._compute(group)

    def _compute(self, group: list[_Item]) -> None:
        total = sum(it.batch for it in group)
        with self._cond:
            self._counts["predict_calls"] += 1
        try:
            result = self._model.predict(_concat(group))
            success_prob = np.asarray(result.success_prob, dtype=np.float32).reshape(-1)
            reward = np.asarray(result.reward, dtype=np.float32).reshape(-1)
            if success_prob.shape != (total,) or reward.shape != (total,):
                raise ModelError(
                    f"model returned success_prob {np.shape(result.success_prob)} and reward "
                    f"{np.shape(result.reward)} for a batch of {total}; expected ({total},)"
                )
        except Exception as e:  # the model's failure is the request's, not the server's
            log.exception("reward model failed on a batch of %d frames", total)
            error = e if isinstance(e, ModelError) else ModelError(f"{type(e).__name__}: {e}")
            with self._cond:
                self._counts["failed"] += len(group)
            for item in group:
                item.future.set_exception(error)
            return
        with self._cond:
            self._counts["frames_computed"] += total
        start = 0
        for item in group:
            end = start + item.batch
            item.future.set_result(
                RewardResult(
                    success_prob=success_prob[start:end],
                    reward=reward[start:end],
                    model_id=result.model_id,
                    model_version=result.model_version,
                )
            )
            start = end
