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
(``frame_bytes``), from one fluid run's rates. A transfer gets the largest, over the links
of its path after the first that are full when its last bit is sent, of (m - 1) frame times
of that link. Here m counts the full links that feed that link the flows it then carries
(whether or not the transfer's own feeding link is one of them: its last frame queues
behind theirs either way), and a frame time is ``frame_bytes`` x 8 over the link's rate.

Pure: networkx through ``topology``, and the simulator's own event loop.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from simulator.events import link_capacity, with_events
from topology.links import background_flows, fingerprint, link_failures
from traffic.schedule import Schedule

#: A link is full when its flows' rates add up to its capacity within this fraction.
FULL_RTOL = 1e-6

Link = tuple[str, str]


def frame_tails(graph: nx.Graph, schedule: Schedule, frame_bytes: float, *,
                startup_s: float = 0.0, hop_latency_s: float = 0.0, goodput: float = 1.0,
                failover_s: float = 0.0) -> list[float]:
    """Extra arrival latency of each transfer (the schedule's order, seconds) from the
    drain of full round-robin queues fed by full links, ``frame_bytes`` a frame (module
    doc), measured on the fluid run with the same costs, network events included. The
    last answer is kept for the next call on the same Schedule (``_LAST``)."""
    if not frame_bytes > 0:
        raise ValueError(f"frame_bytes must be > 0, got {frame_bytes!r}")
    key = (fingerprint(graph), repr(link_failures(graph)), repr(background_flows(graph)),
           frame_bytes, startup_s, hop_latency_s, goodput, failover_s)
    if _LAST and _LAST[0] is schedule and _LAST[1] is graph and _LAST[2] == key:
        return list(_LAST[3])
    extra = _tails(graph, schedule, frame_bytes, startup_s, hop_latency_s, goodput, failover_s)
    _LAST[:] = [schedule, graph, key, tuple(extra)]
    return extra


#: The last answer of ``frame_tails``: [the Schedule, the graph, its key and the costs, the
#: tails]. ``simulator.simulate`` and ``simulator.link_load`` with the same costs ask for the
#: tails of one run in turn (``emulation.run`` does, per scheduler), and each asking runs the
#: event loop. A Schedule does not change; the graph must be the same object, and is
#: compared again by ``topology.fingerprint``, its failing links and its background flows
#: (changed in place, it is measured again).
_LAST: list = []


def _tails(graph: nx.Graph, schedule: Schedule, frame_bytes: float, startup_s: float,
           hop_latency_s: float, goodput: float, failover_s: float) -> list[float]:
    count = len(schedule.transfers)
    trace: list[tuple[float, int, float, tuple[str, ...]]] = []
    with_events(graph, schedule, startup_s, hop_latency_s, goodput, failover_s, trace)
    last = {f: k for k, (_, f, _, _) in enumerate(trace) if f < count}
    ends: dict[int, list[int]] = defaultdict(list)  # trace position -> flows last seen there
    for f, k in last.items():
        ends[k].append(f)
    capacity = link_capacity(graph, goodput)
    rates: dict[Link, dict[int, float]] = defaultdict(dict)  # link -> flow -> bit/s
    feeders: dict[int, dict[Link, Link | None]] = {}  # flow -> its links -> the link before
    full: dict[Link, bool] = {}  # with the rates just before the current time, per link asked

    def is_full(link: Link) -> bool:
        if link not in full:
            full[link] = sum(rates[link].values()) >= capacity(*link) * (1 - FULL_RTOL)
        return full[link]

    extra = [0.0] * count
    k = 0
    while k < len(trace):
        now = trace[k][0]
        stop = k
        while stop < len(trace) and trace[stop][0] == now:
            stop += 1
        full.clear()
        for f in (f for j in range(k, stop) for f in ends.get(j, ())):
            for link, before in feeders.get(f, {}).items():
                if before is None or not is_full(link):
                    continue
                fed = {feeders[g][link] for g in rates[link]}
                m = sum(1 for u in fed if u is not None and is_full(u))
                frame_s = frame_bytes * 8 * goodput / capacity(*link)
                extra[f] = max(extra[f], (m - 1) * frame_s)
        for _, f, r, path in trace[k:stop]:
            for link in feeders.get(f, {}):
                rates[link].pop(f, None)
            hops = list(zip(path, path[1:], strict=False))
            feeders[f] = {h: (hops[i - 1] if i else None) for i, h in enumerate(hops)}
            if r > 0:
                for link in hops:
                    rates[link][f] = r
        k = stop
    return extra
