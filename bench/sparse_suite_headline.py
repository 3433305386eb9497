"""The sparse suite's headline: the agent before stage 9 against today's default, per task.

Collects the records of the ``previous`` config and of the default agent (``default``, or
``no_backup_entropy_bc_norm_g98``: the same agent, measured under that name before it became
the default; the record keeps the name in ``measured_as``) for the suite's tasks from the
given ``bench/sparse_suite.py`` record files, writes them to ``--jsonl``, and plots them with the
suite's own plot (one panel per task, mean over seeds, the band from the worst seed to the best).

    python bench/sparse_suite_headline.py bench/results/sparse_suite.jsonl \\
        bench/results/sparse_suite_push_screens.jsonl bench/results/sparse_suite_fresh.jsonl \\
        --jsonl bench/results/sparse_suite_headline.jsonl \\
        --plot bench/results/sparse_suite_headline.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_suite import SuiteConfig, _plot, _records, summarize  # noqa: E402

TASKS = (
    "pick_cube",
    "peg_insert+human",
    "fetch_pick_place",
    "metaworld_pick_place_fresh",
    "metaworld_push_fresh",
)
"""The suite's tasks as it now runs them (Meta-World on fresh layouts)."""
DEFAULT_AS = ("default", "no_backup_entropy_bc_norm_g98")


def headline(paths: list[Path]) -> list[dict]:
    """The previous and default records of :data:`TASKS` in ``paths`` (first file wins a
    duplicate (task, config, seed))."""
    out: dict[tuple, dict] = {}
    for path in paths:
        for r in _records(path):
            if r["task"] not in TASKS or r["config"] not in ("previous", *DEFAULT_AS):
                continue
            if r["config"] != "previous":
                r = {**r, "config": "default", "measured_as": r["config"]}
            out.setdefault((r["task"], r["config"], r["seed"]), r)
    return [out[k] for k in sorted(out)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+", type=Path)
    p.add_argument("--jsonl", type=Path, required=True)
    p.add_argument("--plot", type=Path, required=True)
    args = p.parse_args()
    recs = headline(args.records)
    args.jsonl.write_text("".join(json.dumps(r) + "\n" for r in recs))
    for s in summarize(SuiteConfig(summarize=True, jsonl=args.jsonl)):
        print(json.dumps(s))
    _plot(args.plot, recs, cols=len(TASKS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
