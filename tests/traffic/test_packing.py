"""The packing optimum (max-flow) against closed forms, the tree packing (LP) against it, and
the ``packing`` collective: valid, never faster than the bounds, adapting to a slow link."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import topology as tp
from simulator import lower_bound, packing_bound, simulate
from traffic.arborescence import min_arborescence
from traffic.collectives import build
from traffic.cuts import link_capacities, overlap_rate, packing_rate
from traffic.packing import (
    _Master,
    _paired,
    pack_trees,
    packing_plan,
    rate_parts,
    split,
)
from traffic.schedule import validate

C = 100e6  # bit/s of a 100 Mbit/s link


def star(servers: int) -> nx.Graph:
    g = nx.Graph(bw_mbps=100.0)
    g.add_node("w", role="switch")
    for i in range(servers):
        g.add_node(f"h{i}", role="server", rank=i)
        g.add_edge(f"h{i}", "w")
    return g


def cycle(servers: int) -> nx.Graph:
    g = nx.Graph(bw_mbps=100.0)
    for i in range(servers):
        g.add_node(f"h{i}", role="server", rank=i)
    for i in range(servers):
        g.add_edge(f"h{i}", f"h{(i + 1) % servers}")
    return g


def two_halves(slow_mbps: float = 25.0) -> nx.Graph:
    """Two stars of three servers whose switches share one slow link."""
    g = nx.Graph(bw_mbps=100.0)
    rank = 0
    for side in "ab":
        g.add_node(f"w{side}", role="switch")
        for i in range(3):
            g.add_node(f"h{side}{i}", role="server", rank=rank)
            g.add_edge(f"h{side}{i}", f"w{side}", bw_mbps=100.0)
            rank += 1
    g.add_edge("wa", "wb", bw_mbps=slow_mbps)
    return g


@pytest.mark.parametrize("servers", [2, 3, 5, 8])
def test_star_rate_is_one_link_over_the_others(servers):
    rate, cut = packing_rate(star(servers))
    assert rate == pytest.approx(C / (servers - 1), rel=1e-12)
    assert len([v for v in cut if v.startswith("h")]) == servers - 1


@pytest.mark.parametrize("servers", [3, 4, 7])
def test_cycle_rate_is_two_links_over_the_others(servers):
    rate, _ = packing_rate(cycle(servers))
    assert rate == pytest.approx(2 * C / (servers - 1), rel=1e-12)


def test_bcube_2_1_rate_is_its_two_links_over_three():
    rate, _ = packing_rate(tp.bcube_graph(2, 1, bw_mbps=100.0))
    assert rate == pytest.approx(2 * C / 3, rel=1e-12)


def test_a_slow_link_between_halves_sets_the_rate():
    rate, cut = packing_rate(two_halves(25.0))
    # Three shards of one half must cross the 25 Mbit/s link: 25e6 / 3 per server.
    assert rate == pytest.approx(25e6 / 3, rel=1e-12)
    servers = {v for v in cut if v.startswith("h")}
    assert servers in ({"ha0", "ha1", "ha2"}, {"hb0", "hb1", "hb2"})
    g = two_halves(25.0)
    assert packing_bound(g, 10**6) > lower_bound(g, 10**6) * 2


@pytest.mark.parametrize("family,params", [
    ("bcube", {"n": 4, "k": 1}), ("dcell", {"n": 3, "k": 1}), ("dcell", {"n": 4, "k": 1}),
    ("jellyfish", {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0}),
])
def test_optimum_equals_the_message_count_bound_on_uniform_families(family, params):
    g = tp.make_graph(family, **params)
    assert packing_bound(g, 8_000_000) == pytest.approx(lower_bound(g, 8_000_000), rel=1e-9)


def test_min_arborescence_matches_networkx():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(2, 10))
        cost = rng.integers(0, 4, size=(n, n)).astype(float)  # many ties
        root = int(rng.integers(n))
        parent = min_arborescence(cost, root)
        assert parent[root] == -1
        for v in range(n):  # every server reaches the root
            x, steps = v, 0
            while x != root:
                x, steps = parent[x], steps + 1
                assert steps <= n
        digraph = nx.DiGraph()
        digraph.add_weighted_edges_from((u, v, cost[u, v]) for u in range(n) for v in range(n)
                                        if u != v and v != root)
        digraph.add_nodes_from(range(n))
        best = nx.minimum_spanning_arborescence(digraph)
        mine = sum(cost[parent[v], v] for v in range(n) if v != root)
        assert mine == pytest.approx(best.size(weight="weight")), trial


def test_split_is_proportional_and_whole():
    assert split(10, [1.0, 1.0]) == [5, 5]
    assert split(7, [3.0, 1.0]) == [5, 2]
    assert sum(split(13, [0.2, 0.5, 0.3])) == 13


@pytest.mark.parametrize("graph", [
    star(4), cycle(5), two_halves(25.0), tp.bcube_graph(2, 1), tp.dcell_graph(2, 1),
    tp.jellyfish_graph(8, 4, 3, seed=0), tp.dcell_graph(3, 1), tp.bcube_graph(4, 2),
], ids=["star", "cycle", "two-halves", "bcube-2-1", "dcell-2-1", "jellyfish-8", "dcell-3-1",
        "bcube-4-2"])
def test_tree_packing_reaches_the_optimum_within_capacity(graph):
    packed = pack_trees(graph)
    assert packed.rate == pytest.approx(packed.optimum, rel=1e-6)
    servers = set(tp.servers(graph)) if "spec" in graph.graph else {
        v for v, r in graph.nodes(data="role") if r == "server"}
    load: dict[tuple[str, str], float] = {}
    for root, items in packed.trees.items():
        assert sum(w for w, _ in items) >= packed.rate * (1 - 1e-9)
        for weight, tree in items:
            assert set(tree) | {root} == servers  # spanning
            for _, (_, path) in tree.items():
                for a, b in zip(path[::-1], path[::-1][1:]):  # broadcast direction
                    load[(a, b)] = load.get((a, b), 0.0) + weight
    caps = link_capacities(graph, 1.0)
    for link, used in load.items():
        assert used <= caps[link] * (1 + 1e-6), link


def test_the_final_weighting_keeps_the_shallowest_of_the_optimal_trees():
    # Two roots; each has a deep and a shallow tree over the same links. Any split reaches the
    # rate; the least weight x height is all on the shallow trees, within the capacities.
    columns = [(0, [0, 1]), (0, [0, 1]), (1, [2]), (1, [2])]
    heights = [3, 1, 1, 5]
    cap = np.array([1.0, 1.0, 0.5])
    master = _Master(cap, 2, 0.5)
    master.add(columns)
    assert master.solve()[0] == pytest.approx(0.5)
    assert master.shallowest(heights, 0.5) == pytest.approx([0.0, 0.5, 0.5, 0.0])
    # Above what the trees can carry there are no weights; the max-rate LP then says how far
    # they go, and its duals price new trees.
    short = _Master(cap, 2, 0.75)
    short.add(columns)
    assert short.shallowest(heights, 0.75) is None
    rate, price, dual = short.solve()
    assert rate == pytest.approx(0.5)
    assert price @ cap == pytest.approx(0.5) and dual.sum() == pytest.approx(1.0)


def test_the_master_lp_takes_new_columns_between_solves():
    # Root 1 lent a share of link 0 reaches 0.75, root 0 keeping 0.75 of it.
    columns = [(0, [0, 1]), (1, [2])]
    master = _Master(np.array([1.0, 1.0, 0.5]), 2, 1.0)
    master.add(columns)
    assert master.solve()[0] == pytest.approx(0.5)
    master.add([(1, [0])])
    assert master.columns == 3
    assert master.solve()[0] == pytest.approx(0.75)
    assert master.shallowest([1, 1, 1], 0.75) == pytest.approx([0.75, 0.5, 0.25])


@pytest.mark.parametrize("family,params,generated", [
    ("bcube", {"n": 4, "k": 1}, False), ("dcell", {"n": 3, "k": 1}, True),
])
def test_seeds_that_reach_the_optimum_skip_column_generation(family, params, generated):
    packed = pack_trees(tp.make_graph(family, **params))
    assert (packed.iterations > 0) == generated
    assert packed.rate == pytest.approx(packed.optimum, rel=1e-6)


@pytest.mark.parametrize("family,params", [
    ("bcube", {"n": 2, "k": 1}), ("dcell", {"n": 2, "k": 1}), ("dcell", {"n": 3, "k": 1}),
    ("jellyfish", {"switches": 8, "ports": 4, "uplinks": 3, "seed": 0}),
])
def test_packing_schedules_validate_and_never_beat_the_bounds(family, params):
    g = tp.make_graph(family, **params)
    size = 400_000
    schedule = build("packing", g, size)
    validate(schedule, g)
    makespan = simulate(g, schedule).makespan_s
    assert makespan >= packing_bound(g, size) * (1 - 1e-9)
    assert makespan >= lower_bound(g, size) * (1 - 1e-9)


def test_packing_adapts_to_a_slow_link_where_rate_oblivious_baselines_do_not():
    g = two_halves(25.0)
    size = 8_000_000
    optimum = packing_bound(g, size)
    ratio = {algo: simulate(g, build(algo, g, size)).makespan_s / optimum
             for algo in ("ring", "multitree", "packing")}
    assert ratio["packing"] < 1.1
    assert ratio["ring"] > 1.5 and ratio["multitree"] > 1.5


def test_packing_on_one_server_is_empty():
    assert build("packing", star(1), 4).transfers == ()


@pytest.mark.parametrize("family,params", [
    ("bcube", {"n": 4, "k": 1}), ("dcell", {"n": 4, "k": 1}),
    ("jellyfish", {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0}),
])
def test_packing_uses_rings_where_they_reach_the_optimum(family, params):
    g = tp.make_graph(family, **params)
    size = 960_000
    schedule = build("packing", g, size)
    assert schedule.meta["style"] == "rings"
    validate(schedule, g)
    assert simulate(g, schedule).makespan_s == pytest.approx(packing_bound(g, size), rel=1e-9)


def test_packing_uses_trees_where_rings_fall_short():
    g = tp.make_graph("dcell", n=3, k=1)
    schedule = build("packing", g, 400_000)
    assert schedule.meta["style"] == "trees"
    assert schedule.meta["rate_to_optimum"] == pytest.approx(1.0, rel=1e-6)


def thin_star(servers: int, thin_mbps: float) -> nx.Graph:
    """A star whose server h0 has a thin link."""
    g = star(servers)
    g.edges["h0", "w"]["bw_mbps"] = thin_mbps
    return g


@pytest.mark.parametrize("servers", [3, 4, 6])
def test_overlapped_phases_on_a_thin_server_reach_its_own_link(servers):
    # h0's link carries, each way, every shard but its own (one phase) plus its own shard
    # once (the other phase): N x <= a, so the optimum is bits / a, the one-server bound;
    # ReduceScatter then AllGather would take 2 (N-1) / N of that.
    a = 25.0
    g = thin_star(servers, a)
    bits = 8 * 10**6
    assert overlap_rate(g) == pytest.approx(a * 1e6 / servers, rel=1e-6)
    assert packing_bound(g, 10**6) == pytest.approx(bits / (a * 1e6), rel=1e-6)
    assert packing_bound(g, 10**6) == pytest.approx(lower_bound(g, 10**6), rel=1e-6)
    sequential = 2 * (bits / servers) / packing_rate(g)[0]
    assert sequential == pytest.approx(2 * (servers - 1) / servers * bits / (a * 1e6))


def test_overlap_gains_nothing_across_a_thin_cut():
    # The slow link carries, each way, the AllGather of one half and the ReduceScatter into
    # the other: overlapping the phases halves the rate, so the optimum stays bits / 25 Mbit/s.
    g = two_halves(25.0)
    assert overlap_rate(g) == pytest.approx(25e6 / 6, rel=1e-6)
    assert packing_bound(g, 10**6) == pytest.approx(8e6 / 25e6, rel=1e-6)


@pytest.mark.parametrize("family,params", [
    ("bcube", {"n": 4, "k": 1}), ("dcell", {"n": 3, "k": 1}),
    ("jellyfish", {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0}),
])
def test_overlap_rate_is_half_the_packing_rate_on_uniform_families(family, params):
    g = tp.make_graph(family, **params)
    assert overlap_rate(g) == pytest.approx(packing_rate(g)[0] / 2, rel=1e-6)


def degraded_bcube(change: str) -> nx.Graph:
    """BCube(4,1) with s00-w0_0 removed ("fail") or at a quarter of the rate ("quarter")."""
    g = tp.make_graph("bcube", n=4, k=1)
    if change == "fail":
        g.remove_edge("s00", "w0_0")
    else:
        g.edges["s00", "w0_0"]["bw_mbps"] = 2.5
    return g


@pytest.mark.parametrize("change", ["fail", "quarter"])
def test_no_baseline_beats_the_optimum_on_a_degraded_bcube(change):
    # BCube(4,1) with s00 left one link (or one at a quarter rate): multitree once finished
    # below ReduceScatter-then-AllGather's time, which is no optimum when the phases overlap.
    g = degraded_bcube(change)
    size = 10**6
    optimum = packing_bound(g, size)
    assert optimum >= lower_bound(g, size) * (1 - 1e-9)
    for algo in ("ring", "ps-sharded", "tree", "double-tree", "multitree", "packing"):
        makespan = simulate(g, build(algo, g, size)).makespan_s
        assert makespan >= optimum * (1 - 1e-9), algo


def test_overlapped_packing_reaches_the_overlap_rate_within_capacity():
    # Two tree families in one LP: every root broadcasts at >= x and is reduced into at >= x,
    # the reduce trees using the links reversed, both within every directed link.
    g = degraded_bcube("quarter")
    packed = pack_trees(g, overlap=True)
    assert packed.optimum == pytest.approx(overlap_rate(g), rel=1e-9)
    assert packed.rate == pytest.approx(packed.optimum, rel=1e-6)
    assert packed.rate > packing_rate(g)[0] / 2 * 1.2  # the overlap gains here
    load: dict[tuple[str, str], float] = {}
    for family, reverse in ((packed.trees, True), (packed.reduce_trees, False)):
        for items in family.values():
            assert sum(w for w, _ in items) >= packed.rate * (1 - 1e-9)
            for weight, tree in items:
                for _, (_, path) in tree.items():  # path: child up to parent
                    nodes = path[::-1] if reverse else path
                    for a, b in zip(nodes, nodes[1:]):
                        load[(a, b)] = load.get((a, b), 0.0) + weight
    caps = link_capacities(g, 1.0)
    for link, used in load.items():
        assert used <= caps[link] * (1 + 1e-6), link


@pytest.mark.parametrize("change", ["fail", "quarter"])
def test_packing_overlaps_the_phases_on_a_degraded_bcube(change):
    # With reduce and broadcast on the same trees packing took 2 x the optimum here
    # (ReduceScatter then AllGather); on two families it comes close and beats multitree.
    g = degraded_bcube(change)
    size = 4_000_000
    schedule = build("packing", g, size)
    validate(schedule, g)
    optimum = packing_bound(g, size)
    packing = simulate(g, schedule).makespan_s / optimum
    multitree = simulate(g, build("multitree", g, size)).makespan_s / optimum
    assert packing < 1.3
    assert packing < multitree


def test_rate_parts_cut_a_shard_in_proportion_to_the_rates():
    parts = rate_parts([(3.0, "a"), (1.0, "b"), (1e-3, "c")], 4000, 4)
    assert sum(cnt for _, cnt in parts) == 4000
    share = {t: sum(cnt for u, cnt in parts if u == t) for t in "abc"}
    assert share == {"a": 2999, "b": 1000, "c": 1}  # every tree gets its share, if tiny
    assert [t for t, _ in parts] == ["a", "a", "a", "b", "c"]


@pytest.mark.parametrize("change", [None, "quarter"])
def test_packing_plan_puts_the_lps_load_on_every_link(change):
    # Each root's trees carry parts of its shard in proportion to their rates, so every
    # directed link carries its LP load (up to whole elements), and with two families the
    # pieces pair a reduce and a broadcast tree over the same elements.
    g = tp.make_graph("dcell", n=3, k=1) if change is None else degraded_bcube(change)
    packed = pack_trees(g, overlap=change is not None)
    elements = 1_200_000
    plan = packing_plan(packed, elements)
    covered = sorted((off, cnt) for *_, off, cnt, _ in plan)
    assert [off for off, _ in covered] == list(np.cumsum([0] + [c for _, c in covered])[:-1])
    assert sum(c for _, c in covered) == elements
    shard = elements / len(packed.trees)
    load: dict[tuple[str, str], float] = {}
    expected: dict[tuple[str, str], float] = {}
    up_family = packed.trees if packed.reduce_trees is None else packed.reduce_trees
    for family, reverse, index in ((packed.trees, True, 1), (up_family, False, 0)):
        for root, items in family.items():
            total = sum(w for w, _ in items)
            for weight, tree in items:
                for _, (_, path) in tree.items():
                    nodes = path[::-1] if reverse else path
                    for a, b in zip(nodes, nodes[1:]):
                        expected[(a, b)] = expected.get((a, b), 0.0) + shard * weight / total
            for entry in plan:
                if entry[2] == root:
                    for _, (_, path) in entry[index].items():
                        nodes = path[::-1] if reverse else path
                        for a, b in zip(nodes, nodes[1:]):
                            load[(a, b)] = load.get((a, b), 0.0) + entry[4]
    assert load.keys() == expected.keys()
    for link, used in load.items():
        assert used == pytest.approx(expected[link], rel=1e-3), link


def test_small_shards_get_one_copy_per_tree():
    # Where the shard holds fewer than MIN_CHUNKS_PER_COPY chunks of the floor per copy,
    # packing_plan makes fewer copies (one per tree at least), so each keeps its pipeline.
    packed = pack_trees(tp.make_graph("dcell", n=3, k=1))
    roots = len(packed.trees)
    per_root = {}
    for elements in (roots * 7 * 100, roots * 64 * 100):
        plan = packing_plan(packed, elements, min_chunk=100)
        per_root[elements] = max(sum(1 for entry in plan if entry[2] == r) for r in packed.trees)
    trees = max(len(items) for items in packed.trees.values())
    assert per_root[roots * 7 * 100] == trees
    assert per_root[roots * 64 * 100] > trees


def test_paired_cuts_where_either_family_begins():
    up = [("A", 275), ("A", 275), ("B", 225), ("B", 225)]
    down = [("C", 250), ("C", 250), ("D", 300), ("E", 200)]
    pieces = _paired(up, down)
    assert sum(c for *_, c in pieces) == 1000
    assert pieces == [("A", "C", 250), ("A", "C", 25), ("A", "C", 225), ("A", "D", 50),
                      ("B", "D", 225), ("B", "D", 25), ("B", "E", 200)]
    assert _paired(up, []) == [] and _paired([], down) == []
