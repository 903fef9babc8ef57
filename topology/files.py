"""Topology files in and out: GraphML (as the Internet Topology Zoo uses) and networkx
node-link JSON. Pure: standard library and networkx.

What a file says (docs/design.md, "Topology files"):

- node ``role``: ``server`` or ``switch``. When no node has one, every node is a server and
  servers relay (a router-level map such as a Topology Zoo network); when some have one,
  every node needs one.
- node ``rank`` (servers, optional): distinct integers 0..N-1, the servers' order in every
  collective; default: the order of the servers in the file.
- link ``bw_mbps`` (optional): the link's rate in Mbit/s each direction; default: the graph's
  ``bw_mbps``, else the command line's ``--bw-mbps``. Link ``background_mbps`` (optional).
- graph ``servers_relay`` (optional): whether servers forward for others; default: yes when
  no node has a role, else no. Where servers do not relay, each server has exactly one link.
- graph ``name`` (optional, default the file name), ``bw_mbps``; ``family`` and ``params``
  (written for generated networks): when the file's nodes and links are exactly that
  family's, the graph is that family's (with its routing); else the attributes are ignored.

Any other node or link attribute is refused unless it is descriptive: ``label``,
``description``, ``x``, ``y``, ``type``, or a name starting with a capital letter (the
Topology Zoo's keys). Errors are ValueError, one line, naming the file and the element.
"""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import networkx as nx

from topology._common import DEFAULT_BW_MBPS, check_bw

#: Suffixes read and written, per format.
FORMATS = {".graphml": "graphml", ".xml": "graphml", ".json": "json"}
NODE_KEYS = {"role", "rank"}
LINK_KEYS = {"bw_mbps", "background_mbps"}
GRAPH_KEYS = {"name", "bw_mbps", "servers_relay", "family", "params"}
DESCRIPTIVE = {"label", "description", "x", "y", "type", "id"}
ROLES = ("server", "switch")
GRAPHML_NS = "{http://graphml.graphdrawing.org/xmlns}"


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown topology file type {path.suffix!r}; use "
                         ".graphml or .json")
    return fmt


def _descriptive(key: str) -> bool:
    return key in DESCRIPTIVE or key[:1].isupper()


def _parse(path: Path, text: str, fmt: str) -> nx.Graph:
    """The raw graph of a file; ValueError naming the line or element of a syntax error or
    a duplicate."""
    where = str(path)
    if fmt == "json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: line {exc.lineno}: not JSON ({exc.msg})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
            raise ValueError(f"{where}: not a node-link graph (an object with a 'nodes' list)")
        links = doc.get("links", doc.get("edges"))
        if not isinstance(links, list):
            raise ValueError(f"{where}: not a node-link graph (no 'links' list)")
        seen: set = set()
        for i, node in enumerate(doc["nodes"]):
            if not isinstance(node, dict) or "id" not in node:
                raise ValueError(f"{where}: nodes[{i}] has no 'id'")
            if node["id"] in seen:
                raise ValueError(f"{where}: node {node['id']!r} is declared twice")
            seen.add(node["id"])
        for i, link in enumerate(links):
            if not isinstance(link, dict) or "source" not in link or "target" not in link:
                raise ValueError(f"{where}: links[{i}] needs 'source' and 'target'")
            for end in (link["source"], link["target"]):
                if end not in seen:
                    raise ValueError(f"{where}: links[{i}] ({link['source']}-{link['target']}) "
                                     f"names node {end!r}, which is not declared")
        if doc.get("directed"):
            raise ValueError(f"{where}: the graph is directed; links are bidirectional, "
                             "write it undirected")
        if doc.get("multigraph"):
            raise ValueError(f"{where}: a multigraph; one link per pair of nodes")
        graph = nx.Graph()
        graph.graph.update(doc.get("graph") or {})
        for node in doc["nodes"]:
            graph.add_node(str(node["id"]), **{k: v for k, v in node.items() if k != "id"})
        for i, link in enumerate(links):
            a, b = str(link["source"]), str(link["target"])
            if graph.has_edge(a, b):
                raise ValueError(f"{where}: links[{i}] repeats link {a}-{b}")
            graph.add_edge(a, b, **{k: v for k, v in link.items()
                                    if k not in ("source", "target", "key")})
        return graph
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, col = exc.position
        raise ValueError(f"{where}: line {line}, column {col}: not XML ({exc.msg})") from None
    graphs = root.findall(f"{GRAPHML_NS}graph") or root.findall("graph")
    if root.tag not in (f"{GRAPHML_NS}graphml", "graphml") or len(graphs) != 1:
        raise ValueError(f"{where}: not a GraphML file with one <graph>")
    ids = [n.get("id") for n in graphs[0].iter() if n.tag.endswith("node")]
    seen = set()
    for node_id in ids:
        if node_id in seen:
            raise ValueError(f"{where}: <node id={node_id!r}> is declared twice")
        seen.add(node_id)
    for edge in graphs[0].iter():
        if edge.tag.endswith("edge"):
            for end in (edge.get("source"), edge.get("target")):
                if end not in seen:
                    raise ValueError(f"{where}: <edge source={edge.get('source')!r} "
                                     f"target={edge.get('target')!r}> names node {end!r}, "
                                     "which is not declared")
    if graphs[0].get("edgedefault") == "directed":
        raise ValueError(f"{where}: the graph is directed; links are bidirectional, write it "
                         "with edgedefault=\"undirected\"")
    try:
        raw = nx.parse_graphml(text)
    except (nx.NetworkXError, ValueError, KeyError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    if raw.is_multigraph():
        pairs = Counter(tuple(sorted(e)) for e in raw.edges())
        repeated = next((p for p, n in pairs.items() if n > 1), None)
        if repeated:
            raise ValueError(f"{where}: link {repeated[0]}-{repeated[1]} is declared twice")
    graph = nx.Graph()
    graph.graph.update(raw.graph)
    graph.add_nodes_from((str(v), d) for v, d in raw.nodes(data=True))
    graph.add_edges_from((str(a), str(b), d) for a, b, d in raw.edges(data=True))
    return graph


def _number(value: object, what: str) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    return x


def _flag(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{what} must be true or false, got {value!r}")


def _checked(graph: nx.Graph, where: str, bw_mbps: float) -> nx.Graph:
    """Apply defaults and check every rule of the module docstring."""
    if graph.number_of_nodes() == 0:
        raise ValueError(f"{where}: the graph has no nodes")
    for key in graph.graph:
        if key not in GRAPH_KEYS and not _descriptive(key) and key != "node_default" \
                and key != "edge_default":
            raise ValueError(f"{where}: unknown graph attribute {key!r} (known: "
                             f"{', '.join(sorted(GRAPH_KEYS))})")
    for v, data in graph.nodes(data=True):
        for key in data:
            if key not in NODE_KEYS and not _descriptive(key):
                raise ValueError(f"{where}: node {v!r}: unknown attribute {key!r} (known: "
                                 f"{', '.join(sorted(NODE_KEYS))})")
    for a, b, data in graph.edges(data=True):
        if a == b:
            raise ValueError(f"{where}: link {a}-{b} joins a node to itself")
        for key in data:
            if key not in LINK_KEYS and not _descriptive(key):
                raise ValueError(f"{where}: link {a}-{b}: unknown attribute {key!r} (known: "
                                 f"{', '.join(sorted(LINK_KEYS))})")
    roles = nx.get_node_attributes(graph, "role")
    if roles:
        for v in graph.nodes:
            if v not in roles:
                raise ValueError(f"{where}: node {v!r} has no role (server or switch)")
            if roles[v] not in ROLES:
                raise ValueError(f"{where}: node {v!r}: role must be server or switch, got "
                                 f"{roles[v]!r}")
        relay_default = False
    else:
        nx.set_node_attributes(graph, "server", "role")
        relay_default = True
    relay = graph.graph.get("servers_relay", relay_default)
    relay = _flag(relay, f"{where}: graph attribute servers_relay")
    graph.graph["servers_relay"] = relay
    servers = [v for v, r in graph.nodes(data="role") if r == "server"]
    if len(servers) < 2:
        raise ValueError(f"{where}: {len(servers)} server(s); an AllReduce needs at least 2")
    for v in servers:
        degree = graph.degree(v)
        if degree == 0:
            raise ValueError(f"{where}: server {v!r} has no link")
        if not relay and degree > 1:
            raise ValueError(f"{where}: server {v!r} has {degree} links but servers do not "
                             "relay (servers_relay false): such a server has one link")
    for v, r in graph.nodes(data="role"):
        if r == "switch" and graph.degree(v) == 0:
            raise ValueError(f"{where}: switch {v!r} has no link")
    if not nx.is_connected(graph):
        parts = sorted(nx.connected_components(graph), key=len)
        raise ValueError(f"{where}: the network is disconnected: {sorted(parts[0])[0]!r} cannot "
                         f"reach {sorted(parts[-1])[0]!r}")
    given = {v: graph.nodes[v].get("rank") for v in servers}
    if any(r is not None for r in given.values()):
        ranks = {}
        for v, r in given.items():
            if r is None:
                raise ValueError(f"{where}: server {v!r} has no rank (give every server one, "
                                 "or none)")
            if isinstance(r, bool) or not float(_number(r, f"{where}: server {v!r}: rank"))\
                    .is_integer():
                raise ValueError(f"{where}: server {v!r}: rank must be an integer, got {r!r}")
            ranks[v] = int(r)
        if sorted(ranks.values()) != list(range(len(servers))):
            raise ValueError(f"{where}: server ranks must be 0..{len(servers) - 1}, each once")
    else:
        ranks = {v: i for i, v in enumerate(servers)}
    for v in graph.nodes:
        graph.nodes[v].pop("rank", None)
    for v, r in ranks.items():
        graph.nodes[v]["rank"] = r
    default = graph.graph.get("bw_mbps", bw_mbps)
    try:
        default = check_bw(_number(default, "bw_mbps"))
    except ValueError as exc:
        raise ValueError(f"{where}: graph attribute {exc}") from None
    graph.graph["bw_mbps"] = default
    for a, b, data in graph.edges(data=True):
        what = f"{where}: link {a}-{b}"
        rate = _number(data.get("bw_mbps", default), f"{what}: bw_mbps")
        if not (rate > 0 and rate < float("inf")):
            raise ValueError(f"{what}: bw_mbps must be > 0, got {data.get('bw_mbps')!r}")
        data["bw_mbps"] = rate
        if "background_mbps" in data:
            load = _number(data["background_mbps"], f"{what}: background_mbps")
            if not 0 <= load < rate:
                raise ValueError(f"{what}: background_mbps must be >= 0 and below bw_mbps "
                                 f"{rate:g}, got {load:g}")
            data["background_mbps"] = load
    return graph


def _family_graph(graph: nx.Graph, where: str) -> nx.Graph | None:
    """The generated family graph the file's ``family``/``params`` name, when its nodes,
    roles, ranks and links are exactly the file's."""
    from topology import make_graph

    family, params = graph.graph.get("family"), graph.graph.get("params")
    if family is None:
        return None
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: graph attribute params is not JSON: {params!r}") \
                from None
    try:
        built = make_graph(str(family), bw_mbps=graph.graph["bw_mbps"], **dict(params or {}))
    except (ValueError, TypeError):
        return None
    same = (set(built.nodes) == set(graph.nodes)
            and all(built.nodes[v]["role"] == graph.nodes[v]["role"]
                    and built.nodes[v].get("rank") == graph.nodes[v].get("rank")
                    for v in built.nodes)
            and {frozenset(e) for e in built.edges} == {frozenset(e) for e in graph.edges})
    if not same:
        return None
    for a, b, data in graph.edges(data=True):
        built.edges[a, b].update({k: data[k] for k in LINK_KEYS if k in data})
    return built


def read_topology(path: str | Path, bw_mbps: float = DEFAULT_BW_MBPS) -> nx.Graph:
    """The topology a GraphML or node-link JSON file describes (module docstring), with its
    spec ``{"family": "file", "params": {"file": name, "sha256": digest}}`` unless it is
    exactly a generated family's. ValueError, one line, on any fault.
    """
    path = Path(path)
    fmt = _format(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read topology file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    graph = _checked(_parse(path, text, fmt), str(path), bw_mbps)
    name = str(graph.graph.get("name") or path.stem)
    built = _family_graph(graph, str(path))
    if built is not None:
        built.graph["name"] = name
        return built
    graph.graph.pop("family", None)
    graph.graph.pop("params", None)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    graph.graph["spec"] = {"family": "file", "params": {"file": path.name, "sha256": digest}}
    graph.graph["name"] = name
    return graph


def _writable(graph: nx.Graph) -> nx.Graph:
    """The graph as written: roles, ranks, link rates and the graph's facts, nothing else."""
    from topology.links import relays

    out = nx.Graph()
    spec = graph.graph.get("spec") or {}
    out.graph["name"] = graph.graph.get("name", "")
    out.graph["bw_mbps"] = float(graph.graph.get("bw_mbps", DEFAULT_BW_MBPS))
    out.graph["servers_relay"] = relays(graph)
    if spec.get("family") not in (None, "file"):
        out.graph["family"] = spec["family"]
        out.graph["params"] = json.dumps(spec["params"])
    for v, data in graph.nodes(data=True):
        attrs = {"role": data["role"]}
        if data["role"] == "server":
            attrs["rank"] = int(data["rank"])
        out.add_node(v, **attrs)
    for a, b, data in graph.edges(data=True):
        attrs = {"bw_mbps": float(data.get("bw_mbps", out.graph["bw_mbps"]))}
        if data.get("background_mbps"):
            attrs["background_mbps"] = float(data["background_mbps"])
        out.add_edge(a, b, **attrs)
    return out


def write_topology(graph: nx.Graph, path: str | Path) -> None:
    """Write ``graph`` as GraphML or node-link JSON (by suffix); ``read_topology`` gives the
    same graph back."""
    path = Path(path)
    fmt = _format(path)
    out = _writable(graph)
    try:
        if fmt == "json":
            doc = nx.node_link_data(out, edges="links")
            path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        else:
            nx.write_graphml(out, path)
    except OSError as exc:
        raise ValueError(f"cannot write topology file {path}: {exc.strerror}") from None
