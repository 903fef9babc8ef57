"""Rings: the reduce-scatter / all-gather ring on a segment, short tours of the servers, and a
load-balancing packing of bidirectional rings for the generic multitree.

A ring over N servers is N path-shaped spanning trees at once (chunk c is reduced along the
ring to one server and broadcast on along it), perfectly staggered: every hop is busy at
every step and each hop's path carries a constant rate for the whole collective. That makes
a set of concurrent rings predictable: its time is set by the most loaded directed link,
which is what ``ring_packing`` minimises.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from topology.links import GraphMemo, fingerprint
from traffic.overlay import Router
from traffic.schedule import segments
from traffic.trees import Builder

#: Relative gain in worst link load that justifies running more rings (each adds transfers).
SIGNIFICANT = 0.02
#: Bound on the transfers the rounds of ``ring_packing`` may add up to (by default).
MAX_TRANSFERS = 50_000
#: The ring packings ``ring_packing`` keeps, one per graph and ``rounds`` (8 at most).
_PACKINGS = GraphMemo(8)


def emit_ring(builder: Builder, order: list[str], paths: list[tuple[str, ...]], offset: int,
              count: int) -> None:
    """Ring AllReduce of elements [offset, offset + count) over ``order`` (hop i on
    ``paths[i]``, from order[i] to order[i+1], wrapping): N-1 reduce-scatter steps then N-1
    all-gather steps, each send waiting only for the chunk it forwards to have arrived."""
    n = len(order)
    chunks = segments(count, n)
    held: dict[tuple[int, int], int] = {}
    for step in range(2 * (n - 1)):
        gather = step >= n - 1
        for i in range(n):
            c = (i + 1 - (step - n + 1)) % n if gather else (i - step) % n
            if c >= len(chunks):
                continue
            off, cnt = chunks[c]
            nxt = (i + 1) % n
            held[(nxt, c)] = builder.add(order[i], order[nxt], offset + off, cnt,
                                         "copy" if gather else "reduce", paths[i],
                                         [held.get((i, c))])


def _length(dist: np.ndarray, t: np.ndarray) -> float:
    return float(dist[t, np.roll(t, -1)].sum())


def _two_opt(dist: np.ndarray, t: np.ndarray) -> bool:
    """One pass of 2-opt (reverse a stretch when that shortens the cycle); True if any."""
    n, improved = len(t), False
    for i in range(n - 2):
        a, b = t[i], t[i + 1]
        c, d = t[i + 2:], np.roll(t, -1)[i + 2:]
        if i == 0:
            c, d = c[:-1], d[:-1]
        if not len(c):
            continue
        gain = dist[a, b] + dist[c, d] - dist[a, c] - dist[b, d]
        j = int(np.argmax(gain))
        if gain[j] > 1e-9:
            j += i + 2
            t[i + 1:j + 1] = t[i + 1:j + 1][::-1].copy()
            improved = True
    return improved


def _or_opt(dist: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """Move one stretch of 1-3 servers elsewhere (possibly reversed) if that shortens the
    cycle; the new tour, or None."""
    n = len(t)
    for size in (1, 2, 3):
        if size >= n - 1:
            break
        for i in range(n - size + 1):
            seg = t[i:i + size]
            prev, nxt = t[i - 1], t[(i + size) % n]
            saved = dist[prev, seg[0]] + dist[seg[-1], nxt] - dist[prev, nxt]
            rest = np.concatenate([t[:i], t[i + size:]])
            a, b = rest, np.roll(rest, -1)
            base = dist[a, b]
            fwd = dist[a, seg[0]] + dist[seg[-1], b] - base
            rev = dist[a, seg[-1]] + dist[seg[0], b] - base
            best = np.minimum(fwd, rev)
            j = int(np.argmin(best))
            if best[j] < saved - 1e-9:
                piece = seg if fwd[j] <= rev[j] else seg[::-1]
                return np.concatenate([rest[:j + 1], piece, rest[j + 1:]])
    return None


def tour(dist: np.ndarray) -> list[int]:
    """A short cycle through all indices of the symmetric cost matrix ``dist``: nearest
    neighbour from a few starts, each improved by 2-opt and (up to 200 servers) Or-opt."""
    n = len(dist)
    if n <= 3:
        return list(range(n))
    best, best_len = None, math.inf
    for start in sorted({0, n // 3, (2 * n) // 3}):
        seq, left = [start], set(range(n)) - {start}
        while left:
            here = seq[-1]
            nxt = min(left, key=lambda j: (dist[here, j], j))
            seq.append(nxt)
            left.remove(nxt)
        t = np.array(seq)
        for _ in range(200):
            if _two_opt(dist, t):
                continue
            moved = _or_opt(dist, t) if n <= 200 else None
            if moved is None:
                break
            t = moved
        length = _length(dist, t)
        if length < best_len - 1e-9:
            best, best_len = t, length
    k = int(np.flatnonzero(best == 0)[0])
    return np.roll(best, -k).tolist()


def _weighted_paths(router: Router, weight: dict[tuple[str, str], float]):
    """Cheapest allowed paths between all pairs of servers under link ``weight``:
    (cost matrix, path of each ordered pair)."""
    graph, names = router.graph, router.servers
    index = {v: i for i, v in enumerate(names)}
    cost = np.zeros((len(names), len(names)))
    paths: dict[tuple[int, int], tuple[str, ...]] = {}
    for i, src in enumerate(names):
        dist, parent, heap, done = {src: 0.0}, {src: None}, [(0.0, src)], set()
        while heap:
            d, x = heapq.heappop(heap)
            if x in done:
                continue
            done.add(x)
            if x != src and router.is_server(x):
                j = index[x]
                cost[i, j] = d
                node, path = x, []
                while node is not None:
                    path.append(node)
                    node = parent[node]
                paths[(i, j)] = tuple(reversed(path))
                if not router.relay:
                    continue
            for y in graph[x]:
                nd = d + weight[(x, y)]
                if nd < dist.get(y, math.inf) - 1e-12:
                    dist[y], parent[y] = nd, x
                    heapq.heappush(heap, (nd, y))
        if len(done & set(names)) < len(names):
            missing = next(v for v in names if v not in done)
            raise ValueError(f"server {missing} is not reachable from {src}")
    return cost, paths


def ring_packing(router: Router, rounds: int | None = None) -> tuple[
        list[tuple[float, list[str], list[tuple[str, ...]]]], float]:
    """Weighted directed rings (share of the buffer, server order, hop paths) whose links
    together carry the least worst load per capacity, and that load: the largest fraction
    of the buffer any directed link carries, over its capacity (the fluid time per byte).

    Round r (up to ``rounds``; by default 8, fewer if the rings would pass MAX_TRANSFERS)
    finds a short tour of the servers under link weights exp(4 u) / capacity, u the average
    number of times the earlier tours cross the link, so each new tour avoids the links the
    earlier ones crowd; a hop costs its cheapest path. Candidates: the first tour one way,
    and the first r tours each run both ways, all 2r rings with equal shares (equal shares
    matter: max-min fair links do not honour unequal ones). The candidate with the lowest
    worst link load wins; more rings must beat fewer by SIGNIFICANT. One tour both ways
    often suffices: on DCell(n, 1) the shortest tour alternates level-1 links and switch
    hops, so half of each server's traffic goes on each NIC.

    The answer depends only on the graph (not on ``router.load``), so it is kept per graph
    (``topology.links.fingerprint``, the servers by rank) and ``rounds``: the baselines and
    the learned scheduler's rows ask for it several times per graph.
    """
    rings, cost = _PACKINGS.get((fingerprint(router.graph), tuple(router.servers), rounds),
                                lambda: _ring_packing(router, rounds))
    return [(w, list(order), list(hops)) for w, order, hops in rings], cost


def _ring_packing(router: Router, rounds: int | None) -> tuple[
        list[tuple[float, list[str], list[tuple[str, ...]]]], float]:
    names = router.servers
    if len(names) < 2:
        return [(1.0, list(names), [(v,) for v in names])], 0.0
    if rounds is None:
        per_tour = 4 * len(names) * (len(names) - 1)
        rounds = max(1, min(8, MAX_TRANSFERS // max(1, per_tour)))
    links = list(router.cap)
    row = {link: i for i, link in enumerate(links)}
    back = np.array([row[(b, a)] for a, b in links], dtype=np.int64)
    cap = np.array([router.cap[link] for link in links])
    usage = np.zeros(len(links))
    tours: list[tuple[list[str], list[tuple[str, ...]]]] = []
    best, best_worst = None, math.inf
    scale = 2 * (len(names) - 1) / len(names)  # of the buffer, per ring hop
    for r in range(rounds):
        mean = (usage + usage[back]) / max(1, r)
        weight = {link: math.exp(4.0 * mean[i]) / router.cap[link]
                  for i, link in enumerate(links)}
        cost, paths = _weighted_paths(router, weight)
        seq = tour((cost + cost.T) / 2.0)
        n = len(seq)
        hops = [paths[(seq[i], seq[(i + 1) % n])] for i in range(n)]
        use = np.zeros(len(links))
        for path in hops:
            for a, b in zip(path, path[1:], strict=False):
                use[row[(a, b)]] += 1.0
        usage += use
        tours.append(([names[i] for i in seq], hops))
        if r == 0:
            best, best_worst = 0, float((use / cap).max())
        worst = float(((usage + usage[back]) / (2 * (r + 1) * cap)).max())
        if worst < best_worst * (1 - SIGNIFICANT):
            best, best_worst = r + 1, worst
    if best == 0:
        order, hops = tours[0]
        return [(1.0, order, hops)], scale * best_worst
    rings = []
    for order, hops in tours[:best]:
        n = len(order)
        rings.append((0.5 / best, order, hops))
        rings.append((0.5 / best, order[::-1], [hops[(n - 2 - i) % n][::-1] for i in range(n)]))
    return rings, scale * best_worst
