"""Node positions for drawing a topology, one layout per family, and drawing it to a PNG file
(matplotlib, imported only when drawing)."""

from __future__ import annotations

import math
import re
from numbers import Real

import networkx as nx

from topology.dcell import dcell_switch
from topology.routing import servers, switches

#: Cell radius as a share of the distance between neighbouring cells (DCell) or a switch's
#: distance to its nearest switch (Jellyfish): below one half, so a server is always nearer its
#: own switch than any other.
NEAR = 0.3


def _name_key(node: object) -> tuple:
    """Sort key independent of insertion order and hash seed: digit runs compare as numbers
    (``w2`` before ``w10``)."""
    parts = re.split(r"(\d+)", str(node))
    return (tuple(int(p) if i % 2 else p for i, p in enumerate(parts)),
            type(node).__name__, repr(node))


def _family(graph: nx.Graph) -> object:
    spec = graph.graph.get("spec")
    if isinstance(spec, dict) and "family" in spec:
        return spec["family"]
    return graph.graph.get("family")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bcube(graph: nx.Graph) -> dict | None:
    """Servers in a row by rank (y 0), each switch level one row higher than the last; a
    switch over the mean x of its servers while that keeps its row at least half the even
    spacing apart, else the row is spread evenly (in the order of those means)."""
    data = graph.nodes
    if any(not _is_int(d.get("rank")) for _, d in data(data=True) if d.get("role") == "server"):
        return None
    if any(not _is_int(d.get("level")) for _, d in data(data=True) if d.get("role") == "switch"):
        return None
    if any(d.get("role") not in ("server", "switch") for _, d in data(data=True)):
        return None
    srv = servers(graph)
    pos = {v: (float(i), 0.0) for i, v in enumerate(srv)}
    width = float(max(len(srv) - 1, 1))
    rows: dict[int, list] = {}
    for w in switches(graph):
        rows.setdefault(data[w]["level"], []).append(w)
    for height, level in enumerate(sorted(rows), start=1):
        row = rows[level]
        means = {}
        for w in row:
            xs = [pos[s][0] for s in graph[w] if s in pos]
            means[w] = sum(xs) / len(xs) if xs else math.inf
        order = sorted(row, key=lambda w: (means[w], _name_key(w)))
        xs = [means[w] for w in order]
        spacing = width / len(row)
        if math.inf in xs or any(b - a < spacing / 2 for a, b in zip(xs, xs[1:])):
            xs = [spacing * (i + 0.5) for i in range(len(row))]
        pos.update((w, (x, float(height))) for w, x in zip(order, xs))
    return pos


def _top_peer(graph: nx.Graph, server: str, address: dict) -> str | None:
    """The server at the other end of ``server``'s highest-level link (the server neighbour
    whose address differs from it in the most significant digit), or None."""
    own = address[server]
    peers = [u for u in graph[server] if u in address]
    if not peers:
        return None

    def first_difference(u: str) -> tuple:
        diff = next((i for i, (a, b) in enumerate(zip(own, address[u])) if a != b), len(own))
        return diff, _name_key(u)

    return min(peers, key=first_difference)


def _dcell(graph: nx.Graph) -> dict | None:
    """Each DCell_0 cell (servers sharing ``address[:-1]``, and their switch
    ``dcell_switch(address)``) around its switch, the cells around a large circle in address
    order with a gap between DCell_1s. A cell's servers are spread evenly over the half of
    its small circle that faces the centre, ordered by the direction in which the cell their
    highest-level link goes to lies, so those links leave the cell without crossing."""
    address = {}
    for v, d in graph.nodes(data=True):
        if d.get("role") == "server":
            a = d.get("address")
            if not isinstance(a, (tuple, list)) or not a or not all(map(_is_int, a)):
                return None
            address[v] = tuple(a)
        elif d.get("role") != "switch":
            return None
    if not address or len({len(a) for a in address.values()}) != 1:
        return None
    switch_of = {a[:-1]: dcell_switch(a) for a in address.values()}
    if set(switch_of.values()) != set(switches(graph)):
        return None
    cells = sorted(switch_of)
    groups = sorted({c[:-1] for c in cells})
    gap = 0.5 if len(groups) > 1 else 0.0
    group_index = {g: i for i, g in enumerate(groups)}
    slots = len(cells) + gap * len(groups)
    centre = {}
    for i, c in enumerate(cells):
        angle = math.pi / 2 - 2 * math.pi * (i + gap * group_index[c[:-1]]) / slots
        centre[c] = (math.cos(angle), math.sin(angle)) if len(cells) > 1 else (0.0, 0.0)
    radius = min(NEAR * 2 * math.sin(math.pi / slots), 0.2) if len(cells) > 1 else 1.0
    pos = {switch_of[c]: centre[c] for c in cells}
    members: dict[tuple, list] = {}
    for v, a in address.items():
        members.setdefault(a[:-1], []).append(v)
    for c, cell_servers in members.items():
        cell_servers.sort(key=lambda v: (address[v], _name_key(v)))
        cx, cy = centre[c]
        m = len(cell_servers)
        if len(cells) == 1:
            angles = [math.pi / 2 - 2 * math.pi * j / m for j in range(m)]
        else:
            inward = math.atan2(-cy, -cx)
            # Where each server's highest-level link heads, seen from the cell and measured
            # from the inward direction; a server without one keeps its address order.
            turn = {}
            for v in cell_servers:
                peer = _top_peer(graph, v, address)
                rel = 0.0
                if peer is not None and address[peer][:-1] != c:
                    px, py = centre[address[peer][:-1]]
                    rel = math.atan2(py - cy, px - cx) - inward
                turn[v] = (math.atan2(math.sin(rel), math.cos(rel)), address[v])
            cell_servers.sort(key=turn.__getitem__)
            angles = [inward + math.pi * ((j + 0.5) / m - 0.5) for j in range(m)]
        for v, angle in zip(cell_servers, angles):
            pos[v] = (cx + radius * math.cos(angle), cy + radius * math.sin(angle))
    return pos


def _jellyfish(graph: nx.Graph) -> dict | None:
    """``nx.spring_layout(seed=0)`` of the switch graph (nodes in name order); a switch's
    servers on an arc around it, facing away from its neighbours, at a radius below its
    distance to the nearest switch."""
    import numpy as np

    sw = sorted(switches(graph), key=_name_key)
    if not sw or any(r not in ("server", "switch") for _, r in graph.nodes(data="role")):
        return None
    home: dict = {w: [] for w in sw}
    for v, d in graph.nodes(data=True):
        if d.get("role") == "server":
            own = sorted((u for u in graph[v] if u in home), key=_name_key)
            if not own:
                return None
            home[own[0]].append(v)
    core = nx.Graph()
    core.add_nodes_from(sw)
    core.add_edges_from(sorted((tuple(sorted(e, key=_name_key)) for e in graph.subgraph(sw).edges),
                               key=lambda e: (_name_key(e[0]), _name_key(e[1]))))
    layout = nx.spring_layout(core, seed=0)
    xy = np.array([layout[w] for w in sw], dtype=float)
    dist = np.hypot(*(xy[:, None, :] - xy[None, :, :]).transpose(2, 0, 1))
    np.fill_diagonal(dist, np.inf)
    nearest = dist.min(axis=1) if len(sw) > 1 else np.ones(1)
    pos = {w: (float(x), float(y)) for w, (x, y) in zip(sw, xy)}
    for i, w in enumerate(sw):
        attached = sorted(home[w], key=lambda v: (graph.nodes[v].get("rank", -1), _name_key(v)))
        if not attached:
            continue
        x, y = pos[w]
        near = [pos[u] for u in core[w]]
        ox = x - sum(p[0] for p in near) / len(near) if near else 0.0
        oy = y - sum(p[1] for p in near) / len(near) if near else 1.0
        out = math.atan2(oy, ox) if math.hypot(ox, oy) > 1e-9 else math.pi / 2
        radius = min(NEAR * float(nearest[i]), 0.1)
        m = len(attached)
        for j, v in enumerate(attached):
            angle = out + math.pi * ((j + 0.5) / m - 0.5)
            pos[v] = (x + radius * math.cos(angle), y + radius * math.sin(angle))
    return pos


def _given_or_spring(graph: nx.Graph) -> dict:
    """The nodes' own numeric ``x``/``y`` when every node has both and no two coincide, else
    ``nx.spring_layout(seed=0)`` of the graph with nodes and links in name order."""
    given = {}
    for v, d in graph.nodes(data=True):
        x, y = d.get("x"), d.get("y")
        if not all(isinstance(c, Real) and not isinstance(c, bool) and math.isfinite(c)
                   for c in (x, y)):
            break
        given[v] = (float(x), float(y))
    else:
        if len(set(given.values())) == len(given):
            return given
    ordered = nx.Graph()
    ordered.add_nodes_from(sorted(graph.nodes, key=_name_key))
    ordered.add_edges_from(sorted((tuple(sorted(e, key=_name_key)) for e in graph.edges),
                                  key=lambda e: (_name_key(e[0]), _name_key(e[1]))))
    return {v: (float(x), float(y)) for v, (x, y) in nx.spring_layout(ordered, seed=0).items()}


def _normalised(raw: dict, keep_aspect: bool) -> dict:
    """Map raw coordinates into [0, 1]^2: each axis on its own, or both by the longer span
    with the shorter one centred; a zero span maps to 0.5."""
    xs = [p[0] for p in raw.values()]
    ys = [p[1] for p in raw.values()]
    spans = [max(xs) - min(xs), max(ys) - min(ys)]
    lows = [min(xs), min(ys)]

    def scale(value: float, axis: int) -> float:
        span = max(spans) if keep_aspect else spans[axis]
        if span <= 0:
            return 0.5
        return (value - lows[axis]) / span + (1 - spans[axis] / span) / 2

    return {v: (scale(x, 0), scale(y, 1)) for v, (x, y) in raw.items()}


def positions(graph: nx.Graph) -> dict[str, tuple[float, float]]:
    """Return a drawing position ``(x, y)`` for every node of ``graph``, by its family.

    The family is ``graph.graph["spec"]["family"]`` (else ``graph.graph["family"]``):

    - ``bcube``: servers in a row at the bottom ordered by ``rank``; above them one row per
      switch ``level``, lowest level first. A switch sits over the mean x of its servers when
      that keeps the switches of its row at least half the even spacing apart; otherwise the
      row is spread evenly, in the order of those means. The axes are scaled separately.
    - ``dcell``: a server's cell is its ``address`` without the last digit and its cell's
      switch is ``dcell_switch(address)`` (switches carry no address). The cells sit around a
      large circle in address order, with a gap between DCell_1s; each cell's servers sit on
      the inner half of a small circle around its switch (nearer it than any other switch),
      ordered by the direction of the cell their highest-level link leads to, so
      server-server links are chords between cells. A single cell (k = 0) is a star.
    - ``jellyfish``: ``networkx.spring_layout(seed=0)`` of the switch graph; each server on a
      small arc around the switch it links to, nearer that switch than any other.
    - anything else (``file``, unknown, none): the nodes' numeric ``x`` and ``y`` attributes
      when every node has both and no two coincide, else ``networkx.spring_layout(seed=0)``.

    A family graph whose nodes lack the attributes above is laid out like "anything else".
    Coordinates lie in [0, 1] x [0, 1] (x right, y up) and are rounded to 4 decimals; except
    for BCube the aspect ratio is kept, the longer side spans [0, 1] and the shorter one is
    centred. The result is a pure function of the graph's nodes, links and attributes: it
    does not depend on insertion order or the hash seed. In the BCube and DCell layouts no
    two nodes share a position.

    >>> from topology.bcube import bcube_graph
    >>> positions(bcube_graph(2, 0))
    {'s0': (0.0, 0.0), 'w0': (0.5, 1.0), 's1': (1.0, 0.0)}
    """
    if graph.number_of_nodes() == 0:
        return {}
    family = _family(graph)
    layouts = {"bcube": _bcube, "dcell": _dcell, "jellyfish": _jellyfish}
    layout = layouts.get(family) if isinstance(family, str) else None
    raw = layout(graph) if layout is not None else None
    keep_aspect = raw is None or family != "bcube"
    if raw is None:
        raw = _given_or_spring(graph)
    scaled = _normalised(raw, keep_aspect)
    return {v: (round(scaled[v][0], 4) + 0.0, round(scaled[v][1], 4) + 0.0) for v in graph}


def draw_png(graph: nx.Graph, path: str) -> None:
    """Draw ``graph`` into the PNG file ``path`` at ``positions(graph)``: servers as blue
    circles, switches as orange squares, labelled by name (labels are left out above 64
    servers)."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError("drawing needs matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = positions(graph)
    srv, sw = servers(graph), switches(graph)
    if _family(graph) == "bcube":
        width = min(max(6.0, 0.45 * len(srv)), 40.0)
        height = 3.0 + 1.2 * (1 + max((graph.nodes[w].get("level", 0) for w in sw), default=0))
    else:
        width = height = min(max(7.0, 1.2 * math.sqrt(graph.number_of_nodes())), 30.0)
    fig, ax = plt.subplots(figsize=(width, height))
    nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.35, width=0.8)
    nx.draw_networkx_nodes(graph, pos, nodelist=srv, node_shape="o", node_color="#4c78a8",
                           node_size=260, ax=ax, label="server")
    nx.draw_networkx_nodes(graph, pos, nodelist=sw, node_shape="s", node_color="#f58518",
                           node_size=320, ax=ax, label="switch")
    if len(srv) <= 64:
        nx.draw_networkx_labels(graph, pos, font_size=7, ax=ax)
    ax.set_title(f"{graph.graph.get('name', '')}: {len(srv)} servers, {len(sw)} switches, "
                 f"{graph.number_of_edges()} links")
    ax.legend(loc="upper right", scatterpoints=1, fontsize=8)
    ax.axis("off")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ValueError(f"cannot write {path!r}: {exc.strerror}") from None
    finally:
        plt.close(fig)
