"""Training speed: from scratch on BCube(4, 1) until the DRL policy beats ring.

``python bench/train.py [--budget-s 900] [--seed 0] [--stop-ratio 1.0]`` trains both levels
(``agent.train``, one thread) until the greedy policy's simulated makespan is within
``--stop-ratio`` lower bounds or the budget runs out, and prints the wall and CPU seconds at
which the greedy policy first beat ring, and the ratios reached. Figures only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import topology  # noqa: E402
from agent.train import TrainConfig, train  # noqa: E402

#: "Beats ring" means a greedy makespan at most this fraction of ring's.
BEAT = 0.99


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=900.0, help="wall-clock budget")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--stop-ratio", type=float, default=1.0,
                        help="stop once the greedy makespan is within this many lower bounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    graph = topology.make_graph("bcube", n=4, k=1)
    cfg = TrainConfig(seed=args.seed, episodes=1_000_000, time_budget_s=args.budget_s,
                      stop_ratio=args.stop_ratio)
    wall, cpu = time.monotonic(), time.process_time()
    _, _, history = train(graph, cfg, progress=False)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    beat = next((row for row in history if row.get("greedy_ring_ratio", 2.0) <= BEAT), None)
    last = history[-1]
    print(f"BCube(4,1), 8 MiB, 10 Mbit/s, seed {args.seed}: {last['episodes']} episodes in "
          f"{wall:.0f} s wall, {cpu:.0f} s CPU")
    if beat is None:
        print(f"never beat ring (<= {BEAT} x) within {args.budget_s:.0f} s")
    else:
        print(f"first beat ring after {beat['seconds']:.0f} s wall ({beat['episodes']} episodes):"
              f" greedy makespan {beat['greedy_ring_ratio']:.3f} x ring")
    best_ring = last["best_lb_ratio"] / (last["lb_ratio"] / last["ring_ratio"])
    print(f"best greedy makespan {last['best_lb_ratio']:.3f} x lower bound = "
          f"{best_ring:.3f} x ring")
    return 0 if beat is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
