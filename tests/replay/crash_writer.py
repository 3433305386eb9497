"""Subprocess for the crash test: writes finished episodes, then an endless open episode.

Usage: python crash_writer.py PATH N_FINISHED LENGTH. Prints ``flushed <steps>`` after each
explicit flush of the open episode (steps of that episode now durable), and keeps writing until
killed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import replay_data as rd  # noqa: E402

from robot_rl.replay import EpisodeLog  # noqa: E402


def main() -> None:
    path, n_finished, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lay = rd.layout()
    log = EpisodeLog.create(
        path, lay, rd.ACTION_DIM, {"test": "crash"}, flush_every_steps=10**6, flush_interval_s=1e6
    )
    for ep in range(n_finished):
        rd.write_episode(log, ep, length)
    ep = n_finished
    log.begin_episode("online", policy_version=ep, seed=ep)
    print("begun", flush=True)
    for t in range(100_000):
        log.append(**rd.step(lay, ep, t, 10**9, pv=ep))
        if (t + 1) % 5 == 0:
            log.flush()
            print(f"flushed {t + 1}", flush=True)


if __name__ == "__main__":
    main()
