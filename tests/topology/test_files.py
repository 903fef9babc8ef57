"""Topology files: round trips of every family through both formats, Topology Zoo style
files, the network-condition flags, and malformed files refused in one line with status 2."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import networkx as nx
import pytest

import topology as tp
from topology.files import read_topology, write_topology
from topology.links import relays, with_link_rates

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli(*args: str, module: str = "topology") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("suffix", [".json", ".graphml"])
@pytest.mark.parametrize("family,params", [
    ("bcube", {"n": 3, "k": 1}), ("dcell", {"n": 3, "k": 1}),
    ("jellyfish", {"switches": 12, "ports": 4, "uplinks": 3, "seed": 2})])
def test_round_trip_is_identical(tmp_path, family, params, suffix):
    graph = tp.make_graph(family, **params)
    path = tmp_path / f"net{suffix}"
    write_topology(graph, path)
    back = read_topology(path)
    assert nx.utils.graphs_equal(graph, back)
    assert back.graph["spec"] == graph.graph["spec"]  # the family's own routing applies
    first, last = tp.servers(graph)[0], tp.servers(graph)[-1]
    assert tp.paths(back, first, last, 2) == tp.paths(graph, first, last, 2)


def test_rates_survive_and_an_edited_family_becomes_a_file(tmp_path):
    graph = with_link_rates(tp.make_graph("bcube", n=2, k=1), {("s00", "w0_0"): 3.0})
    write_topology(graph, tmp_path / "a.graphml")
    back = read_topology(tmp_path / "a.graphml")
    assert back.edges["s00", "w0_0"]["bw_mbps"] == 3.0
    assert back.graph["spec"]["family"] == "bcube"
    graph.remove_edge("s00", "w1_0")
    write_topology(graph, tmp_path / "b.json")
    edited = read_topology(tmp_path / "b.json")
    assert edited.graph["spec"]["family"] == "file"
    assert edited.graph["spec"]["params"]["file"] == "b.json"
    assert relays(edited) and edited.number_of_edges() == 7


ZOO = """<?xml version="1.0" encoding="utf-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="label" attr.type="string" for="node" id="d0"/>
  <key attr.name="Latitude" attr.type="double" for="node" id="d1"/>
  <key attr.name="LinkLabel" attr.type="string" for="edge" id="d2"/>
  <key attr.name="Network" attr.type="string" for="graph" id="d3"/>
  <graph edgedefault="undirected">
    <data key="d3">Tiny</data>
    <node id="0"><data key="d0">Paris</data><data key="d1">48.8</data></node>
    <node id="1"><data key="d0">Lyon</data></node>
    <node id="2"><data key="d0">Nice</data></node>
    <node id="3"><data key="d0">Lille</data></node>
    <edge source="0" target="1"><data key="d2">10G</data></edge>
    <edge source="1" target="2"/>
    <edge source="2" target="3"/>
    <edge source="3" target="0"/>
  </graph>
</graphml>
"""


def test_topology_zoo_style_file_is_servers_that_relay(tmp_path):
    path = tmp_path / "tiny.graphml"
    path.write_text(ZOO)
    graph = read_topology(path, bw_mbps=20.0)
    assert tp.servers(graph) == ["0", "1", "2", "3"]
    assert relays(graph) and graph.graph["name"] == "tiny"
    assert all(d["bw_mbps"] == 20.0 for _, _, d in graph.edges(data=True))
    out = cli("--topo-file", str(path), "--json", module="topology")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"servers": 4, "switches": 0, "links": 4, "diameter": 2}


def test_simulator_runs_a_file_with_conditions(tmp_path):
    write_topology(tp.make_graph("jellyfish"), tmp_path / "j.json")
    out = cli("--topo-file", str(tmp_path / "j.json"), "--algo", "ring", "--size-mb", "0.1",
              "--json", module="simulator")
    base = json.loads(out.stdout)["makespan_s"]
    server = tp.servers(tp.make_graph("jellyfish"))[0]
    tor = next(iter(tp.make_graph("jellyfish")[server]))
    out = cli("--topo-file", str(tmp_path / "j.json"), "--algo", "ring", "--size-mb", "0.1",
              "--link-rate", f"{server}-{tor}=5", "--json", module="simulator")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["makespan_s"] > base


def _node_link(nodes, links, graph=None):
    return json.dumps({"directed": False, "multigraph": False, "graph": graph or {},
                       "nodes": nodes, "links": links})


S = [{"id": "a", "role": "server"}, {"id": "b", "role": "server"}, {"id": "x",
                                                                       "role": "switch"}]
L = [{"source": "a", "target": "x"}, {"source": "b", "target": "x"}]

#: (file name, content, a fragment the one-line error must contain)
BAD = [
    ("syntax.json", '{"nodes": [\n  {"id": "a",}\n]}', "line 2"),
    ("syntax.graphml", "<graphml>\n<graph><node id='a'>\n</graphml>", "line 3"),
    ("type.txt", "a b", "unknown topology file type"),
    ("noroles-partial.json", _node_link([{"id": "a", "role": "server"}, {"id": "b"},
                                         {"id": "x", "role": "switch"}], L),
     "node 'b' has no role"),
    ("badrole.json", _node_link([{"id": "a", "role": "host"}, *S[1:]], L),
     "role must be server or switch"),
    ("disconnected.json", _node_link(
        [*S, {"id": "c", "role": "server"}, {"id": "d", "role": "server"}],
        [*L, {"source": "c", "target": "d"}]), "disconnected"),
    ("lonely.json", _node_link([*S, {"id": "c", "role": "server"}], L),
     "server 'c' has no link"),
    ("unknown-node-attr.json", _node_link([{"id": "a", "role": "server", "bw": 3}, *S[1:]], L),
     "unknown attribute 'bw'"),
    ("unknown-link-attr.json", _node_link(S, [{"source": "a", "target": "x", "rate": 3},
                                              L[1]]), "unknown attribute 'rate'"),
    ("duplicate.json", _node_link([*S, {"id": "a", "role": "server"}], L),
     "node 'a' is declared twice"),
    ("duplicate.graphml", ZOO.replace('<node id="3">', '<node id="2">'),
     "node id='2'> is declared twice"),
    ("dangling.json", _node_link(S, [*L, {"source": "a", "target": "zz"}]),
     "names node 'zz'"),
    ("repeated-link.json", _node_link(S, [*L, {"source": "x", "target": "a"}]),
     "repeats link x-a"),
    ("badrate.json", _node_link(S, [{"source": "a", "target": "x", "bw_mbps": -1}, L[1]]),
     "bw_mbps must be > 0"),
    ("badrank.json", _node_link([{"id": "a", "role": "server", "rank": 0},
                                 {"id": "b", "role": "server", "rank": 0}, S[2]], L),
     "ranks must be 0..1"),
    ("one-server.json", _node_link(S[:1] + S[2:], L[:1]), "at least 2"),
    ("directed.json", json.dumps({"directed": True, "nodes": S, "links": L}), "directed"),
    ("multihomed.json", _node_link(S + [{"id": "y", "role": "switch"}],
                                   [*L, {"source": "a", "target": "y"},
                                    {"source": "y", "target": "x"}]),
     "server 'a' has 2 links but servers do not relay"),
    ("selfloop.json", _node_link(S, [*L, {"source": "x", "target": "x"}]),
     "joins a node to itself"),
]


@pytest.mark.parametrize("name,content,fragment", BAD, ids=[b[0] for b in BAD])
def test_malformed_files_are_one_line_errors(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_text(content)
    out = cli("--topo-file", str(path))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("python -m topology: error:")
    assert fragment in lines[0], lines[0]


def test_family_and_file_together_is_refused(tmp_path):
    write_topology(tp.make_graph("bcube", n=2, k=1), tmp_path / "b.json")
    out = cli("dcell", "--topo-file", str(tmp_path / "b.json"))
    assert out.returncode == 2 and "not both" in out.stderr


@pytest.mark.parametrize("flag,value,fragment", [
    ("--link-rate", "s00-w0_0=0", "rate must be > 0"),
    ("--link-rate", "s00-s01=5", "not a link"),
    ("--fail-link", "s00-nowhere", "not two nodes"),
    ("--background", "s00:s01=fast", "expected ...=NUMBER"),
    ("--fail-link-at", "s00-w0_0@-1", "failure time must be >= 0"),
])
def test_bad_condition_flags(flag, value, fragment):
    out = cli("bcube", "--n", "2", flag, value)
    assert out.returncode == 2 and fragment in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_out_writes_what_the_flags_made(tmp_path):
    out = cli("bcube", "--n", "2", "--fail-link", "s00-w0_0", "--link-rate", "s01-w0_0=4",
              "--out", str(tmp_path / "d.graphml"))
    assert out.returncode == 0, out.stderr
    graph = read_topology(tmp_path / "d.graphml")
    assert not graph.has_edge("s00", "w0_0")
    assert graph.edges["s01", "w0_0"]["bw_mbps"] == 4.0
