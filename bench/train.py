"""Training cost of the general policy: the learning curve of ``agent.train`` from scratch,
or the speed of its episode collection with and without Ray.

``python bench/train.py [--budget-s 900] [--seed 0]`` trains both levels (one thread) on
the training split of ``agent.instances`` for ``--budget-s`` seconds and prints, per
evaluation, the wall and CPU seconds and the greedy policy's mean makespan on the selection
episodes as a multiple of the best baseline (training instances only: ``bench/drl.py``
judges the result on the test split). Figures only.

``python bench/train.py --collect [--episodes 96] [--workers 2] [--seed 0]`` measures only
the collection of training episodes, as ``agent.train`` does it, on the training split with
the untrained networks (no learning in between, so both runs play the same policy): the
same ``--episodes`` (same seed, so the same instances and settings, in updates of
``TrainConfig.episodes_per_update``) first in this process (``--workers 1``), then on
``--workers`` Ray actors (the weights broadcast once per update). It prints both wall
times, episodes per second and their ratio; Ray's start-up (a local Ray and the actors) is
timed apart and left out of the ratio. The load average is printed first: other jobs on
the machine disturb the figures (two workers need two idle CPUs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent.instances import TRAIN, graphs  # noqa: E402
from agent.policy import new_models  # noqa: E402
from agent.train import Episodes, TrainConfig, draw_pairs, train  # noqa: E402


def collect(episodes: int, workers: int, seed: int) -> None:
    """Time ``episodes`` training episodes played in this process, then on ``workers`` Ray
    actors, and print both."""
    cfg = TrainConfig(seed=seed)
    pool = graphs(TRAIN, degraded=True, seed=seed)
    torch.manual_seed(seed)
    upper, lower = new_models(cfg.hidden, cfg.env.slots, cfg.lower_prior, cfg.rank_prior)
    rng = np.random.default_rng(seed)
    updates = [draw_pairs(rng, len(pool), cfg, min(cfg.episodes_per_update, episodes - done))
               for done in range(0, episodes, cfg.episodes_per_update)]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {episodes} "
          f"episodes in {len(updates)} updates, seed {seed}")

    start = time.monotonic()
    local = Episodes(pool, cfg, upper, lower)
    gen = torch.Generator().manual_seed(seed)
    for pairs in updates:
        for i, setting in pairs:
            local.sampled(i, setting, gen)
    one = time.monotonic() - start
    print(f"--workers 1: {one:.1f} s, {episodes / one:.2f} episodes/s")

    from agent.cluster import start_ray, stop_ray
    from agent.rollouts import EpisodeWorkers

    start = time.monotonic()
    start_ray(None, workers)
    try:
        runners = EpisodeWorkers(pool, cfg, workers)
        startup = time.monotonic() - start
        start, cpu = time.monotonic(), time.process_time()
        for u, pairs in enumerate(updates):
            runners.broadcast(upper, lower)
            runners.sampled(u, pairs)
        many, cpu = time.monotonic() - start, time.process_time() - cpu
        runners.close()
    finally:
        stop_ray()
    print(f"--workers {workers}: {many:.1f} s, {episodes / many:.2f} episodes/s "
          f"(Ray start-up {startup:.1f} s, not counted; the driver used {cpu:.1f} s CPU)")
    print(f"ratio {one / many:.2f} x with {workers} workers")


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=900.0, help="wall-clock budget")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--collect", action="store_true",
                        help="time episode collection in-process and on Ray actors instead")
    parser.add_argument("--episodes", type=int, default=96,
                        help="--collect: episodes per run (default 96)")
    parser.add_argument("--workers", type=int, default=2,
                        help="--collect: Ray actors of the second run (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.collect:
        collect(args.episodes, args.workers, args.seed)
        return 0
    cfg = TrainConfig(seed=args.seed, episodes=1_000_000, time_budget_s=args.budget_s)
    wall, cpu = time.monotonic(), time.process_time()
    _, _, history = train(graphs(TRAIN, degraded=True, seed=args.seed), cfg, progress=False)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    for row in history:
        if "greedy_ref_ratio" in row:
            print(f"{row['episodes']:>6} episodes {row['seconds']:>7.0f} s: greedy "
                  f"{row['greedy_ref_ratio']:.3f} x best baseline (best so far "
                  f"{row['best_ref_ratio']:.3f})")
    first = next(r for r in history if "greedy_ref_ratio" in r)
    print(f"seed {args.seed}: {history[-1]['episodes']} episodes in {wall:.0f} s wall, "
          f"{cpu:.0f} s CPU; greedy {first['greedy_ref_ratio']:.3f} at the first evaluation, "
          f"best {history[-1]['best_ref_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
