"""Drawing positions: one layout per family, inside the unit square, distinct and
deterministic; BCube in levels, DCell in cells around a circle, Jellyfish servers by their
switch; files and unknown families by their x/y or a spring layout."""

from __future__ import annotations

import copy
import json
import math
import os
import pathlib
import subprocess
import sys

import networkx as nx
import pytest

import topology as tp
from topology.dcell import dcell_switch
from topology.draw import draw_png, positions
from topology.files import read_topology

ROOT = pathlib.Path(__file__).resolve().parents[2]

FAMILY_CASES = {
    "bcube(4,1)": ("bcube", {"n": 4, "k": 1}),
    "bcube(2,2)": ("bcube", {"n": 2, "k": 2}),
    "dcell(3,1)": ("dcell", {"n": 3, "k": 1}),
    "dcell(2,2)": ("dcell", {"n": 2, "k": 2}),
    "jellyfish": ("jellyfish", {}),
    "jellyfish(12,6,3,1)": ("jellyfish", {"switches": 12, "ports": 6, "uplinks": 3, "seed": 1}),
}

ZOO = """<?xml version="1.0" encoding="utf-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="label" attr.type="string" for="node" id="d0"/>
  <graph edgedefault="undirected">
    <node id="0"><data key="d0">Paris</data></node>
    <node id="1"><data key="d0">Lyon</data></node>
    <node id="2"><data key="d0">Nice</data></node>
    <node id="3"><data key="d0">Lille</data></node>
    <node id="4"><data key="d0">Brest</data></node>
    <edge source="0" target="1"/>
    <edge source="1" target="2"/>
    <edge source="2" target="3"/>
    <edge source="3" target="0"/>
    <edge source="3" target="4"/>
  </graph>
</graphml>
"""


def unknown_family_graph() -> nx.Graph:
    """A small switch-centric network of a family this module does not know."""
    graph = nx.Graph()
    for i in range(6):
        graph.add_node(f"s{i}", role="server", rank=i)
        graph.add_edge(f"s{i}", f"w{i % 3}")
    for i in range(3):
        graph.nodes[f"w{i}"]["role"] = "switch"
    graph.add_edges_from([("w0", "w1"), ("w1", "w2"), ("w2", "w0")])
    graph.graph["spec"] = {"family": "mystery", "params": {}}
    return graph


def build(case: str, tmp_path: pathlib.Path) -> nx.Graph:
    if case == "file":
        path = tmp_path / "zoo.graphml"
        path.write_text(ZOO)
        graph = read_topology(path)
        assert graph.graph["spec"]["family"] == "file"
        return graph
    if case == "unknown":
        return unknown_family_graph()
    family, params = FAMILY_CASES[case]
    return tp.make_graph(family, **params)


ALL_CASES = [*FAMILY_CASES, "file", "unknown"]


def reinserted(graph: nx.Graph) -> nx.Graph:
    """The same graph with nodes and links inserted in reverse order."""
    out = nx.Graph()
    out.graph.update(copy.deepcopy(graph.graph))
    out.add_nodes_from(reversed(list(graph.nodes(data=True))))
    out.add_edges_from(reversed(list(graph.edges(data=True))))
    return out


def by_level(graph: nx.Graph, pos: dict) -> dict[int, set[float]]:
    levels: dict[int, set[float]] = {}
    for w in tp.switches(graph):
        levels.setdefault(graph.nodes[w]["level"], set()).add(pos[w][1])
    return levels


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_node_in_the_unit_square(case, tmp_path):
    graph = build(case, tmp_path)
    pos = positions(graph)
    assert set(pos) == set(graph.nodes)
    for x, y in pos.values():
        assert isinstance(x, float) and isinstance(y, float)
        assert 0.0 <= x <= 1.0 and 0.0 <= y <= 1.0
        assert round(x, 4) == x and round(y, 4) == y
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    assert max(max(xs) - min(xs), max(ys) - min(ys)) == 1.0  # the longer side fills [0, 1]


@pytest.mark.parametrize("case", ALL_CASES)
def test_positions_are_distinct(case, tmp_path):
    pos = positions(build(case, tmp_path))
    assert len(set(pos.values())) == len(pos)


@pytest.mark.parametrize("case", ALL_CASES)
def test_deterministic_whatever_the_insertion_order(case, tmp_path):
    graph = build(case, tmp_path)
    first = positions(graph)
    assert positions(graph) == first
    assert positions(reinserted(graph)) == first


def test_independent_of_the_hash_seed():
    here = {case: positions(tp.make_graph(f, **p)) for case, (f, p) in FAMILY_CASES.items()}
    here["unknown"] = positions(unknown_family_graph())
    script = (
        "import json, sys\n"
        "sys.path.insert(0, 'tests/topology')\n"
        "import topology as tp\n"
        "from test_draw import FAMILY_CASES, unknown_family_graph\n"
        "from topology.draw import positions\n"
        "out = {c: positions(tp.make_graph(f, **p)) for c, (f, p) in FAMILY_CASES.items()}\n"
        "out['unknown'] = positions(unknown_family_graph())\n"
        "print(json.dumps(out))\n"
    )
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    there = json.loads(run.stdout)
    assert there == {c: {v: list(p) for v, p in pos.items()} for c, pos in here.items()}


@pytest.mark.parametrize("case", ["bcube(4,1)", "bcube(2,2)"])
def test_bcube_servers_at_the_bottom_and_levels_rising(case, tmp_path):
    graph = build(case, tmp_path)
    pos = positions(graph)
    lowest = min(y for _, y in pos.values())
    assert {pos[s][1] for s in tp.servers(graph)} == {lowest}
    levels = by_level(graph, pos)
    assert all(len(ys) == 1 for ys in levels.values())  # one row per level
    heights = [next(iter(levels[level])) for level in sorted(levels)]
    assert lowest < heights[0] and heights == sorted(set(heights))
    xs = [pos[s][0] for s in tp.servers(graph)]
    assert xs == sorted(xs)  # servers in rank order, left to right


def test_bcube_switches_over_their_servers_or_spread_evenly():
    graph = tp.make_graph("bcube", n=4, k=1)
    pos = positions(graph)
    for w in tp.switches(graph):
        if graph.nodes[w]["level"] == 0:
            mean = sum(pos[s][0] for s in graph[w]) / len(graph[w])
            assert pos[w][0] == pytest.approx(mean, abs=1e-4)
    # Level-1 means (6..9 of 0..15) would crowd the middle: the row is spread evenly.
    top = [pos[f"w1_{i}"][0] for i in range(4)]
    assert top == pytest.approx([0.125, 0.375, 0.625, 0.875], abs=1e-4)


@pytest.mark.parametrize("case", ["dcell(3,1)", "dcell(2,2)"])
def test_dcell_servers_nearest_their_own_cell_switch(case, tmp_path):
    graph = build(case, tmp_path)
    pos = positions(graph)
    sw = tp.switches(graph)
    for s in tp.servers(graph):
        own = dcell_switch(graph.nodes[s]["address"])
        assert own in graph[s]
        d_own = math.dist(pos[s], pos[own])
        assert d_own < min(math.dist(pos[s], pos[w]) for w in sw if w != own), s


@pytest.mark.parametrize("case", ["dcell(3,1)", "dcell(2,2)"])
def test_dcell_cells_around_a_large_circle(case, tmp_path):
    graph = build(case, tmp_path)
    pos = positions(graph)
    sw = tp.switches(graph)
    cx = sum(pos[w][0] for w in sw) / len(sw)
    cy = sum(pos[w][1] for w in sw) / len(sw)
    radii = [math.dist(pos[w], (cx, cy)) for w in sw]
    assert max(radii) - min(radii) < 1e-3
    # Servers sit inside the ring of switches, so server-server links are chords.
    assert all(math.dist(pos[s], (cx, cy)) < min(radii) for s in tp.servers(graph))


@pytest.mark.parametrize("case", ["jellyfish", "jellyfish(12,6,3,1)"])
def test_jellyfish_servers_nearest_their_own_switch(case, tmp_path):
    graph = build(case, tmp_path)
    pos = positions(graph)
    sw = tp.switches(graph)
    for s in tp.servers(graph):
        (own,) = graph[s]
        d_own = math.dist(pos[s], pos[own])
        assert d_own < min(math.dist(pos[s], pos[w]) for w in sw if w != own), s


def test_jellyfish_switches_follow_the_seeded_spring_layout():
    graph = tp.make_graph("jellyfish")
    pos = positions(graph)
    sw = sorted(tp.switches(graph), key=lambda w: int(w[1:]))
    core = nx.Graph()
    core.add_nodes_from(sw)
    core.add_edges_from(sorted(tuple(sorted(e, key=lambda w: int(w[1:])))
                               for e in graph.subgraph(sw).edges))
    spring = nx.spring_layout(core, seed=0)
    # Normalising is a uniform scale plus a shift: distances to one switch keep their ratio.
    first = sw[0]
    ratios = [math.dist(pos[first], pos[w]) / math.dist(spring[first], spring[w])
              for w in sw[1:]]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-2)


def test_file_graph_uses_its_own_x_y():
    graph = nx.Graph([("a", "b"), ("b", "c"), ("c", "d")])
    for v, (x, y) in {"a": (0, 0), "b": (2, 0), "c": (2, 1), "d": (0, 1)}.items():
        graph.nodes[v].update(x=x, y=y)
    graph.graph["spec"] = {"family": "file", "params": {}}
    assert positions(graph) == {"a": (0.0, 0.25), "b": (1.0, 0.25), "c": (1.0, 0.75),
                                "d": (0.0, 0.75)}
    graph.nodes["d"].update(x=2, y=1)  # two nodes on one point: a spring layout instead
    pos = positions(graph)
    assert len(set(pos.values())) == 4


def test_family_graph_without_its_attributes_falls_back_to_spring():
    graph = nx.relabel_nodes(nx.cycle_graph(6), str)
    graph.graph["spec"] = {"family": "bcube", "params": {"n": 2, "k": 1}}
    pos = positions(graph)
    assert set(pos) == set(graph.nodes) and len(set(pos.values())) == 6


def test_degraded_dcell_keeps_its_cells():
    graph = tp.without_link(tp.make_graph("dcell", n=3, k=1), "s0_0", "s1_0")
    pos = positions(graph)
    for s in tp.servers(graph):
        own = dcell_switch(graph.nodes[s]["address"])
        d_own = math.dist(pos[s], pos[own])
        assert d_own < min(math.dist(pos[s], pos[w]) for w in tp.switches(graph) if w != own)


def test_draw_png_draws_at_positions(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import topology.draw as draw

    calls = []
    monkeypatch.setattr(draw, "positions", lambda g: calls.append(g) or positions(g))
    graph = tp.make_graph("dcell", n=2, k=1)
    target = tmp_path / "dcell.png"
    draw_png(graph, str(target))
    assert calls == [graph]
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
