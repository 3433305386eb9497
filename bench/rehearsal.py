"""The real-robot day on the twin: ``robot-rl rehearse`` (robot_rl.app.rehearsal.rehearse) as a
benchmark.

Runs the rehearsal (up, record, label, reward train / eval, learner + actor over gRPC against
the real-time twin played as a real robot) and prints one JSON object per run: the config, the
machine and the report's figures (the final evaluation's success, the policy's unaided success
over the last training episodes as the twin scored them, robot minutes to the early stop,
classifier precision / recall and online false positives / negatives, corrections per episode,
actor tick overruns, learner updates/s). ``--jsonl`` appends it; the run directory
(``--out``; report.json, success.png, interventions.png, summary.md) is kept.

    python bench/rehearsal.py --out runs/rehearsal-pick --jsonl bench/results/rehearsal.jsonl \
        -- --task pick_cube --obs pixels --robot-minutes 60
    python bench/rehearsal.py --out runs/rehearsal-reach -- --task reach --obs state \
        --cameras front --image-size 64 --demos 5 --label-episodes 6 --robot-minutes 5

Everything after ``--`` goes to ``robot-rl rehearse`` as is. The learner and the actor share
this machine's cores (the target of stage 11: 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_efficiency import machine_info  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the rehearsal's report directory")
    p.add_argument("--jsonl", type=Path, default=None, help="append the record here")
    args = p.parse_args(argv)
    cmd = [sys.executable, "-m", "robot_rl.cli.main", "rehearse", "--out", str(args.out)]
    proc = subprocess.run([*cmd, *rest, "--json"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(f"rehearse failed (exit {proc.returncode}); see {args.out}/logs", file=sys.stderr)
        return proc.returncode
    report = json.loads(proc.stdout)
    record = {
        "benchmark": "rehearsal",
        "config": report["config"],
        "args": rest,
        "machine": machine_info(),
        "figures": report["figures"],
        "classifier": report["classifier"],
        "steps_wall_s": {k: v["wall_s"] for k, v in report["steps"].items()},
        "privileged_readers": (report.get("train") or {}).get("privileged_readers"),
        "stopped_by": (report.get("train") or {}).get("stopped_by"),
        "report_dir": str(args.out),
    }
    line = json.dumps(record)
    print(line)
    if args.jsonl is not None:
        args.jsonl.parent.mkdir(parents=True, exist_ok=True)
        with args.jsonl.open("a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
