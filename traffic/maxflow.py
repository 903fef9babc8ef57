"""Maximum flow on flat arrays (Dinic's algorithm), many sinks over one network; compiled
with numba where it imports (the same functions run interpreted where it does not).

``traffic.cuts.overlap_rate`` asks thousands of times, for one network and one sink after
another, whether the flow from a source reaches a value and, where it falls short, which
nodes the source still reaches in the residual network (the source side of the minimal
minimum cut, the same for every maximum flow). Integer capacities, so the answers are exact.
numba is a dependency of the project; interpreted, the same code is correct but far
slower.
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:  # numba missing: the same functions, interpreted
    def njit(**_):
        return lambda function: function


class Network:
    """Arcs ``tail[i] -> head[i]`` with integer capacities ``cap[i]`` over nodes 0..n-1, laid
    out once for any number of ``flow`` calls: arc i is residual edge 2i, its reverse 2i+1."""

    def __init__(self, n: int, tail: np.ndarray, head: np.ndarray, cap: np.ndarray) -> None:
        tail = np.asarray(tail, dtype=np.int64)
        head = np.asarray(head, dtype=np.int64)
        cap = np.asarray(cap, dtype=np.int64)
        if (cap < 0).any():
            raise ValueError("capacities must be >= 0")
        m = len(tail)
        self.n = n
        self.to = np.empty(2 * m, dtype=np.int64)
        self.to[0::2], self.to[1::2] = head, tail
        self.cap = np.zeros(2 * m, dtype=np.int64)
        self.cap[0::2] = cap
        start = np.empty(2 * m, dtype=np.int64)
        start[0::2], start[1::2] = tail, head
        self.edges = np.argsort(start, kind="stable")
        self.ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(start, minlength=n), out=self.ptr[1:])

    def flow(self, source: int, sink: int, enough: int) -> tuple[int, np.ndarray | None]:
        """(value, None) when the flow from ``source`` to ``sink`` reaches ``enough`` (the
        value returned may stop there), else (the maximum flow, a boolean array of the nodes
        the source reaches in its residual network)."""
        if source == sink:
            raise ValueError(f"the source and the sink are the same node, {source}")
        value, reach = _dinic(self.ptr, self.edges, self.to, self.cap, source, sink, enough)
        return int(value), (None if value >= enough else reach.astype(bool))


@njit(cache=True)
def _dinic(ptr, edges, to, cap0, s, t, enough):
    """Dinic's blocking flows from ``s`` to ``t`` until the value reaches ``enough`` or no
    augmenting path is left: (value, level >= 0 of the last search: the residual reach)."""
    n = ptr.shape[0] - 1
    cap = cap0.copy()
    level = np.empty(n, np.int64)
    it = np.empty(n, np.int64)
    queue = np.empty(n, np.int64)
    path = np.empty(n, np.int64)
    value = 0
    while value < enough:
        level[:] = -1
        level[s] = 0
        queue[0] = s
        first, last = 0, 1
        while first < last:
            u = queue[first]
            first += 1
            for k in range(ptr[u], ptr[u + 1]):
                e = edges[k]
                v = to[e]
                if cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue[last] = v
                    last += 1
        if level[t] < 0:
            break
        for u in range(n):
            it[u] = ptr[u]
        while value < enough:
            # one augmenting path in the level graph, advancing the current-arc pointers
            depth, u = 0, s
            while u != t:
                advanced = False
                while it[u] < ptr[u + 1]:
                    e = edges[it[u]]
                    v = to[e]
                    if cap[e] > 0 and level[v] == level[u] + 1:
                        path[depth] = e
                        depth += 1
                        u = v
                        advanced = True
                        break
                    it[u] += 1
                if not advanced:
                    if u == s:
                        break
                    level[u] = -1  # a dead end for the rest of this phase
                    depth -= 1
                    u = to[path[depth] ^ 1]
                    it[u] += 1
            if u != t:
                break
            push = enough - value
            for i in range(depth):
                if cap[path[i]] < push:
                    push = cap[path[i]]
            for i in range(depth):
                cap[path[i]] -= push
                cap[path[i] ^ 1] += push
            value += push
    if value < enough:  # the last search found no path: its levels are the residual reach
        return value, level >= 0
    return value, np.zeros(n, np.bool_)
