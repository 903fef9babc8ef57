"""The general policy's train/test split, and the settings it is trained and judged under.

Training sees only ``TRAIN`` (small and mid-sized graphs of all three families) and
degraded copies of them; every reported figure comes from ``TEST`` (other sizes and seeds,
the emulation's three default networks among them, and their degraded copies), which
training never builds. Degraded copies use the link attributes of ``topology.links``:
``slow`` halves two links' rates, ``failed`` removes one link, ``background`` puts 40 %
background load on two links; which links is drawn from a seeded generator.

Pure: networkx and numpy only (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from simulator import BANDWIDTH_ONLY, CALIBRATED, CostModel
from topology import make_graph, with_background, with_link_rates, without_link
from topology.routing import servers

#: (family, parameters) of the training graphs.
TRAIN = (
    ("bcube", {"n": 2, "k": 1}), ("bcube", {"n": 3, "k": 1}), ("bcube", {"n": 2, "k": 2}),
    ("bcube", {"n": 5, "k": 1}),
    ("dcell", {"n": 2, "k": 1}), ("dcell", {"n": 5, "k": 1}),
    *(("jellyfish", {"switches": s, "ports": 4, "uplinks": 3, "seed": seed})
      for s in (8, 12, 16) for seed in range(1, 4)),
    ("jellyfish", {"switches": 10, "ports": 5, "uplinks": 3, "seed": 0}),
)
#: (family, parameters) of the test graphs: never trained on. The first of each family are
#: the emulation's defaults.
TEST = (
    ("bcube", {"n": 4, "k": 1}), ("bcube", {"n": 3, "k": 2}), ("bcube", {"n": 4, "k": 2}),
    ("dcell", {"n": 3, "k": 1}), ("dcell", {"n": 4, "k": 1}), ("dcell", {"n": 2, "k": 2}),
    ("jellyfish", {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0}),
    ("jellyfish", {"switches": 16, "ports": 4, "uplinks": 3, "seed": 100}),
    ("jellyfish", {"switches": 24, "ports": 5, "uplinks": 3, "seed": 101}),
    ("jellyfish", {"switches": 32, "ports": 5, "uplinks": 3, "seed": 102}),
)
#: How a copy is degraded.
DEGRADATIONS = ("slow", "failed", "background")


@dataclass(frozen=True)
class Setting:
    """One buffer size under one cost model."""

    name: str
    size_bytes: int
    cost: CostModel


#: The settings the issue's goals name: the bandwidth-only model at 8 MiB, and the cost
#: model measured by the emulation at 1 MB and 64 KiB.
SETTINGS = (
    Setting("bandwidth 8MiB", 8 * 2**20, BANDWIDTH_ONLY),
    Setting("calibrated 1MB", 1_000_000, CALIBRATED),
    Setting("calibrated 64KiB", 64 * 1024, CALIBRATED),
)


def degrade(graph: nx.Graph, kind: str, seed: int) -> nx.Graph:
    """A degraded copy of ``graph`` (see the module docstring), links drawn with ``seed``;
    a failed link is one whose removal keeps the graph connected."""
    rng = np.random.default_rng(seed)
    edges = sorted(tuple(sorted(e)) for e in graph.edges())
    picks = [edges[i] for i in rng.permutation(len(edges))]
    if kind == "slow":
        return with_link_rates(graph, {e: 0.5 * graph.edges[e]["bw_mbps"] for e in picks[:2]})
    if kind == "background":
        return with_background(graph, {e: 0.4 * graph.edges[e]["bw_mbps"] for e in picks[:2]})
    if kind == "failed":
        for a, b in picks:
            try:
                return without_link(graph, a, b)
            except ValueError:
                continue
        raise ValueError(f"no link of {graph.graph['name']} can fail without disconnecting it")
    raise ValueError(f"unknown degradation {kind!r}; choose from {', '.join(DEGRADATIONS)}")


def label(graph: nx.Graph) -> str:
    """``bcube(4, 1)``, with its degradation when it has one."""
    notes = graph.graph.get("degraded")
    return graph.graph["name"] + (f" [{'; '.join(notes)}]" if notes else "")


def graphs(split: tuple, degraded: bool, seed: int = 0) -> list[nx.Graph]:
    """The graphs of a split, and with ``degraded`` one copy per degradation of each
    (links drawn from ``seed`` and the graph's position)."""
    out = []
    for i, (family, params) in enumerate(split):
        graph = make_graph(family, **params)
        out.append(graph)
        if degraded:
            out += [degrade(graph, kind, seed * 1000 + 10 * i + j)
                    for j, kind in enumerate(DEGRADATIONS)]
    return out


def server_count(graph: nx.Graph) -> int:
    """Number of servers."""
    return len(servers(graph))
