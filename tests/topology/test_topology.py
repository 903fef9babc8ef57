"""The three families against the reference counts of shared/topologies.md, their routing,
and argument checks."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import networkx as nx
import pytest

import topology as tp

BCUBE = [  # (n, k): servers, switches, links, diameter
    ((2, 1), (4, 4, 8, 4)),
    ((3, 1), (9, 6, 18, 4)),
    ((4, 1), (16, 8, 32, 4)),
    ((8, 1), (64, 16, 128, 4)),
    ((2, 2), (8, 12, 24, 6)),
    ((4, 2), (64, 48, 192, 6)),
]
DCELL = [
    ((2, 1), (6, 3, 9, 4)),
    ((3, 1), (12, 4, 18, 5)),
    ((4, 1), (20, 5, 30, 5)),
    ((2, 2), (42, 21, 84, 9)),
    ((3, 2), (156, 52, 312, 11)),
]
JELLYFISH = [  # (N, k, r): servers, switch-switch links, total links
    ((8, 4, 3), (8, 12, 20)),
    ((16, 4, 3), (16, 24, 40)),
    ((20, 8, 5), (60, 50, 110)),
]


def counts(graph):
    s = tp.summary(graph)
    return s["servers"], s["switches"], s["links"], s["diameter"]


@pytest.mark.parametrize(("params", "expected"), BCUBE)
def test_bcube_counts(params, expected):
    assert counts(tp.bcube_graph(*params)) == expected


@pytest.mark.parametrize(("params", "expected"), DCELL)
def test_dcell_counts(params, expected):
    g = tp.dcell_graph(*params)
    assert counts(g) == expected
    n, k = params
    t = expected[0]
    server_switch = sum(1 for u, v in g.edges if {g.nodes[u]["role"], g.nodes[v]["role"]}
                        == {"server", "switch"})
    assert server_switch == t
    assert g.number_of_edges() - server_switch == k * t // 2


@pytest.mark.parametrize(("params", "expected"), JELLYFISH)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jellyfish_counts(params, expected, seed):
    g = tp.jellyfish_graph(*params, seed=seed)
    core = g.subgraph(tp.switches(g))
    assert (len(tp.servers(g)), core.number_of_edges(), g.number_of_edges()) == expected
    assert nx.is_connected(g)


@pytest.mark.parametrize(
    "graph",
    [tp.bcube_graph(2, 1), tp.bcube_graph(4, 1), tp.bcube_graph(3, 2), tp.dcell_graph(2, 1),
     tp.dcell_graph(4, 1), tp.dcell_graph(2, 2)],
    ids=lambda g: g.graph["name"],
)
def test_server_centric_degrees(graph):
    k = graph.graph["spec"]["params"]["k"]
    assert {graph.degree(s) for s in tp.servers(graph)} == {k + 1}


def test_bcube_switches_join_servers_differing_in_one_digit():
    g = tp.bcube_graph(3, 2)
    for w in tp.switches(g):
        level = g.nodes[w]["level"]
        members = [g.nodes[s]["address"] for s in g[w]]
        assert len(members) == 3
        for a, b in itertools.combinations(members, 2):
            differ = [i for i in range(3) if a[i] != b[i]]
            assert differ == [2 - level]
    assert not any(g.nodes[u]["role"] == g.nodes[v]["role"] for u, v in g.edges)


@pytest.mark.parametrize(("N", "k", "r"), [(8, 4, 3), (16, 4, 3), (15, 4, 3), (20, 8, 5)])
def test_jellyfish_degrees(N, k, r):
    g = tp.jellyfish_graph(N, k, r, seed=3)
    assert {g.degree(s) for s in tp.servers(g)} == {1}
    assert all(g.degree(w) <= k for w in tp.switches(g))
    core_degrees = sorted(sum(1 for x in g[w] if g.nodes[x]["role"] == "switch")
                          for w in tp.switches(g))
    # r-regular, or near-regular (one switch one short) when N * r is odd
    assert core_degrees[-1] == r and core_degrees[0] >= r - 1
    assert sum(core_degrees) == N * r - (N * r) % 2


def test_jellyfish_same_seed_same_graph_other_seed_other_graph():
    a = tp.jellyfish_graph(16, 4, 3, seed=7)
    b = tp.jellyfish_graph(16, 4, 3, seed=7)
    c = tp.jellyfish_graph(16, 4, 3, seed=8)
    assert sorted(a.edges) == sorted(b.edges)
    assert sorted(a.edges) != sorted(c.edges)


def is_walk(g, path):
    return all(g.has_edge(a, b) for a, b in zip(path, path[1:], strict=False))


@pytest.mark.parametrize(("n", "k"), [(2, 1), (4, 1), (3, 2), (2, 3)])
def test_bcube_path_sets_node_disjoint(n, k):
    g = tp.bcube_graph(n, k)
    servers = tp.servers(g)
    for src, dst in itertools.permutations(servers[: min(len(servers), 9)], 2):
        ps = tp.build_path_set(g, src, dst)
        assert len(ps) == k + 1
        differ = sum(a != b for a, b in zip(g.nodes[src]["address"], g.nodes[dst]["address"],
                                            strict=True))
        for p in ps:
            assert p[0] == src and p[-1] == dst and is_walk(g, p)
            assert len(set(p)) == len(p)
            # one server hop per corrected digit; detours for agreeing digits add two
            assert (len(p) - 1) // 2 in (differ, differ + 2)
        assert sorted((len(p) - 1) // 2 for p in ps).count(differ) == differ
        inner = [set(p[1:-1]) for p in ps]
        for a, b in itertools.combinations(inner, 2):
            assert not a & b


def test_bcube_paper_example():
    g = tp.bcube_graph(4, 1)
    assert sorted(tp.build_path_set(g, "s00", "s13")) == [
        ["s00", "w0_0", "s03", "w1_3", "s13"],
        ["s00", "w1_0", "s10", "w0_1", "s13"],
    ]


@pytest.mark.parametrize(("n", "k"), [(2, 1), (4, 1), (2, 2), (3, 2)])
def test_dcell_routing_hops(n, k):
    g = tp.dcell_graph(n, k)
    servers = tp.servers(g)
    step = max(1, len(servers) // 25)
    for src, dst in itertools.permutations(servers[::step], 2):
        p = tp.dcell_routing(g, src, dst)
        assert p[0] == src and p[-1] == dst and is_walk(g, p)
        server_hops = sum(1 for v in p if g.nodes[v]["role"] == "server") - 1
        assert server_hops <= 2 ** (k + 1) - 1


@pytest.mark.parametrize("family", tp.FAMILIES)
def test_paths_api(family):
    g = tp.make_graph(family)
    servers = tp.servers(g)
    for src, dst in [(servers[0], servers[-1]), (servers[1], servers[5])]:
        ps = tp.paths(g, src, dst, 4)
        assert len(ps) == 4
        assert len({tuple(p) for p in ps}) == 4
        for p in ps:
            assert p[0] == src and p[-1] == dst and is_walk(g, p) and len(set(p)) == len(p)
            if family == "jellyfish":
                assert all(g.nodes[v]["role"] == "switch" for v in p[1:-1])
    assert tp.paths(g, servers[0], servers[0]) == [[servers[0]]]


def test_single_link_servers_search_between_their_switches():
    # Jellyfish servers do not relay and hang off one switch: the search runs between the
    # switches (cached per pair of switches) and must give what Yen's algorithm on the
    # whole graph gives.
    from topology.routing import _relay_graph, yen_paths

    g = tp.make_graph("jellyfish", switches=12, ports=4, uplinks=3, seed=5)
    servers = tp.servers(g)
    cache: dict = {}
    for src, dst in itertools.permutations(servers[:8], 2):
        full = yen_paths(_relay_graph(g, src, dst), src, dst, 3)
        assert tp.shortest_paths(g, src, dst, 3, cache) == full
        assert tp.shortest_paths(g, src, dst, 3) == full
    assert cache


@pytest.mark.parametrize("graph", [
    tp.make_graph("bcube", n=3, k=1),
    tp.make_graph("dcell", n=2, k=1),
    tp.make_graph("jellyfish", switches=8, ports=5, uplinks=3, seed=5),
    nx.cycle_graph([f"n{i:03d}" for i in range(9)]),
], ids=["bcube", "dcell", "jellyfish", "cycle"])
def test_path_search_equals_yens_algorithm(graph):
    # The depth-first search by length (and its hand-over to Yen's algorithm where it meets
    # many dead ends, as between two servers of one Jellyfish switch) gives Yen's paths.
    from topology.routing import _by_length, _relay_graph, yen_paths

    ends = (tp.servers(graph) if graph.graph.get("spec") else list(graph))[:6]
    for src, dst in itertools.permutations(ends, 2):
        searched = _relay_graph(graph, src, dst) if graph.graph.get("spec") else graph
        for k in (1, 3, 6):
            assert _by_length(searched, src, dst, k) == yen_paths(searched, src, dst, k)


def test_path_search_between_disconnected_ends_raises_like_yen():
    from topology.routing import _by_length, yen_paths

    graph = nx.Graph([("a", "b"), ("c", "d")])
    for search in (_by_length, yen_paths):
        with pytest.raises(nx.NetworkXNoPath):
            search(graph, "a", "d", 2)


def test_path_search_hands_over_to_yen_between_servers_of_one_switch(monkeypatch):
    # Two servers of one Jellyfish switch have one path and a search full of dead ends.
    from topology import routing

    graph = tp.make_graph("jellyfish", switches=24, ports=5, uplinks=3, seed=5)
    calls = []
    monkeypatch.setattr(routing.nx, "shortest_simple_paths",
                        lambda *a, **k: calls.append(a) or nx.algorithms.shortest_simple_paths(
                            *a, **k))
    searched = routing._relay_graph(graph, "s0_0", "s0_1")
    assert routing._by_length(searched, "s0_0", "s0_1", 3) == [["s0_0", "w0", "s0_1"]]
    assert calls


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: tp.bcube_graph(1, 1), "n"),
        (lambda: tp.bcube_graph(4, -1), "k"),
        (lambda: tp.bcube_graph(4, 5), "1024"),
        (lambda: tp.dcell_graph(4, 3), "1024"),
        (lambda: tp.dcell_graph(2.5, 1), "n"),
        (lambda: tp.jellyfish_graph(16, 4, 2), "uplinks"),
        (lambda: tp.jellyfish_graph(16, 3, 3), "ports"),
        (lambda: tp.jellyfish_graph(3, 5, 3), "uplinks"),
        (lambda: tp.jellyfish_graph(16, 4, 3, seed=-1), "seed"),
        (lambda: tp.bcube_graph(2, 1, bw_mbps=0), "bw_mbps"),
        (lambda: tp.make_graph("fattree"), "fattree"),
        (lambda: tp.make_graph("bcube", switches=3), "switches"),
        (lambda: tp.paths(tp.bcube_graph(2, 1), "s00", "w0_0"), "w0_0"),
    ],
)
def test_bad_values_name_themselves(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_spec_rebuilds_graph():
    g = tp.jellyfish_graph(8, 4, 3, seed=5, bw_mbps=25)
    h = tp.from_spec(g.graph["spec"], bw_mbps=25)
    assert sorted(g.edges(data="bw_mbps")) == sorted(h.edges(data="bw_mbps"))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "topology", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bcube", "--n", "4", "--k", "1"], {"servers": 16, "switches": 8, "links": 32,
                                             "diameter": 4}),
        (["dcell", "--n", "4", "--k", "1"], {"servers": 20, "switches": 5, "links": 30,
                                             "diameter": 5}),
        (["jellyfish", "--switches", "16", "--ports", "4", "--uplinks", "3", "--seed", "0"],
         {"servers": 16, "switches": 16, "links": 40}),
    ],
)
def test_cli_json(args, expected):
    out = cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {k: doc[k] for k in expected} == expected
    assert isinstance(doc["diameter"], int)


@pytest.mark.parametrize(
    "args",
    [["bcube", "--n", "1"], ["bcube", "--switches", "4"], ["jellyfish", "--uplinks", "2"],
     ["mesh"], ["bcube", "--n", "x"], ["dcell", "--n", "5", "--k", "3"]],
)
def test_cli_bad_input_one_line_exit_2(args):
    out = cli(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_cli_png(tmp_path):
    target = tmp_path / "bcube.png"
    out = cli("bcube", "--png", str(target))
    assert out.returncode == 0, out.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
