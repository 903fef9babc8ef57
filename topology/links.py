"""Link facts written once: the rate a schedule can use on a link, and degraded copies of a
graph (slow links, a failed link, background load) expressed as edge attributes.

Edge attributes (see docs/design.md, "Link attributes"):

- ``bw_mbps``: the link's rate, Mbit/s each direction (default: the graph's ``bw_mbps``);
- ``background_mbps``: steady traffic of someone else on the link, Mbit/s each direction
  (default 0); a schedule can use ``bw_mbps - background_mbps``;
- a failed link is not in the graph.

Graph attributes (network conditions a run applies; the simulator and the emulation read them):

- ``servers_relay``: whether servers forward traffic for others (see ``relays``);
- ``background_flows``: steady flows of someone else, a list of ``{"src", "dst", "mbps",
  "path"}``; each also counts in the ``background_mbps`` of every link of its path, so a
  scheduler sees the rate left, while the simulator and the emulation run it as a real flow;
- ``link_failures``: links that go down during the run, a list of ``{"link": [a, b],
  "at_s"}``; traffic then takes ``topology.backup_path``.

Pure: networkx only.
"""

from __future__ import annotations

import gc

import networkx as nx


def relays(graph: nx.Graph) -> bool:
    """Whether servers forward traffic for other servers: the graph's ``servers_relay``
    attribute where set (topology files), else yes in BCube, DCell and spec-less graphs, no
    in switch-centric families such as Jellyfish.

    >>> from topology import make_graph
    >>> relays(make_graph("bcube", n=2, k=1)), relays(make_graph("jellyfish"))
    (True, False)
    """
    flag = graph.graph.get("servers_relay")
    if flag is not None:
        return bool(flag)
    spec = graph.graph.get("spec")
    return spec is None or spec.get("family") in ("bcube", "dcell")


def link_rate_mbps(graph: nx.Graph, a: str, b: str) -> float:
    """Mbit/s a schedule can use on link a-b, each direction: its ``bw_mbps`` (or the
    graph's) minus its ``background_mbps``. ValueError naming the link when it is not a
    link or nothing is left.

    >>> from topology import make_graph
    >>> g = make_graph("bcube", n=2, k=1)
    >>> link_rate_mbps(g, "s00", "w0_0")
    10.0
    >>> link_rate_mbps(with_background(g, {("s00", "w0_0"): 4.0}), "s00", "w0_0")
    6.0
    """
    data = graph.get_edge_data(a, b)
    if data is None:
        raise ValueError(f"{a}-{b} is not a link")
    bw = data.get("bw_mbps", graph.graph.get("bw_mbps"))
    if bw is None or not float(bw) > 0:
        raise ValueError(f"link {a}-{b} has no positive bw_mbps")
    rate = float(bw) - float(data.get("background_mbps", 0.0))
    if not rate > 0:
        raise ValueError(f"link {a}-{b}: background_mbps leaves no capacity")
    return rate


def _edge(graph: nx.Graph, link: tuple[str, str]) -> tuple[str, str]:
    if not graph.has_edge(*link):
        raise ValueError(f"{link[0]}-{link[1]} is not a link")
    return link


def _degraded(graph: nx.Graph, note: str) -> nx.Graph:
    out = graph.copy()
    out.graph["degraded"] = [*graph.graph.get("degraded", []), note]
    return out


def with_link_rates(graph: nx.Graph, rates: dict[tuple[str, str], float]) -> nx.Graph:
    """A copy of ``graph`` whose listed links run at the given Mbit/s."""
    out = _degraded(graph, "rates " + ", ".join(f"{a}-{b}={r:g}" for (a, b), r in rates.items()))
    for link, rate in rates.items():
        if not float(rate) > 0:
            raise ValueError(f"link {link[0]}-{link[1]}: rate must be > 0, got {rate!r}")
        out.edges[_edge(graph, link)]["bw_mbps"] = float(rate)
    return out


def with_background(graph: nx.Graph, loads: dict[tuple[str, str], float]) -> nx.Graph:
    """A copy of ``graph`` with steady background traffic (Mbit/s each direction) on the
    listed links."""
    out = _degraded(graph, "background " + ", ".join(f"{a}-{b}={r:g}"
                                                     for (a, b), r in loads.items()))
    for link, load in loads.items():
        out.edges[_edge(graph, link)]["background_mbps"] = float(load)
        link_rate_mbps(out, *link)
    return out


def without_link(graph: nx.Graph, a: str, b: str) -> nx.Graph:
    """A copy of ``graph`` without link a-b; ValueError when that disconnects it."""
    out = _degraded(graph, f"failed {a}-{b}")
    out.remove_edge(*_edge(graph, (a, b)))
    if not nx.is_connected(out):
        raise ValueError(f"removing {a}-{b} disconnects the network")
    return out


def background_flows(graph: nx.Graph) -> list[dict]:
    """The graph's background flows: ``{"src", "dst", "mbps", "path"}`` each."""
    return list(graph.graph.get("background_flows", []))


def with_background_flow(graph: nx.Graph, src: str, dst: str, mbps: float) -> nx.Graph:
    """A copy of ``graph`` with a steady flow of ``mbps`` Mbit/s from server ``src`` to
    server ``dst`` on its routing path (the shortest of ``topology.paths``' first four, the
    first of equals); every link of the path gains ``mbps`` of ``background_mbps``.
    ValueError naming the flow when it leaves a link no capacity.
    """
    from topology.routing import paths

    if not (float(mbps) > 0 and float(mbps) < float("inf")):
        raise ValueError(f"background {src}:{dst}: rate must be > 0, got {mbps!r}")
    path = min(paths(graph, src, dst, 4), key=len)
    out = _degraded(graph, f"flow {src}:{dst}={float(mbps):g}")
    out.graph["background_flows"] = [*background_flows(graph), {
        "src": src, "dst": dst, "mbps": float(mbps), "path": list(path)}]
    for a, b in zip(path, path[1:]):
        data = out.edges[a, b]
        data["background_mbps"] = float(data.get("background_mbps", 0.0)) + float(mbps)
        try:
            link_rate_mbps(out, a, b)
        except ValueError:
            raise ValueError(f"background {src}:{dst}={float(mbps):g} leaves link {a}-{b} "
                             "no capacity") from None
    return out


def link_failures(graph: nx.Graph) -> list[dict]:
    """The links that go down during the run: ``{"link": [a, b], "at_s"}`` each, by time."""
    return sorted(graph.graph.get("link_failures", []), key=lambda f: f["at_s"])


def with_link_failure(graph: nx.Graph, a: str, b: str, at_s: float) -> nx.Graph:
    """A copy of ``graph`` whose link a-b goes down ``at_s`` seconds into the run (the link
    stays in the graph: schedulers do not know the future). ValueError when a-b is not a
    link, the time is negative, or losing it with the graph's other failing links would
    disconnect the network."""
    _edge(graph, (a, b))
    if not (float(at_s) >= 0 and float(at_s) < float("inf")):
        raise ValueError(f"link {a}-{b}: failure time must be >= 0 s, got {at_s!r}")
    remaining = graph
    for failure in [*link_failures(graph), {"link": [a, b]}]:
        # refuses failures that together disconnect the network
        remaining = without_link(remaining, *failure["link"])
    out = _degraded(graph, f"fails {a}-{b}@{float(at_s):g}s")
    out.graph["link_failures"] = [*link_failures(graph),
                                  {"link": [a, b], "at_s": float(at_s)}]
    return out


def scaled(graph: nx.Graph, factor: float) -> nx.Graph:
    """A copy of ``graph`` with every rate times ``factor``: the graph's and every link's
    ``bw_mbps`` and ``background_mbps``, and the background flows' ``mbps`` (the same
    network, faster or slower).

    >>> from topology import make_graph
    >>> g = scaled(make_graph("bcube", n=2, k=1), 0.5)
    >>> g.graph["bw_mbps"], link_rate_mbps(g, "s00", "w0_0")
    (5.0, 5.0)
    """
    if not (float(factor) > 0 and float(factor) < float("inf")):
        raise ValueError(f"scale factor must be > 0, got {factor!r}")
    out = graph.copy()
    if "bw_mbps" in out.graph:
        out.graph["bw_mbps"] = float(out.graph["bw_mbps"]) * factor
    for _, _, data in out.edges(data=True):
        for key in ("bw_mbps", "background_mbps"):
            if key in data:
                data[key] = float(data[key]) * factor
    if background_flows(graph):
        out.graph["background_flows"] = [dict(f, mbps=float(f["mbps"]) * factor)
                                         for f in background_flows(graph)]
    return out


def fingerprint(graph: nx.Graph) -> tuple:
    """A hashable key that changes with the graph's spec, links and their rates (what
    caches of per-graph tables key on)."""
    spec = graph.graph.get("spec") or {}
    edges = tuple(sorted((min(a, b), max(a, b), float(d.get("bw_mbps", 0.0)),
                          float(d.get("background_mbps", 0.0)))
                         for a, b, d in graph.edges(data=True)))
    return (spec.get("family"), repr(sorted((spec.get("params") or {}).items())),
            float(graph.graph.get("bw_mbps") or 0.0), edges, relays(graph))


class GraphMemo:
    """Answers kept per graph (keys usually begin with ``fingerprint``), at most ``size`` of
    them: the oldest is dropped first.

    Kept answers are long-lived (the learned scheduler's rows hold millions of transfers), so
    each new one is taken out of the cyclic garbage collector's full passes with
    ``gc.freeze()`` (everything alive then is: reference counting still frees what is
    dropped, but reference cycles alive at that moment are never collected).

    >>> memo = GraphMemo(2)
    >>> [memo.get(k, lambda k=k: k * 10) for k in (1, 2, 1, 3)], len(memo)
    ([10, 20, 10, 30], 2)
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: dict = {}

    def get(self, key, make):
        """The answer kept for ``key``, made by ``make()`` (and kept) when there is none."""
        if key not in self._kept:
            if len(self._kept) >= self.size:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = make()
            gc.freeze()
        return self._kept[key]

    def __len__(self) -> int:
        return len(self._kept)
