"""Data-center topologies as networkx graphs: BCube, DCell, Jellyfish, and their routing.

Pure: imports only networkx. See docs/design.md for node names and attributes.
"""

from __future__ import annotations

import networkx as nx

from topology._common import DEFAULT_BW_MBPS, MAX_SERVERS
from topology.bcube import bcube_graph, build_path_set
from topology.dcell import dcell_graph, dcell_routing
from topology.jellyfish import jellyfish_graph
from topology.links import (
    fingerprint,
    link_rate_mbps,
    relays,
    with_background,
    with_link_rates,
    without_link,
)
from topology.routing import backup_path, paths, servers, shortest_paths, switches

FAMILIES = ("bcube", "dcell", "jellyfish")

#: Parameters of each family, in order, and the defaults ``python -m topology`` uses.
DEFAULTS = {
    "bcube": {"n": 4, "k": 1},
    "dcell": {"n": 4, "k": 1},
    "jellyfish": {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0},
}


def make_graph(family: str, bw_mbps: float = DEFAULT_BW_MBPS, **params: int) -> nx.Graph:
    """Build a topology from its family name and parameters (missing ones take DEFAULTS).

    >>> make_graph("bcube", n=2, k=1).graph["spec"]
    {'family': 'bcube', 'params': {'n': 2, 'k': 1}}
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown topology family {family!r}; choose one of {', '.join(FAMILIES)}")
    unknown = set(params) - set(DEFAULTS[family])
    if unknown:
        raise ValueError(f"{family} takes no parameter {sorted(unknown)[0]!r}")
    full = {**DEFAULTS[family], **params}
    builder = {"bcube": bcube_graph, "dcell": dcell_graph, "jellyfish": jellyfish_graph}[family]
    return builder(**full, bw_mbps=bw_mbps)


def from_spec(spec: dict, bw_mbps: float = DEFAULT_BW_MBPS) -> nx.Graph:
    """Rebuild the graph a spec dict (``graph.graph["spec"]``) describes."""
    return make_graph(spec["family"], bw_mbps=bw_mbps, **spec["params"])


def summary(graph: nx.Graph) -> dict:
    """Counts of a topology: servers, switches, links and diameter (in links)."""
    return {
        "servers": len(servers(graph)),
        "switches": len(switches(graph)),
        "links": graph.number_of_edges(),
        "diameter": nx.diameter(graph),
    }


__all__ = [
    "DEFAULTS",
    "DEFAULT_BW_MBPS",
    "FAMILIES",
    "MAX_SERVERS",
    "backup_path",
    "bcube_graph",
    "build_path_set",
    "dcell_graph",
    "dcell_routing",
    "fingerprint",
    "from_spec",
    "jellyfish_graph",
    "link_rate_mbps",
    "make_graph",
    "relays",
    "paths",
    "servers",
    "shortest_paths",
    "summary",
    "switches",
    "with_background",
    "with_link_rates",
    "without_link",
]
