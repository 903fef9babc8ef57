"""Aggregation trees over any topology graph: the overlay the learned policy grows its trees
on, and the trees of the hand rules it is compared with (``agent.rules``).

A tree spans the servers; each of its edges is a server-to-server *hop* routed on a concrete
node path of the graph (``topology.paths``). A chunk of the buffer is reduced up its tree to
the root and broadcast back down the same hops reversed, so every hop loads each of its
directed links once per direction.

``Overlay`` interns every hop path once (a padded table of directed-link ids, as the
simulator does) so that growing a tree against the current link loads is a few numpy
operations. Hand-rule trees, all topology-agnostic:

- ``greedy``: Prim's tree, each step attaching the server whose hop leaves the smallest peak
  directed-link load (plus a per-link and a per-depth penalty: several weightings);
- ``star``: every server attaches straight to the root (sharded parameter server);
- ``chain``: a Hamiltonian cycle of the servers with one edge of the root removed, reduced
  in one orientation and broadcast in the other. The cycles are searched once per graph so
  that the cycle's hops, used both ways, load every directed link as evenly as possible: on
  BCube(4,1) and DCell(4,1) each server then sends clockwise on one NIC and
  counter-clockwise on the other.

Pure: standard library, networkx and numpy only (no torch).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np

from topology import fingerprint, link_rate_mbps
from topology import paths as topology_paths
from topology import servers as topology_servers
from topology.links import GraphMemo

#: Paths interned per ordered server pair.
PATHS_PER_PAIR = 3
#: Greedy weightings (per-link penalty, per-depth penalty), in units of one chunk's link time.
GREEDY_WEIGHTS = ((0.25, 0.0), (0.25, 1.0), (1.0, 0.25), (0.05, 0.05))
#: Local-search moves spent on each Hamiltonian cycle.
CYCLE_MOVES = 4000
#: Relative gain in worst link load for which the ring packing's tours replace the
#: searched cycles.
SIGNIFICANT = 0.02


@dataclass(frozen=True)
class Tree:
    """A spanning tree rooted at ``root``: ``parent[v]`` and ``hop[v]`` (an Overlay hop id
    whose path runs from v up to its parent) for every other server index v."""

    root: int
    parent: tuple[int, ...]
    hop: tuple[int, ...]
    kind: str

    def depth(self) -> int:
        """Largest number of hops from a server up to the root."""
        best = 0
        for v in range(len(self.parent)):
            d = 0
            while v != self.root:
                v = self.parent[v]
                d += 1
            best = max(best, d)
        return best

    def children(self) -> list[list[int]]:
        """Children of every server."""
        kids: list[list[int]] = [[] for _ in self.parent]
        for v, p in enumerate(self.parent):
            if v != self.root:
                kids[p].append(v)
        return kids


class Overlay:
    """The servers of ``graph`` and every interned server-to-server hop path."""

    def __init__(self, graph: nx.Graph, seed: int = 0, turns: int = 2) -> None:
        self.graph = graph
        self.servers = topology_servers(graph)
        self.n = len(self.servers)
        if self.n < 2:
            raise ValueError("the graph needs at least two servers")
        index = {v: i for i, v in enumerate(self.servers)}
        self.links: list[tuple[str, str]] = []
        link_id: dict[tuple[str, str], int] = {}
        for u, v in graph.edges():
            for a, b in ((u, v), (v, u)):
                link_id[(a, b)] = len(self.links)
                self.links.append((a, b))
        self.cap_Bps = np.array([link_rate_mbps(graph, a, b) * 1e6 / 8 for a, b in self.links]
                                + [np.inf])
        self.dummy = len(self.links)
        self.link_id = link_id
        self.hop_path: list[tuple[str, ...]] = []
        src, dst, rows = [], [], []
        self.pair_hops: dict[tuple[int, int], list[int]] = {}
        cache: dict = {}
        found = {(u, v): [tuple(p) for p in topology_paths(graph, u, v, PATHS_PER_PAIR, cache)]
                 for u in self.servers for v in self.servers if u != v}
        for u in self.servers:
            for v in self.servers:
                if u == v:
                    continue
                # Every hop's reverse is interned too, so a tree's broadcast can retrace it.
                mine = found[(u, v)]
                mine = mine + [p[::-1] for p in found[(v, u)] if p[::-1] not in mine]
                for path in mine:
                    hop = len(self.hop_path)
                    self.hop_path.append(tuple(path))
                    self.pair_hops.setdefault((index[u], index[v]), []).append(hop)
                    src.append(index[u])
                    dst.append(index[v])
                    fwd = [link_id[(a, b)] for a, b in zip(path, path[1:], strict=False)]
                    rev = [link_id[(b, a)] for a, b in zip(path, path[1:], strict=False)]
                    rows.append(fwd + rev)
        width = max(len(r) for r in rows)
        self.hop_src = np.array(src)
        self.hop_dst = np.array(dst)
        #: Per hop, its directed links both ways (forward then reverse), padded with dummy.
        self.hop_links = np.full((len(rows), width), self.dummy)
        #: Per hop, its forward directed links only, padded with dummy.
        self.hop_fwd = np.full((len(rows), width // 2), self.dummy)
        for i, r in enumerate(rows):
            self.hop_links[i, : len(r)] = r
            self.hop_fwd[i, : len(r) // 2] = r[: len(r) // 2]
        self.hop_len = np.array([len(r) // 2 for r in rows])
        self.reverse = np.array([self._reverse_hop(h) for h in range(len(rows))])
        #: Per hop, whether a server relays it, and the neighbours its path leaves the
        #: sender by and enters the receiver from (node ids in ``node_id``).
        self.node_id = {v: i for i, v in enumerate(graph.nodes)}
        self.hop_relayed = np.array([any(x in index for x in p[1:-1]) for p in self.hop_path])
        self.hop_out = np.array([self.node_id[p[1]] for p in self.hop_path])
        self.hop_in = np.array([self.node_id[p[-2]] for p in self.hop_path])
        self._seed, self._turns = seed, turns

    @cached_property
    def cycles(self) -> list[tuple[tuple[int, int], ...]]:
        """Hamiltonian cycles of the servers (``find_cycles``), searched on first use: the
        alternating hand rule of the ablation needs them, the learned policy does not."""
        return find_cycles(self, self._seed, self._turns)

    def _reverse_hop(self, hop: int) -> int:
        path = self.hop_path[hop]
        pair = (int(self.hop_dst[hop]), int(self.hop_src[hop]))
        return next(h for h in self.pair_hops[pair] if self.hop_path[h] == path[::-1])

    def usage(self, tree: Tree) -> tuple[np.ndarray, np.ndarray]:
        """How many times the tree's reduce (up) and broadcast (down) cross each directed
        link (the last entry is the dummy, always 0)."""
        hops = [h for v, h in enumerate(tree.hop) if v != tree.root]
        up = np.bincount(self.hop_fwd[hops].ravel(), minlength=len(self.cap_Bps))
        down = np.bincount(self.hop_fwd[self.reverse[hops]].ravel(),
                           minlength=len(self.cap_Bps))
        up[self.dummy] = down[self.dummy] = 0
        return up.astype(float), down.astype(float)

    def path(self, hop: int) -> tuple[str, ...]:
        """The node path of a hop."""
        return self.hop_path[hop]


def greedy_tree(ov: Overlay, root: int, load_s: np.ndarray, chunk_bytes: float,
                link_weight: float, depth_weight: float) -> Tree:
    """Prim's tree from ``root`` against the current load (seconds per directed link): each
    step attaches, over any interned hop from a tree server to an outside one, the hop with
    the smallest peak link load after adding it, plus ``link_weight`` per link and
    ``depth_weight`` per level of the attaching server, in chunk link-times."""
    inc = chunk_bytes / ov.cap_Bps
    unit = float(inc[:-1].max())
    load = load_s.copy()
    inside = np.zeros(ov.n, bool)
    inside[root] = True
    depth = np.zeros(ov.n)
    parent = [root] * ov.n
    hop_of = [-1] * ov.n
    # Tree hops run child -> parent: src outside, dst inside.
    for _ in range(ov.n - 1):
        ok = ~inside[ov.hop_src] & inside[ov.hop_dst]
        cand = np.flatnonzero(ok)
        peak = (load[ov.hop_links[cand]] + inc[ov.hop_links[cand]]).max(axis=1)
        cost = (peak + unit * (link_weight * ov.hop_len[cand]
                               + depth_weight * depth[ov.hop_dst[cand]]))
        best = int(cand[np.argmin(cost)])
        v, u = int(ov.hop_src[best]), int(ov.hop_dst[best])
        inside[v] = True
        depth[v] = depth[u] + 1
        parent[v], hop_of[v] = u, best
        np.add.at(load, ov.hop_links[best], inc[ov.hop_links[best]])
        load[ov.dummy] = 0.0
    return Tree(root, tuple(parent), tuple(hop_of), f"greedy{link_weight:g}/{depth_weight:g}")


def star_tree(ov: Overlay, root: int, load_s: np.ndarray) -> Tree:
    """Every server attaches straight to ``root`` on its least-loaded interned path."""
    parent = [root] * ov.n
    hop_of = [-1] * ov.n
    for v in range(ov.n):
        if v != root:
            hops = ov.pair_hops[(v, root)]
            hop_of[v] = min(hops, key=lambda h: (load_s[ov.hop_links[h]].max(), ov.hop_len[h]))
    return Tree(root, tuple(parent), tuple(hop_of), "star")


def chain_tree(ov: Overlay, cycle: tuple[tuple[int, int], ...], root: int,
               clockwise: bool) -> Tree:
    """The cycle (a tuple of (server, hop to the next server)) without one edge at
    ``root``: ``clockwise`` reduces along the cycle's direction (leaf = root's successor),
    otherwise against it (leaf = root's predecessor, hops reversed)."""
    order = [v for v, _ in cycle]
    n = len(order)
    at = order.index(root)
    parent = [root] * ov.n
    hop_of = [-1] * ov.n
    for step in range(1, n):
        if clockwise:
            # order[at - step] sends its reduce on to order[at - step + 1], nearer the root.
            i = (at - step) % n
            v, up = order[i], order[(i + 1) % n]
            parent[v], hop_of[v] = up, cycle[i][1]
        else:
            i = (at + step) % n
            v, up = order[i], order[(i - 1) % n]
            hop_of[v] = int(ov.reverse[cycle[(i - 1) % n][1]])
            parent[v] = up
    return Tree(root, tuple(parent), tuple(hop_of), "chain-cw" if clockwise else "chain-ccw")


def _cycle_cost(ov: Overlay, order: list[int], base: np.ndarray) -> tuple[float, list[int]]:
    """Score a cyclic order: pick per consecutive pair the hop (with a reverse) that loads
    least, and return (peak load**2-sum, chosen hops)."""
    used = base.copy()
    hops = []
    for i, v in enumerate(order):
        w = order[(i + 1) % len(order)]
        best = min(ov.pair_hops[(v, w)],
                   key=lambda h: ((used[ov.hop_links[h]] + 1).max(), ov.hop_len[h]))
        np.add.at(used, ov.hop_links[best], 1.0)
        used[ov.dummy] = 0.0
        hops.append(best)
    real = used[:-1] * (ov.cap_Bps[:-1].min() / ov.cap_Bps[:-1])
    return float((real ** 2).sum() + 4.0 * ((real > 1) * (real - 1) ** 2).sum()), hops


def alternating_cycle(ov: Overlay, budget: int = 200_000) -> list[int] | None:
    """A Hamiltonian cycle of direct hops (no relay server) in which every server reaches
    its predecessor and its successor through different links of its own, found by
    depth-first search (fewest onward options first) within ``budget`` steps; None when
    there is none or the servers have a single link each."""
    graph, names = ov.graph, ov.servers
    index = {v: i for i, v in enumerate(names)}
    if min(graph.degree(v) for v in names) < 2:
        return None
    nic: dict[tuple[int, int], str] = {}
    adjacent: list[list[int]] = [[] for _ in names]
    for (u, w), hops in ov.pair_hops.items():
        path = min((ov.hop_path[h] for h in hops), key=len)
        if not any(x in index for x in path[1:-1]):
            nic[(u, w)] = path[1]
            adjacent[u].append(w)
    order, used, steps = [0], [False] * ov.n, 0
    used[0] = True

    def extend() -> bool:
        nonlocal steps
        steps += 1
        if steps > budget:
            return False
        here = order[-1]
        came = nic.get((here, order[-2])) if len(order) > 1 else None
        if len(order) == ov.n:
            return ((here, 0) in nic and nic[(here, 0)] != came
                    and nic[(0, here)] != nic[(0, order[1])])
        options = [w for w in adjacent[here] if not used[w] and nic[(here, w)] != came]
        options.sort(key=lambda w: sum(not used[x] for x in adjacent[w]))
        for w in options:
            used[w] = True
            order.append(w)
            if extend():
                return True
            order.pop()
            used[w] = False
        return False

    return order if extend() else None


def cycle_set_load(ov: Overlay, cycles: list[tuple[tuple[int, int], ...]]) -> float:
    """Worst directed-link load (crossings per unit of the smallest capacity) when every
    cycle carries an equal share of the buffer, each in both orientations: what a set of
    cycles costs the chain candidates when each one is used as often as the others."""
    used = np.zeros(len(ov.cap_Bps))
    for cycle in cycles:
        for _, h in cycle:
            np.add.at(used, ov.hop_links[h], 1.0)
    used[ov.dummy] = 0.0
    real = used[:-1] * (ov.cap_Bps[:-1].min() / ov.cap_Bps[:-1])
    return float(real.max()) / (2 * len(cycles))


def packing_cycles(ov: Overlay) -> list[tuple[tuple[int, int], ...]]:
    """The tours of ``traffic.rings.ring_packing`` (a weighted packing of rings, each tour
    searched against the links the earlier ones crowd) as overlay cycles; a tour hop whose
    exact path is not interned takes the pair's shortest interned hop."""
    from traffic.overlay import Router
    from traffic.rings import ring_packing

    index = {v: i for i, v in enumerate(ov.servers)}
    rings, _ = ring_packing(Router(ov.graph))
    # The packing lists every tour twice (both directions) after the first one.
    tours = rings if len(rings) == 1 else rings[::2]
    out = []
    for _, order, paths in tours:
        cycle = []
        for v, path in zip(order, paths, strict=True):
            pair = (index[path[0]], index[path[-1]])
            hops = ov.pair_hops[pair]
            exact = [h for h in hops if ov.hop_path[h] == tuple(path)]
            cycle.append((index[v], exact[0] if exact else min(hops, key=lambda h: ov.hop_len[h])))
        out.append(tuple(cycle))
    return out


def find_cycles(ov: Overlay, seed: int, turns: int = 2,
                count: int = 2) -> list[tuple[tuple[int, int], ...]]:
    """Hamiltonian cycles of the servers whose hops, used both ways, load the directed
    links evenly. The NIC-alternating cycle when one exists, else local search (2-opt and
    node moves, simulated annealing, seeded); each later cycle is searched against the load
    of the earlier ones, ``count`` in all. Without an alternating cycle the tours of the
    ring packing replace them when their equal-share load (``cycle_set_load``) is lower by
    SIGNIFICANT and each owner has the ``turns`` (chunks per server) to carry every tour both
    ways: on DCell(3,1) no two cycles balance the NICs, seven tours nearly do with 14 chunks
    per server. With fewer turns the first tours would carry everything (DCell(3,1) at 2
    chunks per server under bcube-4-1.pt: 2.54 x the bound on the tours, 2.27 on the
    searched cycles)."""
    first = alternating_cycle(ov)
    out = _search_cycles(ov, seed, count, first)
    if first is None and ov.n > 3:
        packed = packing_cycles(ov)
        if (2 * len(packed) <= turns
                and cycle_set_load(ov, packed) < cycle_set_load(ov, out) * (1 - SIGNIFICANT)):
            return packed
    return out


def _search_cycles(ov: Overlay, seed: int, count: int,
                   first: list[int] | None) -> list[tuple[tuple[int, int], ...]]:
    rng = random.Random(seed)
    base = np.zeros(len(ov.cap_Bps))
    out = []
    for attempt in range(count):
        order = list(range(ov.n))
        rng.shuffle(order)
        if attempt == 0 and first is not None:
            order = first
        cost, hops = _cycle_cost(ov, order, base)
        best = (cost, order, hops)
        moves = 0 if ov.n <= 3 or (attempt == 0 and first is not None) else CYCLE_MOVES
        for move in range(moves):
            temperature = 2.0 * (1 - move / CYCLE_MOVES) + 1e-3
            i, j = sorted(rng.sample(range(ov.n), 2))
            trial = order[:]
            if rng.random() < 0.5:
                trial[i:j + 1] = reversed(trial[i:j + 1])
            else:
                trial.insert(j, trial.pop(i))
            c, h = _cycle_cost(ov, trial, base)
            if c <= cost or rng.random() < np.exp((cost - c) / temperature):
                order, cost, hops = trial, c, h
                if cost < best[0]:
                    best = (cost, order, hops)
        cost, order, hops = best
        cycle = tuple(zip(order, hops, strict=True))
        if cycle in out:
            break
        out.append(cycle)
        for h in hops:
            np.add.at(base, ov.hop_links[h], 1.0)
        base[ov.dummy] = 0.0
    return out


#: Overlays kept (oldest dropped first).
OVERLAY_CACHE = 64
_OVERLAYS = GraphMemo(OVERLAY_CACHE)


def overlay_for(graph: nx.Graph, seed: int = 0, turns: int = 2) -> Overlay:
    """The (cached) Overlay of a graph, keyed by its ``topology.fingerprint`` (spec, links,
    rates), ``seed`` and ``turns`` (chunks per server, which decide whether ring-packing
    tours are usable)."""
    return _OVERLAYS.get((fingerprint(graph), seed, turns), lambda: Overlay(graph, seed, turns))
