"""Routing path sets behind one API: ``paths(graph, src, dst, k)``."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence

import networkx as nx

from topology.bcube import build_path_set
from topology.dcell import dcell_routing
from topology.links import relays


def servers(graph: nx.Graph) -> list[str]:
    """The graph's servers, ordered by rank."""
    found = [(data["rank"], v) for v, data in graph.nodes(data=True)
             if data.get("role") == "server"]
    return [v for _, v in sorted(found)]


def switches(graph: nx.Graph) -> list[str]:
    """The graph's switches, in insertion order."""
    return [v for v, role in graph.nodes(data="role") if role == "switch"]


#: ``shortest_paths``' depth-first search may take this many steps per node of the searched
#: graph (one budget for all its length classes) before it hands over to Yen's algorithm.
SEARCH_STEPS = 20
#: Longest path it searches depth-first (one recursion level per hop).
SEARCH_DEPTH = 200


def _relay_graph(graph: nx.Graph, src: str, dst: str) -> nx.Graph:
    """The graph in which paths from src to dst may be searched: where servers do not relay
    (switch-centric networks such as Jellyfish) other servers are left out."""
    if relays(graph):
        return graph
    keep = [v for v, role in graph.nodes(data="role") if role == "switch" or v in (src, dst)]
    return graph.subgraph(keep)


def _sole_switch(graph: nx.Graph, server: str) -> str | None:
    """The switch a server hangs off when it has exactly one link to a switch, else None."""
    if graph.degree(server) != 1:
        return None
    (nbr,) = graph[server]
    return nbr if graph.nodes[nbr].get("role") == "switch" else None


def shortest_paths(graph: nx.Graph, src: str, dst: str, k: int,
                   cache: dict | None = None) -> list[list[str]]:
    """Up to k loop-free paths from src to dst, shortest first (what Yen's algorithm gives;
    ``_by_length`` finds them).

    Ties are broken by node names so the result does not depend on insertion order. Where
    servers do not relay and both ends hang off one switch each, every path is the two ends
    around a path between their switches, so the search runs between the switches
    (``cache``: a dict that keeps those searches, and the hops to each destination where the
    whole graph is searched, for callers asking about many pairs of one graph)."""
    if not relays(graph) and src != dst:
        a, b = _sole_switch(graph, src), _sole_switch(graph, dst)
        if a is not None and b is not None:
            if a == b:
                return [[src, a, dst]]
            key = (a, b, k)
            core = None if cache is None else cache.get(key)
            if core is None:
                core = _by_length(_relay_graph(graph, a, b), a, b, k)
                if cache is not None:
                    cache[key] = core
            return [[src, *p, dst] for p in core]
    searched = _relay_graph(graph, src, dst)
    if cache is None or searched is not graph:
        return _by_length(searched, src, dst, k)
    # The whole graph is searched for every pair: its hops to dst and sorted neighbours are
    # kept for the next pair.
    dist = cache.get(("hops to", dst))
    if dist is None:
        dist = cache[("hops to", dst)] = nx.single_source_shortest_path_length(graph, dst)
    return _by_length(graph, src, dst, k, dist, cache.setdefault("neighbours", {}))


def _by_length(searched: nx.Graph, src: str, dst: str, k: int, dist: dict | None = None,
               adj: dict | None = None) -> list[list[str]]:
    """The k first of the loop-free paths from src to dst, by length, then by node names:
    every path of each length, shortest length first, until k are found, whole length
    classes sorted. By a depth-first search per length that only steps to nodes from which
    dst is still reachable in the hops left; where that search takes more than
    ``SEARCH_STEPS`` steps per node in all (few paths, many dead ends), by Yen's algorithm
    (networkx), which gives the same paths. ``dist`` (hops to dst) and ``adj`` (sorted
    neighbours, filled on use): computed here when not given."""
    if src not in searched or dst not in searched:
        raise nx.NodeNotFound(f"{src if src not in searched else dst} is not in the graph")
    if dist is None:
        dist = nx.single_source_shortest_path_length(searched, dst)
    if src not in dist:
        raise nx.NetworkXNoPath(f"no path from {src} to {dst}")
    if adj is None:
        adj = {}
    out: list[list[str]] = []
    steps = [SEARCH_STEPS * searched.number_of_nodes()]
    for length in range(dist[src], searched.number_of_nodes()):
        found: list[list[str]] = []
        if length > SEARCH_DEPTH or not _extend(searched, adj, dist, dst, [src], {src},
                                                length, found, steps):
            break
        out.extend(sorted(found))
        if len(out) >= k:
            return out[:k]
    else:
        return out
    return yen_paths(searched, src, dst, k)


def yen_paths(searched: nx.Graph, src: str, dst: str, k: int) -> list[list[str]]:
    """What ``_by_length`` gives, by Yen's algorithm as networkx yields the paths (shortest first),
    whole length classes sorted by node names."""
    out: list[list[str]] = []
    for _, group in itertools.groupby(nx.shortest_simple_paths(searched, src, dst), key=len):
        out.extend(sorted(group))
        if len(out) >= k:
            break
    return out[:k]


def _extend(searched: nx.Graph, adj: dict, dist: dict, dst: str, path: list[str],
            on_path: set[str], left: int, found: list[list[str]], steps: list[int]) -> bool:
    """Append to ``found`` every loop-free continuation of ``path`` reaching dst in exactly
    ``left`` more hops (``dist``: hops to dst; ``adj``: sorted neighbours, filled on use);
    False once ``steps[0]`` steps are spent."""
    v = path[-1]
    if left == 0:
        if v == dst:
            found.append(list(path))
        return True
    if v not in adj:
        adj[v] = sorted(searched[v])
    for w in adj[v]:
        if w not in on_path and dist.get(w, left) <= left - 1 and (w != dst or left == 1):
            steps[0] -= 1
            if steps[0] < 0:
                return False
            path.append(w)
            on_path.add(w)
            whole = _extend(searched, adj, dist, dst, path, on_path, left - 1, found, steps)
            path.pop()
            on_path.discard(w)
            if not whole:
                return False
    return True


def paths(graph: nx.Graph, src: str, dst: str, k: int = 1,
          cache: dict | None = None) -> list[list[str]]:
    """Return up to ``k`` distinct loop-free paths (node lists, src first, dst last).

    BCube: BuildPathSet's k+1 node-disjoint parallel paths come first; DCell: the
    DCellRouting path comes first (paths crossing a link missing from the graph, as on a
    copy with a failed link, are dropped); then, for any graph, shortest simple paths fill
    up to k (``cache``: see ``shortest_paths``).

    >>> from topology.bcube import bcube_graph
    >>> paths(bcube_graph(4, 1), "s00", "s13", 2)
    [['s00', 'w1_0', 's10', 'w0_1', 's13'], ['s00', 'w0_0', 's03', 'w1_3', 's13']]
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    for name in (src, dst):
        if graph.nodes.get(name, {}).get("role") != "server":
            raise ValueError(f"{name!r} is not a server of {graph.graph.get('name', 'graph')}")
    if src == dst:
        return [[src]]
    family = graph.graph["spec"]["family"]
    if family == "bcube":
        first = build_path_set(graph, src, dst)
    elif family == "dcell":
        first = [dcell_routing(graph, src, dst)]
    else:
        first = []
    # On a degraded copy (a failed link) the family's own paths may use a missing link.
    out = [p for p in first if all(graph.has_edge(a, b) for a, b in zip(p, p[1:]))][:k]
    if len(out) < k:
        for path in shortest_paths(graph, src, dst, k + len(out), cache):
            if path not in out:
                out.append(path)
            if len(out) == k:
                break
    return out


def backup_path(graph: nx.Graph, path: Sequence[str], a: str, b: str) -> tuple[str, ...] | None:
    """The path the traffic of ``path`` takes once link a-b is down.

    Unchanged when the path does not cross a-b. Else repaired at the nearest node before
    the link that has a detour (at the node right before it, this is what an OpenFlow
    fast-failover group does; further back, a controller re-route): the path up to that
    node, then the shortest detour that avoids the link, the nodes already crossed and
    (where servers do not relay) other servers, to the first later node of the path it
    meets, then the rest of the path. Breadth-first with neighbours by name, so ties are
    deterministic. None when no detour exists.

    >>> from topology.bcube import bcube_graph
    >>> g = bcube_graph(2, 1)
    >>> backup_path(g, ("s00", "w0_0", "s01"), "s00", "w0_0")
    ('s00', 'w1_0', 's10', 'w0_1', 's11', 'w1_1', 's01')
    >>> backup_path(g, ("s00", "w0_0", "s01"), "w0_0", "s01")  # no way on from w0_0
    ('s00', 'w1_0', 's10', 'w0_1', 's11', 'w1_1', 's01')
    """
    path = tuple(path)
    hops = list(zip(path, path[1:]))
    if (a, b) in hops:
        i = hops.index((a, b))
    elif (b, a) in hops:
        i = hops.index((b, a))
    else:
        return path
    dst, rest = path[-1], path[i + 1:]
    later = {n: k for k, n in enumerate(rest)}
    relay = relays(graph)
    roles = nx.get_node_attributes(graph, "role")
    for j in range(i, -1, -1):
        u, blocked = path[j], set(path[:j])
        parent = {u: None}
        queue = deque([u])
        join = None
        while queue and join is None:
            x = queue.popleft()
            for y in sorted(graph.neighbors(x)):
                if y in parent or y in blocked or {x, y} == {a, b}:
                    continue
                if y != dst and not relay and roles.get(y) == "server":
                    continue
                parent[y] = x
                if y in later:
                    join = y
                    break
                queue.append(y)
        if join is None:
            continue
        detour = [join]
        while detour[-1] != u:
            detour.append(parent[detour[-1]])
        return path[:j] + tuple(reversed(detour)) + rest[later[join] + 1:]
    return None
