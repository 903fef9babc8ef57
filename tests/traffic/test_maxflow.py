"""traffic.maxflow: Dinic's maximum flow against networkx, and its residual reach."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from traffic import maxflow
from traffic.maxflow import Network


def random_network(seed: int, n: int = 12, p: float = 0.3):
    """A random directed graph with integer capacities, as arrays and as networkx."""
    rng = np.random.default_rng(seed)
    g = nx.gnp_random_graph(n, p, seed=seed, directed=True)
    tail, head, cap = [], [], []
    for a, b in g.edges():
        c = int(rng.integers(0, 20))
        g.edges[a, b]["capacity"] = c
        tail.append(a)
        head.append(b)
        cap.append(c)
    return g, Network(n, np.array(tail), np.array(head), np.array(cap))


@pytest.mark.parametrize("seed", range(12))
def test_value_and_residual_reach_match_networkx(seed):
    g, net = random_network(seed)
    for t in range(1, g.number_of_nodes()):
        value, (side, _) = nx.minimum_cut(g, 0, t)
        got, reach = net.flow(0, t, 10**9)
        assert got == value
        # the minimal source side of a minimum cut: what the source reaches in the residual
        residual = nx.algorithms.flow.edmonds_karp(g, 0, t)
        open_arcs = nx.DiGraph()
        open_arcs.add_nodes_from(residual)
        open_arcs.add_edges_from((u, v) for u, v, d in residual.edges(data=True)
                                 if d["capacity"] - d["flow"] > 0)
        reachable = {0} | nx.descendants(open_arcs, 0)
        assert set(np.flatnonzero(reach)) == reachable
        assert side >= reachable  # networkx's side is a minimum cut's too


def test_flow_stops_once_it_reaches_enough():
    # two disjoint paths of 5 from 0 to 3
    net = Network(4, np.array([0, 1, 0, 2]), np.array([1, 3, 2, 3]), np.array([5, 5, 5, 5]))
    assert net.flow(0, 3, 10) == (10, None)
    value, reach = net.flow(0, 3, 7)
    assert reach is None and 7 <= value <= 10
    value, reach = net.flow(0, 3, 11)
    assert value == 10 and list(reach) == [True, False, False, False]


def test_parallel_arcs_add_up():
    net = Network(2, np.array([0, 0]), np.array([1, 1]), np.array([3, 4]))
    assert net.flow(0, 1, 100)[0] == 7


def test_negative_capacity_and_a_sink_at_the_source_are_refused():
    with pytest.raises(ValueError, match="capacities"):
        Network(2, np.array([0]), np.array([1]), np.array([-1]))
    with pytest.raises(ValueError, match="same node, 0"):
        Network(2, np.array([0]), np.array([1]), np.array([1])).flow(0, 0, 1)


def test_interpreted_equals_compiled():
    dinic = maxflow._dinic
    if not hasattr(dinic, "py_func"):
        pytest.skip("numba is not installed: only the interpreted function exists")
    _, net = random_network(3, n=10, p=0.4)
    for t in range(1, 10):
        args = (net.ptr, net.edges, net.to, net.cap, 0, t, 10**9)
        value, reach = dinic(*args)
        value_py, reach_py = dinic.py_func(*args)
        assert value == value_py
        assert list(reach) == list(reach_py)
