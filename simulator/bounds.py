"""Bandwidth lower bounds on AllReduce completion time."""

from __future__ import annotations

import networkx as nx

from topology.links import link_rate_mbps
from topology.routing import servers as servers_by_rank
from traffic.cuts import packing_rate


def lower_bound(graph: nx.Graph, size_bytes: int, *, goodput: float = 1.0) -> float:
    """Seconds below which no AllReduce of ``size_bytes`` per server can finish on
    ``graph`` (links of ``bw_mbps`` each direction, scaled by ``goodput``).

    Returns max(B_all, B_one) with C(v) the total capacity of server v's links (bit/s, each
    direction) and ``bits = 8 * size_bytes``:

    - B_all = 2 (N-1) bits / sum_v C(v). On a network where every server has capacity C this
      is the classic 2 (N-1)/N * bits / C.
    - B_one = max_v bits / C(v).

    Proof. Fix one element and call a transfer carrying it a message. (i) At least 2(N-1)
    messages carry it. Let m* be the message whose arrival first leaves some server u
    holding the complete sum, at time t*. Every other server v also ends complete and
    becomes so only by a message it receives arriving at or after t*: that gives N-1
    distinct messages B_v (distinct receivers, none of them u). Every v != u must have sent a
    message A_v (distinct senders) that starts the chain of messages bringing v's
    contribution to u by t*. A_v is no B_w: if A_v were the message completing w != u, it
    would end at w, so the chain continues after it; a message's data is its source's buffer
    at its start, which is after A_v arrived, and every message takes positive time, so A_v
    arrives strictly before t*, while B_w arrives at or after t*. Hence >= 2(N-1) messages.
    (ii) Each message leaves its source server over one of that server's links, so per
    element >= 2(N-1) * itemsize bytes cross servers' outgoing links (relays only add to
    this), whose total capacity is sum_v C(v): B_all. (iii) Server v must send out its own
    contribution to every element and receive the others', >= bits each way over its own
    links: B_one. Relays, paths and schedules only add load, so both bounds hold for every
    schedule; hop latency and start-up costs only add time.

    B_one matters only on heterogeneous networks (a thin-linked server). A cut argument
    (every element must cross any cut that separates servers, once each way) gives
    bits / cut capacity; with one capacity c on every link that beats B_all only for a cut
    of fewer than deg * N / (2 (N-1)) links, about half a server's degree, which BCube,
    DCell and connected Jellyfish graphs do not have, so it is not computed.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValueError(f"size_bytes must be an integer >= 0, got {size_bytes!r}")
    if not 0 < goodput <= 1:
        raise ValueError(f"goodput must be in (0, 1], got {goodput!r}")
    names = servers_by_rank(graph)
    n = len(names)
    if n < 2 or size_bytes == 0:
        return 0.0
    capacity = {}
    for v in names:
        total = sum(link_rate_mbps(graph, v, w) for w in graph[v]) * 1e6 * goodput
        if total <= 0:
            raise ValueError(f"server {v} has no link capacity")
        capacity[v] = total
    bits = 8.0 * size_bytes
    every = 2 * (n - 1) * bits / sum(capacity.values())
    one = max(bits / c for c in capacity.values())
    return max(every, one)


def packing_bound(graph: nx.Graph, size_bytes: int, *, goodput: float = 1.0) -> float:
    """Seconds of the best tree-based AllReduce of ``size_bytes`` per server on ``graph``:
    ReduceScatter then AllGather at the optimal packing rate, 2 (bits / N) / x*
    (``packing_rate``). At least ``lower_bound``; equal to it on BCube, DCell and single-NIC
    Jellyfish with one link rate, above it where a thin cut limits every tree."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValueError(f"size_bytes must be an integer >= 0, got {size_bytes!r}")
    if not 0 < goodput <= 1:
        raise ValueError(f"goodput must be in (0, 1], got {goodput!r}")
    n = len(servers_by_rank(graph))
    if n < 2 or size_bytes == 0:
        return 0.0
    rate, _ = packing_rate(graph, goodput=goodput)
    return 2.0 * (8.0 * size_bytes / n) / rate
