"""BCube's multitree: k+1 concurrent digit-by-digit reduce-scatter / all-gather passes.

BCube(n, k) is a product of k+1 levels: the servers that differ only in digit l share one
level-l switch. The buffer is cut into k+1 parts. Part j reduce-scatters level by level in
the digit order j, j+1, ..., j+k (mod k+1): in phase p every server splits its current
shard in n pieces by digit L[p] and sends piece d to the neighbour whose digit L[p] is d
through their level-L[p] switch, keeping its own piece; after k+1 phases each server holds
1/N of the part fully reduced. The all-gather retraces the phases in reverse with copies.

Seen per element this is a spanning tree per (part, owner): the digit-correction tree
rooted at the owner, reduced up and broadcast back, and the messages of the trees that
share a hop are merged. At any phase the k+1 parts use k+1 different levels, so every NIC
of every server is busy in both directions with equal load, and the fluid completion time
is 2 (N-1)/N * size / ((k+1) * bw): exactly the bandwidth lower bound.

Dependencies: a phase's sends at a server wait for that part's previous-phase arrivals at
the server and its own previous-phase sends (so every earlier write into its shard is
ordered before they read it).
"""

from __future__ import annotations

import networkx as nx

from topology.bcube import bcube_server, bcube_switch
from traffic.trees import Builder


def piece(offset: int, count: int, parts: int, i: int) -> tuple[int, int]:
    """Piece ``i`` of ``parts`` near-equal contiguous pieces of [offset, offset + count)."""
    base, extra = divmod(count, parts)
    return offset + i * base + min(i, extra), base + (1 if i < extra else 0)


def bcube_multitree(builder: Builder, graph: nx.Graph, parts: list[tuple[int, int]]) -> None:
    """Emit the k+1-level reduce-scatter / all-gather of docs above, one pass per element
    segment in ``parts`` (part j starts at level j mod (k+1)); each part needs at least N
    elements so that no piece is empty."""
    n, k = graph.graph["spec"]["params"]["n"], graph.graph["spec"]["params"]["k"]
    addresses = {v: tuple(a) for v, a in graph.nodes(data="address") if a is not None}
    levels = k + 1
    for j, (offset, count) in enumerate(parts):
        order = [(j + p) % levels for p in range(levels)]
        shard = {v: [(offset, count)] for v in addresses}
        recv: dict[str, list[int]] = {v: [] for v in addresses}
        sent: dict[str, list[int]] = {v: [] for v in addresses}
        history = []
        for level in order:
            pos = k - level
            new_recv: dict[str, list[int]] = {v: [] for v in addresses}
            new_sent: dict[str, list[int]] = {v: [] for v in addresses}
            for v, a in addresses.items():
                off, cnt = shard[v][-1]
                deps = recv[v] + sent[v]
                switch = bcube_switch(level, a, n)
                for d in range(n):
                    if d == a[pos]:
                        continue
                    b = bcube_server(a[:pos] + (d,) + a[pos + 1:], n)
                    o, c = piece(off, cnt, n, d)
                    tid = builder.add(v, b, o, c, "reduce", (v, switch, b), deps)
                    new_sent[v].append(tid)
                    new_recv[b].append(tid)
            for v, a in addresses.items():
                off, cnt = shard[v][-1]
                shard[v].append(piece(off, cnt, n, a[pos]))
            history.append((level, pos))
            recv, sent = new_recv, new_sent
        for p in range(levels - 1, -1, -1):
            level, pos = history[p]
            new_recv = {v: [] for v in addresses}
            new_sent = {v: [] for v in addresses}
            for v, a in addresses.items():
                off, cnt = shard[v][p + 1]
                deps = recv[v] + sent[v]
                switch = bcube_switch(level, a, n)
                for d in range(n):
                    if d == a[pos]:
                        continue
                    b = bcube_server(a[:pos] + (d,) + a[pos + 1:], n)
                    tid = builder.add(v, b, off, cnt, "copy", (v, switch, b), deps)
                    new_sent[v].append(tid)
                    new_recv[b].append(tid)
            recv, sent = new_recv, new_sent
