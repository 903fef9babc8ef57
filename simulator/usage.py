"""How loaded each link was while a Schedule ran: the average Mbit/s of every directed link
over consecutive time bins.

``LinkLoad`` is the shape both sides give: ``link_load`` computes it from the simulator's
exact sending rates, and the emulation from the port counters of its switches
(``emulation.linkstats``), so a report can put the two next to each other.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

import networkx as nx

from traffic.schedule import Schedule

#: Bins ``link_load`` cuts the run into when not given its bin edges.
BINS = 40


@dataclass(frozen=True)
class LinkLoad:
    """Average load in Mbit/s of each directed link (``(a, b)``: from a to b) in each time
    bin; bin i spans ``edges_s[i]`` to ``edges_s[i + 1]``, seconds after the start of the
    collective. Every directed link of the network appears, unused ones with zeros."""

    edges_s: tuple[float, ...]
    mbps: dict[tuple[str, str], tuple[float, ...]]
    source: str = "simulator"

    def mean_mbps(self, a: str, b: str, until_s: float | None = None) -> float:
        """Average load of a->b from the first edge to ``until_s`` (default: the last)."""
        end = self.edges_s[-1] if until_s is None else until_s
        start = self.edges_s[0]
        if end <= start:
            return 0.0
        carried = 0.0
        for i, value in enumerate(self.mbps[(a, b)]):
            lo, hi = self.edges_s[i], min(self.edges_s[i + 1], end)
            if hi > lo:
                carried += value * (hi - lo)
        return carried / (end - start)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict: ``edges_s``, ``source`` and ``links``, a list of ``{"from",
        "to", "mbps"}`` in the order of ``mbps`` (values to 4 significant digits)."""
        return {"edges_s": [round(t, 6) for t in self.edges_s], "source": self.source,
                "links": [{"from": a, "to": b, "mbps": [float(f"{v:.4g}") for v in values]}
                          for (a, b), values in self.mbps.items()]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> LinkLoad:
        """Inverse of ``to_dict``; ValueError naming the field of a malformed document."""
        try:
            edges = tuple(float(t) for t in doc["edges_s"])
            links = {(str(e["from"]), str(e["to"])): tuple(float(v) for v in e["mbps"])
                     for e in doc["links"]}
            source = str(doc["source"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"link load: malformed document ({exc!r})") from None
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError("link load: edges_s must increase")
        for (a, b), values in links.items():
            if len(values) != len(edges) - 1:
                raise ValueError(f"link load: {a}->{b} has {len(values)} values for "
                                 f"{len(edges) - 1} bins")
        return cls(edges, links, source)


def directed_links(graph: nx.Graph) -> list[tuple[str, str]]:
    """Both directions of every link, in the graph's edge order."""
    return [d for a, b in graph.edges() for d in ((a, b), (b, a))]


def link_load(graph: nx.Graph, schedule: Schedule, *, edges_s: list[float] | None = None,
              bins: int = BINS, startup_s: float = 0.0, hop_latency_s: float = 0.0,
              goodput: float = 1.0, failover_s: float = 0.0,
              frame_bytes: float = 0.0) -> LinkLoad:
    """The simulated load of every directed link while ``schedule`` runs on ``graph``, with
    the cost options of ``simulator.simulate``: the bits its flows (and the graph's
    background flows) put on each link in each bin, over the bin's length, in Mbit/s of
    payload. Bins are ``edges_s``, or ``bins`` equal ones from 0 to the makespan.

    The rates are the max-min fair rates of the same event loop the simulator runs with
    network events (``simulator.events.with_events``), so they are exact, and each
    transfer's bits add up to its size on every link of its path."""
    from simulator.events import with_events
    from simulator.fluid import _check_option

    extra = None
    if _check_option("frame_bytes", frame_bytes):
        from simulator.frames import frame_tails

        extra = frame_tails(graph, schedule, frame_bytes, startup_s=startup_s,
                            hop_latency_s=hop_latency_s, goodput=goodput, failover_s=failover_s)
    trace: list[tuple[float, int, float, tuple[str, ...]]] = []
    start, finish, _ = with_events(graph, schedule, startup_s, hop_latency_s, goodput,
                                   failover_s, trace, extra)
    if edges_s is None:
        end = max((x for x in finish if not math.isnan(x)), default=0.0)
        edges_s = [end * i / bins for i in range(bins + 1)] if end > 0 else [0.0, 1.0]
    edges = [float(t) for t in edges_s]
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges_s must be at least two increasing times, got {edges_s!r}")
    bits = {d: [0.0] * (len(edges) - 1) for d in directed_links(graph)}
    last: dict[int, tuple[float, float, tuple[str, ...]]] = {}
    for when, f, rate, path in [*trace, *((edges[-1], f, 0.0, ()) for f in range(
            len(schedule.transfers), 1 + max((e[1] for e in trace), default=-1)))]:
        if f in last:
            since, was, route = last[f]
            if was > 0 and when > since:
                _spread(bits, edges, since, when, was, route)
        last[f] = (when, rate, path)
    widths = [b - a for a, b in zip(edges, edges[1:])]
    mbps = {d: tuple(x / w / 1e6 for x, w in zip(values, widths)) for d, values in bits.items()}
    return LinkLoad(tuple(edges), mbps)


def _spread(bits: dict[tuple[str, str], list[float]], edges: list[float], since: float,
            until: float, rate: float, path: tuple[str, ...]) -> None:
    """Add ``rate`` bit/s from ``since`` to ``until`` to every link of ``path``, bin by bin
    (the part outside the edges is dropped)."""
    lo = max(since, edges[0])
    hi = min(until, edges[-1])
    if hi <= lo:
        return
    first = max(0, bisect.bisect_right(edges, lo) - 1)
    shares = []
    for i in range(first, len(edges) - 1):
        a, b = max(lo, edges[i]), min(hi, edges[i + 1])
        if a >= hi:
            break
        if b > a:
            shares.append((i, rate * (b - a)))
    for hop in zip(path, path[1:]):
        row = bits[hop]
        for i, amount in shares:
            row[i] += amount
