"""The optimal AllGather rate of a graph, from its cuts: the number that tree packings reach.

Pure: standard library and networkx only. ``traffic.packing`` builds the trees that reach it;
``simulator.bounds.packing_bound`` turns it into seconds.
"""

from __future__ import annotations

import networkx as nx

from topology.links import link_rate_mbps
from topology.routing import servers as servers_by_rank


def link_capacities(graph: nx.Graph, goodput: float) -> dict[tuple[str, str], float]:
    """Bit/s of every directed link: ``topology.link_rate_mbps`` times ``goodput``."""
    caps = {}
    for a, b in graph.edges():
        caps[(a, b)] = caps[(b, a)] = link_rate_mbps(graph, a, b) * 1e6 * goodput
    return caps


def packing_rate(graph: nx.Graph, *, goodput: float = 1.0) -> tuple[float, frozenset[str]]:
    """The optimal AllGather rate per server on ``graph`` (bit/s) and the cut that sets it.

    x* = min over node sets S holding some but not all servers of B+(S) / |S ∩ servers|,
    B+(S) the capacity leaving S: every shard that starts in S must leave it once, and by
    Edmonds' branching theorem (with switches split off, see ``traffic.packing``) a packing
    of broadcast trees reaches it. Found by a Dinkelbach iteration on max-flow: with a source
    feeding every server at rate x, x is feasible iff every server t receives x * N; a cut
    that falls short names a tighter S. Returns (x*, S); S holds the servers on the slow
    side (for a uniform network, every server but one).

    Servers that do not relay in the network (Jellyfish) still receive and re-send whole
    messages, as every ring does, so the relay rule changes paths, not this rate.
    """
    names = servers_by_rank(graph)
    if len(names) < 2:
        raise ValueError("the packing rate needs at least two servers")
    caps = link_capacities(graph, goodput)
    inflow = {t: sum(caps[(u, t)] for u in graph[t]) for t in names}
    # The tightest single-server cut (S = all but t) starts the iteration.
    tight = min(names, key=lambda t: inflow[t])
    x = inflow[tight] / (len(names) - 1)
    cut = frozenset(v for v in graph if v != tight)
    flow = nx.DiGraph()
    for (a, b), c in caps.items():
        flow.add_edge(a, b, capacity=c)
    source = ("source",)
    changed = True
    while changed:
        changed = False
        for v in names:
            flow.add_edge(source, v, capacity=x)
        for t in names:
            value, (side, _) = nx.minimum_cut(flow, source, t)
            if value < x * len(names) * (1 - 1e-9):
                held = side - {source}
                inside = sum(1 for v in held if v in inflow)
                leaving = sum(c for (a, b), c in caps.items() if a in held and b not in held)
                x, cut = leaving / inside, frozenset(held)
                changed = True
                break
    return x, cut
