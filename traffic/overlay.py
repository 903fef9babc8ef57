"""Routing for the collectives: who may relay, load-aware shortest paths, overlay trees.

Collectives talk in server-to-server hops whose physical path runs through switches (and, in
server-centric families, relay servers). ``Router`` picks such paths on shortest routes,
steering each hop onto the least-loaded directed link, and ``spt_tree`` builds a shortest-path
spanning tree over the servers. Pure: standard library and networkx only.
"""

from __future__ import annotations

import heapq
from collections import deque

import networkx as nx

from topology.links import link_rate_mbps, relays
from topology.routing import servers as servers_by_rank

#: A server-to-server overlay tree: each server but the root -> (parent server, node path
#: from the server to its parent).
Tree = dict[str, tuple[str, tuple[str, ...]]]


def topology_of(graph: nx.Graph) -> dict:
    """The spec a Schedule records: the graph's own, or a custom placeholder without one."""
    spec = graph.graph.get("spec")
    if spec is None:
        return {"family": "custom", "params": {}}
    return {"family": spec["family"], "params": dict(spec["params"])}


class Router:
    """Shortest paths between servers that respect the relay rule and spread load.

    ``load`` counts the bytes already put on every directed link; ``path`` picks, among the
    shortest allowed routes, the one whose most loaded link (per unit of capacity) is least
    loaded, then the least total load, then by node names (so results are deterministic).
    """

    def __init__(self, graph: nx.Graph) -> None:
        self.graph = graph
        #: Neighbours of every node (networkx's views are slow in the inner loops).
        self.adj = {x: list(nbrs) for x, nbrs in graph.adjacency()}
        self.relay = relays(graph)
        self.servers = servers_by_rank(graph)
        self.rank = {v: r for r, v in enumerate(self.servers)}
        self.load: dict[tuple[str, str], float] = {}
        self._dist: dict[str, dict[str, int]] = {}
        self._next: dict[str, dict[str, list[tuple[str, float]]]] = {}
        self.cap = {}
        for u, v in graph.edges():
            self.cap[(u, v)] = self.cap[(v, u)] = link_rate_mbps(graph, u, v)

    def is_server(self, node: str) -> bool:
        """Whether ``node`` is a server."""
        return node in self.rank

    def passable(self, node: str, end: str) -> bool:
        """Whether a path towards ``end`` may go through ``node``."""
        return node == end or self.relay or node not in self.rank

    def distances(self, dst: str) -> dict[str, int]:
        """Hop counts from every node to ``dst`` over nodes that may carry traffic to it."""
        dist = self._dist.get(dst)
        if dist is None:
            dist = {dst: 0}
            queue = deque([dst])
            while queue:
                x = queue.popleft()
                if x != dst and not self.passable(x, dst):
                    continue
                for y in self.adj[x]:
                    if y not in dist:
                        dist[y] = dist[x] + 1
                        queue.append(y)
            self._dist[dst] = dist
        return dist

    def hops(self, src: str, dst: str) -> int:
        """Length in links of the shortest allowed path from ``src`` to ``dst``."""
        dist = self.distances(dst)
        if src not in dist:
            raise ValueError(f"no path from {src} to {dst}")
        return dist[src]

    def _next_hops(self, dst: str) -> dict[str, list[tuple[str, float]]]:
        """Per node, its next hops on the shortest allowed routes to ``dst`` with the
        capacities of the links to them."""
        nxt = self._next.get(dst)
        if nxt is None:
            dist = self.distances(dst)
            nxt = {x: [(y, self.cap[(x, y)]) for y in self.adj[x]
                       if dist.get(y, -1) == d - 1 and self.passable(y, dst)]
                   for x, d in dist.items()}
            self._next[dst] = nxt
        return nxt

    def path(self, src: str, dst: str, nbytes: float = 0.0) -> tuple[str, ...]:
        """A shortest allowed path from ``src`` to ``dst`` on the least-loaded links, and
        ``nbytes`` added to the load of each of its directed links."""
        nxt = self._next_hops(dst)
        if src not in nxt:
            raise ValueError(f"no path from {src} to {dst}")
        # Dynamic programme over the shortest-path DAG: the least (worst, total) load per
        # capacity from each node to dst; ties go to the smaller next-hop name.
        best: dict[str, tuple[float, float, str]] = {dst: (0.0, 0.0, "")}
        load = self.load

        def solve(x: str) -> tuple[float, float, str]:
            if x not in best:
                options = []
                for y, cap in nxt[x]:
                    level = load.get((x, y), 0.0) / cap
                    worst, total, _ = solve(y)
                    options.append((max(level, worst), total + level, y))
                best[x] = min(options)
            return best[x]

        solve(src)
        path, x = [src], src
        while x != dst:
            x = best[x][2]
            path.append(x)
        if nbytes:
            self.add(path, nbytes)
        return tuple(path)

    def add(self, path: tuple[str, ...] | list[str], nbytes: float) -> None:
        """Add ``nbytes`` to the load of every directed link of ``path``."""
        for a, b in zip(path, path[1:], strict=False):
            self.load[(a, b)] = self.load.get((a, b), 0.0) + nbytes

    def cost(self, path: tuple[str, ...], nbytes: float) -> tuple[float, float]:
        """(worst, total) load per capacity over the links of ``path`` in both directions
        if ``nbytes`` more went each way: the greedy trees minimise it."""
        worst = total = 0.0
        for a, b in zip(path, path[1:], strict=False):
            for link in ((a, b), (b, a)):
                level = (self.load.get(link, 0.0) + nbytes) / self.cap[link]
                worst = max(worst, level)
                total += level
        return worst, total

    def center(self) -> str:
        """The server with the most link capacity, then the smallest eccentricity, then the
        lowest rank: a good root for star- and tree-shaped collectives."""
        def key(v: str) -> tuple[float, int, int]:
            capacity = sum(self.cap[(v, y)] for y in self.graph[v])
            ecc = max(self.hops(u, v) for u in self.servers)
            return (-capacity, ecc, self.rank[v])
        return min(self.servers, key=key)

    def farthest(self, root: str) -> str:
        """The server farthest from ``root`` (lowest rank among ties)."""
        return max(self.servers, key=lambda v: (self.hops(v, root), -self.rank[v]))


def spt_tree(router: Router, root: str, penalty: float = 0.0) -> Tree:
    """A shortest-path spanning tree over the servers, rooted at ``root``.

    Dijkstra from the root with link weight 1 + ``penalty`` * (load of the link, both
    directions, per capacity), so ``penalty > 0`` steers a second tree off a first one's
    links. Where servers relay, a server's parent is the nearest server on its tree path to
    the root. Where they do not (Jellyfish), the first server under each switch is its
    switch's head: the other servers there hang off it, and it hangs off the head of the
    nearest switch above that has one.
    """
    graph, parent = router.graph, {root: None}
    dist = {root: 0.0}
    heap = [(0.0, root)]
    done: set[str] = set()
    found: list[str] = []
    scale = max(router.load.values(), default=0.0) or 1.0
    while heap:
        d, x = heapq.heappop(heap)
        if x in done:
            continue
        done.add(x)
        if router.is_server(x) and x != root:
            found.append(x)
            if not router.relay:
                continue
        for y in sorted(graph[x]):
            if y in done:
                continue
            load = router.load.get((x, y), 0.0) + router.load.get((y, x), 0.0)
            nd = d + 1.0 + penalty * load / scale
            if nd < dist.get(y, float("inf")) - 1e-12:
                dist[y], parent[y] = nd, x
                heapq.heappush(heap, (nd, y))
    if len(found) + 1 < len(router.servers):
        missing = next(v for v in router.servers if v != root and v not in done)
        raise ValueError(f"server {missing} is not reachable from {root}")
    tree: Tree = {}
    head: dict[str, str] = {}
    for v in found:
        path = [v]
        x = parent[v]
        if not router.relay and not router.is_server(x):
            if x in head:
                tree[v] = (head[x], (v, x, head[x]))
                continue
            head[x] = v
        while True:
            path.append(x)
            if router.is_server(x):
                break
            if not router.relay and x in head and head[x] != v:
                path.append(head[x])
                break
            x = parent[x]
        tree[v] = (path[-1], tuple(path))
    return tree


def children_of(tree: Tree, root: str) -> tuple[list[str], dict[str, list[str]]]:
    """The servers of ``tree`` parents first (breadth-first from the root) and each
    server's children, in rank-stable order."""
    children: dict[str, list[str]] = {root: []}
    for v in tree:
        children.setdefault(v, [])
    for v, (p, _) in tree.items():
        children[p].append(v)
    order, queue = [], deque([root])
    while queue:
        v = queue.popleft()
        order.append(v)
        queue.extend(children[v])
    if len(order) != len(children):
        raise ValueError("the overlay tree is not connected to its root")
    return order, children


def depth(tree: Tree, root: str) -> int:
    """Height of ``tree`` in server hops."""
    order, children = children_of(tree, root)
    level = {root: 0}
    for v in order:
        for c in children[v]:
            level[c] = level[v] + 1
    return max(level.values())
