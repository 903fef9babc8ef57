"""``python -m agent.evaluate --topo bcube --n 4 --k 1 [--json] [--checkpoint F] [--samples N]``

Loads the general checkpoint (or ``--checkpoint``), builds the DRL Schedule
with the greedy (argmax) actions of both levels, validates it, and simulates it next to the
baseline collectives and the bandwidth lower bound. ``--samples N`` additionally draws N
sampled rollouts (seeded by ``--sample-seed``) and keeps the best by simulated makespan;
the default, 0, is the deterministic greedy policy alone.
"""

from __future__ import annotations

import json

import networkx as nx

from agent.policy import GENERAL, build_schedule, load_checkpoint, policy_config
from agent.rules import baseline_makespans
from simulator import BANDWIDTH_ONLY, CALIBRATED, CostModel, lower_bound, packing_bound
from topology.cli import ArgumentParser, add_topology_args, graph_from_args, run
from traffic.collectives import BASELINES
from traffic.schedule import validate

PROG = "python -m agent.evaluate"


def evaluate(graph: nx.Graph, checkpoint: str | None = None, size_bytes: int | None = None,
             samples: int = 0, seed: int = 0, baselines: tuple[str, ...] = BASELINES,
             cost: CostModel = BANDWIDTH_ONLY) -> list[dict]:
    """Rows ``{"algo", "makespan_s", "ratio_to_lower_bound", "ratio_to_optimum"}``: the DRL
    schedule (validated), each baseline, the lower bound and the packing optimum
    (``simulator.packing_bound``) themselves, all under the cost model ``cost``."""
    upper, lower, doc = load_checkpoint(checkpoint or GENERAL)
    cfg = policy_config(doc, size_bytes or 8 * 2**20, cost)
    schedule, makespan = build_schedule(graph, upper, lower, cfg, samples=samples, seed=seed)
    validate(schedule, graph)
    rows = [("drl", makespan), *baseline_makespans(graph, cfg, baselines).items()]
    lb = lower_bound(graph, cfg.size_bytes, goodput=cost.goodput)
    optimum = packing_bound(graph, cfg.size_bytes, goodput=cost.goodput)
    rows += [("lower-bound", lb), ("optimum", optimum)]
    return [{"algo": a, "makespan_s": m, "ratio_to_lower_bound": m / lb,
             "ratio_to_optimum": m / optimum} for a, m in rows]


def main() -> int:
    """Entry point of ``python -m agent.evaluate``."""
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    add_topology_args(parser)
    parser.add_argument("--checkpoint", metavar="FILE",
                        help="checkpoint to use (default: agent/checkpoints/general.pt)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows")
    parser.add_argument("--size-bytes", type=int, help="buffer per server (default 8 MiB)")
    parser.add_argument("--samples", type=int, default=0, metavar="N",
                        help="also draw N sampled rollouts and keep the best by simulated "
                        "makespan (default 0: greedy actions only)")
    parser.add_argument("--sample-seed", type=int, default=0, help="seed of the samples")
    parser.add_argument("--startup-s", type=float, help="simulator start-up delay per transfer")
    parser.add_argument("--hop-latency-s", type=float, help="simulator latency per link")
    parser.add_argument("--goodput", type=float, default=1.0, help="simulator goodput factor")
    parser.add_argument("--calibrated", action="store_true",
                        help="the cost model measured by the emulation here (start-up "
                        f"{CALIBRATED.startup_s * 1e3:g} ms, goodput {CALIBRATED.goodput:g})"
                        "; overrides the three flags above")
    args = parser.parse_args()
    if args.samples < 0:
        raise ValueError(f"--samples must be >= 0, got {args.samples}")
    graph = graph_from_args(args)
    import torch

    torch.set_num_threads(1)
    cost = (CALIBRATED if args.calibrated else
            CostModel(args.startup_s or 0.0, args.hop_latency_s or 0.0, args.goodput))
    rows = evaluate(graph, args.checkpoint, args.size_bytes, args.samples, args.sample_seed,
                    cost=cost)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{graph.graph['name']}, {graph.graph['bw_mbps']:g} Mbit/s links")
    print(f"{'algo':<12} {'makespan_s':>12} {'x lower bound':>14} {'x optimum':>10}")
    for row in rows:
        print(f"{row['algo']:<12} {row['makespan_s']:>12.4f} {row['ratio_to_lower_bound']:>14.3f}"
              f" {row['ratio_to_optimum']:>10.3f}")
    return 0


if __name__ == "__main__":
    run(main, PROG)
