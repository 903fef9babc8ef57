"""Training cost of the general policy: the learning curve of ``agent.train`` from scratch.

``python bench/train.py [--budget-s 900] [--seed 0]`` trains both levels (one thread) on
the training split of ``agent.instances`` for ``--budget-s`` seconds and prints, per
evaluation, the wall and CPU seconds and the greedy policy's mean makespan on the selection
episodes as a multiple of the best baseline (training instances only: ``bench/drl.py``
judges the result on the test split). Figures only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agent.instances import TRAIN, graphs  # noqa: E402
from agent.train import TrainConfig, train  # noqa: E402


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=900.0, help="wall-clock budget")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    args = parser.parse_args()
    torch.set_num_threads(1)
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
