"""Minimum-cost spanning arborescence of a dense digraph (Chu-Liu/Edmonds), compiled with
numba where it imports (the same function runs interpreted where it does not).

The packing's pricing (``traffic.packing``) asks for one per root, pricing round and tree
family: thousands of small contractions on graphs of up to a few hundred servers.

Pure: numpy, and numba through ``traffic.maxflow``'s import.
"""

from __future__ import annotations

import numpy as np

from traffic.maxflow import njit


def min_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """Parents of the minimum-cost spanning arborescence rooted at ``root`` of the complete
    digraph with edge costs ``cost[u, v]`` (inf: no edge; O(n^3)); parent[root] = -1. Of
    equal-cost choices it keeps the lowest-numbered parent, cycle entry and cycle exit.

    >>> min_arborescence(np.array([[0., 1., 5.], [9., 0., 1.], [2., 9., 0.]]), 0).tolist()
    [-1, 0, 1]
    """
    return _edmonds(np.array(cost, dtype=np.float64), int(root))


@njit(cache=True)
def _argmin_column(c, rows, v):
    """The first of ``rows`` with the least ``c[row, v]`` (a NaN counts as least, as in
    numpy's argmin), as a position in ``rows``."""
    best, at = c[rows[0], v], 0
    for i in range(1, rows.shape[0]):
        if best != best:
            break
        x = c[rows[i], v]
        if x < best or x != x:
            best, at = x, i
    return at


@njit(cache=True)
def _edmonds(c, root):
    n = c.shape[0]
    for v in range(n):
        c[v, v] = np.inf
        c[v, root] = np.inf
    everyone = np.arange(n)
    parent = np.empty(n, dtype=np.int64)
    for v in range(n):
        parent[v] = _argmin_column(c, everyone, v)
    parent[root] = -1
    # Find a cycle among the chosen parent edges: walks from 0, 1, ... in turn.
    state = np.zeros(n, dtype=np.int64)  # 0 unseen, 1 on current walk, 2 done
    walk = np.empty(n, dtype=np.int64)
    cycle = np.empty(0, dtype=np.int64)
    for start in range(n):
        length, v = 0, start
        while v != -1 and state[v] == 0:
            state[v] = 1
            walk[length] = v
            length += 1
            v = parent[v]
        if v != -1 and state[v] == 1:
            first = 0
            while walk[first] != v:
                first += 1
            cycle = walk[first:length].copy()
        for i in range(length):
            state[walk[i]] = 2
        if cycle.shape[0]:
            break
    if cycle.shape[0] == 0:
        return parent
    inside = np.zeros(n, dtype=np.bool_)
    for v in cycle:
        inside[v] = True
    outside = np.flatnonzero(~inside)
    k, m = cycle.shape[0], outside.shape[0] + 1  # the contracted node is m - 1
    sub = np.full((m, m), np.inf)
    for i in range(m - 1):
        for j in range(m - 1):
            sub[i, j] = c[outside[i], outside[j]]
    # Into the cycle: entering v replaces v's cycle edge.
    pick_in = np.empty(m - 1, dtype=np.int64)
    for i in range(m - 1):
        best, at = np.inf, 0
        for j in range(k):
            x = c[outside[i], cycle[j]] - c[parent[cycle[j]], cycle[j]]
            if j == 0 or x < best or (x != x and best == best):
                best, at = x, j
        pick_in[i], sub[i, m - 1] = at, best
    # Out of the cycle: the cheapest edge from any cycle node.
    pick_out = np.empty(m - 1, dtype=np.int64)
    for i in range(m - 1):
        at = _argmin_column(c, cycle, outside[i])
        pick_out[i], sub[m - 1, i] = at, c[cycle[at], outside[i]]
    new_root = 0
    while outside[new_root] != root:
        new_root += 1
    sub_parent = _edmonds(sub, new_root)
    result = parent.copy()
    for i in range(m - 1):
        p = sub_parent[i]
        if p == -1:
            result[outside[i]] = -1
        elif p == m - 1:
            result[outside[i]] = cycle[pick_out[i]]
        else:
            result[outside[i]] = outside[p]
    u = sub_parent[m - 1]
    result[cycle[pick_in[u]]] = outside[u]
    return result
