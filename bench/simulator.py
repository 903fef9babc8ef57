"""Simulator speed: time to build and simulate AllReduce schedules on 16 to 256 servers.

``python bench/simulator.py [--algo ring,ps-sharded,multitree,packing] [--size-mb 8]`` prints
one line per (topology, algorithm): transfers, build and simulation seconds, transfers
simulated per second, and the makespan over the lower bound and over the packing optimum
(and, per topology, how long computing that optimum took).
``packing`` is built only up to ``--max-packing-servers`` (its LP takes seconds at 64
servers, much longer beyond).
Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import topology as tp  # noqa: E402
from simulator import lower_bound, packing_bound, simulate  # noqa: E402
from traffic.collectives import ALGORITHMS, build  # noqa: E402
from traffic.schedule import buffer_bytes  # noqa: E402

CASES = [
    ("bcube", {"n": 4, "k": 1}),                                            # 16 servers
    ("dcell", {"n": 3, "k": 1}),                                            # 12
    ("jellyfish", {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0}),   # 16
    ("dcell", {"n": 6, "k": 1}),                                            # 42
    ("bcube", {"n": 4, "k": 2}),                                            # 64
    ("jellyfish", {"switches": 64, "ports": 5, "uplinks": 4, "seed": 0}),   # 64
    ("bcube", {"n": 2, "k": 6}),                                            # 128
    ("bcube", {"n": 4, "k": 3}),                                            # 256
    ("bcube", {"n": 16, "k": 1}),                                           # 256
]


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="ring,ps-sharded,multitree,packing",
                        help="comma-separated algorithms (default ring,ps-sharded,multitree,"
                             "packing)")
    parser.add_argument("--size-mb", type=float, default=8.0, help="buffer, 10^6 bytes")
    parser.add_argument("--max-servers", type=int, default=256)
    parser.add_argument("--max-packing-servers", type=int, default=64)
    args = parser.parse_args()
    algos = args.algo.split(",")
    for algo in algos:
        if algo not in ALGORITHMS:
            parser.error(f"unknown algo {algo!r}")
    size = buffer_bytes(args.size_mb, "float32")
    t0 = time.perf_counter()
    small = tp.make_graph("bcube", n=2, k=1)
    simulate(small, build("ring", small, 4000))  # loads (or compiles) the event loop
    print(f"simulator ready (compiled event loop loaded) in {time.perf_counter() - t0:.2f} s")
    print(f"{'topology':<24} {'servers':>7} {'algo':<12} {'transfers':>9} {'build_s':>8} "
          f"{'sim_s':>8} {'transfers/s':>11} {'makespan/lb':>11} {'makespan/opt':>12}")
    for family, params in CASES:
        graph = tp.make_graph(family, bw_mbps=100.0, **params)
        servers = len(tp.servers(graph))
        if servers > args.max_servers:
            continue
        t0 = time.perf_counter()
        optimum = packing_bound(graph, size)
        print(f"{graph.graph['name']:<24} {servers:>7} packing optimum computed in "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
        for algo in algos:
            if algo == "packing" and servers > args.max_packing_servers:
                print(f"{graph.graph['name']:<24} {servers:>7} {algo:<12} skipped: over "
                      f"--max-packing-servers {args.max_packing_servers}", flush=True)
                continue
            t0 = time.perf_counter()
            schedule = build(algo, graph, size)
            t1 = time.perf_counter()
            result = simulate(graph, schedule)
            t2 = time.perf_counter()
            count = len(schedule.transfers)
            ratio = result.makespan_s / lower_bound(graph, size)
            print(f"{graph.graph['name']:<24} {servers:>7} {algo:<12} {count:>9} "
                  f"{t1 - t0:>8.3f} {t2 - t1:>8.3f} {count / (t2 - t1):>11.0f} {ratio:>11.3f} "
                  f"{result.makespan_s / optimum:>12.3f}", flush=True)


if __name__ == "__main__":
    main()
