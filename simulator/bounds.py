"""Bandwidth lower bounds on AllReduce completion time."""

from __future__ import annotations

import networkx as nx

from topology.routing import servers as servers_by_rank
from traffic.cuts import message_seconds_per_bit, tree_allreduce_rate


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
    if size_bytes == 0:
        return 0.0
    return 8.0 * size_bytes * message_seconds_per_bit(graph, goodput=goodput)


def packing_bound(graph: nx.Graph, size_bytes: int, *, goodput: float = 1.0) -> float:
    """Seconds of the best tree-based AllReduce of ``size_bytes`` per server on ``graph``
    (every element reduced up a tree into its shard's owner and broadcast down a tree from
    it, pipelined; the fluid model, no per-transfer costs): (bits / N) / x, x the best rate at
    which a ReduceScatter and an AllGather by trees overlap (``traffic.cuts.tree_allreduce_rate``).

    At least ``lower_bound``. Equal to ReduceScatter then AllGather at the optimal packing
    rate, 2 (bits / N) / x*, wherever that meets the message-count bound (BCube, DCell and
    single-NIC Jellyfish with one link rate: the linear programme is skipped there); above
    the bound where a thin cut limits every tree both ways; below 2 (bits / N) / x* where
    the phases use a thin cut's two directions unevenly (a server with one link)."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValueError(f"size_bytes must be an integer >= 0, got {size_bytes!r}")
    if not 0 < goodput <= 1:
        raise ValueError(f"goodput must be in (0, 1], got {goodput!r}")
    n = len(servers_by_rank(graph))
    if n < 2 or size_bytes == 0:
        return 0.0
    rate, _ = tree_allreduce_rate(graph, goodput=goodput)
    return 8.0 * size_bytes / n / rate
