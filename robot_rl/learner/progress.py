"""The trainer's progress bar: env steps, recent training success / return / intervention rate
and the last evaluation (rich, on stderr)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class Progress:
    """A rich progress bar (env steps) with the live training success / return (and human
    intervention rate, when a teleop is attached) over the last 20 episodes, and the last eval.

    Args:
        total: Env steps of the run.
        enabled: False: no bar (every method is a no-op).
    """

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        self._recent: list[tuple[float, bool, float | None]] = []
        self._eval = float("nan")
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._task = self._bar.add_task("env steps", total=total)
        self._bar.start()

    def _describe(self) -> None:
        if self._bar is None:
            return
        if self._recent:
            sr = np.mean([s for _, s, _ in self._recent])
            ret = np.mean([r for r, _, _ in self._recent])
            desc = f"train success {sr:.0%} return {ret:.1f}"
            rates = [h for _, _, h in self._recent if h is not None]
            if rates:
                desc += f" human {np.mean(rates):.0%}"
            desc += f" | eval success {self._eval:.0%}"
        else:
            desc = f"eval success {self._eval:.0%}"
        self._bar.update(self._task, description=desc)

    def episode(self, ret: float, success: bool, intervention_rate: float | None = None) -> None:
        """A training episode ended (``intervention_rate``: fraction of human-driven steps)."""
        self._recent = (self._recent + [(ret, success, intervention_rate)])[-20:]
        self._describe()

    def eval(self, success_rate: float) -> None:
        self._eval = success_rate
        self._describe()

    def advance_to(self, steps: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=steps)

    def count(self, description: str, total: int) -> Callable[[int], None]:
        """A second bar under the first (e.g. a learner's owed updates); returns ``done(n)``."""
        if self._bar is None:
            return lambda n: None
        task = self._bar.add_task(description, total=total)
        return lambda n: self._bar.update(task, completed=n)  # type: ignore[union-attr]

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
