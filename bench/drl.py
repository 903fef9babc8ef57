"""Ablation of the learned scheduler on the test split only (instances training never saw).

``python bench/drl.py [--checkpoint F] [--no-degraded] [--min-servers N] [--max-servers N]
[--json FILE] [--inference-only]``

For every test instance of ``agent.instances.TEST`` (and its degraded copies) under every
setting of ``agent.instances.SETTINGS`` it prints the simulated makespan, as a multiple of
the best baseline, of: the general checkpoint (greedy), the same network untrained (its
initialisation under the training seed), the hand rules of ``agent.rules`` (each at its best
chunk count), and every baseline (``packing`` included), with the lower bound and the
packing optimum; "choice" is what the learned first decision picked (a forest row of
``agent.forest`` or hop-by-hop trees at a chunk count). It ends with a summary: per
setting, on how many instances the learned policy is at most 1.00 and at most 0.90 x the
best baseline (ring, ps, ps-sharded, tree, multitree: the issue's reference), its median
ratio to the best of those and ``packing``, and how often it beats the best hand rule; and
the inference time on the largest instance: CPU seconds to choose and build the Schedule, as
``agent.schedule_for`` does (a chosen forest row is simulated after the clock stops). With
``--inference-only`` it prints only those CPU seconds per instance and setting, in a fresh
process: a graph's first setting includes the packing LP behind the forest rows (cached per
graph in the process).
Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agent.instances import SETTINGS, TEST, graphs, label, server_count  # noqa: E402
from agent.policy import (  # noqa: E402
    GENERAL,
    build_schedule,
    load_checkpoint,
    new_models,
    policy_config,  # noqa: E402
)
from agent.rules import REFERENCE_BASELINES, RULES, baseline_makespans, best_rule  # noqa: E402
from simulator import lower_bound, packing_bound, simulate  # noqa: E402
from traffic.schedule import validate  # noqa: E402

#: Baselines printed: the reference ones and the packing.
ALGOS = (*REFERENCE_BASELINES, "packing")


def main() -> int:
    """Run the ablation and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(GENERAL), help="the learned policy")
    parser.add_argument("--no-degraded", action="store_true", help="intact test graphs only")
    parser.add_argument("--max-servers", type=int, default=64, help="skip larger instances")
    parser.add_argument("--min-servers", type=int, default=0, help="skip smaller instances")
    parser.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    parser.add_argument("--inference-only", action="store_true",
                        help="print only the learned policy's CPU seconds per row")
    args = parser.parse_args()
    torch.set_num_threads(1)
    upper, lower, doc = load_checkpoint(args.checkpoint)
    if args.inference_only:
        for graph in graphs(TEST, degraded=not args.no_degraded):
            if args.min_servers <= server_count(graph) <= args.max_servers:
                for setting in SETTINGS:
                    cfg = policy_config(doc, setting.size_bytes, setting.cost)
                    start = time.process_time()
                    build_schedule(graph, upper, lower, cfg, score=False)
                    print(f"{label(graph)[:58]:<58} {server_count(graph):>4} servers "
                          f"{setting.name:<17} {time.process_time() - start:6.2f} s CPU",
                          flush=True)
        return 0
    torch.manual_seed(doc["config"]["seed"])
    raw_upper, raw_lower = new_models(doc["hidden"], doc["config"]["env"]["slots"],
                                      doc["config"]["lower_prior"], doc["config"]["rank_prior"])
    rows = []
    print(f"checkpoint {args.checkpoint}: trained {doc['meta']['episodes']} episodes, "
          f"{doc['meta']['train_seconds']:.0f} s")
    print(f"{'instance':<58} {'setting':<17} {'drl':>6} {'untr.':>6} {'greedy':>6} "
          f"{'altern':>6} {'star':>6} {'predic':>6} | "
          + " ".join(f"{a[:7]:>7}" for a in ALGOS) + f" | {'bound':>6} {'optim':>6} choice")
    for graph in graphs(TEST, degraded=not args.no_degraded):
        if not args.min_servers <= server_count(graph) <= args.max_servers:
            continue
        for setting in SETTINGS:
            cfg = policy_config(doc, setting.size_bytes, setting.cost)
            start = time.process_time()
            schedule, drl = build_schedule(graph, upper, lower, cfg, score=False)
            cpu = time.process_time() - start
            if math.isnan(drl):  # a forest row: deployment does not simulate it
                drl = simulate(graph, schedule, **cfg.cost().kwargs()).makespan_s
            validate(schedule, graph)
            _, untrained = build_schedule(graph, raw_upper, raw_lower, cfg)
            rules = best_rule(graph, cfg)
            base = baseline_makespans(graph, cfg, ALGOS)
            best = min(base[a] for a in REFERENCE_BASELINES)
            choice = schedule.meta.get("forest") or (
                f"hops x{schedule.meta.get('chunks_per_server', '?')}")
            lb = lower_bound(graph, setting.size_bytes, goodput=setting.cost.goodput)
            opt = packing_bound(graph, setting.size_bytes, goodput=setting.cost.goodput)
            row = {"instance": label(graph), "servers": server_count(graph),
                   "setting": setting.name, "drl_s": drl, "untrained_s": untrained,
                   "rules_s": {k: v[0] for k, v in rules.items()},
                   "rule_chunks": {k: v[1] for k, v in rules.items()},
                   "baselines_s": base, "lower_bound_s": lb, "optimum_s": opt,
                   "drl_cpu_s": cpu, "choice": choice,
                   "drl_transfers": len(schedule.transfers)}
            rows.append(row)
            print(f"{label(graph)[:58]:<58} {setting.name:<17} {drl / best:6.3f} "
                  f"{untrained / best:6.3f} "
                  + " ".join(f"{rules[r][0] / best:6.3f}" for r in RULES)
                  + " | " + " ".join(f"{base[a] / best:7.3f}" for a in ALGOS)
                  + f" | {lb / best:6.3f} {opt / best:6.3f} {choice}", flush=True)
    print()
    for setting in SETTINGS:
        mine = [r for r in rows if r["setting"] == setting.name]
        if not mine:
            continue
        ratio = [r["drl_s"] / min(r["baselines_s"][a] for a in REFERENCE_BASELINES)
                 for r in mine]
        to_all = [r["drl_s"] / min(r["baselines_s"].values()) for r in mine]
        rule = [r["drl_s"] / min(r["rules_s"].values()) for r in mine]
        untrained = [r["drl_s"] / r["untrained_s"] for r in mine]
        print(f"{setting.name}: {len(mine)} instances; drl <= 1.00 x best baseline on "
              f"{sum(x <= 1.0 + 1e-9 for x in ratio)}, <= 0.90 x on "
              f"{sum(x <= 0.9 for x in ratio)}; median {sorted(ratio)[len(ratio) // 2]:.3f}, "
              f"worst {max(ratio):.3f}; with packing among the baselines median "
              f"{sorted(to_all)[len(to_all) // 2]:.3f}, worst {max(to_all):.3f}, "
              f"<= 1.00 on {sum(x <= 1.0 + 1e-9 for x in to_all)}; beats the best hand rule on "
              f"{sum(x < 1 - 1e-9 for x in rule)}; beats its untrained network on "
              f"{sum(x < 1 - 1e-9 for x in untrained)}")
    largest = max(rows, key=lambda r: (r["servers"], r["drl_cpu_s"]))
    print(f"inference on {largest['instance']} ({largest['servers']} servers, "
          f"{largest['setting']}): {largest['drl_cpu_s']:.2f} s CPU")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
