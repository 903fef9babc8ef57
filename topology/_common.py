"""Shared helpers for the topology generators: argument checks and graph labels."""

from __future__ import annotations

import networkx as nx

#: Largest network any generator builds. An emulated server is a network namespace plus an
#: Open vSwitch bridge; far fewer than this fit on a laptop, but the pure models stay usable.
MAX_SERVERS = 1024

#: Default capacity of every link, each direction, in Mbit/s. Low on purpose: the emulated data
#: plane runs in one OVS userspace thread, and shaping is exact only while the total traffic in
#: flight stays well below its limit (see docs/design.md).
DEFAULT_BW_MBPS = 10.0


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int, or raise ValueError naming it when it is not >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_bw(bw_mbps: object) -> float:
    """Return a positive finite link capacity, or raise ValueError naming it."""
    try:
        bw = float(bw_mbps)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"bw_mbps must be a number, got {bw_mbps!r}") from None
    if not (bw > 0 and bw < float("inf")):
        raise ValueError(f"bw_mbps must be > 0, got {bw_mbps!r}")
    return bw


def check_size(family: str, servers: int) -> None:
    """Raise ValueError when a network would exceed MAX_SERVERS."""
    if servers > MAX_SERVERS:
        raise ValueError(
            f"{family} would have {servers} servers; the limit is {MAX_SERVERS}"
        )


def label(graph: nx.Graph, family: str, params: dict, bw_mbps: float) -> nx.Graph:
    """Attach the spec (family and parameters) that rebuilds ``graph`` and give servers ranks."""
    graph.graph["spec"] = {"family": family, "params": dict(params)}
    graph.graph["bw_mbps"] = bw_mbps
    graph.graph["name"] = f"{family}({', '.join(str(v) for v in params.values())})"
    return graph
