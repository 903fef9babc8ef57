"""Packet granularity the fluid model misses: the drain of round-robin queues in tandem.

A network that serves the flows of a link round robin, a frame at a time, moves what max-min
fairness says, save at one place. Take a link whose flows arrive over other links that are
full too, so that each feeds it frames at exactly the rate it is served. Such a queue holds
almost nothing while the flows run. When they end, the last frames of the flows from its m
feeding links reach it together, and the last of them leaves up to m - 1 frame times after
the fluid model's end. Where the feeding links are not full, or where flows fan out into idle
links, the frames wait or pass in the fluid model's time, and nothing is added.
``bench/waves.py`` measures the effect on the emulation (docs/emulation.md, section 4).

``frame_tails`` turns this into a latency per transfer for ``simulator.simulate``
(``frame_bytes``), from one fluid run's rates. The latency is the largest of
(m - 1) x frame time over the links of the transfer's path after the first that are full
when its last bit is sent. Here m counts the full links that feed that link the flows it then
carries, and a frame time is ``frame_bytes`` x 8 over the link's rate.

Pure: networkx through ``topology``, and the simulator's own event loop.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from simulator.events import _Network, with_events
from traffic.schedule import Schedule

#: A link is full when its flows' rates add up to its capacity within this fraction.
FULL_RTOL = 1e-6


def frame_tails(graph: nx.Graph, schedule: Schedule, frame_bytes: float, *,
                startup_s: float = 0.0, hop_latency_s: float = 0.0, goodput: float = 1.0,
                failover_s: float = 0.0) -> list[float]:
    """Extra arrival latency of each transfer (the schedule's order, seconds) from the
    drain of full round-robin queues fed by full links, ``frame_bytes`` a frame (module
    doc), measured on the fluid run with the same costs, network events included."""
    if frame_bytes <= 0:
        raise ValueError(f"frame_bytes must be > 0, got {frame_bytes!r}")
    count = len(schedule.transfers)
    trace: list[tuple[float, int, float, tuple[str, ...]]] = []
    with_events(graph, schedule, startup_s, hop_latency_s, goodput, failover_s, trace)
    last = {}
    for k, (_, f, _, _) in enumerate(trace):
        if f < count:
            last[f] = k
    ends = defaultdict(list)  # trace position of a transfer's last entry -> the transfer
    for f, k in last.items():
        ends[k].append(f)
    rates: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    before: dict[int, dict[tuple[str, str], tuple[str, str] | None]] = {}
    caps: dict[tuple[str, str], float] = {}
    network = _Network(graph, goodput)

    def cap(link: tuple[str, str]) -> float:  # bit/s on the wire (before the goodput)
        if link not in caps:
            caps[link] = network.capacity(*link) / goodput
        return caps[link]

    def full(link: tuple[str, str]) -> bool:
        return sum(rates[link].values()) >= cap(link) * goodput * (1 - FULL_RTOL)

    extra = [0.0] * count
    k = 0
    while k < len(trace):
        now = trace[k][0]
        stop = k
        while stop < len(trace) and trace[stop][0] == now:
            stop += 1
        for f in (f for j in range(k, stop) for f in ends.get(j, ())):
            extra[f] = _tail(f, before, rates, full, frame_bytes, cap)
        for _, f, r, path in trace[k:stop]:
            hops = list(zip(path, path[1:], strict=False))
            for link in before.get(f, {}):
                rates[link].pop(f, None)
            before[f] = {h: (hops[i - 1] if i else None) for i, h in enumerate(hops)}
            if r > 0:
                for link in hops:
                    rates[link][f] = r
        k = stop
    return extra


def _tail(f: int, before: dict, rates: dict, full, frame_bytes: float, cap) -> float:
    """The latency ``frame_tails`` gives transfer ``f`` with the rates just before its last
    bit is sent (``before``: every flow's links, each with the link before it on its path)."""
    worst = 0.0
    for link, feeder in before[f].items():
        if feeder is None or not full(link):
            continue
        feeders = {before[g][link] for g in rates[link]}
        m = sum(1 for u in feeders if u is not None and full(u))
        worst = max(worst, (m - 1) * frame_bytes * 8 / cap(link))
    return worst
