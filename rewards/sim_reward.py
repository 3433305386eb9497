"""SimReward: the twin's privileged ground truth as a :class:`RewardModel` (twin only).

The twin's task reads physics (object poses) to say whether the task is solved; this model
answers a query with that truth for the scene *as it is now*, whatever the images show. It is
the reference a learned reward is measured against (``bench/reward_rl.py``) and lets every
reward-consuming code path (the success detector, the reward wrapper, the reward server) run in
the twin with a model that never errs. A real robot has no such truth: its task's
``privileged_spec`` is empty and :class:`SimReward` refuses it.

Its reward is the same binary cost as :class:`rewards.classifier.ClassifierReward` (0 on
success, -1 otherwise), so the two are interchangeable in training.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.protocols import RewardQuery, RewardResult, Task


class SimReward:
    """Ground-truth success of the twin's current scene.

    Args:
        task: The twin's task (reads physics; ``evaluate()`` gives the truth).
        version: Recorded as ``model_version`` (e.g. the twin's MJCF hash).

    Raises:
        ValueError: ``task`` exposes no privileged state (a real robot's task).
    """

    def __init__(self, task: Task, version: str = "1") -> None:
        if not task.privileged_spec:
            raise ValueError(
                f"task {task.name!r} has no privileged sim state: SimReward is the twin's ground "
                "truth and cannot run on a real robot; use a classifier (robot-rl reward train)"
            )
        self._task = task
        self._version = version

    @property
    def model_id(self) -> str:
        return f"sim_truth/{self._task.name}"

    @property
    def model_version(self) -> str:
        return self._version

    def predict(self, query: RewardQuery) -> RewardResult:
        """The current scene's truth, once per query row.

        Only the present can be judged: every row of a batch gets the same answer (the scene
        now); pass batches of one frame, as the reward wrapper does.
        """
        batch = _batch_size(query)
        ok = bool(self._task.evaluate().success)
        prob = np.full(batch, 1.0 if ok else 0.0, np.float32)
        return RewardResult(prob, prob - 1.0, self.model_id, self.model_version)


def _batch_size(query: RewardQuery) -> int:
    sizes = {len(np.asarray(v)) for v in query.images.values()}
    if query.state is not None:
        sizes.add(len(np.asarray(query.state)))
    if len(sizes) > 1:
        raise ValueError(f"query rows disagree across cameras / state: sizes {sorted(sizes)}")
    return sizes.pop() if sizes else 1
