"""Hand rules over the same trees, plans and lower level as the learned policy, and the
baselines it is judged against: what the ablation (``bench/drl.py``) compares with, and
the per-instance reference that scales the training reward.

Rules (each at every chunk count of ``EnvConfig.chunk_options``; the best is reported):

- ``greedy``: every chunk's tree grown by the greedy least-load key the attachment rows
  are ranked by (always row 0), which is where the untrained policy starts;
- ``alternating``: the owner's chunks alternate between the two orientations of one
  Hamiltonian cycle of the servers (``agent.trees.find_cycles``): the one-line rule the
  earlier per-instance checkpoints had learned;
- ``star``: every server sends straight to the chunk's owner (a fixed candidate);
- ``predicted``: the forest row (``agent.forest``) with the smallest closed-form makespan
  guess (``Forest.predicted_s``): the hand rule over the same rows the learned first
  decision ranks.

Pure: no torch.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import numpy as np

from agent.env import EnvConfig, TreeBuildingEnv, fifo_schedule
from agent.forest import best_predicted
from agent.plan import Plan
from agent.trees import Tree, chain_tree, overlay_for, star_tree
from simulator import simulate
from traffic.collectives import build

RULES = ("greedy", "alternating", "star", "predicted")
#: Baselines that scale the training reward (packing's LP is too slow to run per
#: training instance; it is in the ablation).
REFERENCE_BASELINES = ("ring", "ps", "ps-sharded", "tree", "multitree")


def _trees(graph: nx.Graph, cfg: EnvConfig, rule: str, per_server: int) -> list[Tree]:
    ov = overlay_for(graph)
    chunks = per_server * ov.n
    load = np.zeros(len(ov.cap_Bps))
    out = []
    for c in range(chunks):
        root, turn = c % ov.n, c // ov.n
        if rule == "alternating":
            tree = chain_tree(ov, ov.cycles[0], root, turn % 2 == 0)
        elif rule == "star":
            tree = star_tree(ov, root, load)
        else:
            raise ValueError(f"unknown rule {rule!r}")
        up, down = ov.usage(tree)
        load += (up + down) * (cfg.size_bytes / chunks) / ov.cap_Bps
        out.append(tree)
    return out


def rule_schedule(graph: nx.Graph, cfg: EnvConfig, rule: str,
                  per_server: int) -> tuple[object, float]:
    """(Schedule, simulated makespan) of hand rule ``rule`` at ``per_server`` chunks per
    server, ordered by the FIFO lower level."""
    if rule == "predicted":
        env = TreeBuildingEnv(graph, cfg)
        env.reset()
        _, _, _, _, info = env.step(len(env.options) + best_predicted(env.forests))
        return info["schedule"], info["makespan_s"]
    if rule == "greedy":
        env = TreeBuildingEnv(graph, replace(cfg, chunk_options=(per_server,)))
        _, info = env.reset()
        done = False
        while not done:
            _, _, done, _, info = env.step(0)
        return info["schedule"], info["makespan_s"]
    plan = Plan(overlay_for(graph), _trees(graph, cfg, rule, per_server), cfg.size_bytes,
                cfg.dtype)
    return fifo_schedule(plan, cfg)


def best_rule(graph: nx.Graph, cfg: EnvConfig, rules: tuple[str, ...] = RULES) -> dict:
    """``{rule: (makespan_s, chunks per server)}``, each rule at its best chunk count."""
    out = {}
    for rule in rules:
        best = (float("inf"), 0)
        for per_server in cfg.chunk_options[:1] if rule == "predicted" else cfg.chunk_options:
            try:
                _, makespan = rule_schedule(graph, cfg, rule, per_server)
            except ValueError:
                continue
            best = min(best, (makespan, per_server))
        out[rule] = best
    return out


def baseline_makespans(graph: nx.Graph, cfg: EnvConfig,
                       algos: tuple[str, ...] = REFERENCE_BASELINES) -> dict[str, float]:
    """Simulated makespan of each baseline collective under ``cfg``'s size and costs."""
    return {algo: simulate(graph, build(algo, graph, cfg.size_bytes, cfg.dtype),
                           **cfg.cost().kwargs()).makespan_s for algo in algos}
