"""The baseline collectives: every one is a valid AllReduce on every family, at awkward sizes,
and on graphs without a spec; ring orders keep neighbours close."""

from __future__ import annotations

import networkx as nx
import pytest

import topology as tp
from traffic.collectives import ALGORITHMS, build, ring, ring_order
from traffic.schedule import validate

GRAPHS = {
    "bcube": lambda: tp.make_graph("bcube", n=4, k=1),
    "bcube-3-2": lambda: tp.make_graph("bcube", n=3, k=2),
    "dcell": lambda: tp.make_graph("dcell", n=4, k=1),
    "dcell-2-2": lambda: tp.make_graph("dcell", n=2, k=2),
    "jellyfish": lambda: tp.make_graph("jellyfish"),
    "jellyfish-multi": lambda: tp.make_graph("jellyfish", switches=6, ports=5, uplinks=3),
}


@pytest.fixture(scope="module")
def graphs():
    return {name: make() for name, make in GRAPHS.items()}


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("family", ["bcube", "dcell", "jellyfish"])
@pytest.mark.parametrize("size_bytes", [4_000, 1_000_004])
def test_baseline_validates(graphs, family, algo, size_bytes):
    graph = graphs[family]
    schedule = build(algo, graph, size_bytes)
    assert schedule.algo == algo
    assert schedule.topology == graph.graph["spec"]
    assert schedule.size_bytes == size_bytes
    validate(schedule, graph)


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("name", ["bcube-3-2", "dcell-2-2", "jellyfish-multi"])
def test_baseline_validates_on_other_shapes(graphs, name, algo):
    validate(build(algo, graphs[name], 4_096, "float64"), graphs[name])


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("size_bytes", [4, 12, 68])
def test_tiny_buffers(graphs, algo, size_bytes):
    # Fewer elements than servers: empty chunks must vanish without breaking dependencies.
    for name in ("bcube", "dcell", "jellyfish"):
        validate(build(algo, graphs[name], size_bytes), graphs[name])


def custom_graph() -> nx.Graph:
    """Two switches, five servers, a server-server link, mixed rates; no spec."""
    g = nx.Graph()
    g.add_nodes_from(["x", "y"], role="switch")
    for i in range(5):
        g.add_node(f"h{i}", role="server", rank=4 - i)
    for i in range(3):
        g.add_edge(f"h{i}", "x", bw_mbps=10.0)
    for i in range(3, 5):
        g.add_edge(f"h{i}", "y", bw_mbps=10.0)
    g.add_edge("h2", "h3", bw_mbps=5.0)
    return g


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_graph_without_spec(algo):
    g = custom_graph()
    schedule = build(algo, g, 400)
    assert schedule.topology == {"family": "custom", "params": {}}
    validate(schedule, g)


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_single_and_two_servers(algo):
    for count in (1, 2):
        g = nx.Graph()
        g.add_node("w", role="switch")
        for i in range(count):
            g.add_node(f"h{i}", role="server", rank=i)
            g.add_edge(f"h{i}", "w", bw_mbps=1.0)
        validate(build(algo, g, 40), g)


def test_unknown_algo_is_named():
    with pytest.raises(ValueError, match="unknown algo 'nccl'"):
        build("nccl", tp.make_graph("bcube"), 64)


@pytest.mark.parametrize(("size_bytes", "dtype"), [(0, "float32"), (6, "float32"),
                                                   (12, "float64"), (8, "float16")])
def test_bad_buffer_rejected(size_bytes, dtype):
    with pytest.raises(ValueError, match="size_bytes|dtype"):
        ring(tp.make_graph("bcube"), size_bytes, dtype)


@pytest.mark.parametrize(("n", "k"), [(4, 1), (3, 2), (2, 3)])
def test_bcube_ring_neighbours_share_a_switch(n, k):
    g = tp.make_graph("bcube", n=n, k=k)
    order = ring_order(g)
    assert sorted(order) == tp.servers(g)
    for a, b in zip(order, order[1:] + order[:1]):
        assert set(g[a]) & set(g[b]), (a, b)


def test_ring_hops_are_shortest_paths(graphs):
    g = graphs["dcell"]
    for t in ring(g, 4_000).transfers:
        assert len(t.path) - 1 == nx.shortest_path_length(g, t.src, t.dst)


def test_jellyfish_ring_is_a_tour_of_neighbouring_switches(graphs):
    g = graphs["jellyfish"]
    order = ring_order(g)
    tor = {v: next(iter(g[v])) for v in order}
    lengths = [nx.shortest_path_length(g, tor[a], tor[b]) for a, b in
               zip(order, order[1:] + order[:1])]
    assert max(lengths) <= 2


def test_multitree_uses_every_bcube_nic(graphs):
    g = graphs["bcube"]
    schedule = build("multitree", g, 4_000)
    first_hops = {(t.src, t.path[1]) for t in schedule.transfers}
    assert first_hops == {(s, w) for s in tp.servers(g) for w in g[s]}


def test_ps_root_and_sharded_owners(graphs):
    g = graphs["bcube"]
    schedule = build("ps", g, 4_000)
    root = schedule.meta["root"]
    assert {t.dst for t in schedule.transfers if t.op == "reduce"} == {root}
    sharded = build("ps-sharded", g, 4_000)
    owners = {t.dst for t in sharded.transfers if t.op == "reduce"}
    assert owners == set(tp.servers(g))


def test_deterministic(graphs):
    for algo in ALGORITHMS:
        assert build(algo, graphs["jellyfish"], 4_000) == build(algo, graphs["jellyfish"], 4_000)


def test_ring_packing_is_kept_per_graph_and_callers_get_their_own_lists(monkeypatch):
    from topology.links import GraphMemo
    from traffic import rings
    from traffic.overlay import Router

    monkeypatch.setattr(rings, "_PACKINGS", GraphMemo(8))
    graph = tp.make_graph("dcell", n=3, k=1)
    first, cost = rings.ring_packing(Router(graph))
    assert (first, cost) == rings._ring_packing(Router(graph), None)
    first[0][1].reverse()  # a caller changing its answer does not change the kept one
    again, _ = rings.ring_packing(Router(graph))
    assert again == rings._ring_packing(Router(graph), None)[0]
    assert len(rings._PACKINGS) == 1
    slow = tp.with_link_rates(graph, {next(iter(graph.edges())): 2.5})
    assert rings.ring_packing(Router(slow)) == rings._ring_packing(Router(slow), None)
    assert len(rings._PACKINGS) == 2  # another link rate is another graph
